"""lm-evaluation-harness tasks run through the loaded (and hooked) model, as one more eval task.

`LmEvalTask` plugs into the same sweep as the native tasks: one TaskManager per sweep (built before the model
loads, so an unknown task is refused on one line first), one HFLM around the loaded model, and for each variant
`lm_eval.simple_evaluate` with the chat template, few-shot count and per-sample logging passed through. Metrics are
`<task>/<metric>`; the primary metric is the first task's own first metric (acc, exact_match, word_perplexity...),
n is the task's effective sample count, and per-sample values give the paired change against r = 0.

Under a launcher every process builds every request (so each document gets the few-shot context one process
samples), scores one contiguous share of each request type's requests (ranks.map_batches) and gets every answer;
what the main process's lm-eval scored is every process's.
"""

from __future__ import annotations

import difflib
import logging
import statistics
from dataclasses import replace
from pathlib import Path

from wemask_cli.eval.data import EvalData
from wemask_cli.eval.settings import DEFAULT_WINDOW, EvalSettings
from wemask_cli.eval.stats import Metric, mean_se
from wemask_cli.eval.tasks.base import Prepared, Scored, Task, TaskFlag
from wemask_cli.eval.tasks.registry import register
from wemask_cli.runtime import ranks
from wemask_cli.runtime.errors import WeMaskError, first_line

NOT_UNDER_LM_EVAL = {  # EvalSettings field -> flag: these configure native tasks only
    "data": "--data", "split": "--split", "data_config": "--data-config", "text_field": "--text-field",
    "question_field": "--question-field", "choices_field": "--choices-field", "answer_field": "--answer-field",
    "stride": "--stride", "max_new_tokens": "--max-new-tokens", "temperature": "--temperature",
    "prompt_template": "--prompt-template",
}


def require_lm_eval() -> None:
    try:
        import lm_eval  # noqa: F401
    except ImportError:
        raise WeMaskError(
            "--lm-eval-tasks needs lm-evaluation-harness, which is not installed: `pip install lm-eval`, or use --task"
        ) from None


def check_flags(settings: EvalSettings) -> None:
    """Refuse, on one line, the flags that do not apply to lm-eval tasks."""
    given = [flag for name, flag in NOT_UNDER_LM_EVAL.items() if getattr(settings, name) is not None]
    given += ["--window"] if settings.window not in (None, DEFAULT_WINDOW) else []
    given += ["--seeds"] if settings.seeds != 1 else []
    given += ["--top-p"] if settings.top_p != 1.0 else []
    if given:
        raise WeMaskError(
            f"{', '.join(given)} do{'es' if len(given) == 1 else ''} not apply to --lm-eval-tasks (the lm-eval task "
            "defines its data, prompt and generation); drop it, or use --task"
        )


