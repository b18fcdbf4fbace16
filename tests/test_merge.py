"""`wemask merge RUN -o DIR`: a LoRA run merged into a full model folder that gives the same greedy tokens, with
its saved mask and run record carried over."""

from __future__ import annotations

import json
from pathlib import Path

from conftest import run_main

DATA = str(Path(__file__).resolve().parents[1] / "data" / "sft_chat.jsonl")
PROMPTS = ("What is the capital of Chile?", "Reverse the word 'bakery'.")


def greedy(monkeypatch, capsys, model: str, out: Path) -> list[str]:
    args = [arg for prompt in PROMPTS for arg in ("-p", prompt)]
    code, _, err = run_main(monkeypatch, capsys, "infer", "--model", model, *args, "--max-new-tokens", "12", "-o", str(out))
    assert code == 0, err
    return [json.loads(line)["completion"] for line in out.read_text().splitlines()]


def test_merge_gives_the_lora_runs_greedy_tokens(monkeypatch, capsys, tmp_path, tiny_model_dir):
    import torch
    from safetensors.torch import load_file, save_file

    run = tmp_path / "lora"
    code, _, err = run_main(monkeypatch, capsys, "sft", "--model", tiny_model_dir, "--dataset", DATA, "--use-peft", "--mask-rate", "0.3",
                            "--me-layer", "1", "--max-steps", "1", "--max-length", "32", "--save-strategy", "no",
                            "--report-to", "none", "-o", str(run))  # fmt: skip
    assert code == 0, err
    weights = load_file(run / "adapter_model.safetensors")
    torch.manual_seed(0)  # a one-step adapter barely moves the weights: make it matter, so a lost adapter shows
    save_file({name: t + 0.5 * torch.randn_like(t) if "lora_B" in name else t for name, t in weights.items()}, run / "adapter_model.safetensors")
    code, _, err = run_main(monkeypatch, capsys, "merge", str(run), "-o", str(tmp_path / "merged"))
    assert code == 0, err
    merged = tmp_path / "merged"
    assert (merged / "model.safetensors").is_file() and not (merged / "adapter_config.json").exists()
    assert json.loads((merged / "wemask_config.json").read_text())["mask_rate"] == 0.3
    lora_tokens = greedy(monkeypatch, capsys, str(run), tmp_path / "lora.jsonl")
    assert lora_tokens != greedy(monkeypatch, capsys, tiny_model_dir, tmp_path / "base.jsonl")
    assert greedy(monkeypatch, capsys, str(merged), tmp_path / "merged.jsonl") == lora_tokens
    code, _, err = run_main(monkeypatch, capsys, "merge", str(run), "-o", str(merged))
    assert code == 2 and "--overwrite" in err.splitlines()[-1]
    code, _, err = run_main(monkeypatch, capsys, "merge", tiny_model_dir, "-o", str(tmp_path / "again"))
    assert code == 2 and "not a LoRA run" in err and "Traceback" not in err


def lora_run(monkeypatch, capsys, base: str, folder: Path) -> Path:
    code, _, err = run_main(monkeypatch, capsys, "sft", "--model", base, "--dataset", DATA, "--use-peft", "--max-steps", "1",
                            "--max-length", "32", "--save-strategy", "no", "--report-to", "none", "-o", str(folder))  # fmt: skip
    assert code == 0, err
    return folder


def test_files_the_user_writes_during_a_merge_are_never_recorded(monkeypatch, capsys, tmp_path, tiny_model_dir):
    """A loop writing OUT/user_N.txt while `merge RUN -o OUT` runs: none enters the manifest, so `merge --overwrite`
    refuses (naming them) instead of deleting them."""
    import threading

    from wemask_cli.outputs import MANIFEST_NAME

    run = lora_run(monkeypatch, capsys, tiny_model_dir, tmp_path / "lora")
    out, stop, written = tmp_path / "merged", threading.Event(), []

    def scribble():
        while not stop.is_set():
            if (out / MANIFEST_NAME).exists():  # the merge has claimed the folder
                path = out / f"user_{len(written)}.txt"
                path.write_text("the user's")
                written.append(path)
            stop.wait(0.001)

    thread = threading.Thread(target=scribble)
    thread.start()
    try:
        code, _, err = run_main(monkeypatch, capsys, "merge", str(run), "-o", str(out))
    finally:
        stop.set()
        thread.join()
    assert code == 0 and len(written) > 5, (err, len(written))
    recorded = json.loads((out / MANIFEST_NAME).read_text())
    assert "model.safetensors" in recorded["files"] and not [name for name in recorded["files"] if name.startswith("user_")]
    code, _, err = run_main(monkeypatch, capsys, "merge", str(run), "-o", str(out), "--overwrite")
    assert code == 2 and "user_" in err.strip().splitlines()[-1], err
    assert all(path.read_text() == "the user's" for path in written)


