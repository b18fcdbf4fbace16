"""What the stages that generate and score their own completions share (`wemask grpo`, `wemask rloo`): the reward
flags and their checks, the prompts data, the rollouts through an engine (TRL's --use-vllm), WeMask on the model TRL
both generates and trains with, and the reward summaries of metrics.json.

A `RolloutStage` subclass names its TRL trainer (`trainer_class`); everything else is here:
- aware mode: the hook sits on the model TRL trains *and* generates with (rollouts come from `trainer.model`,
  unwrapped), and on the reference model when TRL builds one (beta > 0 without LoRA; with LoRA the reference is the
  same model with the adapter disabled, hooks included). The hook finds the first real token of each row from the
  attention mask it receives, so TRL's left-padded log-probability passes (input ids + 2D mask, no position ids)
  mask the same token that generation masked (tests/test_grpo.py, tests/test_rloo.py).
- free mode: plain training; the mask is only recorded for inference.
- vLLM (`--use-vllm`, TRL's colocate mode): TRL's in-process engine generates the rollouts with the same mask as a
  tensor op on `positions == 0`, installed once TRL has built it; TRL syncs the trained weights into it every step
  (LoRA merged). The loss passes still run the hooks. The rollouts come through the Engine protocol (`rollouts`, the
  vLLM engine's rollouts.py; CPU workarounds: colocate.py). Server mode syncs weights over NCCL (GPU only): refused
  on CPU.

Data: a `prompt` column (plain text or a conversation) plus whatever the rewards read (e.g. `answer`), or the
GSM8K layout as is (`question`, `answer` ending in `#### N`): questions become user messages when the tokenizer
has a chat template (`--no-chat-template` keeps them plain). Other names: `--dataset-columns prompt=X,answer=Y`.

Rewards: `--reward NAME[:WEIGHT]` (repeatable; recipe key `reward`): builtins `math` and `format`, or custom
`path/to/file.py:function` / `module:function` with TRL's signature `f(completions, **kwargs) -> list[float]`.
They are loaded and checked before any model loads; weights go to the TRL config's reward_weights.
"""

from __future__ import annotations

from contextlib import nullcontext
from pathlib import Path

from wemask_cli.engines.base import NO_ROLLOUT_ENGINE, rollout_engine
from wemask_cli.method.config import WeMaskConfig
from wemask_cli.runtime.errors import WeMaskError
from wemask_cli.train.recipe import recipe_path
from wemask_cli.train.stage_base import Stage, TrainContext
from wemask_cli.train.stage_registry import StageFlag

DEFAULT_REWARDS = ("math",)
GSM8K_COLUMNS = ("question", "answer")
ROLLOUT_FLAGS = (
    StageFlag(
        "reward", list,
        "Reward NAME[:WEIGHT], repeatable (default math; TRL's --reward_funcs A B works too): math | format | "
        "TRL's accuracy_reward, reasoning_accuracy_reward, think_format_reward, get_soft_overlong_punishment | "
        "path/to/file.py:function | module:function, called as f(completions, **kwargs) -> a list of floats, "
        "with dataset columns as keywords.",
        default=list(DEFAULT_REWARDS), recipe_kinds=(str, list),
    ),
    StageFlag(
        "chat_template", bool,
        "Put plain-text prompts in a user message (default: for GSM8K-layout 'question' data when the tokenizer "
        "has a chat template).",
        recipe_kinds=(bool, str),
    ),
)

CONTINUOUS_BATCHING_REFUSAL = (
    "--use-transformers-continuous-batching cannot train with --mode aware: WeMask's first-token rule is not verified "
    "with its paged, batched generation; drop the flag (plain generate() is used) or use --mode free"
)


# ---------------------------------------------------------------------------------------------------------------
# Options checked before anything loads


def reward_specs(value) -> list[str]:
    """The `reward` option (flag list, recipe string or list) as a list of specs; default: the math reward."""
    if value is None or value == [] or value == ():
        return list(DEFAULT_REWARDS)
    if isinstance(value, str):
        value = [value]
    if isinstance(value, (list, tuple)) and all(isinstance(v, str) for v in value):
        return [spec for v in value for spec in v.split(",") if spec.strip()]  # TRL's lists arrive comma-joined
    raise WeMaskError(f"reward {value!r} is not valid: give names like math, format:0.5 or path/to/file.py:function")


