"""Packaging of the engines (issue 23): the core package never imports an engine, the extras are declared,
and the CI switch turns a missing extra into a failure."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from engine_support import REQUIRE_ENV, missing, require

ROOT = Path(__file__).resolve().parent.parent
ENGINE_MODULES = ("jax", "jaxlib", "onnx", "onnxruntime", "triton", "numba")


def test_core_and_cli_do_not_import_engines():
    code = ("import sys, pldr_ref, pldr_ref.cli, pldr_ref.harness.cli, pldr_ref.export.cli; "
            "pldr_ref.cli.build_parser(); "
            f"print(sorted(m for m in {ENGINE_MODULES!r} if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    assert out.stdout.strip() == "[]", out.stdout


def test_extras_are_declared():
    tomllib = pytest.importorskip("tomllib", reason="tomllib is in the standard library from Python 3.11")
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    for name, module in (("jax", "jax"), ("onnx", "onnxruntime"), ("triton", "triton"), ("fast", "numba")):
        assert any(req.startswith(module) for req in extras[name]), (name, extras[name])


def test_missing_extra_skips_or_fails_under_the_ci_switch(monkeypatch):
    monkeypatch.setitem(sys.modules, "jax", None)  # `import jax` raises ImportError
    assert "jax" in missing("jax")
    monkeypatch.delenv(REQUIRE_ENV, raising=False)
    with pytest.raises(pytest.skip.Exception):
        require("jax")
    monkeypatch.setenv(REQUIRE_ENV, "1")
    with pytest.raises(pytest.fail.Exception, match=REQUIRE_ENV):
        require("jax")
