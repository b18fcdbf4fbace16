"""`wemask grpo` on TRL's real GRPOTrainer: in aware mode the rollouts and every log-probability/loss pass mask the
same token (the first real token of each left-padded prompt); r = 0 is plain TRL GRPO; rewards and vLLM are
checked before the model loads; one short run on the real embedded model with the bundled math set."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import torch

from wemask_cli import WeMaskConfig
from wemask_cli.cli import main
from wemask_cli.data.formats import PROMPTS as PROMPT_DATA
from wemask_cli.method.arch import resolve_layers
from wemask_cli.method.wemask_hook import masked_layers
from wemask_cli.models import loading as models_module
from wemask_cli.train import grpo, rollout_stage
from wemask_cli.train.options import TrainOptions
from wemask_cli.train.run import run

ROOT = Path(__file__).resolve().parents[1]
MATH = str(ROOT / "data" / "math_problems.jsonl")
ME = 1
# Prompts of very different token lengths, so every batch is left-padded.
PROMPTS = [
    ("What is 12 plus 30?", "42"),
    ("Natalia sold clips to 48 of her friends in April, and then she sold half as many clips in May. How many?", "72"),
    ("The quick brown fox?", "1"),
    ("def add(a, b): return a + b. What is add(2, 3)? The answer is", "5"),
    ("Sure!", "0"),
    ("I'm sorry, but I can't help with that. Here is how to do it step by step: 3 times 4", "12"),
]
TRL = dict(
    per_device_train_batch_size=4, num_generations=2, max_completion_length=6, max_steps=2, logging_steps=1,
    learning_rate=1e-3, save_strategy="no", report_to="none", seed=0, temperature=1.0,
)
LENGTH_REWARD = "def length_reward(completions, **kwargs):\n    return [float(len(c)) for c in completions]\n"


def flags(**overrides) -> list[str]:
    out = []
    for key, value in {**TRL, **overrides}.items():
        out += [f"--{key.replace('_', '-')}", str(value)]
    return out


def write_prompts(folder: Path) -> str:
    path = folder / "prompts.jsonl"
    path.write_text("".join(json.dumps({"prompt": p, "answer": a}) + "\n" for p, a in PROMPTS))
    return str(path)


def write_length_reward(folder: Path) -> str:
    """A custom reward file whose rewards differ within a group, so the advantages (and updates) are not zero."""
    path = folder / "my_rewards.py"
    path.write_text(LENGTH_REWARD)
    return f"{path}:length_reward"


@pytest.fixture(scope="module")
def prompts_file(tmp_path_factory) -> str:
    return write_prompts(tmp_path_factory.mktemp("grpo-data"))


@pytest.fixture(scope="module")
def length_reward(tmp_path_factory) -> str:
    return write_length_reward(tmp_path_factory.mktemp("rewards"))


# ---------------------------------------------------------------------------------------------------------------
# The same tokens are masked while sampling and while training


class MaskCapture:
    """Records, for every forward through the masked layer, which positions WeMask actually changed.

    A forward hook on the layer's input norm keeps its output (the attention input before WeMask); a pre-hook
    on the attention registered *after* WeMask's sees the masked input: the positions that differ are masked.
    The model's own pre-hook records the input ids and 2D attention mask of the same forward. Phases come from
    wrapping the trainer: generation (`_generate_single_turn`), the loss forward (`_compute_loss`), and the
    other log-probability passes (old policy, reference model).
    """

    def __init__(self, trainer, layer: int):
        self.phase = "logp"
        self.records: list[dict] = []
        self.generated_prompts: set[tuple[int, ...]] = set()
        self.handles = []
        for name, model in (("policy", trainer.model), ("ref", getattr(trainer, "ref_model", None))):
            if model is not None:
                self._attach(model, name, layer)
        generate, compute_loss = trainer._generate_single_turn, trainer._compute_loss

        def generate_wrapper(prompt_ids, *args, **kwargs):
            self.generated_prompts.update(tuple(ids) for ids in prompt_ids)
            self.phase = "generate"
            try:
                return generate(prompt_ids, *args, **kwargs)
            finally:
                self.phase = "logp"

        def compute_loss_wrapper(model, inputs):
            self.phase = "loss"
            try:
                return compute_loss(model, inputs)
            finally:
                self.phase = "logp"

        trainer._generate_single_turn, trainer._compute_loss = generate_wrapper, compute_loss_wrapper

    def _attach(self, model, name, layer):
        part = resolve_layers(model)[layer]
        seen = {}

        def on_model(_module, _args, kwargs):
            seen["ids"], seen["mask"] = kwargs["input_ids"].detach().cpu(), kwargs.get("attention_mask")

        def on_norm(_module, _args, output):
            seen["normed"] = output.detach()

        def on_attention(_module, args, kwargs):
            hidden = kwargs["hidden_states"] if "hidden_states" in kwargs else args[0]
            changed = (hidden.detach() != seen["normed"]).any(-1).cpu()
            mask = seen["mask"]
            mask = torch.ones_like(seen["ids"]) if mask is None else mask.detach().cpu()
            self.records.append(dict(phase=self.phase, model=name, ids=seen["ids"], mask=mask, masked=changed))

        self.handles += [
            model.register_forward_pre_hook(on_model, with_kwargs=True),
            part.attn_norm.register_forward_hook(on_norm),
            part.attention.register_forward_pre_hook(on_attention, with_kwargs=True),  # after WeMask's hook
        ]

    def masked_tokens(self, phase: str, model: str = "policy") -> set[tuple]:
        """{(prompt, index of the masked token in the row's real tokens, its id)} over all rows of a phase."""
        found = set()
        for record in self.records:
            if record["phase"] != phase or record["model"] != model or record["ids"].shape[1] == 1:
                continue
            for ids, mask, masked in zip(record["ids"], record["mask"], record["masked"]):
                real = ids[mask.bool()].tolist()
                start = int(mask.argmax())  # first real token (left padding before it)
                prompt = max((p for p in self.generated_prompts if tuple(real[: len(p)]) == p), key=len)
                for position in masked.nonzero().flatten().tolist():
                    found.add((prompt, position - start, int(ids[position])))
        return found


class Capturing:
    """A stage whose install also attaches a MaskCapture (after WeMask's hooks): mixed in before the stage class."""

    def __init__(self, captures: list, mode_layer: int = ME):
        super().__init__()
        self.captures, self.mode_layer = captures, mode_layer

    def install(self, trainer, ctx):
        config = super().install(trainer, ctx)
        self.captures.append(MaskCapture(trainer, self.mode_layer))
        return config


class CapturingStage(Capturing, grpo.GRPOStage):
    """The GRPO stage with a MaskCapture."""


capturing_stage = CapturingStage


@pytest.mark.parametrize("chat", [False, True], ids=["plain-prompts", "chat-prompts"])
def test_aware_masks_the_same_first_tokens_in_rollouts_and_loss(tmp_path, tiny_model_dir, prompts_file, length_reward, chat):
    captures = []
    # beta > 0 adds the reference model's passes; num_iterations 2 adds the old-policy log-prob pass.
    result = run(
        capturing_stage(captures),
        TrainOptions(model=tiny_model_dir, output_dir=str(tmp_path / "aware"), dataset=prompts_file, mask_rate="0.5",
                     me_layer=str(ME), stage_options={"reward": [length_reward], "chat_template": chat}),
        flags(beta=0.1, num_iterations=2, max_steps=2),
    )
    (capture,) = captures
    assert masked_layers(result.trainer.model) == [1, 2, 3] and masked_layers(result.trainer.ref_model) == [1, 2, 3]
    assert len({len(p) for p in capture.generated_prompts}) > 1, "prompts must differ in length (left padding)"
    prefill = [r for r in capture.records if r["phase"] == "generate" and r["ids"].shape[1] > 1]
    decode = [r for r in capture.records if r["phase"] == "generate" and r["ids"].shape[1] == 1]
    assert prefill and decode, "generation runs one prefill then cached decoding steps"
    assert not any(r["masked"].any() for r in decode), "a decoded token was masked"
    for record in capture.records:
        if record["ids"].shape[1] > 1:  # every row of every full forward: exactly one masked token
            assert record["masked"].sum(-1).tolist() == [1] * record["ids"].shape[0], record["phase"]
    # left padding really happened in the trainer's passes (position 0 is a pad there, not the first token)
    for phase in ("generate", "loss"):
        assert any((r["mask"][:, 0] == 0).any() for r in capture.records if r["phase"] == phase), phase

    rollout = capture.masked_tokens("generate")
    expected = {(p, 0, p[0]) for p in capture.generated_prompts}
    assert rollout == expected  # the first real token of each prompt, nothing else
    assert capture.masked_tokens("loss") == rollout  # the loss forward masks the very same tokens
    assert capture.masked_tokens("logp") == rollout  # old-policy log-probs
    assert capture.masked_tokens("logp", model="ref") == rollout  # reference model (beta > 0)
    saved = WeMaskConfig.load(tmp_path / "aware")
    assert saved.mode == "aware" and saved.mask_rate == 0.5 and saved.dims == result.wemask.dims
    metrics = json.loads((tmp_path / "aware" / "metrics.json").read_text())
    assert metrics["stage"] == "grpo" and metrics["rewards"] == ["length_reward"]
    assert len(metrics["reward_history"]) == 1  # num_iterations 2: one generation batch serves both steps


def test_free_mode_is_plain_grpo_with_the_mask_recorded(tmp_path, tiny_model_dir, prompts_file, length_reward):
    captures = []
    result = run(
        capturing_stage(captures),
        TrainOptions(model=tiny_model_dir, output_dir=str(tmp_path / "free"), dataset=prompts_file, mask_rate="0.5",
                     me_layer=str(ME), mode="free", stage_options={"reward": [length_reward]}),
        flags(max_steps=1),
    )
    (capture,) = captures
    assert {r["phase"] for r in capture.records} >= {"generate", "loss"}
    assert not any(r["masked"].any() for r in capture.records)  # neither rollouts nor loss are masked
    assert masked_layers(result.trainer.model) == []
    saved = WeMaskConfig.load(tmp_path / "free")
    assert saved.mode == "free" and saved.mask_rate == 0.5 and sorted(saved.dims) == [1, 2, 3]


# ---------------------------------------------------------------------------------------------------------------
# r = 0 is plain TRL GRPO


def plain_trl_run(trainer_class, config_class, output_dir, model_dir, prompts_file, reward_file):
    """TRL's own trainer (GRPO or RLOO) on the same model, prompts and reward, with TRL's settings, trained."""
    from datasets import load_dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from wemask_cli.rewards import load_reward

    trainer = trainer_class(
        model=AutoModelForCausalLM.from_pretrained(model_dir),
        reward_funcs=[load_reward(reward_file)],
        args=config_class(output_dir=str(output_dir), use_cpu=True, bf16=False, gradient_checkpointing=False, **TRL),
        train_dataset=load_dataset("json", data_files=prompts_file, split="train"),
        processing_class=AutoTokenizer.from_pretrained(model_dir),
    )
    trainer.train()
    return trainer


def test_r0_equals_plain_trl_grpo(tmp_path, tiny_model_dir, prompts_file, length_reward):
    from transformers import AutoModelForCausalLM
    from trl import GRPOConfig, GRPOTrainer

    ours = run(
        grpo.GRPOStage(),
        TrainOptions(model=tiny_model_dir, output_dir=str(tmp_path / "r0"), dataset=prompts_file, mask_rate="0",
                     me_layer=str(ME), stage_options={"reward": [length_reward]}),
        flags(),
    )
    plain = plain_trl_run(GRPOTrainer, GRPOConfig, tmp_path / "plain", tiny_model_dir, prompts_file, length_reward)

    def logged(trainer):
        keys = ("reward", "reward_std", "completions/mean_length", "entropy", "grad_norm")
        return [{k: e[k] for k in keys} for e in trainer.state.log_history if "reward" in e]

    assert logged(ours.trainer) == logged(plain) and len(logged(plain)) == 2
    start = AutoModelForCausalLM.from_pretrained(tiny_model_dir).state_dict()
    trained, reference = ours.trainer.model.state_dict(), plain.model.state_dict()
    assert all(torch.equal(trained[k], reference[k]) for k in reference)  # bitwise the same weights
    assert any(not torch.equal(start[k], reference[k]) for k in reference)  # and training did move them


# ---------------------------------------------------------------------------------------------------------------
# Errors before the model loads: one line, exit 2


@pytest.fixture
def cli(monkeypatch, capsys, tiny_model_dir, prompts_file, tmp_path):
    """Runs `wemask grpo` in-process; loading a model fails the test (errors must come first)."""

    def no_load(*_args, **_kwargs):
        raise AssertionError("the model was loaded before the error")

    monkeypatch.setattr(models_module, "load_model", no_load)

    def invoke(*args):
        argv = ["wemask", "grpo", "--model", tiny_model_dir, "--dataset", prompts_file, "--output-dir",
                str(tmp_path / "out"), *args]
        monkeypatch.setattr(sys, "argv", argv)
        with pytest.raises(SystemExit) as exit_info:
            main()
        return exit_info.value.code, capsys.readouterr().err

    return invoke


@pytest.fixture
def bad_rewards(tmp_path) -> Path:
    path = tmp_path / "bad_rewards.py"
    path.write_text("def no_kwargs(completions):\n    return [0.0]\n\nNOT_CALLABLE = 3\n")
    return path


@pytest.mark.parametrize(
    "spec, message",
    [
        ("missing_file.py:reward", "reward file 'missing_file.py' does not exist"),
        ("{bad}:nope", "reward function 'nope' not found in"),
        ("{bad}:no_kwargs", "has the wrong signature: it must accept `completions` and `**kwargs`"),
        ("{bad}:NOT_CALLABLE", "is a int, not a function"),
        ("no_such_module_xyz:f", "reward module 'no_such_module_xyz' cannot be imported"),
        ("mth", "unknown reward 'mth'"),
        ("math:heavy", "bad reward weight 'heavy'"),
    ],
)
def test_bad_custom_reward_is_one_line_exit_2_before_the_model_loads(cli, bad_rewards, spec, message):
    code, err = cli("--reward", "format", "--reward", spec.format(bad=bad_rewards))
    assert code == 2, err
    assert err.count("\n") == 1 and err.startswith("wemask: error: ") and message in err, err
    assert "Traceback" not in err


@pytest.mark.parametrize(
    "args, message",
    [
        (["--use-transformers-continuous-batching", "--mask-rate", "0.3", "--me-layer", "1"], "continuous-batching"),
        (["--reward", "math:2", "--reward-weights", "1", "0.5"], "not both"),
        (["--reward", "math", "--reward", "format", "--reward-weights", "1"], "--reward-weights has 1 value(s) for 2"),
        (["--num-generations", "3", "--per-device-train-batch-size", "4"], "must be divisible by num_generations"),
    ],
)
def test_refused_settings_exit_2_before_the_model_loads(cli, args, message):
    code, err = cli(*args)
    assert code == 2 and err.count("\n") == 1 and message in err, err


@pytest.mark.parametrize(
    "trl, given, remedies, message",
    [
        ({"vllm_mode": "server"}, {}, {}, "--vllm-mode server needs GPUs"),
        ({}, {}, {"gated_norm": "both"}, "--use-vllm: GatedNorm"),
        ({}, {"use_peft": True, "load_in_4bit": True}, {}, "--use-vllm with --load-in-4bit"),
    ],
)
def test_rollouts_refuse_what_vllm_cannot_run_before_the_model_loads(tiny_model_dir, trl, given, remedies, message):
    """The stage's check, vLLM installed or not (without it the command refuses earlier: tests/test_preflight.py)."""
    from trl import GRPOConfig

    from wemask_cli.interventions.registry import configs_from_options
    from wemask_cli.mask_request.flags import MaskRequest
    from wemask_cli.runtime.errors import WeMaskError
    from wemask_cli.train.resolve import Resolved

    args = GRPOConfig(output_dir="unused", use_cpu=True, bf16=False, use_vllm=True, per_device_train_batch_size=8, **trl)
    opts = dict(mask_rate="0.3", me_layer=1, mode="aware", strength=1.0, model=tiny_model_dir, reward=["math"], **given)
    resolved = Resolved(opts, args, {}, MaskRequest.parse("0.3", "1", strength=1.0), configs_from_options(remedies))
    with pytest.raises(WeMaskError) as refused:
        grpo.GRPOStage().check(resolved)
    assert message in str(refused.value) and "\n" not in str(refused.value)


@pytest.mark.vllm
def test_check_allows_vllm_in_free_mode_and_without_a_mask(tiny_model_dir):
    from trl import GRPOConfig
    from vllm_support import require_vllm

    require_vllm()  # --use-vllm without vLLM is one line (VllmEngineError) before the model loads

    def args():
        return GRPOConfig(output_dir="unused", use_cpu=True, bf16=False, use_vllm=True, per_device_train_batch_size=8)

    from wemask_cli.mask_request.flags import MaskRequest
    from wemask_cli.train.resolve import Resolved

    base = dict(mask_rate="0.3", mode="free", strength=1.0, model=tiny_model_dir, reward=["math", "format:0.5"])
    stage, free = grpo.GRPOStage(), args()
    stage.check(Resolved(dict(base), free, {}, MaskRequest.parse("0.3", strength=1.0), []))  # free mode: plain GRPO on vLLM
    assert free.reward_weights == [1.0, 0.5] and len(stage.rewards) == 2
    aware = Resolved(dict(base, mode="aware", mask_rate="0"), args(), {}, MaskRequest.parse("0", strength=1.0), [])
    stage.check(aware)  # aware at r = 0: no mask to lose


def test_gsm8k_layout_becomes_chat_prompts(tiny_tokenizer):
    from datasets import Dataset

    from wemask_cli.data import load_training_data
    from wemask_cli.rewards import math_reward

    dataset, fmt = load_training_data(PROMPT_DATA, MATH)
    assert fmt.name == "question-answer (GSM8K)" and len(dataset) == 100
    chat = rollout_stage.prepare_dataset(dataset, tiny_tokenizer, None, [math_reward])
    assert chat[0]["prompt"] == [{"role": "user", "content": dataset[0]["question"]}]
    assert chat[0]["answer"].endswith("#### 48")
    plain = rollout_stage.prepare_dataset(dataset, tiny_tokenizer, False, [math_reward])
    assert plain[0]["prompt"] == dataset[0]["question"]
    with pytest.raises(Exception, match=r"the math reward needs the reference answers in an 'answer' \(or 'solution'\) column"):
        rollout_stage.prepare_dataset(Dataset.from_dict({"prompt": ["hi"]}), tiny_tokenizer, None, [math_reward])
    renamed, _ = load_training_data(PROMPT_DATA, MATH, columns="prompt=question,solution=answer")  # TRL's prompt/solution data
    assert rollout_stage.prepare_dataset(renamed, tiny_tokenizer, None, [math_reward])[0]["solution"].endswith("#### 48")
    assert math_reward([r"\boxed{48}", "no idea"], solution=[renamed[0]["solution"]] * 2) == [1.0, 0.0]


# ---------------------------------------------------------------------------------------------------------------
# Recipes and the command line


def test_recipes_resolve():
    from wemask_cli.train.resolve import resolve

    r = resolve(grpo.GRPOStage(), TrainOptions(config=str(ROOT / "recipes" / "grpo-gsm8k-qwen3-4b.yaml")), [])
    opts, args = r.opts, r.args
    assert (opts["model"], opts["dataset"], opts["dataset_config"]) == ("Qwen/Qwen3-4B", "openai/gsm8k", "main")
    assert (args.learning_rate, args.max_completion_length) == (1e-6, 256)
    assert args.per_device_train_batch_size * args.gradient_accumulation_steps * 8 == 256
    assert opts["reward"] == ["math"] and opts["mode"] == "free" and opts["me_layer"] == 7
    r = resolve(grpo.GRPOStage(), TrainOptions(config=str(ROOT / "recipes" / "grpo-tiny-cpu.yaml"), output_dir="x"), [])
    opts, args = r.opts, r.args
    assert Path(opts["dataset"]).is_file() and opts["reward"] == ["math", "format:0.5"] and args.num_generations == 2


def test_tiny_recipe_through_the_cli(monkeypatch, capsys, tmp_path, tiny_model_dir, length_reward):
    out = tmp_path / "run"
    monkeypatch.setattr(sys, "argv", [
        "wemask", "grpo", "--config", str(ROOT / "recipes" / "grpo-tiny-cpu.yaml"), "--model", tiny_model_dir,
        "--output-dir", str(out), "--report-to", "none", "--max-steps", "1", "--max-completion-length", "4",
        "--reward", "math", "--reward", f"{length_reward}:0.1", "--no-chat-template", "--me-layer", "1",
    ])  # fmt: skip
    with pytest.raises(SystemExit) as exit_info:
        main()
    assert exit_info.value.code == 0, capsys.readouterr().err
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["global_step"] == 1  # the flag wins over the recipe's max_steps: 2
    assert metrics["rewards"] == ["math_reward", "length_reward"] and metrics["reward_weights"] == [1.0, 0.1]
    record = json.loads((out / "wemask_run.json").read_text())
    assert record["set_by"]["wemask"]["reward"] == "flag" and record["trl_args"]["max_completion_length"] == 4
    assert record["options"]["chat_template"] is False and WeMaskConfig.load(out).mode == "aware"


# ---------------------------------------------------------------------------------------------------------------
# The real embedded model


@pytest.mark.embedded
def test_short_run_on_the_embedded_model_with_the_math_set(tmp_path, embedded_dir):
    out = tmp_path / "embedded"
    result = run(
        grpo.GRPOStage(),
        TrainOptions(model=embedded_dir, output_dir=str(out), dataset=MATH, mask_rate="0.3", me_layer="11",
                     use_peft=True, lora_r=8, stage_options={"reward": ["math", "format:0.5"]}),
        flags(per_device_train_batch_size=2, num_generations=2, max_completion_length=16, max_steps=2,
              learning_rate=1e-5, save_strategy="steps", save_steps=2),
    )
    saved = WeMaskConfig.load(out)
    assert saved.mode == "aware" and saved.mask_rate == 0.3 and saved.me_layer == 11
    assert (out / "checkpoint-2" / "wemask_config.json").is_file() and (out / "adapter_config.json").is_file()
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["global_step"] == 2 and metrics["rewards"] == ["math_reward", "format_reward"]
    assert metrics["reward_weights"] == [1.0, 0.5] and len(metrics["reward_history"]) == 2
    assert all(0.0 <= reward <= 1.5 for _, reward in metrics["reward_history"])
    run_record = json.loads((out / "wemask_run.json").read_text())
    assert run_record["data_format"] == "question-answer (GSM8K)" and run_record["options"]["reward"] == ["math", "format:0.5"]
    assert masked_layers(result.trainer.model) == list(range(11, 30))
    print(f"\nembedded GRPO: rewards {metrics['reward_history']}, runtime {metrics['runtime_s']} s")


def test_an_all_nan_reward_stops_the_run_with_one_line(monkeypatch, capsys, tmp_path, tiny_model_dir, prompts_file):
    rewards = tmp_path / "nan_rewards.py"
    rewards.write_text("def nan(completions, **kwargs):\n    return [float('nan')] * len(completions)\n")
    argv = ["wemask", "grpo", "--model", tiny_model_dir, "--dataset", prompts_file, "--output-dir", str(tmp_path / "o"),
            "--reward", f"{rewards}:nan", *flags(max_steps=1)]  # fmt: skip
    monkeypatch.setattr(sys, "argv", argv)
    with pytest.raises(SystemExit) as exit_info:
        main()
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and "Traceback" not in err
    assert err.strip().splitlines()[-1].endswith(
        f"reward '{rewards}:nan' returned no number for any of the 4 completions (all NaN or None), so the trainer has nothing "
        "to learn from: check what it computes"
    )


def test_an_all_zero_reward_step_warns_once(monkeypatch, capsys, tmp_path, tiny_model_dir, prompts_file, length_reward):
    rewards = tmp_path / "zero_rewards.py"
    rewards.write_text("def zero(completions, **kwargs):\n    return [0.0] * len(completions)\n")
    from conftest import run_main

    base = ["grpo", "--model", tiny_model_dir, "--dataset", prompts_file]
    for reward, expected in ((f"{rewards}:zero", 1), (length_reward, 0)):
        args = [*base, "--output-dir", str(tmp_path / reward[-4:]), "--reward", reward, *flags(max_steps=2, logging_steps=1)]
        code, _, err = run_main(monkeypatch, capsys, *args)
        assert code == 0 and err.count("every completion got reward 0") == expected, err
