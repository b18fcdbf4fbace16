"""Choice scoring on the embedded model: wemask's in-process scoring against lm-evaluation-harness's.

Same 60 bundled choice items (240 option requests), same prompt ('Question: ...\\nAnswer:' + ' ' + option), same
loaded model and the same WeMask rates (0 and 0.3 from layer 11), batch 8, both in this process. wemask: tokenize
and score (`ChoiceTask.prepare` + `evaluate`); lm-eval: its requests built once from a local YAML task, then
`HFLM.loglikelihood` on them (tokenization included), so neither side pays data loading. Interleaved, repeated,
median per side, one torch thread (two threads on a shared 2-core machine swing 10x in bursts). Goal: wemask /
lm-eval <= 0.8. Runs where lm-eval is installed (NEEDS).
"""

from __future__ import annotations

import logging
import statistics
import tempfile
import time
from pathlib import Path

ME_LAYER = 11
RATES = (0.0, 0.3)
REPEATS = 3
BATCH = 8
LIMIT = None  # all 60 items
NEEDS = ("lm_eval",)
SMOKE = {"RATES": (0.3,), "REPEATS": 1, "LIMIT": 2}


def lm_eval_requests(choice_file: Path, folder: Path):
    """The wemask_choice task's loglikelihood instances (lm-eval's own request building)."""
    from lm_eval.tasks import TaskManager

    (folder / "wemask_choice.yaml").write_text(
        "task: wemask_choice\ndataset_path: json\ndataset_kwargs:\n  data_files:\n"
        f"    test: {choice_file}\ntest_split: test\noutput_type: multiple_choice\n"
        'doc_to_text: "Question: {{question}}\\nAnswer:"\ndoc_to_choice: "{{choices}}"\ndoc_to_target: "{{answer}}"\n'
        "metric_list:\n  - metric: acc\n  - metric: acc_norm\n"
    )
    task = TaskManager(include_path=str(folder), include_defaults=False).load_task_or_group(["wemask_choice"])["wemask_choice"]
    task.build_all_requests(rank=0, world_size=1)
    return task.instances


def run() -> dict:
    import torch
    from lm_eval.models.huggingface import HFLM

    from wemask_cli import resources
    from wemask_cli.engines.transformers import TransformersEngine
    from wemask_cli.eval.data import EvalData
    from wemask_cli.eval.settings import EvalSettings
    from wemask_cli.eval.tasks import ChoiceTask, resolve
    from wemask_cli.models.gguf_cache import embedded_model_dir
    from wemask_cli.models.loading import load_model

    logging.getLogger("lm_eval").setLevel(logging.ERROR)  # its notes on YAML defaults
    loaded = load_model(str(embedded_model_dir()), dtype="float32")
    model, tokenizer = loaded.model, loaded.tokenizer
    engine = TransformersEngine(loaded)
    task = ChoiceTask(resolve(EvalSettings(task="choice", batch_size=BATCH, limit=LIMIT)))
    data: EvalData = task.load()
    with tempfile.TemporaryDirectory(prefix="bench-lm-eval-") as tmp, resources.as_file("eval/choice.jsonl") as choice:
        instances = [i for i in lm_eval_requests(choice, Path(tmp)) if LIMIT is None or i.doc_id < LIMIT]
    lm = HFLM(pretrained=model, tokenizer=tokenizer, batch_size=BATCH)

    def ours() -> float:
        start = time.perf_counter()
        prepared = task.prepare(tokenizer, data, engine.context_length())
        task.evaluate(engine, tokenizer, prepared, 0, BATCH, lambda k: None)
        return time.perf_counter() - start

    def theirs() -> float:
        start = time.perf_counter()
        lm.loglikelihood(instances, disable_tqdm=True)
        return time.perf_counter() - start

    times = {"wemask": [0.0] * REPEATS, "lm-eval": [0.0] * REPEATS}  # per round: the sum over the rates
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        measure_all(times, model, ours, theirs)
    finally:
        torch.set_num_threads(threads)
    ours_s, theirs_s = statistics.median(times["wemask"]), statistics.median(times["lm-eval"])
    return {
        f"wemask choice scoring, {len(instances)} requests x {len(RATES)} rates (s)": ours_s,
        "lm-eval loglikelihood, same requests and rates (s)": theirs_s,
        "time ratio wemask/lm-eval (goal <= 0.8)": ours_s / theirs_s,
    }


def measure_all(times: dict, model, ours, theirs) -> None:
    """REPEATS rounds over the rates, the two sides interleaved (alternating which goes first)."""
    import torch

    from wemask_cli import WeMaskConfig, apply_wemask

    with torch.no_grad():
        for repeat in range(REPEATS):
            for rate in RATES:
                with apply_wemask(model, WeMaskConfig(mask_rate=rate, me_layer=ME_LAYER)):
                    pair = (("wemask", ours), ("lm-eval", theirs))
                    for name, measure in pair if repeat % 2 == 0 else reversed(pair):
                        times[name][repeat] += measure()


if __name__ == "__main__":
    print(run())
