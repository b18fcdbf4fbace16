"""The shared training path without training: data formats and errors, config precedence, output-dir safety, the
one-line error contract of the training commands."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import run_main

from wemask_cli.data import detect_format, load_training_data
from wemask_cli.data.formats import PREFERENCE, PROMPTS, SUPERVISED
from wemask_cli.runtime.errors import WeMaskError
from wemask_cli.train.options import TrainOptions
from wemask_cli.train.resolve import resolve as resolve_settings
from wemask_cli.train.sft import SFTStage as sft_stage


def resolve(stage, options, extra):
    """(wemask options, TRL config, provenance)."""
    resolved = resolve_settings(stage, options, extra)
    return resolved.opts, resolved.args, resolved.provenance

ROOT = Path(__file__).resolve().parents[1]
RECIPES = ROOT / "recipes"


def write_jsonl(path: Path, rows) -> Path:
    path.write_text("".join((row if isinstance(row, str) else json.dumps(row)) + "\n" for row in rows))
    return path


# --- data ---------------------------------------------------------------------------------------------------------


def test_sft_formats_are_detected_and_extra_columns_dropped(tmp_path):
    chat = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]
    cases = {
        "messages": [{"messages": chat, "id": 1}],
        "prompt-completion": [{"prompt": "2+2?", "completion": "4", "source": "x"}],
        "text": [{"text": "plain text"}],
    }
    for name, rows in cases.items():
        dataset, fmt = load_training_data(SUPERVISED, str(write_jsonl(tmp_path / f"{name}.jsonl", rows)))
        assert fmt.name == name
        assert dataset.column_names == list(fmt.columns)
    conversational = [{"prompt": chat[:1], "completion": chat[1:]}]
    dataset, fmt = load_training_data(SUPERVISED, str(write_jsonl(tmp_path / "conv.jsonl", conversational)))
    assert fmt.name == "prompt-completion" and dataset[0]["prompt"][0]["role"] == "user"


def test_other_stages_formats():
    assert detect_format(PREFERENCE, ["prompt", "chosen", "rejected"], "x").name == "prompt-chosen-rejected"
    assert detect_format(PREFERENCE, ["chosen", "rejected"], "x").name.startswith("chosen-rejected")
    assert detect_format(PROMPTS, ["prompt", "answer"], "x").keep_other_columns


def test_bundled_data_loads():
    for name, fmt in (("sft_chat.jsonl", "messages"), ("math_sft.jsonl", "prompt-completion")):
        dataset, found = load_training_data(SUPERVISED, str(ROOT / "data" / name))
        assert found.name == fmt and len(dataset) > 10


def test_columns_renames_splits_and_file_types(tmp_path):
    rows = [{"question": f"q{i}", "answer": f"a{i}"} for i in range(10)]
    path = write_jsonl(tmp_path / "gsm.jsonl", rows)
    dataset, fmt = load_training_data(SUPERVISED, str(path), columns="prompt=question,completion=answer", split="train[2:5]")
    assert fmt.name == "prompt-completion" and dataset["prompt"] == ["q2", "q3", "q4"]
    (tmp_path / "list.json").write_text(json.dumps([{"text": "a"}, {"text": "b"}]))
    assert len(load_training_data(SUPERVISED, str(tmp_path / "list.json"))[0]) == 2
    (tmp_path / "t.csv").write_text("prompt,completion\nhi,there\n")
    assert load_training_data(SUPERVISED, str(tmp_path / "t.csv"))[1].name == "prompt-completion"
    import datasets

    datasets.Dataset.from_list([{"text": "x"}, {"text": "y"}]).to_parquet(str(tmp_path / "t.parquet"))
    assert len(load_training_data(SUPERVISED, str(tmp_path / "t.parquet"))[0]) == 2


@pytest.mark.parametrize(
    "content, message",
    [
        (['{"text": "ok"}', '{"text": "broken"'], "line 2 is not valid JSON"),
        (['{"text": "ok"}', "", '[1, 2]'], "line 3 is a JSON list, not an object"),
        (['{"question": "q", "answer": "a"}'],
         "has columns ['answer', 'question'], which match no supervised format: accepted are messages (messages); prompt-completion (prompt, completion); "
         "text (text)"),
        ([], "holds no rows"),
        (['{"prompt": "p", "completion": "c"}', '{"prompt": "p2"}'], "line 2 has no 'completion'"),
        (['{"messages": [1, 2]}'], "'messages' is a list but not a conversation"),
    ],
)
def test_bad_data_errors(tmp_path, content, message):
    path = tmp_path / "bad.jsonl"
    path.write_text("\n".join(content) + ("\n" if content else ""))
    with pytest.raises(WeMaskError, match=None) as info:
        load_training_data(SUPERVISED, str(path))
    assert message in str(info.value)


def test_missing_file_unknown_type_and_local_split(tmp_path):
    with pytest.raises(WeMaskError, match="no such file"):
        load_training_data(SUPERVISED, str(tmp_path / "nope.jsonl"))
    (tmp_path / "x.txt").write_text("hello")
    with pytest.raises(WeMaskError, match="unsupported file type '.txt'"):
        load_training_data(SUPERVISED, str(tmp_path / "x.txt"))
    path = write_jsonl(tmp_path / "a.jsonl", [{"text": "a"}])
    with pytest.raises(WeMaskError, match="single split 'train'"):
        load_training_data(SUPERVISED, str(path), split="test")
    with pytest.raises(WeMaskError, match="does not have"):
        load_training_data(SUPERVISED, str(path), columns="prompt=question")


# --- configuration --------------------------------------------------------------------------------------------------


def test_precedence_defaults_recipe_flags_and_both_spellings(tmp_path):
    recipe = tmp_path / "r.yaml"
    recipe.write_text(
        "dataset: d.jsonl\nmask_rate: 0.5\nme-layer: 2\nmode: free\noutput_dir: from-recipe\n"
        "learning_rate: 2e-5\nmax_steps: 7\nper_device_train_batch_size: 3\nlogging_steps: 5\n"
    )
    options = TrainOptions(config=str(recipe), mask_rate="0.3", output_dir=str(tmp_path / "out"))
    opts, args, provenance = resolve(sft_stage(), options, ["--learning-rate", "1e-3", "--logging_steps", "2", "--packing"])
    assert opts["mask_rate"] == "0.3" and provenance["wemask"]["mask_rate"] == "flag"  # flag beats recipe
    assert opts["me_layer"] == 2 and opts["mode"] == "free" and provenance["wemask"]["mode"] == "recipe"
    assert opts["select"] is None and provenance["wemask"]["select"] == "default"
    assert args.learning_rate == 1e-3 and provenance["trl"]["learning_rate"] == "flag"
    assert args.logging_steps == 2 and args.packing is True
    assert args.max_steps == 7 and args.per_device_train_batch_size == 3  # recipe (2e-5 read as a string by YAML)
    assert args.output_dir == str(tmp_path / "out")
    _, args, _ = resolve(sft_stage(), TrainOptions(config=str(recipe)), [])
    assert args.learning_rate == 2e-5 and args.output_dir == "from-recipe"


def test_cpu_defaults_and_gradient_checkpointing_on_request(tmp_path):
    import torch

    if torch.cuda.is_available():
        pytest.skip("CPU defaults")
    options = TrainOptions(output_dir=str(tmp_path / "o"))
    _, args, _ = resolve(sft_stage(), options, [])
    assert args.use_cpu and not args.bf16 and not args.gradient_checkpointing
    _, args, _ = resolve(sft_stage(), options, ["--gradient-checkpointing"])
    assert args.gradient_checkpointing


def test_every_recipe_resolves():
    recipes = sorted(RECIPES.glob("*.yaml"))
    assert {p.name for p in recipes} >= {
        "sft-tiny-cpu.yaml", "sft-instruction-qwen3-4b.yaml", "sft-math-qwen3-4b.yaml", "sft-safety-qwen3-4b.yaml"
    }
    for recipe in recipes:
        if not recipe.name.startswith("sft-"):
            continue
        opts, args, _ = resolve(sft_stage(), TrainOptions(config=str(recipe), output_dir="x"), [])
        assert opts["dataset"], recipe
    opts, args, _ = resolve(sft_stage(), TrainOptions(config=str(RECIPES / "sft-instruction-qwen3-4b.yaml")), [])
    assert (args.learning_rate, args.max_length, args.per_device_train_batch_size * args.gradient_accumulation_steps * 8) == (2e-5, 4096, 256)
    assert opts["mask_rate"] == 0.1 and opts["me_layer"] == 7
    opts, _, _ = resolve(sft_stage(), TrainOptions(config=str(RECIPES / "sft-tiny-cpu.yaml"), output_dir="x"), [])
    assert Path(opts["dataset"]).is_file()  # relative to the repository, found from any directory
    for name in ("ddp", "zero2", "zero3", "fsdp"):
        import yaml

        assert yaml.safe_load((RECIPES / "accelerate" / f"{name}.yaml").read_text())["distributed_type"]


def test_resolve_errors(tmp_path):
    stage = sft_stage()
    with pytest.raises(WeMaskError, match=r"unknown option\(s\) --no-such-flag: not a wemask flag nor a field of TRL's SFTConfig"):
        resolve(stage, TrainOptions(output_dir="o"), ["--no-such-flag", "3"])
    with pytest.raises(WeMaskError, match=r"use hyphens: --mask-rate"):
        resolve(stage, TrainOptions(output_dir="o"), ["--mask_rate", "0.3"])
    assert resolve_settings(stage, TrainOptions(), []).opts["output_dir"] == "trainer_output"  # TRL's default, as in TRL
    recipe = tmp_path / "bad.yaml"
    recipe.write_text("learning_rat: 1\n")
    with pytest.raises(WeMaskError, match=r"unknown key\(s\) \['learning_rat'\]"):
        resolve(stage, TrainOptions(config=str(recipe), output_dir="o"), [])
    with pytest.raises(WeMaskError, match="invalid choice"):
        resolve(stage, TrainOptions(output_dir="o"), ["--lr-scheduler-type", "nope"])


# --- output directory -----------------------------------------------------------------------------------------------


class Args:
    process_index, world_size, resume_from_checkpoint = 0, 1, None


def claim(out, overwrite=False, resume=False):
    from wemask_cli.train.checkpoints import claim_run_folder

    folder_claim, checkpoint = claim_run_folder(out, {"overwrite": overwrite, "resume": resume}, Args, "sft")
    folder_claim.release()
    return checkpoint


def checkpoint(out, step, *, state=True, record=True, config=None):
    path = out / f"checkpoint-{step}"
    path.mkdir(parents=True)
    if state:
        (path / "trainer_state.json").write_text('{"global_step": %d}' % step)
    if record:
        (path / "wemask_run.json").write_text("{}")
    if config is not None:
        (path / "wemask_config.json").write_text(config)
    return path


def test_output_dir_safety(tmp_path, capsys):
    out = tmp_path / "run"
    assert claim(out) is None and out.is_dir()
    (out / "notes.txt").write_text("mine")
    with pytest.raises(WeMaskError, match=r"is not empty \(it holds files \(notes.txt\)\)"):
        claim(out)
    with pytest.raises(WeMaskError, match="wemask did not write"):
        claim(out, overwrite=True)
    with pytest.raises(WeMaskError, match="no complete checkpoint-N"):
        claim(out, resume=True)
    checkpoint(out, 3)
    checkpoint(out, 5, state=False)  # interrupted while saving: no trainer_state.json
    checkpoint(out, 7, config='{"mask_rate": 0.3, "dims": ')  # torn wemask_config.json
    checkpoint(out, 9, record=False)  # killed before wemask's record, the checkpoint's completion mark
    assert claim(out, resume=True) == str(out / "checkpoint-3")
    err = capsys.readouterr().err
    assert "skipping checkpoint-9: no wemask_run.json" in err and "skipping checkpoint-5: no trainer_state.json" in err
    assert "skipping checkpoint-7: wemask_config.json is torn or invalid" in err and "resuming from checkpoint-3" in err
    (out / "metrics.json").write_text("{}")
    with pytest.raises(WeMaskError, match="holds a finished run"):
        claim(out, resume=True)
    assert (out / "notes.txt").read_text() == "mine"


# --- one line, exit 2 -------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "args, message",
    [
        (["--bogus-option", "1"], "No such option: --bogus-option"),  # refused before TRL loads (train/trl_flags.py)
        (["--mode", "sometimes"], "--mode 'sometimes' is not valid"),
        (["--mask-rate", "0.1,0.3", "--me-layer", "1"], "trains one mask rate at a time"),
        (["--load-in-4bit"], "cannot be fully fine-tuned: add --use-peft"),
        (["--overwrite", "--resume"], "exclude each other"),
        (["--dataset", "DATA_BAD"], "line 2 is not valid JSON"),
        (["--dataset", "DATA_EMPTY"], "holds no rows"),
        (["--dataset", "DATA_COLS"], "match no sft format"),
        (["--dataset", "DATA_LATIN1"], "latin1.jsonl is not UTF-8 text"),
    ],
)
def test_cli_errors_are_one_line_exit_2(monkeypatch, capsys, tmp_path, tiny_model_dir, args, message):
    data = {
        "DATA_BAD": write_jsonl(tmp_path / "bad.jsonl", ['{"text": "a"}', "{oops"]),
        "DATA_EMPTY": write_jsonl(tmp_path / "empty.jsonl", []),
        "DATA_COLS": write_jsonl(tmp_path / "cols.jsonl", [{"input": "a", "output": "b"}]),
        "DATA_LATIN1": tmp_path / "latin1.jsonl",
    }
    data["DATA_LATIN1"].write_bytes('{"text": "caf\xe9"}\n'.encode("latin-1"))
    args = [str(data.get(a, a)) for a in args]
    if "--dataset" not in args:
        args += ["--dataset", str(ROOT / "data" / "sft_chat.jsonl")]
    code, out, err = run_main(monkeypatch, capsys, "sft", "--model", tiny_model_dir, "-o", str(tmp_path / "o"), *args)
    assert code == 2, err
    assert err.startswith("wemask: error: ") and err.count("\n") == 1 and message in err, err
    assert "Traceback" not in err


def test_unknown_lora_target_is_one_line_before_training(monkeypatch, capsys, tmp_path, tiny_model_dir):
    code, _, err = run_main(
        monkeypatch, capsys, "sft", "--model", tiny_model_dir, "-o", str(tmp_path / "o"), "--dataset",
        str(ROOT / "data" / "sft_chat.jsonl"), "--use-peft", "--lora-target-modules", "q_proj,qq_proj", "--max-steps", "1",
    )  # fmt: skip
    assert code == 2 and "Traceback" not in err
    assert err.splitlines()[-1] == (
        "wemask: error: --lora-target-modules: qq_proj is not a module of this model; "
        "use names like down_proj,gate_proj,k_proj,lm_head,o_proj,q_proj,up_proj,v_proj, or all-linear"
    )


def test_cli_refuses_non_empty_output_dir(monkeypatch, capsys, tmp_path, tiny_model_dir):
    out = tmp_path / "o"
    out.mkdir()
    (out / "keep.txt").write_text("x")
    code, _, err = run_main(
        monkeypatch, capsys, "sft", "--model", tiny_model_dir, "-o", str(out), "--dataset", str(ROOT / "data" / "sft_chat.jsonl")
    )
    assert code == 2 and "is not empty" in err and (out / "keep.txt").read_text() == "x"


def test_sft_help_lists_wemask_flags_and_explains_pass_through(monkeypatch, capsys):
    code, out, _ = run_main(monkeypatch, capsys, "sft", "--help")
    text = " ".join(out.split())
    assert code == 0
    for flag in ("--mask-rate", "--mode", "--me-layer", "--use-peft", "--lora-r", "--load-in-4bit", "--resume", "--overwrite", "--config"):
        assert flag in text
    assert "passes through" in text and "--learning_rate" in text and "accelerate launch" in text
    code, out, _ = run_main(monkeypatch, capsys, "sft", "--help-trl")
    assert code == 0 and "--per_device_train_batch_size" in out and "--packing" in out


def test_a_layer_outside_the_model_fails_before_the_trainer_is_built(tiny_model_dir, tmp_path):
    from wemask_cli.train.run import run

    class Never(sft_stage):
        def build_trainer(self, ctx):
            raise AssertionError("the trainer must not be built (the data would be tokenized first)")

    stage = Never()
    options = TrainOptions(model=tiny_model_dir, output_dir=str(tmp_path / "o"), dataset=str(ROOT / "data" / "sft_chat.jsonl"),
                           mask_rate="0.3", me_layer="99")  # fmt: skip
    with pytest.raises(WeMaskError, match="me_layer=99 is outside the model: it has 4 layers"):
        run(stage, options, ["--max-steps", "1"])
