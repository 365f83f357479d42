"""The committed suite in golden/: verifies (this is the CI run of `golden verify`) and equals a fresh build."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from pldr_ref.fixtures.build import build, total_size, verify
from pldr_ref.fixtures.case import DEFAULT_GOLDEN_DIR, compare_bitwise, compare_output, load_case
from pldr_ref.fixtures.manifest import provenance
from pldr_ref.fixtures.suite import build_suite

GOLDEN = DEFAULT_GOLDEN_DIR
MAX_BYTES = 25_000_000


def test_default_golden_dir_is_the_repository_folder():
    assert Path(__file__).resolve().parents[1] / "golden" == GOLDEN
    assert (GOLDEN / "MANIFEST.json").is_file(), "run `pldr-ref golden build` to create the committed suite"


def test_committed_suite_verifies():
    t0 = time.perf_counter()
    problems = verify(GOLDEN, progress=None)
    assert problems == [], ("golden/ does not verify; if the reference changed on purpose, rebuild it with "
                            "`pldr-ref golden build` and commit the result:\n" + "\n".join(problems[:20]))
    assert time.perf_counter() - t0 < 60


def test_committed_suite_is_small_enough():
    assert total_size(GOLDEN) < MAX_BYTES


def test_committed_case_list_is_the_default_suite():
    manifest = json.loads((GOLDEN / "MANIFEST.json").read_text())
    expected = {s.name for s in build_suite("default") if s.committed}
    assert set(manifest["cases"]) == expected
    assert not any(not s.committed for s in build_suite("default"))


def _files(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.fixture(scope="module")
def fresh(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("fresh") / "golden"
    build(root, progress=None)
    return root


@pytest.mark.parametrize("same_environment", [True, False])
def test_committed_suite_equals_a_fresh_build(fresh, same_environment):
    """Same environment as the generator: every file, MANIFEST.json included, is byte-identical.

    Another environment (NumPy, BLAS, platform): inputs, parameters and every exact-tier output are
    byte-identical (they do not depend on the machine) and float64 outputs agree within their tolerance.
    """
    committed = json.loads((GOLDEN / "MANIFEST.json").read_text())
    a, b = _files(GOLDEN), _files(fresh)
    assert a.keys() == b.keys()
    if same_environment:
        if committed["provenance"] != provenance():
            pytest.skip("the committed suite was generated in another environment; the other branch checks it")
        assert [k for k in a if a[k] != b[k]] == [], "golden/ is stale: run `pldr-ref golden build` and commit it"
        return
    for name in committed["cases"]:
        old, new = load_case(GOLDEN / name), load_case(fresh / name)
        for fname in ("inputs.safetensors", "params.safetensors"):
            key = f"{name}/{fname}"
            if key in a:
                assert a[key] == b[key], key
        for out, want in old.outputs.items():
            if old.tier == "exact":
                assert compare_bitwise(out, new.outputs[out], want) is None, (name, out)
            else:
                atol, rtol = old.output_tolerance(out)
                assert compare_output(out, new.outputs[out], want, atol, rtol) is None, (name, out)


@pytest.mark.slow
def test_full_suite_on_demand_case(tmp_path):
    """``--suite full`` adds the v510-110m shape at S = 1024, built on demand and never committed."""
    status = build(tmp_path, "full", select=lambda s: not s.committed, progress=None)
    assert status == {"model/v510_110m_s1024": "new"}
    case = load_case(tmp_path / "model/v510_110m_s1024")
    assert case.outputs["logits"].shape == (1, 1024, 32000)
    assert case.meta["params"]["stored"] == "none"


def test_float64_cases_verify_with_one_blas_thread():
    """Another BLAS schedule (1 thread instead of the default) stays within the stored tolerances."""
    import os
    import subprocess
    import sys

    code = ("from pldr_ref.fixtures.build import verify_case\n"
            "from pldr_ref.fixtures.case import DEFAULT_GOLDEN_DIR as G\n"
            "import sys; names = ['model/medium', 'model/small', 'g_mode/external_pldrv51_110m_1', 'cache/tiny_kv_g'];"
            "p = [q for n in names for q in verify_case(G / n)]; print(p); sys.exit(1 if p else 0)")
    env = {**os.environ, "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    result = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300,
                            cwd=Path(__file__).resolve().parents[1])
    assert result.returncode == 0, result.stdout + result.stderr
