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
