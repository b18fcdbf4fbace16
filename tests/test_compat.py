"""Every touch of another library's internals lives in wemask_cli/compat/, one module per library, each checked at
run time. The canaries call each module's own `check()` (the same code the runtime uses), so a release that moved
an internal fails here loudly; a moved internal at run time is one CompatError line naming the library, its
installed and verified versions and the fix."""

from __future__ import annotations

import ast
import types
import warnings
from pathlib import Path

import pytest
from conftest import run_main

from wemask_cli.compat import CompatError, accelerate, argparse, bitsandbytes, datasets, huggingface_hub, lm_eval, transformers
from wemask_cli.compat.notices import library_notices_quiet

PACKAGE = Path(__file__).resolve().parent.parent / "wemask_cli"


@pytest.mark.parametrize("module", [accelerate, argparse, bitsandbytes, datasets, huggingface_hub, lm_eval, transformers],
                         ids=lambda m: m.__name__.rpartition(".")[2])
def test_canary_the_internals_wemask_touches_are_where_it_expects(module):
    module.check()


def test_a_moved_internal_is_one_line_naming_the_library_its_versions_and_the_fix():
    moved = types.ModuleType("huggingface_hub.constants")  # a release without the HF_HUB_OFFLINE constant
    with pytest.raises(CompatError) as caught:
        huggingface_hub.check(moved)
    message = str(caught.value)
    assert "\n" not in message and message.startswith("huggingface_hub 2.4")
    assert "huggingface_hub.constants.HF_HUB_OFFLINE no longer exists (wemask was verified on huggingface_hub 2.4); " \
           "install a verified huggingface_hub release, or report this to wemask" in message


def test_fsdp_on_the_cpu_says_so_when_accelerate_moved_its_shared_state(monkeypatch):
    from accelerate.state import PartialState

    monkeypatch.delattr(PartialState, "_shared_state")
    with pytest.raises(CompatError, match=r"^accelerate \d+\.\d+\.\d+: accelerate\.state\.PartialState\._shared_state no "
                                          r"longer exists \(wemask was verified on accelerate 1\.16\)"):
        accelerate.force_fsdp(object())


def test_a_dataset_without_its_fingerprint_is_refused_not_skipped(monkeypatch):
    import datasets as hf_datasets

    dataset = hf_datasets.Dataset.from_dict({"text": ["a"]})
    assert datasets.fingerprint(dataset) == dataset._fingerprint and datasets.fingerprint({"text": ["a"]}) is None
    monkeypatch.delattr(hf_datasets.Dataset, "_fingerprint", raising=False)
    monkeypatch.delattr(dataset, "_fingerprint")
    with pytest.raises(CompatError, match="datasets.arrow_dataset.Dataset._fingerprint no longer exists"):
        datasets.set_fingerprint(dataset, "x")


