"""docs/inference.md quotes the real output of ``python -m pldr_ref.inference.demo`` (issue 3 item 9)."""

from __future__ import annotations

import contextlib
import io
from pathlib import Path

from pldr_ref.inference import demo

DOC = Path(__file__).resolve().parents[1] / "docs" / "inference.md"


def test_doc_quotes_current_demo_output():
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        assert demo.main([]) == 0
    out = buf.getvalue().strip()
    text = DOC.read_text(encoding="utf-8")
    assert "python -m pldr_ref.inference.demo" in text
    assert out in text, (
        "docs/inference.md no longer matches the demo output; regenerate the 'Worked example' block with "
        "`python -m pldr_ref.inference.demo` and update the prose numbers"
    )
    # negative control: another seed prints other numbers, which the page does not contain
    other = io.StringIO()
    with contextlib.redirect_stdout(other):
        demo.main(["--seed", "2", "--no-external"])
    assert other.getvalue().strip() not in text
