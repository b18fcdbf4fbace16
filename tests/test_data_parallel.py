"""`wemask eval`, `wemask infer` and `wemask locate` in 2 gloo processes write what one process writes: every number
of metrics.json, results.csv and examples.jsonl (the same rows in the same order), every completion token for token,
every number of locate's report and table; only the recorded process count and the run's times differ. Each process
scores (measures) its share of the batches (of lm-eval's requests under --lm-eval-tasks, whose own batches can round
a log-likelihood's last digit differently)."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

from wemask_cli.runtime.ranks import map_batches

ENV = {**os.environ, "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}  # as the other 2-process tests run
LAUNCH = ("--num_processes", "2", "--accelerate_config", "ddp")
TORCHRUN = ("-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2")
TIMED = ("started", "duration_s", "processes", "command")  # what two runs of one eval may differ in


def wemask(cwd: Path, *args: str, launcher: tuple[str, ...] = ()) -> subprocess.CompletedProcess:
    done = subprocess.run([sys.executable, *launcher, "-m", "wemask_cli", *args], capture_output=True, text=True, env=ENV,
                          timeout=600, cwd=cwd)  # fmt: skip
    assert done.returncode == 0 and "Traceback" not in done.stderr, (done.stdout + done.stderr)[-4000:]
    return done


def untimed(document: dict) -> dict:
    """metrics.json less what differs between two runs of the same eval (times, the command line, the processes)."""
    provenance = {k: v for k, v in document["provenance"].items() if k not in TIMED}
    return {**{k: v for k, v in document.items() if k != "created"}, "provenance": provenance}


def rows(path: Path) -> list[dict]:
    return [{k: v for k, v in json.loads(line).items() if k != "run"} for line in path.read_text().splitlines()]


def close(one, two) -> bool:
    """Equal, but for floats a few roundings apart (a log-likelihood computed under another batch's padding)."""
    if isinstance(one, float) and isinstance(two, float):
        return math.isclose(one, two, rel_tol=1e-4)
    if isinstance(one, dict) and isinstance(two, dict):
        return one.keys() == two.keys() and all(close(one[k], two[k]) for k in one)
    if isinstance(one, list) and isinstance(two, list):
        return len(one) == len(two) and all(close(a, b) for a, b in zip(one, two))
    return one == two


def same_eval(tmp_path: Path, *args: str, flags: tuple[str, ...] = LAUNCH, launcher: tuple[str, ...] = (),
              same_rows=lambda one, two: one == two) -> dict:
    """The eval in one process and in two (through --num_processes, or `launcher`); the two outputs compared
    (the rows by `same_rows`); metrics.json."""
    wemask(tmp_path, "eval", *args, "-o", "one")
    launched = wemask(tmp_path, "eval", *args, "-o", "two", *flags, launcher=launcher)
    one, two = (json.loads((tmp_path / name / "metrics.json").read_text()) for name in ("one", "two"))
    assert (one["provenance"]["processes"], two["provenance"]["processes"]) == (1, 2)
    assert untimed(one) == untimed(two)
    assert same_rows(rows(tmp_path / "one" / "examples.jsonl"), rows(tmp_path / "two" / "examples.jsonl"))
    assert (tmp_path / "one" / "results.csv").read_text() == (tmp_path / "two" / "results.csv").read_text()
    assert sorted(p.name for p in (tmp_path / "one").iterdir()) == sorted(p.name for p in (tmp_path / "two").iterdir())
    assert launched.stderr.count("Wrote metrics.json") == 1  # said once, by the main process
    return two


def test_batches_are_dealt_in_order_without_a_launcher():
    ran = []
    out = map_batches(7, 3, lambda k, start, end: ran.append(k) or [(k, i) for i in range(start, end)])
    assert ran == [0, 1, 2] and out == [(0, 0), (0, 1), (0, 2), (1, 3), (1, 4), (1, 5), (2, 6)]


def test_choice_with_quantize_in_two_processes(tmp_path, tiny_model_dir):
    """Scored options (shared-context batches sorted by length), two rates x two quantization settings."""
    document = same_eval(tmp_path, "--model", tiny_model_dir, "--task", "choice", "--limit", "7", "--batch-size", "2",
                         "--mask-rates", "0,0.5", "--me-layer", "1", "--quantize", "none,w8a8")  # fmt: skip
    assert len(document["results"]) >= 4 and document["n_examples"] == 7


def test_diversity_in_two_processes(tmp_path, tiny_model_dir):
    """The diversity measures per prompt and layer, and the ME layer the task locates itself (no --me-layer at r=0),
    from each process's batches: one process's every digit, --per-layer included."""
    document = same_eval(tmp_path, "--model", tiny_model_dir, "--task", "diversity", "--limit", "5", "--batch-size", "2",
                         "--mask-rates", "0,0.5", "--me-layer", "1", "--per-layer")  # fmt: skip
    assert document["diversity"]["from_layer_source"] == "the ME layer of the mask"
    (tmp_path / "located").mkdir()
    located = same_eval(tmp_path / "located", "--model", tiny_model_dir, "--task", "diversity", "--limit", "3",
                        "--batch-size", "1", "--mask-rates", "0")  # fmt: skip
    assert located["diversity"]["from_layer_source"] in ("the ME layer located on these prompts", "no ME layer found")


def test_math_generation_in_two_processes(tmp_path, tiny_model_dir):
    """Greedy generation, batch by batch: the same completions."""
    document = same_eval(tmp_path, "--model", tiny_model_dir, "--task", "math", "--limit", "5", "--batch-size", "2",
                         "--max-new-tokens", "6", "--mask-rates", "0,0.5", "--me-layer", "1")  # fmt: skip
    assert document["n_examples"] == 5


def lm_eval_tasks(folder: Path) -> Path:
    """Local lm-eval YAML tasks of every request type: multiple choice over 7 questions, a rolling log-likelihood,
    and greedy generation up to a newline."""
    from test_eval_lm_eval import write_tasks

    from wemask_cli import resources

    folder.mkdir()
    questions = [{"question": f"What is {i} plus {i}?", "choices": [str(2 * i), str(2 * i + 1), "no"], "answer": i % 3} for i in range(7)]
    choice = folder / "choice.jsonl"
    choice.write_text("".join(json.dumps(row) + "\n" for row in questions))
    with resources.as_file("eval/perplexity.txt") as text:
        write_tasks(folder, choice, text)
    (folder / "wemask_gen.yaml").write_text(
        f"task: wemask_gen\ndataset_path: json\ndataset_kwargs:\n  data_files:\n    test: {choice}\ntest_split: test\n"
        'output_type: generate_until\ndoc_to_text: "Question: {{question}}\\nAnswer:"\ndoc_to_target: "{{choices[answer]}}"\n'
        "generation_kwargs:\n  until: [\"\\n\"]\n  max_gen_toks: 6\n  do_sample: false\nmetric_list:\n  - metric: exact_match\n"
    )
    return folder


def test_lm_eval_tasks_under_torchrun(tmp_path, tiny_model_dir):
    """Every lm-eval request type, one few-shot example per question (each process builds every request, so each
    question gets the example one process samples), two rates: lm-eval's metrics and samples as in one process."""
    pytest.importorskip("lm_eval")
    folder = lm_eval_tasks(tmp_path / "tasks")
    document = same_eval(tmp_path, "--model", tiny_model_dir, "--lm-eval-tasks", "wemask_choice,wemask_text,wemask_gen",
                         "--lm-eval-include", str(folder), "--num-fewshot", "1", "--batch-size", "2", "--mask-rates", "0,0.5",
                         "--me-layer", "1", flags=(), launcher=TORCHRUN, same_rows=close)  # fmt: skip
    assert {r["metric"] for r in document["results"]} >= {"wemask_choice/acc", "wemask_text/word_perplexity", "wemask_gen/exact_match"}
    samples = rows(tmp_path / "two" / "examples.jsonl")
    assert len(samples) == 2 * (7 + 1 + 7) and samples[0]["prompt"].count("Question:") == 2


def test_lm_eval_task_with_num_processes(tmp_path, tiny_model_dir):
    """--num_processes 2 over 5 questions (an uneven share): the samples in the single process's order."""
    pytest.importorskip("lm_eval")
    folder = lm_eval_tasks(tmp_path / "tasks")
    document = same_eval(tmp_path, "--model", tiny_model_dir, "--lm-eval-tasks", "wemask_choice", "--lm-eval-include", str(folder),
                         "--limit", "5", "--mask-rates", "0,1", "--me-layer", "0", same_rows=close)  # fmt: skip
    assert document["primary_metric"] == "wemask_choice/acc" and all(r["n"] == 5 for r in document["results"])
    assert [s["doc_id"] for s in rows(tmp_path / "two" / "examples.jsonl")] == [0, 1, 2, 3, 4] * 2


def test_infer_under_torchrun_writes_the_single_process_records(tmp_path, tiny_model_dir):
    prompts = tmp_path / "prompts.txt"
    prompts.write_text("".join(f"prompt number {i} about {'cats ' * i}\n" for i in range(5)))
    args = ("infer", "--model", tiny_model_dir, "--input", str(prompts), "--batch-size", "2", "--max-new-tokens", "5",
            "--mask-rate", "0,0.5", "--me-layer", "1", "--temperature", "0.8")  # fmt: skip
    wemask(tmp_path, *args, "-o", "one.jsonl")
    launched = wemask(tmp_path, *args, "-o", "two.jsonl", launcher=TORCHRUN)
    one, two = ((tmp_path / name).read_text() for name in ("one.jsonl", "two.jsonl"))
    assert one == two and len(one.splitlines()) == 10  # sampled too: batch k is seeded alike wherever it runs
    assert launched.stderr.count("Wrote 10 records") == 1


@pytest.mark.embedded
def test_embedded_perplexity_in_two_processes(tmp_path, embedded_dir):
    """Rolling windows with a stride over several documents: the sums, hence every perplexity digit, are the same."""
    document = same_eval(tmp_path, "--model", embedded_dir, "--task", "perplexity", "--limit", "6", "--window", "64",
                         "--stride", "32", "--batch-size", "2", "--mask-rates", "0,0.3")  # fmt: skip
    assert document["results"][0]["metric"] == "perplexity" and document["results"][0]["n"] == 6


@pytest.mark.embedded
def test_embedded_lm_eval_choice_in_two_processes(tmp_path, embedded_dir):
    """The embedded model's 49k-token vocabulary under lm-eval's multiple choice, in 2 processes and in 1."""
    pytest.importorskip("lm_eval")
    folder = lm_eval_tasks(tmp_path / "tasks")
    document = same_eval(tmp_path, "--model", embedded_dir, "--lm-eval-tasks", "wemask_choice", "--lm-eval-include", str(folder),
                         "--num-fewshot", "1", "--batch-size", "4", "--mask-rates", "0,0.3", same_rows=close)  # fmt: skip
    assert {r["n"] for r in document["results"]} == {7}


TORCHRUN = ("-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2")


def same_locate(tmp_path: Path, *args: str, launch: tuple[str, ...] = LAUNCH, launcher: tuple[str, ...] = ()) -> dict:
    """`wemask locate` in one process and in two: the same report (but settings.processes), the same table and verdict
    on stdout, --json and --plot written once. Returns the 2-process report."""
    alone = wemask(tmp_path, "locate", *args, "--json", "one.json", "--plot", "one.png")
    two = wemask(tmp_path, "locate", *args, "--json", "two.json", "--plot", "two.png", *launch, launcher=launcher)
    one, report = (json.loads((tmp_path / f"{name}.json").read_text()) for name in ("one", "two"))
    assert "processes" not in one["settings"] and report["settings"].pop("processes") == 2
    assert one == report
    assert alone.stdout == two.stdout and report["verdict"] in " ".join(two.stdout.split())
    assert two.stderr.count("Wrote two.json") == two.stderr.count("Wrote two.png") == 1
    assert sorted(p.name for p in tmp_path.iterdir() if p.suffix in (".json", ".png")) == ["one.json", "one.png", "two.json", "two.png"]
    return report


def test_locate_under_torchrun_writes_the_single_process_report(tmp_path, tiny_model_dir):
    """5 prompts in batches of 2: rank 0 measures batches 0 and 2, rank 1 batch 1; every number is one process's."""
    report = same_locate(tmp_path, "--model", tiny_model_dir, "--num-prompts", "5", "--batch-size", "2", launch=(),
                         launcher=TORCHRUN)
    assert len(report["prompts"]) == 5 and len(report["layers"]) == report["num_layers"] == 4


def test_locate_with_the_launch_flags_and_its_bad_input(tmp_path, tiny_model_dir):
    """--num_processes 2 from the command line; bad input under the launcher is one line, no traceback, no file."""
    same_locate(tmp_path, "--model", tiny_model_dir, "--num-prompts", "3", "--batch-size", "1")
    for bad, line in ((("--num-prompts", "0"), "--num-prompts 0 is not valid"),
                      (("--json", "one.json"), "one.json")):  # fmt: skip
        done = subprocess.run([sys.executable, "-m", "wemask_cli", "locate", "--model", tiny_model_dir, "--plot", "bad.png",
                               *bad, *LAUNCH], capture_output=True, text=True, env=ENV, timeout=600, cwd=tmp_path)  # fmt: skip
        errors = [row for row in done.stderr.splitlines() if row.startswith("wemask: error:")]
        assert done.returncode != 0 and len(errors) == 1 and line in errors[0], done.stderr[-3000:]
        assert "Traceback" not in done.stderr and not (tmp_path / "bad.png").exists()


@pytest.mark.embedded
def test_embedded_locate_in_two_processes(tmp_path, embedded_dir):
    """The ME layer, its jump, the residual sinks, the massive tokens and a --mask-rate run: one process's digits."""
    report = same_locate(tmp_path, "--model", embedded_dir, "--num-prompts", "3", "--batch-size", "1", "--max-length", "48",
                         "--mask-rate", "0.3", launch=(), launcher=TORCHRUN)  # fmt: skip
    assert report["me_layer"] is not None and report["mask_rates"] and report["massive_tokens"]["prompts"]
