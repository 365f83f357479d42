"""Helpers of the issue-29 hostile tests: tiny suites copied from the committed golden/, in-process CLI runs."""

from __future__ import annotations

import shutil
from collections.abc import Callable, Sequence
from pathlib import Path

import pytest

from pldr_ref.fixtures.case import DEFAULT_GOLDEN_DIR
from pldr_ref.fixtures.format import canonical_json
from pldr_ref.fixtures.manifest import build_manifest

#: The reference backend (float64 only: a run of one op case takes milliseconds).
REF = "pldr_ref.backends.reference:ReferenceBackend"


def make_suite(root: Path, cases: Sequence[str] = ("op/linear",)) -> Path:
    """A copy of committed cases under ``root`` with its own MANIFEST.json."""
    for name in cases:
        shutil.copytree(DEFAULT_GOLDEN_DIR / name, root / name)
    (root / "MANIFEST.json").write_bytes(canonical_json(build_manifest(root, list(cases), "default", {})))
    return root


def tree_stat(root: Path) -> list[tuple[str, int, int]]:
    """(relative path, size, mtime in ns) of every file under ``root``: a cheap "nothing was written here" check."""
    return [(str(p.relative_to(root)), p.stat().st_size, p.stat().st_mtime_ns) for p in sorted(root.rglob("*"))
            if p.is_file()]


def run_main(main: Callable[[list[str]], int], argv: Sequence[str],
             capsys: pytest.CaptureFixture) -> tuple[int, str, str]:
    """(exit status, stdout, stderr) of ``main(argv)`` in-process (argparse's SystemExit turned into its code)."""
    capsys.readouterr()
    try:
        code = main([str(a) for a in argv])
    except SystemExit as exc:
        code = exc.code
    out = capsys.readouterr()
    return code, out.out, out.err


def one_error_line(err: str) -> str:
    """The single non-usage line of ``err`` (asserts there is exactly one and no traceback)."""
    assert "Traceback" not in err, err
    lines = [ln for ln in err.splitlines() if ln.strip() and not ln.startswith(("usage:", " "))]
    assert len(lines) == 1, err
    return lines[0]
