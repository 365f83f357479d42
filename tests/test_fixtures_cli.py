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
    out = tmp_path / "suite"
    assert _run(["golden", "build", "--out", str(out), "--only", "op/linear", "--quiet"]) == 0
    assert _run(["golden", "show", "op/linear", "--suite-dir", str(out)]) == 0
    shown = capsys.readouterr().out
    assert "weight" in shown and "atol" in shown
    assert _run(["golden", "verify", "--suite-dir", str(out), "--quiet"]) == 0
    assert "verified" in capsys.readouterr().out
    assert _run(["golden", "list", "--table", "--suite-dir", str(out)]) == 0
    assert "`op/linear`" in capsys.readouterr().out
    (out / "op/linear/inputs.safetensors").write_bytes(b"x")
    assert _run(["golden", "verify", "--suite-dir", str(out), "--quiet"]) == 1
    assert "inputs.safetensors" in capsys.readouterr().out
    assert _run(["golden", "show", "op/nope", "--suite-dir", str(out)]) == 2


def test_deprecated_dir_spellings_still_read_the_given_suite(tmp_path, capsys):
    out = tmp_path / "suite"
    assert _run(["golden", "build", "--out", str(out), "--only", "op/linear", "--quiet"]) == 0
    assert _run(["golden", "show", "op/linear", "--dir", str(out)]) == 0
    assert _run(["golden", "verify", str(out), "--quiet"]) == 0
    assert f"golden suite {out}: verified" in capsys.readouterr().out
    # negative control: the committed suite has no such folder name, so an ignored --dir would show golden/
    assert _run(["golden", "show", "op/linear", "--dir", str(tmp_path / "absent")]) == 2


def test_build_refuses_the_committed_suite_without_overwrite(capsys):
    from pldr_ref.fixtures.case import DEFAULT_GOLDEN_DIR

    before = sorted((p, p.stat().st_mtime_ns) for p in DEFAULT_GOLDEN_DIR.rglob("*"))
    assert _run(["golden", "build", "--only", "op/linear", "--quiet"]) == 2
    assert _run(["golden", "build", "--out", str(DEFAULT_GOLDEN_DIR), "--quiet", "--only", "op/linear"]) == 2
    assert "--overwrite" in capsys.readouterr().err
    assert sorted((p, p.stat().st_mtime_ns) for p in DEFAULT_GOLDEN_DIR.rglob("*")) == before


def test_top_level_help_lists_subcommands_and_the_flag_convention(capsys):
    from pldr_ref.cli import SUBCOMMANDS, build_parser

    with pytest.raises(SystemExit):
        build_parser().parse_args(["--help"])
    text = capsys.readouterr().out
    for name in SUBCOMMANDS:
        assert f"    {name} " in text, name
    for flag in ("--suite-dir DIR", "--suite NAME", "--out PATH", "--quiet"):
        assert flag in text, flag


def test_unknown_suite_is_rejected():
    with pytest.raises(SystemExit):
        _run(["golden", "build", "--suite", "huge"])
