"""`wemask dpo` on TRL's DPOTrainer: the reference-model policy (--ref-mask), the mask in the graph, r=0 equal to
plain TRL, free mode, the data layouts, one-line errors, the recipes, and a short run on the embedded model."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from conftest import run_main

from wemask_cli.method.config import WeMaskConfig
from wemask_cli.method.wemask_hook import masked_layers
from wemask_cli.runtime.errors import WeMaskError
from wemask_cli.train.dpo import DPOStage as stage
from wemask_cli.train.dpo import split_implicit_prompt
from wemask_cli.train.options import TrainOptions
from wemask_cli.train.reference import PolicyPass
from wemask_cli.train.resolve import hardware_defaults, resolve
from wemask_cli.train.run import run

ROOT = Path(__file__).resolve().parents[1]
PREFS = str(ROOT / "data" / "preferences.jsonl")
PREFS_HH = str(ROOT / "data" / "preferences_hh.jsonl")
RECIPES = ROOT / "recipes"
TRL_ARGS = [
    "--max-steps", "2", "--per-device-train-batch-size", "2", "--logging-steps", "1", "--max-length", "64",
    "--learning-rate", "1e-3", "--report-to", "none", "--save-strategy", "no", "--seed", "0",
]  # fmt: skip
ZERO = 1e-6  # |reward| at the first step with --ref-mask same (float tolerance; observed exactly 0.0)


def train(tmp_path, name, model, *, extra=(), dataset=PREFS, split="train[:8]", **options):
    stage_options = {"ref_mask": options.pop("ref_mask", None)}
    options.setdefault("me_layer", 1)
    return run(
        stage(),
        TrainOptions(model=model, output_dir=str(tmp_path / name), dataset=dataset, dataset_split=split, stage_options=stage_options, **options),
        [*TRL_ARGS, *extra],
    )


def first(result) -> dict:
    return next(e for e in result.trainer.state.log_history if "rewards/chosen" in e)


def losses(result) -> list[float]:
    return [e["loss"] for e in result.trainer.state.log_history if "loss" in e]


# --- the reference policy ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("peft", [False, True], ids=["full", "lora"])
def test_ref_mask_same_starts_at_zero_reward_and_none_does_not(tmp_path, tiny_model_dir, peft):
    same = train(tmp_path, "same", tiny_model_dir, mask_rate=0.5, use_peft=peft)  # default in aware mode
    none = train(tmp_path, "none", tiny_model_dir, mask_rate=0.5, use_peft=peft, ref_mask="none")
    s, n = first(same), first(none)
    assert abs(s["rewards/chosen"]) < ZERO and abs(s["rewards/rejected"]) < ZERO
    assert s["loss"] == pytest.approx(math.log(2), abs=1e-6)
    assert abs(n["rewards/chosen"]) > 1e-4 and abs(n["rewards/rejected"]) > 1e-4
    assert n["rewards/chosen"] != pytest.approx(n["rewards/rejected"], abs=1e-5)
    assert n["loss"] != pytest.approx(math.log(2), abs=1e-5)
    assert same.metrics["ref_mask"] == "same" and none.metrics["ref_mask"] == "none"
    assert same.metrics["first_step"]["rewards/chosen"] == s["rewards/chosen"]
    run_record = json.loads((same.output_dir / "wemask_run.json").read_text())
    assert run_record["options"]["ref_mask"] == "same"
    kind = "adapter-disabled policy" if peft else "separate model"
    assert same.metrics["reference"] == kind and none.metrics["reference"] == kind


def test_unmasked_reference_is_the_same_with_and_without_peft(tmp_path, tiny_model_dir):
    """LoRA starts at B=0, so the adapter-disabled policy equals the separately loaded reference: with --ref-mask none
    both must give the same (non-zero) first-step rewards, which shows the PEFT reference pass really ran unmasked."""
    full = first(train(tmp_path, "full", tiny_model_dir, mask_rate=0.5, ref_mask="none"))
    lora = first(train(tmp_path, "lora", tiny_model_dir, mask_rate=0.5, ref_mask="none", use_peft=True))
    for key in ("rewards/chosen", "rewards/rejected", "logps/chosen", "loss"):
        assert lora[key] == pytest.approx(full[key], rel=1e-4, abs=1e-6), key


def test_hooks_on_policy_and_reference_and_removal_removes_both(tmp_path, tiny_model_dir):
    full = train(tmp_path, "full", tiny_model_dir, mask_rate=0.5)
    trainer = full.trainer
    layers = masked_layers(trainer.model)
    assert layers == [1, 2, 3] and masked_layers(trainer.ref_model) == layers
    full.stage.installation.remove()
    assert masked_layers(trainer.model) == [] and masked_layers(trainer.ref_model) == []

    unmasked_ref = train(tmp_path, "none", tiny_model_dir, mask_rate=0.5, ref_mask="none").trainer
    assert masked_layers(unmasked_ref.model) == [1, 2, 3] and masked_layers(unmasked_ref.ref_model) == []

    result = train(tmp_path, "lora", tiny_model_dir, mask_rate=0.5, ref_mask="none", use_peft=True)
    (mask,) = result.stage.installation.installed
    predicates = {record.hook.active for item in mask.items for record in item.records}
    assert len(predicates) == 1 and isinstance(next(iter(predicates)), PolicyPass)
    policy_pass = next(iter(predicates))
    assert policy_pass()
    with result.trainer.model.disable_adapter():
        assert not policy_pass()
    assert masked_layers(result.trainer.model) == [1, 2, 3]
    result.stage.installation.remove()
    assert masked_layers(result.trainer.model) == []


def test_precomputed_reference_follows_ref_mask(tmp_path, tiny_model_dir):
    extra = ["--precompute-ref-log-probs"]
    same = first(train(tmp_path, "same", tiny_model_dir, mask_rate=0.5, extra=extra))
    none = first(train(tmp_path, "none", tiny_model_dir, mask_rate=0.5, ref_mask="none", extra=extra))
    assert abs(same["rewards/chosen"]) < ZERO and abs(same["rewards/rejected"]) < ZERO
    assert abs(none["rewards/chosen"]) > 1e-4


# --- the mask is in the graph; r = 0 and free mode are plain TRL ---------------------------------------------------


def test_aware_mask_changes_the_first_step(tmp_path, tiny_model_dir):
    r0 = train(tmp_path, "r0", tiny_model_dir, mask_rate=0.0)
    aware = train(tmp_path, "aware", tiny_model_dir, mask_rate=0.5)
    unmasked_ref = train(tmp_path, "none", tiny_model_dir, mask_rate=0.5, ref_mask="none")
    a, z = first(aware), first(r0)
    # With --ref-mask same the first loss is log 2 whatever the mask (policy == reference): the mask shows in the
    # policy's log-probs and gradient at the first step, and in the loss from the second step on.
    assert a["logps/chosen"] != pytest.approx(z["logps/chosen"], rel=1e-4)
    assert a["grad_norm"] != pytest.approx(z["grad_norm"], rel=1e-4)
    assert losses(aware)[1] != pytest.approx(losses(r0)[1], rel=1e-5)
    # With an unmasked reference the first loss itself differs from r = 0.
    assert losses(unmasked_ref)[0] != pytest.approx(losses(r0)[0], rel=1e-5)


def test_padded_batches_equal_one_sequence_at_a_time(tmp_path, tiny_model_dir):
    """DPO's forwards send a padded 2D attention mask and no position ids: the masked policy and the unmasked
    reference must give the same first step in batches of 4 pairs (8 padded rows) as one pair at a time.
    (TRL 1.16 turns --padding-free off for DPO, so padded batches are the only layout to check.)"""
    batched = first(train(tmp_path, "batched", tiny_model_dir, mask_rate=0.5, ref_mask="none", extra=["--per-device-train-batch-size", "4"]))
    single = first(train(
        tmp_path, "single", tiny_model_dir, mask_rate=0.5, ref_mask="none",
        extra=["--per-device-train-batch-size", "1", "--gradient-accumulation-steps", "4"],
    ))  # fmt: skip
    for key in ("logps/chosen", "logps/rejected", "rewards/chosen", "rewards/rejected", "loss"):
        assert single[key] == pytest.approx(batched[key], rel=1e-4, abs=1e-6), key
    assert abs(batched["rewards/chosen"]) > 1e-4


def plain_trl_dpo(tmp_path, model_dir, rows):
    """TRL's DPOTrainer run directly, with the same arguments as TRL_ARGS."""
    import dataclasses

    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import DPOConfig, DPOTrainer

    fields = {f.name for f in dataclasses.fields(DPOConfig)}
    cpu = {k: v for k, v in hardware_defaults(DPOConfig).items() if k in fields}
    args = DPOConfig(
        output_dir=str(tmp_path / "plain"), max_steps=2, per_device_train_batch_size=2, logging_steps=1, max_length=64,
        learning_rate=1e-3, report_to="none", save_strategy="no", seed=0, **cpu,
    )  # fmt: skip
    trainer = DPOTrainer(
        model=AutoModelForCausalLM.from_pretrained(model_dir),
        args=args,
        train_dataset=Dataset.from_list(rows),
        processing_class=AutoTokenizer.from_pretrained(model_dir),
    )
    trainer.train()
    return [e for e in trainer.state.log_history if "loss" in e]


