"""The task interface (in the spirit of lm-evaluation-harness's `Task`): defaults, data, preparation, scoring.

A task is one class: its defaults as class attributes, `load` (read and check the examples, before any model
loads), `prepare` (tokenize once, on the loaded model's tokenizer) and `evaluate` (score one variant of the model:
metrics, the number of units, per-unit records). It declares what the rest of `wemask eval` reads: the shared flags
it accepts (`flags`, of TASK_FLAGS), its own flags (`options`, TaskFlags: `wemask eval` derives them, their values
are `settings.option(dest)`), column roles (`columns`), unit label, primary metric, the engine features it needs
(`needs`). `evaluate` gets the engine (engines/base.py: `token_logprobs`, `score_options`, `generate_ids`),
whichever it is. Register it with
`@register` (tasks/registry.py): a built-in module listed in registry.BUILTIN, or a plugin module named under the
entry-point group `wemask.eval_tasks`."""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

from wemask_cli.eval.data import EvalData
from wemask_cli.eval.stats import Metric

if TYPE_CHECKING:
    from wemask_cli.eval.settings import EvalSettings

FLAG_TYPES = (str, int, float, bool)  # what a task's flag can parse


@dataclass(frozen=True)
class TaskFlag:
    """One flag of `wemask eval` that some tasks take: the value's name (`dest`), its type, its help ('{tasks}' is
    replaced by the tasks that take it) and its spellings (default: --dest with dashes). Not given: None."""

    dest: str
    type: type
    help: str
    names: tuple[str, ...] = ()

    @property
    def name(self) -> str:
        return self.names[0] if self.names else "--" + self.dest.replace("_", "-")

    @property
    def spellings(self) -> tuple[str, ...]:
        return self.names or (self.name,)


# The flags several tasks share, in --help's order: their values are EvalSettings fields of the same name. A task
# accepts those named in its `flags`, the others are refused on one line. (--seeds/--temperature follow `generates`,
# --prompt-template `template`, --num-fewshot `fewshot`; a task's own flags are its `options`.)
TASK_FLAGS = {flag.dest: flag for flag in (
    TaskFlag("window", int, "{tasks}: the longest window in tokens (default 256)."),
    TaskFlag("stride", int, "{tasks}: new tokens scored per later window (default: the window; less overlaps context)."),
    TaskFlag("text_field", str, "{tasks}: text column (default text; dotted paths work)."),
    TaskFlag("question_field", str, "{tasks}: question / prompt column or dotted path (default question, problem, goal, "
             "ctx, prompt...).", ("--question-field", "--prompt-field")),
    TaskFlag("choices_field", str, "{tasks}: options column (a list or ARC's text/label dict), a comma list of columns "
             "like sol1,sol2, or a dotted path."),
    TaskFlag("answer_field", str, "{tasks}: answer column or dotted path (choice: index, letter, label or option text; "
             "math: GSM8K '#### N', a bare answer, reward_model.ground_truth)."),
)}
CALIBRATION = 8  # sequences a task offers as `Prepared.samples`


@dataclass
class Prepared:
    """A task's tokenized work: `units` counted by the progress bar and `n`, `longest` sequence (for --batch-size
    auto), the task's own `payload`, and a few of its token sequences as `samples` (SmoothQuant's calibration)."""

    units: int
    longest: int
    payload: Any = None
    samples: list[list[int]] = field(default_factory=list)


@dataclass
class Scored:
    """One evaluation of one model variant: metrics by name, the number of units (or per metric), per-unit records."""

    metrics: dict[str, Metric]
    n: int | dict[str, int]
    records: list[dict] = field(default_factory=list)


