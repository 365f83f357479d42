"""The committed suite in golden/: verifies (this is the CI run of `golden verify`) and equals a fresh build."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pldr_ref.fixtures.build import build, total_size, verify
from pldr_ref.fixtures.case import DEFAULT_GOLDEN_DIR, compare_bitwise, compare_output, load_case
from pldr_ref.fixtures.suite import build_suite

GOLDEN = DEFAULT_GOLDEN_DIR
MAX_BYTES = 25_000_000


def test_default_golden_dir_is_the_repository_folder():
    assert Path(__file__).resolve().parents[1] / "golden" == GOLDEN
    assert (GOLDEN / "MANIFEST.json").is_file(), "run `pldr-ref golden build --overwrite` to create the committed suite"


def test_committed_suite_verifies():
    """Correctness only; its time (target 60 s) is reported by ``benchmarks/bench_time_limits.py``."""
    problems = verify(GOLDEN, progress=None)
    assert problems == [], ("golden/ does not verify; if the reference changed on purpose, rebuild it with "
                            "`pldr-ref golden build --overwrite` and commit the result:\n" + "\n".join(problems[:20]))


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


#: case.json keys whose values are measured on the building machine: tolerances (from perturbation runs,
#: rounded up to a power of ten, so a BLAS or CPU change can move them by a decade) and the low-precision
#: baselines (informational error statistics).  Every other key must be equal.
MEASURED_META_KEYS = ("tolerance", "baselines")
#: Low-precision baseline statistics (3 significant digits of a bfloat16 / float16 / float32 run) may move
#: when a float64 input differs by an ulp and a rounding flips: compared within this factor.
BASELINE_FACTOR = 2.0


def _same_structure(a, b, where: str) -> list[str]:
    """Differences in keys (recursively) between two JSON values; leaf values are not compared."""
    if isinstance(a, dict) and isinstance(b, dict):
        if a.keys() != b.keys():
            return [f"{where}: keys {sorted(set(a) ^ set(b))}"]
        return [d for k in a for d in _same_structure(a[k], b[k], f"{where}.{k}")]
    return [] if isinstance(a, dict) == isinstance(b, dict) else [f"{where}: {a!r} vs {b!r}"]


def _rebuild_problems(golden: Path, fresh: Path) -> list[str]:
    """Differences between the suite ``golden`` and a fresh build ``fresh`` that exceed what a machine explains."""
    committed = json.loads((golden / "MANIFEST.json").read_text())
    a, b = _files(golden), _files(fresh)
    problems = [f"file list differs: {sorted(set(a) ^ set(b))[:6]}"] if a.keys() != b.keys() else []
    for name in committed["cases"]:
        old, new = load_case(golden / name), load_case(fresh / name, verify_hashes=False)
        for fname in ("inputs.safetensors", "params.safetensors"):
            key = f"{name}/{fname}"
            if key in a and a[key] != b.get(key):
                problems.append(f"{key}: differs")
        stable = {k: v for k, v in old.meta.items() if k not in MEASURED_META_KEYS}
        if stable != {k: v for k, v in new.meta.items() if k not in MEASURED_META_KEYS}:
            problems.append(f"{name}/case.json: differs outside {MEASURED_META_KEYS}")
        for key in MEASURED_META_KEYS:
            problems += _same_structure(old.meta.get(key), new.meta.get(key), f"{name}/case.json {key}")
        for prec, per in (old.meta.get("baselines") or {}).items():
            for out, stats in per.items():
                for stat, want in stats.items():
                    got = new.meta["baselines"][prec][out][stat]
                    if isinstance(want, float) and want > 0 and not (
                            want / BASELINE_FACTOR <= got <= want * BASELINE_FACTOR):
                        problems.append(f"{name} baseline {prec}/{out}/{stat}: {got} vs committed {want}")
        for out, want in old.outputs.items():
            if old.tier == "exact":
                msg = compare_bitwise(out, new.outputs[out], want)
            else:
                atol, rtol = old.output_tolerance(out)
                msg = compare_output(out, new.outputs[out], want, atol, rtol)
            if msg:
                problems.append(f"{name}: {msg}")
    return problems


def test_committed_suite_equals_a_fresh_build(fresh):
    """A fresh build on this machine reproduces golden/ (portable: any machine, BLAS, thread count).

    * inputs and parameters (integer SplitMix64 streams) are byte-identical;
    * exact-tier outputs (correctly rounded from mpmath) are bit-identical;
    * float64 outputs agree within each output's stored tolerance (``case.json``), the same check as
      ``golden verify`` (float64 results are not bitwise portable across BLAS builds and CPUs);
    * case.json is equal except the measured values (:data:`MEASURED_META_KEYS`), which keep their structure;
    * the file list and every case name are the same.
    """
    problems = _rebuild_problems(GOLDEN, fresh)
    assert problems == [], "golden/ is stale: rebuild it (`pldr-ref golden build --overwrite`) and commit it:\n" + (
        "\n".join(problems[:20]))


def test_fresh_build_comparison_catches_changes(fresh, tmp_path):
    """Negative control: a float64 output moved by 100 x its tolerance, one ulp on an exact-tier output,
    an edited description and a changed input are each reported."""
    import shutil

    import numpy as np

    from pldr_ref.fixtures.format import canonical_json, encode_safetensors, load_tensors, storage_array

    copy = tmp_path / "golden"
    shutil.copytree(fresh, copy)
    f64_case, exact_case = "model/tiny_left_pad_finfo_min", "model/tiny_exact"
    case = load_case(GOLDEN / f64_case)
    assert case.tier != "exact" and load_case(GOLDEN / exact_case).tier == "exact"
    out = "logits"
    atol, rtol = case.output_tolerance(out)

    def edit_outputs(name: str, change) -> None:
        path = copy / name / "outputs.safetensors"
        tensors = {k: storage_array(v)[0] for k, v in load_tensors(path).items()}
        tensors[out] = change(tensors[out])
        path.write_bytes(encode_safetensors(tensors))

    edit_outputs(f64_case, lambda y: y + 100 * (atol + rtol * np.max(np.abs(y))))
    edit_outputs(exact_case, lambda y: np.nextafter(y, np.inf))
    meta = json.loads((copy / "op/linear/case.json").read_text())
    meta["description"] += " (edited)"
    (copy / "op/linear/case.json").write_bytes(canonical_json(meta))
    inputs = copy / "op/linear/inputs.safetensors"
    inputs.write_bytes(inputs.read_bytes()[:-1] + bytes([inputs.read_bytes()[-1] ^ 1]))
    text = "\n".join(_rebuild_problems(GOLDEN, copy))
    for needle in (f"{f64_case}: {out}", f"{exact_case}: {out}", "op/linear/case.json: differs",
                   "op/linear/inputs.safetensors: differs"):
        assert needle in text, (needle, text)


@pytest.mark.slow
def test_full_suite_on_demand_case(tmp_path):
    """``--suite full`` adds the v510-110m shape at S = 1024, built on demand and never committed."""
    status = build(tmp_path, "full", select=lambda s: s.name == "model/v510_110m_s1024", progress=None)
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