def test_r0_and_free_mode_equal_plain_trl_dpo(tmp_path, tiny_model_dir):
    rows = [json.loads(line) for line in Path(PREFS).read_text().splitlines()[:8]]
    plain = plain_trl_dpo(tmp_path, tiny_model_dir, rows)
    r0 = train(tmp_path, "r0", tiny_model_dir, mask_rate=0.0)
    free = train(tmp_path, "free", tiny_model_dir, mask_rate=0.5, mode="free")
    for result in (r0, free):
        ours = [e for e in result.trainer.state.log_history if "loss" in e]
        assert len(ours) == len(plain) == 2
        for mine, theirs in zip(ours, plain):
            for key in ("loss", "rewards/chosen", "rewards/rejected", "logps/chosen", "grad_norm"):
                assert mine[key] == pytest.approx(theirs[key], rel=1e-5, abs=1e-7), key
    saved = WeMaskConfig.load(free.output_dir)
    assert saved.mode == "free" and saved.mask_rate == 0.5 and saved.dims and sorted(saved.dims) == [1, 2, 3]
    assert free.metrics["ref_mask"] == "none" and masked_layers(free.trainer.model) == []


# --- data --------------------------------------------------------------------------------------------------------


def test_split_implicit_prompt():
    user = {"role": "user", "content": "Hi"}
    hello = {"role": "assistant", "content": "Hello"}
    ask = {"role": "user", "content": "Help?"}
    yes, no = {"role": "assistant", "content": "Sure."}, {"role": "assistant", "content": "No."}
    out = split_implicit_prompt({"chosen": [user, hello, ask, yes], "rejected": [user, hello, ask, no]})
    assert out == {"prompt": [user, hello, ask], "chosen": [yes], "rejected": [no]}
    hh = split_implicit_prompt(
        {"chosen": "\n\nHuman: Why?\n\nAssistant: I think so.", "rejected": "\n\nHuman: Why?\n\nAssistant: I cannot say."}
    )
    assert hh == {"prompt": "\n\nHuman: Why?\n\nAssistant:", "chosen": " I think so.", "rejected": " I cannot say."}
    words = split_implicit_prompt({"chosen": "The answer is 42.", "rejected": "The answer is 45."})
    assert words == {"prompt": "The answer is", "chosen": " 42.", "rejected": " 45."}
    same = split_implicit_prompt({"chosen": "\n\nHuman: a\n\nAssistant: b", "rejected": "\n\nHuman: a\n\nAssistant: b"})
    assert same["prompt"] == "\n\nHuman: a\n\nAssistant:" and same["chosen"] == " b"
    with pytest.raises(WeMaskError, match="no leading message"):
        split_implicit_prompt({"chosen": [yes], "rejected": [no]})
    with pytest.raises(WeMaskError, match="both be strings or both be conversations"):
        split_implicit_prompt({"chosen": "text", "rejected": [no]})


