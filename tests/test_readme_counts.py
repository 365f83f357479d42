"""Every count README.md states is the count in the code (no hand-typed number can drift from it).

Each stated count is matched by a phrase pattern and compared with the code; a catch-all then requires every
"<number> <word>" in README's feature table (code spans removed) to be one of the checked counts, so a new
hand-typed count fails here until it is checked too.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from pldr_ref.harness.controls.mutants import MUTATIONS
from pldr_ref.harness.controls.switch_mutants import SWITCH_MUTATIONS
from proofs_check.catalog import LEAN_FILES
from proofs_check.mutants import MUTANTS

README = Path(__file__).resolve().parents[1] / "README.md"


def code_counts() -> dict[str, int]:
    """Phrase pattern (one number group) -> the count the code has."""
    return {
        r"(\d+) deliberately broken torch backends": len({m.backend for m in MUTATIONS}),
        r"incl\. (\d+) logits-only ones": len({m.backend for m in MUTATIONS if m.backend.__name__.startswith(
            "LogitsOnly")}),
        r"(\d+) wrong-switch float64 backends": len(SWITCH_MUTATIONS),
        r"(\d+) theorems": sum(len(names) for names in LEAN_FILES.values()),
        r"(\d+) injected operator bugs": len(MUTANTS),
    }


def readme() -> str:
    return README.read_text(encoding="utf-8")


@pytest.mark.parametrize(("pattern", "count"), list(code_counts().items()))
def test_readme_count_equals_the_code(pattern: str, count: int) -> None:
    stated = [int(m) for m in re.findall(pattern, readme())]
    assert stated, f"README states no count for {pattern!r}"
    assert stated == [count] * len(stated), f"README says {stated} for {pattern!r}, the code has {count}"


def table_rows(text: str) -> list[str]:
    """README's table rows with code spans removed."""
    return [re.sub(r"`[^`]*`", "", line) for line in text.splitlines() if line.startswith("|")]


def unchecked_counts(text: str) -> list[str]:
    """'<number> <word>' phrases of the table rows whose number no pattern of :func:`code_counts` reads."""
    out = []
    for row in table_rows(text):
        read = {m.start(1) for p in code_counts() for m in re.finditer(p, row)}
        out += [m.group(0) for m in re.finditer(r"(?<![\w.-])\d+ [A-Za-z][\w-]*", row) if m.start() not in read]
    return out


def test_every_count_in_the_feature_table_is_checked() -> None:
    assert unchecked_counts(readme()) == [], "README counts without a check in this file"


def test_negative_control_a_wrong_or_unchecked_count_is_seen() -> None:
    pattern = r"(\d+) wrong-switch float64 backends"
    right = code_counts()[pattern]
    wrong = readme().replace(f"{right} wrong-switch", f"{right - 1} wrong-switch")
    assert wrong != readme()
    assert [int(m) for m in re.findall(pattern, wrong)] != [code_counts()[pattern]]
    assert unchecked_counts("| 12 new mutants; 38 deliberately broken torch backends |") == ["12 new"]
