"""The pytest plugin: ``--pldr-backend`` turns golden cases into tests; without it the plugin adds nothing."""

from __future__ import annotations

import os
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PLUGIN = "pldr_ref.harness.pytest_plugin"


def _entry_point_active() -> bool:
    return any(ep.value == PLUGIN for ep in metadata.entry_points(group="pytest11"))


def run_pytest(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    """pytest in an empty folder (so only plugin items or the given files are collected)."""
    plugin = [] if _entry_point_active() else ["-p", PLUGIN]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
           "PLDR_REF_TORCH_THREADS": "1"}
    cmd = [sys.executable, "-m", "pytest", *plugin, "-q", "-p", "no:cacheprovider", "--rootdir", str(tmp_path),
           *args]
    return subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)


def test_without_option_the_plugin_adds_nothing(tmp_path):
    (tmp_path / "test_one.py").write_text("def test_one():\n    assert True\n")
    r = run_pytest(tmp_path, "test_one.py")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "1 passed" in r.stdout


def test_every_case_becomes_a_test_and_unsupported_is_a_visible_skip(tmp_path):
    r = run_pytest(tmp_path, "--pldr-backend", "pldr_ref.backends.reference:ReferenceBackend", "--pldr-dtype",
                   "float64,float32", "--pldr-select", "op/linear$|model/tiny_exact", "-rs")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "2 passed" in r.stdout and "2 skipped" in r.stdout  # the reference backend declares float64 only
    assert "unsupported: dtype float32 not supported" in r.stdout


def test_bad_backend_is_a_usage_error(tmp_path):
    r = run_pytest(tmp_path, "--pldr-backend", "no_such_module:X")
    assert r.returncode == 4, r.stdout + r.stderr  # pytest's usage-error exit code
    assert "cannot import" in r.stdout + r.stderr


@pytest.mark.torch
def test_failing_backend_fails_with_the_diagnosis(tmp_path):
    pytest.importorskip("torch")
    r = run_pytest(tmp_path, "--pldr-backend", "pldr_ref.harness.controls.mutants:NoScaleMutant",
                   "--pldr-dtype", "float64", "--pldr-select", "model/tiny_exact")
    assert r.returncode == 1, r.stdout + r.stderr
    assert "1 failed" in r.stdout and "attention_scores" in r.stdout


def test_not_judgeable_is_a_visible_skip_never_a_pass(tmp_path):
    """A logits-only backend on a case whose bfloat16 logits cannot be judged end to end: the correctly rounded
    golden logits are a skip saying "not_judgeable" (not covered, never a pass); all-zero logits fail a case that
    bfloat16 can judge."""
    (tmp_path / "logits_backends.py").write_text(
        "import numpy as np\n"
        "from pldr_ref.harness.protocol import SWITCHES, Capabilities, every_value\n"
        "from pldr_ref.harness.policy.tolerance import round_to\n\n\n"
        "class Zero:\n"
        "    name = 'zero'\n\n"
        "    def capabilities(self):\n"
        "        return Capabilities(dtypes=('bfloat16',), kinds=('forward',), full_trace=False,\n"
        "                            switches=every_value(*SWITCHES))\n\n"
        "    def run_case(self, case, dtype):\n"
        "        return {'logits': np.zeros(case.outputs['logits'].shape)}\n\n\n"
        "class Golden(Zero):\n"
        "    def run_case(self, case, dtype):\n"
        "        return {'logits': round_to(dtype, case.outputs['logits'])}\n")
    r = run_pytest(tmp_path, "--pldr-backend", "logits_backends:Golden", "--pldr-select",
                   "g_mode/external_pldrv51_110m_1$", "-rs")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "1 skipped" in r.stdout and "not_judgeable" in r.stdout and "passed" not in r.stdout
    r = run_pytest(tmp_path, "--pldr-backend", "logits_backends:Zero", "--pldr-select", "model/tiny_identity_g_short$")
    assert r.returncode == 1, r.stdout + r.stderr
    assert "1 failed" in r.stdout