def chat_template_choice(value) -> bool | None:
    """None (auto), True or False, from a flag or a recipe value (auto/on/off/true/false)."""
    if value is None or isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    choices = {"auto": None, "true": True, "on": True, "yes": True, "false": False, "off": False, "no": False}
    if text not in choices:
        raise WeMaskError(f"chat_template {value!r} is not valid: use auto, true or false")
    return choices[text]


def mask_requested(opts: dict, mask) -> bool:
    """Whether the resolved options ask for an active mask (a rate > 0, or a model that carries one)."""
    from wemask_cli.method.config import find_saved_config

    if mask.strength is not None and float(mask.strength) == 0.0:
        return False
    if mask.rates is not None:
        return any(rate > 0 for rate in mask.rates)
    model_dir = Path(str(opts["model"] or "")).expanduser()
    saved = find_saved_config(model_dir) if opts["model"] and model_dir.is_dir() else None
    return bool(saved and saved.active)


def recipe_relative(spec: str, recipe: str | None) -> str:
    """A reward file given relative to a recipe: tried from the current directory, then the recipe's folders."""
    location, sep, rest = spec.partition(".py:")
    if not sep or not recipe:
        return spec
    return recipe_path(location + ".py", recipe) + ":" + rest


def check_rewards(opts: dict, args) -> tuple[list, list[float]]:
    """Load every reward (one clear line on a bad one) and settle the weights into args.reward_weights."""
    from wemask_cli.rewards import load_rewards, parse_reward_spec

    specs = [recipe_relative(spec, opts.get("config")) for spec in reward_specs(opts.get("reward"))]
    funcs, weights = load_rewards(specs)
    weighted = any(len(spec.split(":")) > 1 and parse_reward_spec(spec)[1] != 1.0 for spec in specs)
    if args.reward_weights is not None:
        if weighted:
            raise WeMaskError("give reward weights either in --reward NAME:WEIGHT or with --reward-weights, not both")
        if len(args.reward_weights) != len(funcs):
            raise WeMaskError(
                f"--reward-weights has {len(args.reward_weights)} value(s) for {len(funcs)} reward(s) ({', '.join(specs)}): "
                "give one weight per --reward"
            )
        weights = [float(w) for w in args.reward_weights]
    args.reward_weights = weights
    return funcs, weights


# ---------------------------------------------------------------------------------------------------------------
# Data


def prepare_dataset(dataset, tokenizer, chat_template: bool | None, rewards: list, what: str = "--dataset"):
    """A prompts dataset: `prompt` (plain or conversational) plus the columns rewards read.

    GSM8K layout: `question` becomes `prompt` (a user message when the tokenizer has a chat template, unless
    chat_template is False). chat_template=True also wraps plain-string `prompt`s.
    """
    if dataset is None:
        return None
    from wemask_cli.data import is_conversation
    from wemask_cli.rewards import math_reward, require_references

    columns = set(dataset.column_names)
    gsm8k = "prompt" not in columns and set(GSM8K_COLUMNS) <= columns
    if gsm8k:
        dataset = dataset.rename_column("question", "prompt")
    has_template = bool(getattr(tokenizer, "chat_template", None))
    wrap = chat_template is True or (chat_template is None and gsm8k and has_template)
    first = dataset[0]["prompt"]
    if wrap and not is_conversation(first):
        if not has_template:
            raise WeMaskError(
                "--chat-template: the tokenizer has no chat template to put the prompts in; use --no-chat-template"
            )
        dataset = dataset.map(
            lambda row: {"prompt": [{"role": "user", "content": row["prompt"]}]}, keep_in_memory=True
        )
    if any(func is math_reward for func in rewards):
        references = next((c for c in ("answer", "solution") if c in dataset.column_names), None)  # TRL's data: solution
        if references is None:
            raise WeMaskError(
                f"the math reward needs the reference answers in an 'answer' (or 'solution') column; {what} has "
                f"{sorted(dataset.column_names)}: name yours with --dataset-columns answer=COLUMN, or choose another --reward"
            )
        require_references(dataset[references], what)
    return dataset


