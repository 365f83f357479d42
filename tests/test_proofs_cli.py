"""``pldr-ref prove``: the ci profile runs the whole registry inside the default test run, prints the coverage
table, and the committed ``docs/lean_coverage.md`` lists every Lean theorem as passing."""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import pytest

from proofs_check.catalog import LEAN_NAMES
from proofs_check.cli import register

REPO = Path(__file__).resolve().parents[1]


def _prove(argv: list[str]) -> int:
    parser = argparse.ArgumentParser()
    register(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["prove", *argv])
    return args.func(args)


def test_prove_is_the_pldr_ref_subcommand():
    from pldr_ref import cli

    assert cli.SUBCOMMANDS["prove"] == "proofs_check.cli"


def test_prove_ci_table_and_docs(capsys, tmp_path):
    t0 = time.perf_counter()
    docs = tmp_path / "lean_coverage.md"
    assert _prove(["--profile", "ci", "--table", "--write-docs", str(docs)]) == 0
    elapsed = time.perf_counter() - t0
    out = capsys.readouterr().out
    assert "Lean coverage 79/79" in out and "0 held" in out
    for name in LEAN_NAMES:
        assert name in out
    text = docs.read_text(encoding="utf-8")
    assert all(f"`{name}`" in text for name in LEAN_NAMES)
    assert elapsed < 120


def test_prove_only_and_bad_selection(capsys):
    assert _prove(["--only", "hadPow"]) == 0
    out = capsys.readouterr().out
    assert "hadPow_add" in out and "3 checks" in out
    assert _prove(["--only", "no-such-check"]) == 2
    assert _prove(["--only", "hadPow", "--write-docs", "x.md"]) == 2


def test_committed_docs_cover_every_lean_name():
    text = (REPO / "docs" / "lean_coverage.md").read_text(encoding="utf-8")
    assert "Lean coverage 79/79" in text
    rows = {line.split("|")[2].strip().strip("`"): line for line in text.splitlines() if line.startswith("| ")
            and line.count("|") == 5}
    for name in LEAN_NAMES:
        assert name in rows and rows[name].rstrip(" |").endswith("pass"), name
    assert "FAIL" not in text and "MISSING" not in text and "HELD" not in text


@pytest.mark.slow
def test_prove_thorough_passes():
    assert _prove(["--profile", "thorough"]) == 0