def private_touches(path: Path) -> list[str]:
    """`x._name` attribute reads/writes (also through getattr/hasattr), `setattr(...)`, `x.__class__ = ...` (a class
    swap) and `warnings.filterwarnings/simplefilter` calls in one file (self._x, cls._x and other dunders are the
    file's own)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Attribute) and node.attr.startswith("_") and not node.attr.startswith("__"):
            owner = ast.unparse(node.value)
            if owner not in ("self", "cls", "super()"):
                found.append(f"{path.name}:{node.lineno} {owner}.{node.attr}")
        if isinstance(node, ast.Call) and ast.unparse(node.func) in ("setattr", "warnings.filterwarnings",
                                                                     "warnings.simplefilter"):
            found.append(f"{path.name}:{node.lineno} {ast.unparse(node.func)}")
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Attribute) and t.attr == "__class__" for t in node.targets):
            found.append(f"{path.name}:{node.lineno} {ast.unparse(node.targets[0])} = (a class swap)")
        if isinstance(node, ast.Call) and ast.unparse(node.func) in ("getattr", "hasattr") and len(node.args) > 1:
            name = node.args[1]
            if isinstance(name, ast.Constant) and str(name.value).startswith("_") and not str(name.value).startswith("__"):
                found.append(f"{path.name}:{node.lineno} {ast.unparse(node.args[0])}.{name.value}")
    return found


OWN = {  # wemask's own private names, reached from another of its modules or objects
    "manifest._readable",  # outputs/manifest.py's own class
}


def test_no_module_outside_compat_touches_another_librarys_private_names():
    """Private attributes of other objects, setattr, class swaps and warning filters appear only in compat/, for every
    other module alike (the vLLM engine's included: its internals are compat/vllm.py's)."""
    outside = [path for path in sorted(PACKAGE.rglob("*.py")) if path.relative_to(PACKAGE).parts[0] != "compat"]
    found = [touch for path in outside for touch in private_touches(path) if touch.split(" ")[1] not in OWN]
    assert found == [], found


def test_the_scan_sees_each_kind_of_touch(tmp_path):
    planted = tmp_path / "planted.py"
    planted.write_text("import warnings\nlayer.attn.__class__ = Masked\nx = model._hidden\nsetattr(model, 'a', 1)\n"
                       "warnings.filterwarnings('ignore')\ngetattr(model, '_private')\nself._own = 1\n")
    assert [touch.split(" ")[0] for touch in private_touches(planted)] == [
        "planted.py:2", "planted.py:3", "planted.py:4", "planted.py:5", "planted.py:6"]


def test_library_notices_are_quiet_only_inside_a_command_and_only_for_the_libraries():
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        with library_notices_quiet():
            warnings.warn_explicit("library's", FutureWarning, "modeling_utils.py", 1, module="transformers.modeling_utils")
            warnings.warn_explicit("user's", FutureWarning, "my_rewards.py", 1, module="my_rewards")
        warnings.warn_explicit("after", FutureWarning, "modeling_utils.py", 2, module="transformers.modeling_utils")
    assert [str(w.message) for w in seen] == ["user's", "after"]


def test_a_command_leaves_the_warning_filters_as_it_found_them(monkeypatch, capsys):
    before = list(warnings.filters)
    code, out, _ = run_main(monkeypatch, capsys, "--version")
    assert code == 0 and out.startswith("wemask ") and warnings.filters == before


@pytest.mark.embedded
def test_on_the_embedded_model_an_installed_remedy_is_kept_out_of_saves_through_compat(embedded):
    """The real model's save exclusions, read and written only through compat/transformers.py: exactly the remedy's
    tensors while installed, none after."""
    from wemask_cli.interventions import install_all
    from wemask_cli.interventions.gated_norm import GatedNorm

    model = embedded.model
    assert transformers.is_model(model) and transformers.ignored_on_save(model) == set()
    installation = install_all(model, [GatedNorm(norms="attn", rank=2)])
    try:
        ignored = transformers.ignored_on_save(model)
        added = {key for key in model.state_dict() if ".wemask_gated_norm_attn." in key}
        assert added and ignored == added
    finally:
        installation.remove()
    assert transformers.ignored_on_save(model) == set()


class CacheKeyRead(Exception):
    """Raised once TRL has computed its cache key: the canary needs nothing after it."""


def trl_reference_cache_key(dataset, monkeypatch) -> str:
    """The fingerprint TRL's DPOTrainer keys its precomputed reference log-probs on, read by running its own code up to
    the cache lookup (TRL 1.16: `_precompute_ref_logps`)."""
    from trl.trainer import dpo_trainer

    seen = []

    def cache_path(fingerprint):
        seen.append(fingerprint)
        raise CacheKeyRead

    monkeypatch.setattr(dataset, "_get_cache_file_path", cache_path)
    trainer = object.__new__(dpo_trainer.DPOTrainer)
    trainer._precompute_model_hash = "the-same-weights"
    with pytest.raises(CacheKeyRead):
        trainer._precompute_ref_logps(dataset, "train", 1)
    return seen[0]


def test_canary_renaming_the_fingerprint_changes_trls_reference_cache_key(monkeypatch):
    """TRL's precomputed reference log-probs are cached under a key of the dataset's fingerprint and the weights, not
    the mask: wemask renames the fingerprint for a masked reference (train/reference.py), so an unmasked run's cache is
    never reused. If TRL stopped keying on the fingerprint, that rename would change nothing: this fails first."""
    import datasets as hf_datasets

    from wemask_cli.method.config import WeMaskConfig
    from wemask_cli.train.reference import name_masked_reference

    rows = {"prompt": ["a", "b"], "chosen": ["c", "d"], "rejected": ["e", "f"]}
    plain, masked = hf_datasets.Dataset.from_dict(rows), hf_datasets.Dataset.from_dict(rows)
    assert datasets.fingerprint(plain) == datasets.fingerprint(masked)
    unmasked_key = trl_reference_cache_key(plain, monkeypatch)
    assert trl_reference_cache_key(masked, monkeypatch) == unmasked_key  # same data, same weights: the same cache
    name_masked_reference(masked, WeMaskConfig(mask_rate=0.3, me_layer=1))
    assert trl_reference_cache_key(masked, monkeypatch) != unmasked_key


def test_canary_lm_eval_takes_what_wemask_passes_and_returns_what_it_reads(tmp_path, tiny_tokenizer):
    """On a tiny model through HFLM and a local YAML task (the calls eval/tasks/lm_eval.py makes, with its arguments):
    simple_evaluate's output holds what wemask reads, and the bridge turns it into its metrics; a reshaped output is
    one CompatError line."""
    import json

    import lm_eval as harness
    from conftest import make_tiny_model
    from lm_eval.models.huggingface import HFLM
    from lm_eval.tasks import TaskManager

    from wemask_cli.eval.tasks.lm_eval import LmEvalTask, scored_from

    rows = [{"question": f"{i} plus {i}?", "choices": [str(2 * i), "no"], "answer": 0} for i in range(3)]
    (tmp_path / "rows.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    (tmp_path / "toy_choice.yaml").write_text(
        f"task: toy_choice\ndataset_path: json\ndataset_kwargs:\n  data_files:\n    test: {tmp_path / 'rows.jsonl'}\n"
        'test_split: test\noutput_type: multiple_choice\ndoc_to_text: "Q: {{question}}\\nA:"\ndoc_to_choice: "{{choices}}"\n'
        'doc_to_target: "{{answer}}"\nmetric_list:\n  - metric: acc\n  - metric: acc_norm\n')
    manager = TaskManager(include_path=str(tmp_path), include_defaults=False)
    model = HFLM(pretrained=make_tiny_model("llama", vocab_size=len(tiny_tokenizer)), tokenizer=tiny_tokenizer, batch_size=1)
    with lm_eval.quiet_git_hash():
        out = harness.simple_evaluate(model=model, tasks=["toy_choice"], task_manager=manager, limit=None, num_fewshot=None,
                                      apply_chat_template=False, fewshot_as_multiturn=False, log_samples=True,
                                      fewshot_random_seed=1234, bootstrap_iters=10)
    assert lm_eval.check_output(out, ["toy_choice"]) is out
    task = LmEvalTask.__new__(LmEvalTask)
    task.names, task.primary = ["toy_choice"], "toy_choice/?"
    scored = scored_from(out, task)
    assert set(scored.metrics) == {"toy_choice/acc", "toy_choice/acc_norm"} and task.primary == "toy_choice/acc"
    assert scored.n["toy_choice/acc"] == 3 and len(scored.metrics["toy_choice/acc"].items) == 3
    del out["samples"]["toy_choice"][0]["filtered_resps"]
    with pytest.raises(CompatError, match=r"^lm-eval 0\.4\.\d+: simple_evaluate's output no longer has a sample's 'filtered_resps'"):
        lm_eval.check_output(out, ["toy_choice"])