def test_an_adapter_on_a_base_of_another_shape_is_one_line(monkeypatch, capsys, tmp_path, tiny_model_dir, tiny_tokenizer):
    """base_model_name_or_path naming a model of another shape (PEFT's size mismatch) or architecture (none of the
    adapter's modules): merge and infer say so in one line, and merge leaves no folder."""
    import transformers
    from conftest import make_tiny_model

    run = lora_run(monkeypatch, capsys, tiny_model_dir, tmp_path / "lora")
    narrow, gpt2 = tmp_path / "narrow", tmp_path / "gpt2"
    make_tiny_model("llama", vocab_size=len(tiny_tokenizer), hidden_size=32, intermediate_size=64).save_pretrained(narrow)
    transformers.GPT2LMHeadModel(transformers.GPT2Config(n_embd=32, n_layer=2, n_head=2, vocab_size=len(tiny_tokenizer))).save_pretrained(gpt2)
    config = json.loads((run / "adapter_config.json").read_text())
    for base, detail in ((narrow, "model.layers.0.self_attn.q_proj.lora_A.weight is [16, 64] in the adapter, [16, 32] in the model"),
                         (gpt2, "not found in the base model")):
        (run / "adapter_config.json").write_text(json.dumps({**config, "base_model_name_or_path": str(base)}))
        for args in (("merge", str(run), "-o", str(tmp_path / "merged")), ("infer", "--model", str(run), "-p", "Hi")):
            code, out, err = run_main(monkeypatch, capsys, *args)
            assert code == 2 and err.count("\n") == 1 and "Traceback" not in err, err
            assert f"PEFT cannot put this LoRA adapter on its base model {base} (" in err and detail in err, err
            assert "set base_model_name_or_path in adapter_config.json" in err
        assert not (tmp_path / "merged").exists()


def test_a_file_size_limit_while_merging_is_one_line_and_keeps_the_previous_output(monkeypatch, capsys, tmp_path, tiny_model_dir):
    """`ulimit -f 200; wemask merge RUN -o OUT --overwrite` over a finished merge: safetensors' write fails (EFBIG);
    one line naming the limit, and OUT still holds the previous merge (it is deleted only once the new one is written)."""
    import resource
    import subprocess
    import sys

    def limit_file_size():
        resource.setrlimit(resource.RLIMIT_FSIZE, (200 * 1024, resource.getrlimit(resource.RLIMIT_FSIZE)[1]))

    run, out = lora_run(monkeypatch, capsys, tiny_model_dir, tmp_path / "lora"), tmp_path / "merged"
    code, _, err = run_main(monkeypatch, capsys, "merge", str(run), "-o", str(out))
    assert code == 0, err
    before = {path.name: path.read_bytes() for path in out.iterdir()}
    done = subprocess.run([sys.executable, "-m", "wemask_cli", "merge", str(run), "-o", str(out), "--overwrite"],
                          capture_output=True, text=True, timeout=600, preexec_fn=limit_file_size)
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr[-3000:]
    assert done.stderr.strip().splitlines()[-1] == (
        f"wemask: error: could not write the merged model to {out}: a file reached this process's file-size limit; raise the "
        f"file-size limit (ulimit -f) and merge again (nothing in {out} was deleted)")
    assert {path.name: path.read_bytes() for path in out.iterdir()} == before


def test_a_run_still_training_is_named_in_use(monkeypatch, capsys, tmp_path):
    from wemask_cli.outputs import claim_output_dir

    run = tmp_path / "lora"
    with claim_output_dir(run, overwrite=False, kind="sft"):  # as `wemask sft --use-peft -o RUN` holds it until its final save
        code, _, err = run_main(monkeypatch, capsys, "merge", str(run), "-o", str(tmp_path / "merged"))
    assert code == 2 and err.count("\n") == 1 and "not a LoRA run" not in err, err
    assert err.startswith(f"wemask: error: {run} is in use by `") and f"merge one of its checkpoints ({run}/checkpoint-N)" in err
    assert not (tmp_path / "merged").exists()


def test_merging_into_the_run_itself_is_refused_without_naming_overwrite(monkeypatch, capsys, tmp_path):
    run = tmp_path / "lora"
    run.mkdir()
    (run / "adapter_config.json").write_text("{}")
    for output in (run, tmp_path):
        code, _, err = run_main(monkeypatch, capsys, "merge", str(run), "-o", str(output))
        assert code == 2 and "--overwrite" not in err, err
        assert err == f"wemask: error: --output {output} is the run {run} or holds it: write the merged model to another folder\n"
