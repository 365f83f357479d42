"""The committed suite in golden/: verifies (this is the CI run of `golden verify`) and equals a fresh build."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from pldr_ref.fixtures.build import build, total_size, verify
from pldr_ref.fixtures.case import DEFAULT_GOLDEN_DIR, compare_bitwise, compare_output, load_case
from pldr_ref.fixtures.suite import build_suite

GOLDEN = DEFAULT_GOLDEN_DIR
MAX_BYTES = 25_000_000


def test_default_golden_dir_is_the_repository_folder():
    assert Path(__file__).resolve().parents[1] / "golden" == GOLDEN
    assert (GOLDEN / "MANIFEST.json").is_file(), "run `pldr-ref golden build --overwrite` to create the committed suite"


_REBUILD_HINT = ("golden/ does not verify; if the reference changed on purpose, rebuild it with "
                 "`pldr-ref golden build --overwrite` and commit the result:\n")

#: Exact-tier cases whose exact recomputation dominates `golden verify` (each over 6 x the next case: 68 s, 30 s
#: and 26 s of a 222 s verify on a loaded 2-core machine, 56 %): the default run recomputes their float64
#: tier (and checks their files and generator) but leaves their exact recomputation to the slow full verify
#: (:func:`test_committed_suite_verifies_in_full`).  The engines and switches they use stay covered by the other
#: exact cases: the arb engine (model/small, g_mode/*), the mpmath forward (model/tiny_exact, the switch cases).
HEAVY_EXACT = ("g_mode/external_pldrv51_110m_1", "model/switch_rope_table_keras064", "model/medium")
#: The released-code-base profile cases (``model/emulate_*``, 16 % of the default verify's time): their exact
#: recomputation is left to the slow full verify too.  Each profile is a combination of emulation switches whose
#: own ``model/switch_*`` cases keep their exact recomputation here, and tests/test_switches_exact.py evaluates
#: the combined switches in the exact tier in the default run.
EMULATE_PREFIX = "model/emulate_"


def test_committed_suite_verifies():
    """`golden verify` of every committed case (files, hashes, generator, float64 and exact recomputation), the
    exact recomputation of :data:`HEAVY_EXACT` and the ``model/emulate_*`` cases aside (run by the slow full
    verify) and of the cases of :data:`FRESH_SUBSET` (:func:`test_committed_suite_equals_a_fresh_build`
    recomputes those and compares their exact-tier outputs bit for bit, the same check)."""
    from pldr_ref.fixtures.build import verify_case
    from pldr_ref.fixtures.manifest import check_files, read_manifest

    manifest = read_manifest(GOLDEN)
    assert set(HEAVY_EXACT) <= set(manifest["cases"])
    assert sum(name.startswith(EMULATE_PREFIX) for name in manifest["cases"]) >= 6
    assert all(load_case(GOLDEN / name, verify_hashes=False).tier == "exact" for name in HEAVY_EXACT)
    problems = check_files(GOLDEN, manifest)
    for name in sorted(manifest["cases"]):
        exact = not (name in HEAVY_EXACT or name in FRESH_SUBSET or name.startswith(EMULATE_PREFIX))
        problems += verify_case(GOLDEN / name, exact=exact)
    assert problems == [], _REBUILD_HINT + "\n".join(problems[:20])


@pytest.mark.slow
def test_committed_suite_verifies_in_full():
    """``pldr-ref golden verify`` itself on golden/ (every exact recomputation included).  Correctness only; its
    time (target 60 s) is reported by ``benchmarks/bench_time_limits.py``."""
    problems = verify(GOLDEN, progress=None)
    assert problems == [], _REBUILD_HINT + "\n".join(problems[:20])


def test_committed_suite_is_small_enough():
    assert total_size(GOLDEN) < MAX_BYTES


def test_committed_case_list_is_the_default_suite():
    manifest = json.loads((GOLDEN / "MANIFEST.json").read_text())
    expected = {s.name for s in build_suite("default") if s.committed}
    assert set(manifest["cases"]) == expected
    assert not any(not s.committed for s in build_suite("default"))


def _files(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


#: The committed cases the default run builds afresh (the whole suite is rebuilt by the slow
#: :func:`test_committed_suite_equals_a_fresh_build_in_full`): one or more of every group (op, layer, model, cache,
#: g_mode, scoring), tier and exact engine (float64; exact by mpmath; exact by arb), parameter storage (none; all;
#: params scaled), float32-rounding tolerance run, baselines or none, and the switch cases; 1/20 of the full
#: build's time (11 s against 229 s, one run on a loaded 2-core machine).  Every committed case's inputs and
#: spec-level case.json fields are compared without a build by :func:`test_every_committed_case_matches_its_spec`.
FRESH_SUBSET = (
    "op/linear",  # exact (mpmath) op, no parameters; the negative control edits it
    "op/causal_padding_mask",  # float64-tier op
    "op/rope_half_f32_pos4095",  # float32 rounding: the half-float32-ulp tolerance run
    "op/embedding",  # op with stored parameters
    "layer/tiny_l1_mask_finfo_min",  # exact layer with baselines
    "layer/tiny_cached_step",  # float64 layer
    "model/tiny_exact",  # exact (mpmath) forward; the negative control edits it
    "model/tiny_left_pad_finfo_min",  # float64 forward; the negative control edits it
    "g_mode/learned_tiny",  # exact by arb, stored parameters
    "g_mode/random_small",  # exact by arb, parameters regenerated (stored: none)
    "cache/tiny_kv_g",  # cached generation
    "scoring/tiny_blockwise",  # scoring
    "model/rows_s72_cumulative_gram",  # scaled parameters (params.scales)
    "model/switch_position_ids",  # switch case: exact, no baselines
    "cache/switch_hf_generate_left_padded",  # switch case: float64 cached generation through float32
)


def _build_fresh(root: Path, names: tuple[str, ...] | None) -> Path:
    """A fresh build of the committed suite (``names``: only those cases, then the manifest lists only them)."""
    select = None if names is None else (lambda s: s.name in names)
    build(root, select=select, progress=None)
    return root


@pytest.fixture(scope="module")
def fresh(tmp_path_factory) -> Path:
    """A fresh build of :data:`FRESH_SUBSET`."""
    return _build_fresh(tmp_path_factory.mktemp("fresh") / "golden", FRESH_SUBSET)


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


def _rebuild_problems(golden: Path, fresh: Path, names: tuple[str, ...] | None = None) -> list[str]:
    """Differences between the suite ``golden`` and a fresh build ``fresh`` that exceed what a machine explains
    (``names``: compare only those cases, which ``fresh`` holds; None: the whole suite, MANIFEST.json included)."""
    committed = json.loads((golden / "MANIFEST.json").read_text())
    cases = list(committed["cases"]) if names is None else list(names)
    a, b = _files(golden), _files(fresh)
    if names is not None:
        a = {k: v for k, v in a.items() if k.rpartition("/")[0] in names}
        b = {k: v for k, v in b.items() if k != "MANIFEST.json"}
    problems = [f"file list differs: {sorted(set(a) ^ set(b))[:6]}"] if a.keys() != b.keys() else []
    for name in cases:
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
    """A fresh build of :data:`FRESH_SUBSET` reproduces those cases of golden/, as the slow
    :func:`test_committed_suite_equals_a_fresh_build_in_full` checks for the whole suite."""
    problems = _rebuild_problems(GOLDEN, fresh, FRESH_SUBSET)
    assert problems == [], "golden/ is stale: rebuild it (`pldr-ref golden build --overwrite`) and commit it:\n" + (
        "\n".join(problems[:20]))


@pytest.mark.slow
def test_committed_suite_equals_a_fresh_build_in_full(tmp_path):
    """A fresh build on this machine reproduces golden/ (portable: any machine, BLAS, thread count).

    * inputs and parameters (integer SplitMix64 streams) are byte-identical;
    * exact-tier outputs (correctly rounded from mpmath) are bit-identical;
    * float64 outputs agree within each output's stored tolerance (``case.json``), the same check as
      ``golden verify`` (float64 results are not bitwise portable across BLAS builds and CPUs);
    * case.json is equal except the measured values (:data:`MEASURED_META_KEYS`), which keep their structure;
    * the file list and every case name are the same.
    """
    problems = _rebuild_problems(GOLDEN, _build_fresh(tmp_path / "golden", None))
    assert problems == [], "golden/ is stale: rebuild it (`pldr-ref golden build --overwrite`) and commit it:\n" + (
        "\n".join(problems[:20]))


def test_fresh_build_comparison_catches_changes(fresh, tmp_path):
    """Negative control: a float64 output moved by 100 x its tolerance, one ulp on an exact-tier output,
    an edited description and a changed input are each reported."""
    import shutil

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
    text = "\n".join(_rebuild_problems(GOLDEN, copy, FRESH_SUBSET))
    for needle in (f"{f64_case}: {out}", f"{exact_case}: {out}", "op/linear/case.json: differs",
                   "op/linear/inputs.safetensors: differs"):
        assert needle in text, (needle, text)


def _spec_problems(golden: Path, specs) -> list[str]:
    """Differences, found without computing any output, between each spec of ``specs`` and its committed case:
    the bytes of inputs.safetensors and every case.json field the spec alone determines."""
    from pldr_ref.fixtures.format import encode_safetensors, storage_array
    from pldr_ref.fixtures.weights import GENERATOR, trained_g_record

    problems = []
    for spec in specs:
        d = golden / spec.name
        meta = json.loads((d / "case.json").read_text())
        inputs = {k: np.asarray(v) for k, v in spec.inputs().items()}
        stored = {k: storage_array(v) for k, v in inputs.items()}
        if (d / "inputs.safetensors").read_bytes() != encode_safetensors({k: v[0] for k, v in stored.items()}):
            problems.append(f"{spec.name}/inputs.safetensors: differs")
        want = {"name": spec.name, "group": spec.group, "kind": spec.kind, "tier": spec.tier,
                "description": spec.description, "tags": list(spec.tags),
                "config": spec.config.to_dict() if spec.config is not None else None, "args": dict(spec.args),
                "inputs": {k: {"dtype": stored[k][1], "shape": list(v.shape)} for k, v in inputs.items()}}
        problems += [f"{spec.name}/case.json: {k} differs" for k, v in want.items() if json.loads(json.dumps(v))
                     != meta.get(k)]
        pinfo = meta.get("params")
        if (pinfo is None) != (spec.params_seed is None):
            problems.append(f"{spec.name}/case.json: params differs")
        elif pinfo is not None:
            record = {"generator": GENERATOR, "seed": spec.params_seed, "scales": dict(spec.param_scales) or None,
                      "external_G_LM": None if spec.trained_g_layers is None
                      else trained_g_record(spec.trained_g_layers)}
            problems += [f"{spec.name}/case.json: params.{k} differs" for k, v in record.items() if pinfo.get(k) != v]
    return problems


def test_every_committed_case_matches_its_spec():
    """Every committed case (not only :data:`FRESH_SUBSET`) holds the inputs and spec-level case.json fields
    its spec gives now (an edited description, input, config or argument without a rebuild is stale)."""
    specs = [s for s in build_suite("default") if s.committed]
    problems = _spec_problems(GOLDEN, specs)
    assert problems == [], "golden/ is stale: rebuild it (`pldr-ref golden build --overwrite`) and commit it:\n" + (
        "\n".join(problems[:20]))


def test_spec_comparison_catches_changes():
    """Negative control: an edited description, input, argument and parameter seed are each reported."""
    import dataclasses

    specs = {s.name: s for s in build_suite("default") if s.committed}
    linear, tiny = specs["op/linear"], specs["model/tiny_exact"]
    moved = {k: np.asarray(v) for k, v in linear.inputs().items()}
    first = next(k for k, v in moved.items() if v.dtype == np.float64)
    moved[first] = np.nextafter(moved[first], np.inf)
    edited = [dataclasses.replace(linear, description=linear.description + " (edited)", inputs=lambda: moved),
              dataclasses.replace(tiny, args={**tiny.args, "extra": 1}, params_seed=tiny.params_seed + 1)]
    text = "\n".join(_spec_problems(GOLDEN, edited))
    for needle in ("op/linear/inputs.safetensors: differs", "op/linear/case.json: description differs",
                   "model/tiny_exact/case.json: args differs", "model/tiny_exact/case.json: params.seed differs"):
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
    """Another BLAS schedule (1 thread instead of the default) stays within the stored tolerances.

    Only the float64 recomputation is rerun (``exact=False``): the exact tier (mpmath, FLINT's arb) calls no BLAS,
    and the default run's :func:`test_committed_suite_verifies` recomputes it."""
    import os
    import subprocess
    import sys

    code = ("from pldr_ref.fixtures.build import verify_case\n"
            "from pldr_ref.fixtures.case import DEFAULT_GOLDEN_DIR as G\n"
            "import sys; names = ['model/medium', 'model/small', 'g_mode/external_pldrv51_110m_1', 'cache/tiny_kv_g'];"
            "p = [q for n in names for q in verify_case(G / n, exact=False)]; print(p); sys.exit(1 if p else 0)")
    env = {**os.environ, "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    result = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300,
                            cwd=Path(__file__).resolve().parents[1])
    assert result.returncode == 0, result.stdout + result.stderr