# ---------------------------------------------------------------------------------------------------------------
# The stage


class RolloutStage(Stage):
    """A stage whose TRL trainer generates its completions and scores them with reward functions."""

    def __init__(self) -> None:
        super().__init__()
        self.rewards: list = []  # loaded and checked by check(), before the model loads
        engine = rollout_engine()
        self.rollouts = engine.rollouts() if engine is not None else None  # TRL's --use-vllm, through the engine
        if self.rollouts is not None:
            self.rollouts.quiet()  # before TRL loads

    def check(self, resolved) -> None:
        """Runs after the configuration is resolved and before data or model load."""
        super().check(resolved)
        opts, args = resolved.opts, resolved.args
        opts["reward"] = reward_specs(opts.get("reward"))
        opts["chat_template"] = chat_template_choice(opts.get("chat_template"))
        aware_mask = opts["mode"] == "aware" and mask_requested(opts, resolved.mask)
        if args.use_vllm:
            if self.rollouts is None:
                raise WeMaskError(NO_ROLLOUT_ENGINE)
            self.rollouts.check(resolved, aware_mask)
        if aware_mask and args.use_transformers_continuous_batching:
            raise WeMaskError(CONTINUOUS_BATCHING_REFUSAL)
        self.rewards, _ = check_rewards(opts, args)

    def trainer_class(self) -> type:
        """TRL's trainer class (imported here: the stage module stays torch-free)."""
        raise NotImplementedError

    def build_trainer(self, ctx: TrainContext):
        from wemask_cli.train.callbacks import NoRewardSignal

        chat = ctx.options.get("chat_template")
        train = prepare_dataset(ctx.train_dataset, ctx.tokenizer, chat, self.rewards)
        evaluation = prepare_dataset(ctx.eval_dataset, ctx.tokenizer, chat, self.rewards, what="--eval-dataset")
        train, evaluation = self.reference.before_trainer(ctx, train, evaluation)  # a reference loads from the weights' source
        with self.rollouts.building(ctx) if ctx.args.use_vllm else nullcontext():
            return self.trainer_class()(
                model=ctx.model, reward_funcs=self.rewards, args=ctx.args, train_dataset=train, eval_dataset=evaluation,
                processing_class=ctx.tokenizer, peft_config=ctx.peft_config,
                callbacks=[*ctx.callbacks, NoRewardSignal(self.name)],
            )

    def install(self, trainer, ctx: TrainContext) -> WeMaskConfig:
        """The shared install (reference.py) on `trainer.model`, which rollouts and loss passes both run, and on the
        reference, masked like the policy in aware mode (as under LoRA, where TRL's reference is the same hooked
        model with the adapter disabled); then TRL's colocated vLLM engine, which generates, gets the mask too."""
        config = super().install(trainer, ctx)
        if ctx.args.use_vllm:
            self.rollouts.install(trainer, config)
        return config

    def extra_metrics(self, trainer) -> dict:
        return reward_metrics(trainer)


def reward_metrics(trainer) -> dict:
    """Reward summaries for metrics.json: mean reward per logged step, and each reward's last mean."""
    logs = trainer.state.log_history
    history = [[e["step"], e["reward"]] for e in logs if "reward" in e and "step" in e and e["reward"] is not None]
    last = next((e for e in reversed(logs) if "reward" in e), {})
    per_reward = {
        key[len("rewards/"):-len("/mean")]: value
        for key, value in last.items()
        if key.startswith("rewards/") and key.endswith("/mean")
    }
    step_times = [e["step_time"] for e in logs if e.get("step_time") is not None]
    return {
        "rewards": list(getattr(trainer, "reward_func_names", [])),
        "reward_weights": [float(w) for w in trainer.args.reward_weights or getattr(trainer, "reward_weights", [])],
        "final_reward": history[-1][1] if history else None,
        "final_reward_per_function": per_reward,
        "reward_history": history,
        "mean_step_time_s": sum(step_times) / len(step_times) if step_times else None,
    }