def test_hh_layout_trains_with_zero_first_reward(tmp_path, tiny_model_dir):
    short = dict(dataset=PREFS_HH, split="train[:4]", mask_rate=0.5)
    with pytest.raises(WeMaskError, match="every example's prompt fills --max-length 64 tokens"):
        train(tmp_path, "too-short", tiny_model_dir, **short)
    result = train(tmp_path, "hh", tiny_model_dir, **short, extra=["--max-length", "512"])
    assert result.metrics["global_step"] == 2
    assert abs(first(result)["rewards/chosen"]) < ZERO
    record = json.loads((result.output_dir / "wemask_run.json").read_text())
    assert record["data_format"].startswith("chosen-rejected")


@pytest.mark.parametrize(
    "rows, args, message",
    [
        ([{"prompt": "2+2?", "completion": "4"}], [], "match no dpo format: accepted are prompt-chosen-rejected"),
        ([{"prompt": "2+2?", "chosen": "4"}], [], "columns ['chosen', 'prompt'], which match no dpo format"),
        ([{"prompt": "q", "chosen": "a", "rejected": "b"}], ["--ref-mask", "maybe"], "--ref-mask 'maybe' is not valid"),
        ([{"prompt": "q", "chosen": "a", "rejected": "b"}], ["--ref-mask", "same", "--mode", "free"], "--ref-mask same needs --mode aware"),
        ([{"prompt": "q", "chosen": [{"role": "assistant", "content": "a"}], "rejected": [{"role": "assistant", "content": "b"}]}], [], "prompt is a str"),
    ],
)  # fmt: skip
def test_cli_errors_are_one_line_exit_2(monkeypatch, capsys, tmp_path, tiny_model_dir, rows, args, message):
    data = tmp_path / "data.jsonl"
    data.write_text("".join(json.dumps(row) + "\n" for row in rows))
    code, _, err = run_main(
        monkeypatch, capsys, "dpo", "--model", tiny_model_dir, "--dataset", str(data), "--output-dir", str(tmp_path / "o"), *args
    )
    assert code == 2 and "Traceback" not in err
    errors = [line for line in err.splitlines() if line.startswith("wemask: error:")]
    assert len(errors) == 1 and message in errors[0] and err.strip().splitlines()[-1] == errors[0]