@register
class LmEvalTask(Task):
    """The --lm-eval-tasks "task": names, an optional --lm-eval-include folder of YAML tasks."""

    name = "lm-eval"
    summary = "lm-evaluation-harness tasks, chosen with --lm-eval-tasks"
    primary = ""
    bundled = ""
    data_unit = "task(s)"
    needs = frozenset({"module"})  # HFLM drives the engine's transformers model
    libraries = ("lm-eval",)
    auto_batch = False
    options = (
        TaskFlag("lm_eval_tasks", str, "Comma list of lm-evaluation-harness tasks, run through the hooked model (needs "
                 "`pip install lm-eval`)."),
        TaskFlag("lm_eval_include", str, "A folder of lm-eval YAML tasks for --lm-eval-tasks."),
    )
    selector = "lm_eval_tasks"
    checks_settings = True  # check_flags: the lm-eval task defines its data, prompt and generation

    def __init__(self, settings: EvalSettings, names: str, include: str | None):
        super().__init__(settings)
        self.names = [n.strip() for n in names.split(",") if n.strip()]
        self.include = include
        self.manager = None
        self.lm = None

    @classmethod
    def create(cls, settings: EvalSettings) -> Task:
        """Its options are recorded under metrics.json's `lm_eval` (document_extra), not among the settings."""
        names, include = settings.option("lm_eval_tasks"), settings.option("lm_eval_include")
        if names is None:
            raise WeMaskError("--task lm-eval needs the lm-eval task names: give --lm-eval-tasks (e.g. arc_easy,piqa)")
        return cls(replace(settings, options=None), names, include)

    def inputs(self) -> list[tuple[str, str | None]]:
        return [*super().inputs(), ("--lm-eval-include", self.include)]

    def seed_note(self) -> str:
        return "what the lm-eval task sets"

    def document_extra(self) -> dict:
        return {"lm_eval": {"tasks": self.names, "include": self.include}}

    def load(self) -> EvalData:
        """Check lm-eval, the flags and every task name (one TaskManager, built here, before the model loads)."""
        require_lm_eval()
        if not self.names:
            raise WeMaskError("--lm-eval-tasks is empty: give task names, e.g. arc_easy,piqa")
        check_flags(self.settings)
        if self.include is not None and not Path(self.include).expanduser().is_dir():
            raise WeMaskError(f"--lm-eval-include {self.include}: no such folder")
        logging.getLogger("lm_eval").setLevel(logging.ERROR)  # its notes on YAML defaults are not the user's concern
        self.manager = self.task_manager()
        self.fetch_datasets()
        self.primary = f"{self.names[0]}/?"
        where = f"lm-eval tasks {','.join(self.names)}" + (f" (include {self.include})" if self.include else "")
        return EvalData(self.name, where, rows=[{"task": n} for n in self.names], path=self.include, reader="lm-eval")

    def reader_note(self, data: EvalData) -> str:
        return ""

    def task_manager(self):
        from lm_eval.tasks import TaskManager

        include = str(Path(self.include).expanduser()) if self.include else None
        if include:  # the include folder alone is much faster to index than lm-eval's 14,000 tasks
            local = TaskManager(include_path=include, include_defaults=False)
            if all(self.known(local, name) for name in self.names):
                return local
        manager = TaskManager(include_path=include)
        unknown = [name for name in self.names if not self.known(manager, name)]
        if unknown:
            close = difflib.get_close_matches(unknown[0], manager.all_tasks, n=3)
            hint = f" (did you mean {', '.join(close)}?)" if close else ""
            where = f" or in --lm-eval-include {self.include}" if self.include else "; local YAML tasks need --lm-eval-include DIR"
            raise WeMaskError(f"--lm-eval-tasks: {unknown[0]!r} is not an lm-eval task{hint}{where}")
        return manager

    def fetch_datasets(self) -> None:
        """Build the tasks once now, so a dataset that cannot be fetched is one line before the model loads (the
        sweep builds them again from the datasets cache)."""
        from wemask_cli.runtime.hub import before_hub_fetch

        before_hub_fetch(f"--lm-eval-tasks {','.join(self.names)}")
        try:
            self.manager.load(self.names)
        except OSError as err:  # datasets' ConnectionError and DatasetNotFoundError (a FileNotFoundError) among them
            raise WeMaskError(
                f"--lm-eval-tasks {','.join(self.names)}: its data could not be loaded ({first_line(err)}); lm-eval tasks fetch "
                "their datasets from the hub: run once with network access to fill the HF cache, or use a local YAML "
                "task with --lm-eval-include DIR"
            ) from None

    @staticmethod
    def known(manager, name: str) -> bool:
        return name in manager.all_tasks or Path(name).expanduser().is_file()

    def prepare(self, tokenizer, data, max_positions) -> Prepared:
        return Prepared(len(self.names), 0)

    def evaluate(self, model, tokenizer, prepared, seed, batch_size, advance) -> Scored:
        import lm_eval

        from wemask_cli.compat.lm_eval import check_output, quiet_git_hash

        s = self.settings
        if self.lm is None:
            self.lm = harness_lm(model.module, tokenizer, s.batch_size)
        chat = bool(s.chat_template)
        with quiet_git_hash():
            out = lm_eval.simple_evaluate(
                model=self.lm, tasks=self.names, task_manager=self.manager, limit=s.limit, num_fewshot=s.num_fewshot or None,
                apply_chat_template=chat, fewshot_as_multiturn=chat, log_samples=True, fewshot_random_seed=s.fewshot_seed,
                bootstrap_iters=1000,
            )
        advance(len(self.names))
        # lm-eval returns its output on the main process only: what it scored goes from there to every process
        scored, self.primary = ranks.from_main(lambda: (scored_from(check_output(out, self.names), self), self.primary))
        return scored


