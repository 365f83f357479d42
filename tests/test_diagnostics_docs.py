"""docs/diagnostics.md: every worked-example block is current.  The blocks are regenerated with
docs/make_diagnostics_examples.py and compared number by number within a tolerance (six printed digits and
BLAS summation order may differ between machines), never byte for byte."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "diagnostics.md"
SCRIPT = ROOT / "docs" / "make_diagnostics_examples.py"
#: Relative tolerance of a number in the doc (printed with 6 significant digits) against a fresh run.
RTOL = 1e-5
#: Absolute floor for round-off-level quantities (e.g. a repeatability max |diff| of 0 vs 1e-16).
ATOL = 1e-12
NUMBER = re.compile(r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?|inf|nan|n/a")


def _script():
    spec = importlib.util.spec_from_file_location("make_diagnostics_examples", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def table(text: str) -> dict[str, str]:
    """{quantity: value cell} of the markdown table rows | `key` | value |."""
    return dict(re.findall(r"^\| `([^`]+)` \| (.*) \|$", text, re.M))


def same_numbers(doc_cell: str, fresh_cell: str) -> bool:
    a, b = NUMBER.findall(doc_cell), NUMBER.findall(fresh_cell)
    if len(a) != len(b):
        return False
    for x, y in zip(a, b, strict=True):
        if x in ("inf", "nan", "n/a") or y in ("inf", "nan", "n/a"):
            if x != y:
                return False
            continue
        fx, fy = float(x), float(y)
        if abs(fx - fy) > RTOL * abs(fy) + ATOL:
            return False
    return True


def check_block(name: str) -> None:
    mod = _script()
    text = DOC.read_text(encoding="utf-8")
    found = mod.marker_pattern(name).search(text)
    assert found, f"docs/diagnostics.md lacks the block of example {name!r}"
    in_doc, fresh = table(found.group(1)), table(mod.block(name))
    assert fresh, f"example {name!r} produced no table"
    assert set(in_doc) == set(fresh), f"{name}: quantities differ: {sorted(set(in_doc) ^ set(fresh))}"
    stale = {k: (in_doc[k], fresh[k]) for k in fresh if not same_numbers(in_doc[k], fresh[k])}
    assert not stale, f"{name}: stale numbers (doc, fresh) {stale}; run python docs/make_diagnostics_examples.py {name}"


@pytest.mark.parametrize("name", ["twirl", "g-lm", "model-tiny"])
def test_example_block_is_current(name: str) -> None:
    check_block(name)


@pytest.mark.slow
def test_v510_example_block_is_current() -> None:
    check_block("model-v510-110m")


def test_number_comparison_has_teeth() -> None:
    """Negative controls: a changed digit at the 6th place passes only within RTOL; a changed count fails."""
    assert same_numbers("0.940338", "0.940339")
    assert not same_numbers("0.940338", "0.940438")
    assert not same_numbers("[1, 2]", "[1, 2, 3]")
    assert not same_numbers("32", "31")
    assert same_numbers("0", "4.4e-16")


def test_doc_covers_every_section_and_flag() -> None:
    from pldr_ref.diagnostics.model import SECTIONS

    text = DOC.read_text(encoding="utf-8")
    for name in SECTIONS:
        assert f"### {name}" in text, name
    for flag in ("--json", "--out", "--quiet", "--markdown", "--checkpoint", "--prompts", "--random-prompts"):
        assert flag in text, flag
