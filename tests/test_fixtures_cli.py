"""``pldr-ref golden`` subcommands through the registered parser."""

from __future__ import annotations

import argparse

import pytest

from pldr_ref.fixtures.cli import register
from pldr_ref.fixtures.suite import build_suite


def _run(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="pldr-ref")
    register(parser.add_subparsers(dest="command"))
    args = parser.parse_args(argv)
    return args.func(args)


def test_list_shows_every_case(capsys):
    assert _run(["golden", "list"]) == 0
    out = capsys.readouterr().out
    for spec in build_suite("default"):
        assert spec.name in out
    assert "v510_110m_s1024" not in out
    assert _run(["golden", "list", "--suite", "full"]) == 0
    assert "v510_110m_s1024" in capsys.readouterr().out


def test_show_and_verify_and_build(tmp_path, capsys):
    assert _run(["golden", "build", "--out", str(tmp_path), "--only", "op/linear", "--quiet"]) == 0
    assert _run(["golden", "show", "op/linear", "--dir", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "weight" in out and "atol" in out
    assert _run(["golden", "verify", str(tmp_path), "--quiet"]) == 0
    assert "verified" in capsys.readouterr().out
    (tmp_path / "op/linear/inputs.safetensors").write_bytes(b"x")
    assert _run(["golden", "verify", str(tmp_path), "--quiet"]) == 1
    assert "inputs.safetensors" in capsys.readouterr().out
    assert _run(["golden", "show", "op/nope", "--dir", str(tmp_path)]) == 1


def test_unknown_suite_is_rejected():
    with pytest.raises(SystemExit):
        _run(["golden", "build", "--suite", "huge"])