class Task:
    """Base class: subclasses set the class attributes and implement load, prepare and evaluate."""

    name: ClassVar[str]
    summary: ClassVar[str] = ""  # one line in `wemask eval --help`
    primary: ClassVar[str]  # the metric tables, plots, deltas and `wemask report` lead with
    bundled: ClassVar[str]  # the file in wemask_cli/resources/eval used without --data
    unit: ClassVar[str] = "examples"  # what n counts (the standard error is over these)
    data_unit: ClassVar[str | None] = None  # what len(load()) counts, in the run's first line (default: unit)
    description: ClassVar[str] = ""  # what it measures, in `wemask eval --help`'s list of tasks (empty: not listed)
    flags: ClassVar[frozenset[str]] = frozenset()  # the TASK_FLAGS fields it accepts
    options: ClassVar[tuple[TaskFlag, ...]] = ()  # its own flags (no other task's), read with settings.option(dest)
    columns: ClassVar[dict[str, tuple[str, ...]]] = {}  # column role -> names tried in order without its --*-field
    default_window: ClassVar[int | None] = None  # --window's default, for a task that accepts it
    needs: ClassVar[frozenset[str]] = frozenset()  # the engine features it needs (engines/base.py FEATURES)
    libraries: ClassVar[tuple[str, ...]] = ()  # more libraries whose versions metrics.json records
    auto_batch: ClassVar[bool] = True  # --batch-size auto is measured on its longest sequence
    selector: ClassVar[str | None] = None  # the dest of one of its options that selects it in place of --task
    checks_settings: ClassVar[bool] = False  # it checks its settings itself (else tasks.resolve does, from the above)
    generates: ClassVar[bool] = False  # generation tasks sample with --seeds/--temperature
    template: ClassVar[str | None] = None  # default --prompt-template (None: the task takes none)
    chat_default: ClassVar[bool] = False  # default --chat-template
    fewshot: ClassVar[bool] = False  # accepts --num-fewshot
    max_new_tokens: ClassVar[int | None] = None

    def __init__(self, settings: EvalSettings):
        self.settings = settings

    @classmethod
    def create(cls, settings: EvalSettings) -> Task:
        """The task for `wemask eval`'s settings (checked and completed by tasks.resolve, unless `checks_settings`)."""
        return cls(settings)

    def inputs(self) -> list[tuple[str, str | None]]:
        """(flag, path) of what the run reads, kept outside --output when it is overwritten."""
        return [("--data", self.settings.data)]

    def seed_note(self) -> str:
        """What the seeds vary, for the run's first line."""
        return self.settings.seed_note(self.generates)

    def reader_note(self, data: EvalData) -> str:
        """How the data was read, for the run's first line."""
        return f", read as {data.reader}" if data.reader else ""

    def document_extra(self) -> dict:
        """More top-level entries of metrics.json (after the run)."""
        return {}

    def plan(self, configs: list) -> None:
        """Told, before the sweep runs, the WeMask configs it will run (None: no mask), in order."""

    def load(self) -> EvalData:
        raise NotImplementedError

    def open_rows(self):
        """(source, rows, labels) of a task that needs records, not plain text: --data (or the bundled file), limited."""
        from wemask_cli.eval.data import open_source, text_only_error

        s = self.settings
        source = open_source(s.data, self.bundled, s.split, s.data_config, s.limit)
        if source.rows is None:
            raise text_only_error(source.where, self.name)
        return source, source.rows[: s.limit], source.labels[: s.limit]

    def prepare(self, tokenizer, data: EvalData, max_positions: int | None) -> Prepared:
        raise NotImplementedError

    def evaluate(self, model, tokenizer, prepared: Prepared, seed: int, batch_size: int,
                 advance: Callable[[int], None]) -> Scored:
        raise NotImplementedError


def check_fewshot(k: int, count: int) -> None:
    """Refuse --num-fewshot k on data of k examples or fewer (checked when the data loads, before the model)."""
    if k >= count > 0 and k:
        from wemask_cli.runtime.errors import WeMaskError

        raise WeMaskError(f"--num-fewshot {k} needs more than {k} examples in the data (it has {count})")


def fewshot_draws(count: int, k: int, seed: int) -> list[list[int]]:
    """For each of `count` examples, `k` other examples' indices drawn with a fixed seed (recorded in the output)."""
    if k == 0:
        return [[] for _ in range(count)]
    check_fewshot(k, count)
    rng = random.Random(seed)
    draws = []
    for index in range(count):
        picked = rng.sample(range(count - 1), k)
        draws.append([i if i < index else i + 1 for i in picked])
    return draws