def harness_lm(module, tokenizer, batch_size):
    """lm-eval's HFLM around the loaded (hooked) model. lm-eval runs an HFLM built around a model as one process;
    under a launcher its request methods deal the requests out (`share`), so each process scores its share."""
    from lm_eval.models.huggingface import HFLM

    from wemask_cli.compat.lm_eval import route_requests

    lm = HFLM(pretrained=module, tokenizer=tokenizer, batch_size=batch_size)
    if ranks.group_ready():
        route_requests(lm, share)
    return lm


def share(score, requests: list, disable_tqdm: bool = False) -> list:
    """`score(requests)` (one of an LM's request methods) with each process scoring one contiguous share of the
    requests (its own batches, its own progress bar on the main process only); every answer on every process, in order."""
    size = max(1, -(-len(requests) // ranks.world_size()))
    quiet = disable_tqdm or not ranks.is_main_process()
    return ranks.map_batches(len(requests), size, lambda k, start, end: score(requests[start:end], disable_tqdm=quiet))


def task_primary(config: dict, metrics: dict) -> str | None:
    """The task's own primary metric: the first of its metric_list, else its first reported one (never sample_len)."""
    listed = [m.get("metric") for m in (config or {}).get("metric_list") or [] if isinstance(m.get("metric"), str)]
    names = listed + [key.partition(",")[0] for key in metrics]
    return next((n for n in names if n and n not in ("alias", "sample_len") and "_stderr" not in n), None)


def scored_from(out: dict, task: LmEvalTask) -> Scored:
    """Metrics `<task>/<metric>` with their standard errors, per-sample items and records, from simple_evaluate's output."""
    metrics, n, records = {}, {}, []
    for name, values in out["results"].items():
        samples = sorted(out.get("samples", {}).get(name, []), key=lambda s: s.get("doc_id", 0))
        count = (out.get("n-samples", {}).get(name) or {}).get("effective") or len(samples)
        primary = task_primary(out.get("configs", {}).get(name, {}), values)
        if name == task.names[0] and primary:
            task.primary = f"{name}/{primary}"
        for key, value in values.items():
            metric, _, filt = key.partition(",")
            if metric in ("alias", "sample_len") or "_stderr" in metric or isinstance(value, bool) or not isinstance(value, (int, float)):
                continue
            se = values.get(f"{metric}_stderr,{filt}")
            items = [float(s[metric]) for s in samples if isinstance(s.get(metric), (int, float))]
            pairable = len(items) == len(samples) > 0 and abs(statistics.fmean(items) - value) < 1e-9
            se = float(se) if isinstance(se, (int, float)) else (mean_se(items) if pairable else None)
            metrics[f"{name}/{metric}"] = Metric(float(value), se, items, pairable=pairable)
            n[f"{name}/{metric}"] = count
        records += [sample_record(name, s) for s in samples]
    return Scored(metrics, n, records)


def sample_record(task: str, sample: dict) -> dict:
    """One lm-eval sample: the full prompt, its continuations or generation, the target and its metric values."""
    arguments = [a for a in sample.get("arguments", [])]
    first = arguments[0] if arguments else ()
    record = {"task": task, "doc_id": sample.get("doc_id"), "prompt": first[0] if first else None,
              "continuations": [a[1] for a in arguments if len(a) > 1 and isinstance(a[1], str)],
              "target": sample.get("target"), "responses": sample.get("filtered_resps")}
    record.update({k: v for k, v in sample.items() if k in sample.get("metrics", [])})
    return record