# --- recipes, the CLI, the embedded model -------------------------------------------------------------------------


def test_recipes_resolve():
    r = resolve(stage(), TrainOptions(config=str(RECIPES / "dpo-hh-qwen3-4b.yaml")), [])
    opts, args = r.opts, r.args
    assert (opts["model"], opts["dataset"], opts["dataset_split"]) == ("Qwen/Qwen3-4B", "Anthropic/hh-rlhf", "train[:3000]")
    assert (args.learning_rate, args.max_length) == (5e-6, 1024)
    assert args.per_device_train_batch_size * args.gradient_accumulation_steps * 8 == 8
    r = resolve(stage(), TrainOptions(config=str(RECIPES / "dpo-tiny-cpu.yaml"), output_dir="x"), ["--beta", "0.2"])
    opts, args = r.opts, r.args
    assert Path(opts["dataset"]).is_file() and opts["ref_mask"] == "same" and args.beta == 0.2


def test_tiny_recipe_through_the_cli(monkeypatch, capsys, tmp_path, tiny_model_dir):
    out = tmp_path / "run"
    code, _, err = run_main(
        monkeypatch, capsys, "dpo", "--config", str(RECIPES / "dpo-tiny-cpu.yaml"), "--model", tiny_model_dir,
        "--output-dir", str(out), "--report-to", "none", "--me-layer", "1",
    )  # fmt: skip
    assert code == 0, err
    assert "masked like the policy (--ref-mask same)" in err
    for folder in (out, out / "checkpoint-2", out / "checkpoint-4"):
        assert WeMaskConfig.load(folder).mode == "aware", folder
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["global_step"] == 4 and metrics["ref_mask"] == "same"
    assert abs(metrics["first_step"]["rewards/chosen"]) < ZERO


@pytest.mark.embedded
def test_embedded_model_short_run(tmp_path, embedded_dir):
    """The default embedded model (no --model): TRL reloads the reference from its converted cache directory."""
    result = run(
        stage(),
        TrainOptions(output_dir=str(tmp_path / "emb"), dataset=PREFS, mask_rate=0.3, me_layer=11),
        ["--max-steps", "2", "--per-device-train-batch-size", "1", "--logging-steps", "1", "--max-length", "128",
         "--learning-rate", "1e-5", "--report-to", "none", "--save-strategy", "no", "--seed", "0"],
    )  # fmt: skip
    assert result.trainer.ref_model.config._name_or_path == embedded_dir
    saved = WeMaskConfig.load(result.output_dir)
    assert saved.mode == "aware" and saved.me_layer == 11 and len(saved.dims) == 19
    step = first(result)
    assert abs(step["rewards/chosen"]) < 1e-4 and abs(step["rewards/rejected"]) < 1e-4
    assert result.metrics["global_step"] == 2 and math.isfinite(result.metrics["final_loss"])
