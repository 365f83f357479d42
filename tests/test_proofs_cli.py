"""``pldr-ref prove``: flags (--profile, --only, --table, --out with the hidden --write-docs alias, --quiet),
progress on stderr, the reason of every failure, and a summary that never claims full Lean coverage while a
check fails."""

from __future__ import annotations

import argparse

import pytest
from proofs_support import make_check

import proofs_check.registry as registry
from proofs_check.catalog import LEAN_NAMES
from proofs_check.cli import register
from proofs_check.registry import Outcome
from proofs_check.report import summary


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser()
    register(parser.add_subparsers(dest="command"))
    return parser


def _prove(argv: list[str]) -> int:
    args = _parser().parse_args(["prove", *argv])
    return args.func(args)


def test_prove_is_the_pldr_ref_subcommand():
    from pldr_ref import cli

    assert cli.SUBCOMMANDS["prove"] == "proofs_check.cli"


def test_out_flag_and_hidden_write_docs_alias(tmp_path):
    parser = _parser()
    assert parser.parse_args(["prove", "--out", "a.md"]).out.name == "a.md"
    assert parser.parse_args(["prove", "--write-docs", "b.md"]).out.name == "b.md"
    sub = parser._subparsers._group_actions[0].choices["prove"]  # the prove parser's help text
    text = sub.format_help()
    assert "--out" in text and "--quiet" in text and "--profile" in text and "--write-docs" not in text


def test_prove_only_table_progress_and_quiet(capsys):
    assert _prove(["--only", "hadPow", "--table"]) == 0
    captured = capsys.readouterr()
    assert "hadPow_add" in captured.out and "3 checks" in captured.out
    assert "prove (ci)" in captured.err  # progress on stderr
    assert _prove(["--only", "hadPow", "--quiet"]) == 0
    captured = capsys.readouterr()
    assert captured.err == "" and "3 checks" in captured.out and "hadPow_add " not in captured.out


def test_bad_selection(capsys):
    assert _prove(["--only", "no-such-check"]) == 2
    assert _prove(["--only", "hadPow", "--out", "x.md"]) == 2


def _failing(profile: str) -> str:
    """fails"""
    raise AssertionError("the conclusion broke here")


def _control(profile: str) -> str:
    """violated"""
    return "violated: yes"


def test_table_prints_every_failure_reason(monkeypatch, capsys):
    bad = make_check("broken_mirror", ("hadPow_zero",), "p", "theorem", ("sympy",), (), _failing, _control, "s", "d")
    monkeypatch.setattr(registry, "select", lambda only=None, checks=None: (bad,))
    assert _prove(["--table", "--quiet"]) == 1
    out = capsys.readouterr().out
    assert "broken_mirror: fail: AssertionError: the conclusion broke here" in out
    assert "Lean names fully ok 0/79" in out and "79/79" not in out


def test_summary_never_claims_full_coverage_while_a_check_fails():
    def ok(profile: str) -> str:
        """ok"""
        return "ok"

    outcomes = [Outcome(make_check(f"c{i}", (n,), "p", "theorem", ("sympy",), (), ok, ok, "s", "d"), "pass", "",
                        "violated", "", 0.0) for i, n in enumerate(LEAN_NAMES)]
    assert "Lean names fully ok 79/79" in summary(outcomes)
    outcomes[0] = Outcome(outcomes[0].check, "fail", "x", "violated", "", 0.0)
    assert "79/79" not in summary(outcomes) and "1 fail/error" in summary(outcomes)
    outcomes[0] = Outcome(outcomes[0].check, "pass", "", "skipped", "", 0.0)
    assert "79/79" not in summary(outcomes)


@pytest.mark.slow
def test_prove_thorough_passes():
    assert _prove(["--profile", "thorough", "--quiet"]) == 0
