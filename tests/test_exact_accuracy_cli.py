"""``pldr-ref accuracy`` subcommand: registration contract, deterministic output, option validation."""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from pldr_ref.exact import accuracy

REPO = Path(__file__).resolve().parents[1]
ARGS = ["accuracy", "--configs", "tiny,tiny-v510-quirks", "--seeds", "0", "--seq-len", "4"]


def run_cli(argv: list[str]) -> tuple[int, str]:
    parser = argparse.ArgumentParser(prog="pldr-ref")
    sub = parser.add_subparsers(dest="command")
    accuracy.register(sub)
    args = parser.parse_args(argv)
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        code = args.func(args)
    return code, buf.getvalue()


def test_register_and_deterministic_report() -> None:
    code, first = run_cli(ARGS)
    assert code == 0
    for stage in accuracy.STAGE_ORDER:
        assert f"| {stage} |" in first
    assert "### tiny:" in first and "### all configs pooled" in first and "seeds: 0" in first
    # deterministic: the same output from a second run, in its own process through python -m (the command
    # documented in docs/accuracy.md)
    env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    res = subprocess.run([sys.executable, "-m", "pldr_ref.exact.accuracy", *ARGS[1:]], capture_output=True, text=True,
                         env=env, timeout=120, check=True)
    assert res.stdout == first


def test_stage_errors_detect_a_wrong_tier() -> None:
    exact = {"x": np.array([1.0, 2.0, 0.0])}
    same = accuracy.stage_errors({"x": exact["x"].copy()}, exact)["x"]
    assert same["ulp"].max() == 0 and same["normwise"][0] == 0
    # negative control: one ulp off in one entry is seen
    off = accuracy.stage_errors({"x": np.array([1.0, np.nextafter(2.0, 3.0), 0.0])}, exact)["x"]
    assert off["ulp"].max() == 1 and off["rel"].max() == pytest.approx(2**-52)


def test_bad_options() -> None:
    with pytest.raises(SystemExit):
        run_cli(["accuracy", "--configs", "nope"])
    with pytest.raises(SystemExit):
        run_cli(["accuracy", "--seeds", "a,b"])
    assert run_cli(["accuracy", "--seq-len", "0"])[0] == 2
    with pytest.raises(ValueError, match="unknown accuracy config"):
        accuracy.named_config("huge")
