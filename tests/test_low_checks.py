"""Small input checks: NaN or infinite temperatures, dims listed twice."""

from __future__ import annotations

import pytest
from conftest import run_main

from wemask_cli.errors import WeMaskError
from wemask_cli.method.config import WeMaskConfig


@pytest.mark.parametrize("command", [("infer", "-p", "hi"), ("eval", "--task", "math", "--limit", "1")])
@pytest.mark.parametrize("value", ["nan", "inf"])
def test_a_temperature_that_is_not_a_finite_number_is_refused(command, value, monkeypatch, capsys, tiny_model_dir):
    code, _, err = run_main(monkeypatch, capsys, *command, "--model", tiny_model_dir, "--temperature", value)
    assert code == 2 and err.strip().splitlines()[-1] == (
        f"wemask: error: --temperature {value} is not valid: use 0 (greedy) or a positive number to sample"
    ), err


def test_dims_listed_twice_are_refused():
    with pytest.raises(WeMaskError, match="layer 11 lists a dim twice"):
        WeMaskConfig(mask_rate=0.3, me_layer=11, dims={"11": [3, 3, 507]})
