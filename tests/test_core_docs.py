"""``docs/equations.md`` covers every stage of ``FORWARD_STAGES``, every op function and every switch value,
and every test it cites exists."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest

from pldr_ref import config as config_module
from pldr_ref.registry import FORWARD_STAGES, OP_FUNCTIONS

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "equations.md"


def _doc() -> str:
    if not DOC.is_file():
        raise AssertionError(f"{DOC} is missing")
    return DOC.read_text(encoding="utf-8")


def _qualified(fn) -> str:
    return f"{fn.__module__}.{fn.__qualname__}"


def _stage_rows(text: str) -> dict[str, str]:
    rows = {}
    for line in text.splitlines():
        m = re.match(r"\|\s*\d+\s*\|\s*`([a-z_0-9]+)`\s*\|", line)
        if m:
            rows[m.group(1)] = line
    return rows


@pytest.mark.parametrize("stage", FORWARD_STAGES, ids=[s.name for s in FORWARD_STAGES])
def test_every_stage_has_a_row_naming_its_function(stage) -> None:
    rows = _stage_rows(_doc())
    assert stage.name in rows, f"docs/equations.md has no table row for stage {stage.name!r}"
    row = rows[stage.name]
    assert f"`{_qualified(stage.function)}`" in row, f"row {stage.name!r} does not name {_qualified(stage.function)}"
    for out in stage.outputs:
        assert f"`{out}`" in row, f"row {stage.name!r} does not name its trace output {out!r}"
    assert "tests/test_" in row, f"row {stage.name!r} cites no test"


def test_rows_follow_forward_order() -> None:
    assert list(_stage_rows(_doc())) == [s.name for s in FORWARD_STAGES]


def test_every_op_function_is_documented() -> None:
    text = _doc()
    missing = [name for name, fn in OP_FUNCTIONS.items() if _qualified(fn) not in text]
    assert not missing, f"op functions missing from docs/equations.md: {missing}"


def test_every_switch_value_is_documented() -> None:
    text = _doc()
    for field, values in config_module._CHOICES.items():
        assert f"`{field}`" in text, field
        for value in values:
            assert f'`"{value}"`' in text, f"{field}={value!r} is not documented"
    assert {f.name for f in dataclasses.fields(config_module.PLDRConfig)} >= set(config_module._CHOICES)


def test_cited_tests_exist() -> None:
    cited = set(re.findall(r"(tests/test_[a-z0-9_]+\.py)::([a-zA-Z0-9_]+)", _doc()))
    assert cited
    for path, name in sorted(cited):
        source = (ROOT / path).read_text(encoding="utf-8")
        assert re.search(rf"^def {name}\(", source, flags=re.M), f"{path}::{name} cited in docs does not exist"


def test_negative_control_missing_stage_is_detected() -> None:
    rows = _stage_rows(_doc().replace("| `ffn` |", "| `feed_forward` |"))
    assert "ffn" not in rows
