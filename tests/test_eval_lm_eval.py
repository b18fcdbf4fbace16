"""wemask eval against lm-evaluation-harness: item-for-item agreement, and the --lm-eval-tasks bridge."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import run_main

lm_eval = pytest.importorskip("lm_eval")

from wemask_cli import resources  # noqa: E402


def write_tasks(folder: Path, choice_file: Path, text_file: Path) -> Path:
    """Local lm-eval YAML tasks over wemask's own files: the choice prompt and target delimiter of `--task choice`,
    and a rolling log-likelihood over one document (the whole text, like `--task perplexity`)."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "wemask_choice.yaml").write_text(
        "task: wemask_choice\ndataset_path: json\ndataset_kwargs:\n  data_files:\n"
        f"    test: {choice_file}\ntest_split: test\noutput_type: multiple_choice\n"
        'doc_to_text: "Question: {{question}}\\nAnswer:"\ndoc_to_choice: "{{choices}}"\ndoc_to_target: "{{answer}}"\n'
        "metric_list:\n  - metric: acc\n  - metric: acc_norm\n"
    )
    document = folder / "text.jsonl"
    document.write_text(json.dumps({"text": text_file.read_text(encoding="utf-8")}) + "\n")
    (folder / "wemask_text.yaml").write_text(
        "task: wemask_text\ndataset_path: json\ndataset_kwargs:\n  data_files:\n"
        f"    test: {document}\ntest_split: test\noutput_type: loglikelihood_rolling\n"
        'doc_to_text: ""\ndoc_to_target: "{{text}}"\nmetric_list:\n  - metric: word_perplexity\n'
        "  - metric: byte_perplexity\n  - metric: bits_per_byte\n"
    )
    return folder


@pytest.mark.embedded
def test_native_choice_and_perplexity_agree_with_lm_eval(embedded, tmp_path):
    """Same 60 bundled items, same text, same prompt, same 256-token length: acc and acc_norm equal, word
    perplexity within 0.5% (it is in fact equal: every token scored once, the same windows)."""
    from lm_eval.models.huggingface import HFLM
    from lm_eval.tasks import TaskManager

    from wemask_cli.engines.transformers import TransformersEngine
    from wemask_cli.eval.settings import EvalSettings
    from wemask_cli.eval.sweep import run_sweep, wemask_axis
    from wemask_cli.eval.tasks.registry import task_class
    from wemask_cli.eval.tasks.resolve import resolve
    from wemask_cli.prompts.rendering import context_length

    with resources.as_file("eval/choice.jsonl") as choice, resources.as_file("eval/perplexity.txt") as text:
        folder = write_tasks(tmp_path / "tasks", choice, text)
    manager = TaskManager(include_path=str(folder), include_defaults=False)
    lm = HFLM(pretrained=embedded.model, tokenizer=embedded.tokenizer, batch_size=8, max_length=256)
    theirs = lm_eval.simple_evaluate(model=lm, tasks=["wemask_choice", "wemask_text"], task_manager=manager)["results"]
    ours = {}
    for task, extra in (("choice", {}), ("perplexity", {"window": 256})):
        settings = resolve(EvalSettings(task=task, batch_size=8, **extra))
        native = task_class(settings.task)(settings)
        prepared = native.prepare(embedded.tokenizer, native.load(), context_length(embedded.model))
        sweep = run_sweep(TransformersEngine(embedded), [wemask_axis([None])], native, prepared, settings, 8)
        ours.update({r["metric"]: r["value"] for r in sweep.results})
    assert ours["accuracy"] == pytest.approx(theirs["wemask_choice"]["acc,none"], abs=1e-9)
    assert ours["accuracy_norm"] == pytest.approx(theirs["wemask_choice"]["acc_norm,none"], abs=1e-9)
    assert ours["word_perplexity"] == pytest.approx(theirs["wemask_text"]["word_perplexity,none"], rel=5e-3)
    assert ours["byte_perplexity"] == pytest.approx(theirs["wemask_text"]["byte_perplexity,none"], rel=5e-3)
    assert ours["bits_per_byte"] == pytest.approx(theirs["wemask_text"]["bits_per_byte,none"], rel=5e-3)


def test_bridge_reports_the_tasks_own_metric_n_delta_samples_and_provenance(monkeypatch, capsys, tiny_model_dir, tmp_path):
    rows = [{"question": f"What is {i} plus {i}?", "choices": [str(2 * i), str(2 * i + 1), "no"], "answer": 0} for i in range(6)]
    choice = tmp_path / "choice.jsonl"
    choice.write_text("".join(json.dumps(r) + "\n" for r in rows))
    with resources.as_file("eval/perplexity.txt") as text:
        folder = write_tasks(tmp_path / "tasks", choice, text)
    out = tmp_path / "out"
    code, stdout, err = run_main(
        monkeypatch, capsys, "eval", "--model", tiny_model_dir, "--lm-eval-tasks", "wemask_choice", "--lm-eval-include",
        str(folder), "--mask-rates", "0,1", "--me-layer", "0", "--num-fewshot", "1", "--output", str(out),
    )
    assert code == 0, err
    doc = json.loads((out / "metrics.json").read_text())
    assert doc["primary_metric"] == "wemask_choice/acc"
    assert {r["metric"] for r in doc["results"]} == {"wemask_choice/acc", "wemask_choice/acc_norm"}  # never sample_len
    assert all(r["n"] == 6 for r in doc["results"])
    masked = next(r for r in doc["results"] if r["mask_rate"] == 1.0 and r["metric"] == "wemask_choice/acc")
    assert "delta" in masked and "delta_se" in masked
    assert doc["provenance"]["versions"]["lm-eval"] and doc["lm_eval"]["tasks"] == ["wemask_choice"]
    samples = [json.loads(line) for line in (out / "examples.jsonl").read_text().splitlines()]
    assert len(samples) == 12 and {s["mask_rate"] for s in samples} == {0.0, 1.0}
    first = samples[0]
    assert first["prompt"].count("Question:") == 2  # one few-shot example passed through, then the question
    assert first["continuations"] == [" " + c for c in rows[first["doc_id"]]["choices"]] and "acc" in first
    assert "wemask eval: lm-eval (6 examples" in stdout
