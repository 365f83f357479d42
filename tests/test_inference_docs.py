"""docs/inference.md quotes the real output of ``python -m pldr_ref.inference.demo`` (issue 3 item 9).

The quote is compared line by line: the text between the numbers, and every integer (token ids,
counts), must be identical; every decimal number must agree within one unit in its last printed digit
plus a round-off allowance (:data:`ROUNDOFF_ABS`, :data:`ROUNDOFF_REL`), because the float64 results
behind it are not bitwise portable across BLAS builds and CPUs (issue 10 item 3).
"""

from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path

from pldr_ref.inference import demo

DOC = Path(__file__).resolve().parents[1] / "docs" / "inference.md"

#: A decimal number as the demo prints it (fixed or scientific notation); integers are matched as text.
DECIMAL = re.compile(r"[-+]?\d+\.\d+(?:e[-+]?\d+)?")
#: Absolute allowance: the demo prints round-off gaps (1e-16 .. 1e-14 on a given machine) whose value
#: is machine-dependent by nature; 1e-12 is still ~ 4500 unit roundoffs below every O(1) quantity shown.
ROUNDOFF_ABS = 1e-12
#: Relative allowance for the printed O(1)..O(100) sums and log-probabilities (float64 summation order).
ROUNDOFF_REL = 1e-12


def _last_digit_unit(text: str) -> float:
    """Value of one unit in the last printed digit of ``text`` (e.g. '6.737e-03' -> 1e-6, '-4.139491' -> 1e-6)."""
    mantissa, _, exponent = text.lower().partition("e")
    decimals = len(mantissa.split(".")[1])
    return 10.0 ** (int(exponent or 0) - decimals)


def quote_mismatches(printed: str, quoted: str) -> list[str]:
    """Why the line ``quoted`` (from the doc) does not quote ``printed`` (from the demo); [] if it does."""
    if DECIMAL.sub("#", printed) != DECIMAL.sub("#", quoted):
        return [f"text differs:\n  demo: {printed}\n  doc:  {quoted}"]
    problems = []
    for got, want in zip(DECIMAL.findall(printed), DECIMAL.findall(quoted), strict=True):
        g, w = float(got), float(want)
        if abs(g - w) > _last_digit_unit(want) + ROUNDOFF_ABS + ROUNDOFF_REL * abs(w):
            problems.append(f"number {want} in the doc, demo prints {got}:\n  {printed}")
    return problems


def _demo(argv: list[str]) -> list[str]:
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        assert demo.main(argv) == 0
    return buf.getvalue().strip().splitlines()


def doc_mismatches(lines: list[str], text: str) -> list[str]:
    """Mismatches between the demo output ``lines`` and the block of ``text`` that starts with its first line."""
    doc_lines = text.splitlines()
    starts = [i for i, line in enumerate(doc_lines) if not quote_mismatches(lines[0], line)]
    if not starts:
        return [f"the doc has no line quoting the demo's first line {lines[0]!r}"]
    block = doc_lines[starts[0]:starts[0] + len(lines)]
    if len(block) < len(lines):
        return ["the doc's quote is shorter than the demo output"]
    return [p for printed, quoted in zip(lines, block, strict=True) for p in quote_mismatches(printed, quoted)]


def test_doc_quotes_current_demo_output():
    lines = _demo([])
    text = DOC.read_text(encoding="utf-8")
    assert "python -m pldr_ref.inference.demo" in text
    problems = doc_mismatches(lines, text)
    assert problems == [], (
        "docs/inference.md no longer matches the demo output; regenerate the 'Worked example' block with "
        "`python -m pldr_ref.inference.demo` and update the prose numbers:\n" + "\n".join(problems[:10])
    )


def test_doc_quote_comparison_is_not_vacuous():
    """Negative controls: another seed, and one number moved by ten units in its last digit, both fail."""
    text = DOC.read_text(encoding="utf-8")
    assert doc_mismatches(_demo(["--seed", "2", "--no-external"]), text) != []
    assert quote_mismatches("CE 4.409224  gap 4.832e-16", "CE 4.409234  gap 4.832e-16") != []
    assert quote_mismatches("CE 4.409224  gap 4.832e-16", "CE 4.409225  gap 9.000e-15") == []  # last digit, round-off
    assert quote_mismatches("tokens [44, 17]", "tokens [44, 18]") != []  # integers are exact
