"""Issue 19 item 1: allowances calibrated on an ensemble of legitimate low-precision implementations, bit for bit
the same on every machine, BLAS and thread count; the emulated arithmetic does what it says (negative controls)."""

from __future__ import annotations

import hashlib
import json

import numpy as np

from pldr_ref.fixtures.case import DEFAULT_GOLDEN_DIR, load_case
from pldr_ref.harness.policy import arithmetic as ar
from pldr_ref.harness.policy import calibration, ensemble
from pldr_ref.harness.policy.calibration import ENSEMBLE, TF32_MEMBER, members, robust_stats, round_up
from pldr_ref.harness.policy.tolerance import ErrorStats, case_statistics


def test_ensemble_has_the_required_variety():
    for dtype in ("float32", "bfloat16", "float16"):
        ms = members(dtype)
        assert len(ms) >= 8 and len({m.name for m in ms}) == len(ms)
        assert len(set(dataclass_values(m) for m in ms)) == len(ms), "two members compute the same way"
    ms = ENSEMBLE
    assert {16, 64, 256} <= {m.tile for m in ms}
    assert {"float32", "storage"} <= {m.accumulate for m in ms}
    assert {"forward", "reverse"} <= {m.order for m in ms}
    assert any(m.softmax == "online" for m in ms) and any(m.softmax == "two_pass" for m in ms)
    assert any(m.exp2 for m in ms) and any(not m.exp2 for m in ms)
    assert any(m.reciprocal for m in ms) and any(not m.reciprocal for m in ms)
    assert any(m.fused for m in ms) and any(not m.fused for m in ms)
    assert TF32_MEMBER.tf32 and TF32_MEMBER in members("float32") and TF32_MEMBER not in members("bfloat16")


def dataclass_values(m):
    return tuple(v for k, v in vars(m).items() if k != "name")


def _emulated(arith, dtype, method, *args):
    return getattr(ar.EmulatedOps(arith, dtype), method)(*args)


def test_matmul_order_and_tiles_are_explicit():
    """Integers: every order and tile gives the exact sum; a sum that float32 cannot hold in order shows the
    order (1 + 2^-24 + 2^-24 in forward order loses both halves, in reverse order keeps them)."""
    rng = np.random.default_rng(0)
    a = rng.integers(-8, 8, (3, 40)).astype(float)
    b = rng.integers(-8, 8, (40, 5)).astype(float)
    for arith in (ar.Arithmetic("s"), ar.Arithmetic("t16", tile=16), ar.Arithmetic("r", order="reverse", tile=7)):
        np.testing.assert_array_equal(_emulated(arith, "float32", "matmul", a, b), a @ b)
    x = np.array([[1.0, 2.0**-24, 2.0**-24]])
    ones = np.ones((3, 1))
    fwd = _emulated(ar.Arithmetic("f"), "float32", "matmul", x, ones)
    rev = _emulated(ar.Arithmetic("r", order="reverse"), "float32", "matmul", x, ones)
    assert fwd[0, 0] == 1.0 and rev[0, 0] == 1.0 + 2.0**-23


def test_accumulation_in_the_storage_dtype_is_coarser():
    """1000 terms of 1/128 summed in bfloat16 stall once the spacing exceeds twice the term (the negative control
    of the storage accumulator); float32 accumulation and tiles of 16 in bfloat16 stay close."""
    x = np.full((1, 1000), 2.0**-7)
    ones = np.ones((1000, 1))
    f32 = _emulated(ar.Arithmetic("f"), "bfloat16", "matmul", x, ones)[0, 0]
    bf = _emulated(ar.Arithmetic("b", accumulate="storage"), "bfloat16", "matmul", x, ones)[0, 0]
    tiled = _emulated(ar.Arithmetic("b", accumulate="storage", tile=16), "bfloat16", "matmul", x, ones)[0, 0]
    assert f32 == 1000 * 2.0**-7 and bf == 2.0 and abs(tiled - f32) < 0.05 * f32


def test_online_softmax_matches_two_pass_and_masked_rows():
    rng = np.random.default_rng(1)
    lg = rng.normal(size=(1, 2, 3, 100)) * 4
    lg[0, 0, 0, :] = -np.inf  # fully masked row: zeros, the FlashAttention convention
    two = _emulated(ar.Arithmetic("t"), "float32", "attention_weights", lg, None)
    onl = _emulated(ar.Arithmetic("o", softmax="online", softmax_tile=16), "float32", "attention_weights", lg, None)
    from pldr_ref.attention import masked_softmax

    ref = masked_softmax(lg.copy())
    assert np.all(two[0, 0, 0] == 0) and np.all(onl[0, 0, 0] == 0)
    assert np.max(np.abs(two - ref)) < 1e-6 and np.max(np.abs(onl - ref)) < 1e-6
    assert not np.array_equal(two, onl)  # the rescaled running sum rounds differently


def test_tf32_rounding_keeps_eleven_bits():
    x = np.array([1.0 + 2.0**-10 + 2.0**-11, 1.0 + 2.0**-11, 1.0 + 3 * 2.0**-11, -3.0])
    np.testing.assert_array_equal(ar.round_to_dtype(x, "tf32"), [1.0 + 2.0**-9, 1.0, 1.0 + 2.0**-9, -3.0])


def test_emulated_ops_are_passed_and_leave_the_float64_run_alone():
    """A forward with a member's ops gives other logits than float64, and the float64 forward run after it is
    bitwise the one run before (nothing was swapped); negative control: the ops are not the float64 ones."""
    from core_support import model_params, small_config, token_ids

    from pldr_ref.model import forward

    params = model_params(small_config())
    ids = token_ids(params.config, 2, 6)
    before = forward(params, ids).logits
    emulated = forward(params, ids, ops=ar.EmulatedOps(ENSEMBLE[1], "bfloat16")).logits
    after = forward(params, ids).logits
    assert not np.array_equal(emulated, before)
    assert np.array_equal(after.view(np.uint64), before.view(np.uint64))


def test_robust_statistic_is_the_median_not_the_max():
    per = [ErrorStats(1.0, 0.01, 0.001, 0.002, 10)] * 6 + [ErrorStats(100.0, 5.0, 1.0, 1.0, 10)] * 3
    s = robust_stats(per)
    assert (s.max_abs, s.rms_rel, s.offset, s.gain) == (1.0, 0.01, 0.001, 0.002)
    assert robust_stats([ErrorStats(None)] * 5 + per[:4]) is None  # most members non-finite
    assert round_up(0.012301) == 0.013 and round_up(0.0) == 0.0 and round_up(7.0) == 7.0


def test_statistic_covers_every_choice_group_not_only_the_majority():
    """Members accumulating in the dtype land 5x from the float32-accumulating majority: the statistic is that
    group's median (a plain median over all members would take the majority's value); one member's outlier
    inside a group does not decide it (issue 19: the whole battery's false positives)."""
    from pldr_ref.harness.policy.ensemble import MIN_GROUP, choice_groups

    ms = members("bfloat16")
    groups = dict(choice_groups("bfloat16"))
    storage = groups["accumulate='storage'"]
    assert len(storage) >= MIN_GROUP and all(ms[i].accumulate == "storage" for i in storage)
    assert all(len(idx) >= MIN_GROUP for idx in groups.values())
    assert not any(i for label, idx in groups.items() if label != "all" for i in idx if not ms[i].internal)

    def stats(rms_by_member):
        return [ErrorStats(r, r, 0.0, 0.0, 100) for r in rms_by_member]

    per = [0.01 if i in storage else 0.002 for i in range(len(ms))]
    assert robust_stats(stats(per), "bfloat16").rms_rel == 0.01
    assert robust_stats(stats(per)).rms_rel == 0.002  # without the groups: the majority's median (the old policy)
    one_outlier = [0.5 if i == storage[0] else 0.002 for i in range(len(ms))]
    assert robust_stats(stats(one_outlier), "bfloat16").rms_rel == 0.002
    # the GPU default arithmetic leaves the dtype-accumulating members out (issue 28)
    assert robust_stats(stats(per), "bfloat16", "float32-accumulate").rms_rel == 0.002


def _allowance_numbers(case, dtype):
    """The ensemble statistics computed afresh (neither the committed store nor a memo is read)."""
    ensemble._STORE = {}
    ensemble._MEMO.clear()
    stats, _ = case_statistics(case, dtype)
    ensemble._STORE = None
    return _numbers(stats)


def _numbers(stats):
    """{output: {arithmetic: [max, rms, |offset|, |gain|]}} of ``case_statistics``."""
    return {k: {key: None if s is None else [s.max_abs, s.rms_rel, s.offset, s.gain] for key, s in v.by_arithmetic}
            for k, v in sorted(stats.items()) if v is not None}


#: sha256 of the JSON of the ensemble statistics of layer/tiny_l1_mask_ideal in bfloat16 (a regression anchor for
#: machine independence: any machine, BLAS, thread count and ml_dtypes version must reproduce it).
TINY_LAYER_BF16_SHA256 = "d169c6d8ed1c6fd8a5fca4e5ed07b12ed7ba208d5744b2d5814097b8f2c2d53e"


_PRINT_NUMBERS = """
import json, sys
from pldr_ref.fixtures.case import DEFAULT_GOLDEN_DIR, load_case
from pldr_ref.harness.policy import ensemble
from pldr_ref.harness.policy.tolerance import case_statistics
ensemble._STORE = {}
stats, _ = case_statistics(load_case(DEFAULT_GOLDEN_DIR / "layer/tiny_l1_mask_ideal"), "bfloat16")
numbers = {k: {key: None if s is None else [s.max_abs, s.rms_rel, s.offset, s.gain] for key, s in v.by_arithmetic}
           for k, v in sorted(stats.items()) if v is not None}
print(json.dumps(numbers, sort_keys=True))
"""


def test_calibration_is_bit_identical_across_thread_counts_and_runs():
    """The same statistics in this process, in fresh processes with one BLAS / OpenMP thread and with four, and
    the stored hash of them."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    case = load_case(DEFAULT_GOLDEN_DIR / "layer/tiny_l1_mask_ideal")
    here = json.dumps(_allowance_numbers(case, "bfloat16"), sort_keys=True)
    root = str(Path(__file__).resolve().parents[1])
    children = {}
    for threads in ("1", "4"):  # both processes at once: the wall time of one
        env = {**os.environ, "OMP_NUM_THREADS": threads, "OPENBLAS_NUM_THREADS": threads, "MKL_NUM_THREADS": threads,
               "PLDR_REF_THREADS": threads, "PYTHONPATH": os.pathsep.join([root, os.environ.get("PYTHONPATH", "")])}
        children[threads] = subprocess.Popen([sys.executable, "-c", _PRINT_NUMBERS], env=env, stdout=subprocess.PIPE,
                                             stderr=subprocess.PIPE, text=True)
    try:
        outputs = {threads: child.communicate(timeout=600) for threads, child in children.items()}
    finally:
        for child in children.values():
            child.kill()
    for threads, (out, err) in outputs.items():
        assert children[threads].returncode == 0, (threads, err)
        assert out.strip() == here, threads
    digest = hashlib.sha256(here.encode()).hexdigest()
    assert digest == TINY_LAYER_BF16_SHA256, digest


def test_float32_register_cast_is_pldr_refs_own_rounding():
    """The accumulation loops round to float32 with NumPy's IEEE cast; it is bit-identical to
    pldr_ref.format_rounding (normals, subnormals, midpoints, overflow, signed zeros)."""
    from pldr_ref.format_rounding import FLOAT32, round_to_format

    rng = np.random.default_rng(3)
    x = np.concatenate([rng.standard_normal(20000) * 10.0 ** rng.integers(-45, 39, 20000),
                        np.ldexp(1.0 + np.arange(1, 64) * 2.0**-24, -130), [0.0, -0.0, 3.5e38, -3.5e38, 1e-46]])
    mid = np.ldexp(1.0 + (2 * rng.integers(0, 2**23, 2000) + 1) * 2.0**-24, rng.integers(-140, 120, 2000))
    x = np.concatenate([x, mid, -mid])
    got = ar._f32(x)
    np.testing.assert_array_equal(got, round_to_format(x, FLOAT32))
    assert np.array_equal(np.signbit(got), np.signbit(round_to_format(x, FLOAT32)))


def test_committed_store_covers_the_suite_and_matches_a_fresh_calibration():
    """Every committed case below float64 has its statistics in pldr_ref/harness/policy/calibration.json (of this
    ensemble's fingerprint), and a fresh calibration of one case reproduces them exactly."""
    import json as _json

    from pldr_ref.fixtures.case import iter_cases
    from pldr_ref.fixtures.runners import RUNNERS
    from pldr_ref.harness.policy.tolerance import beyond_float32, inputs_beyond

    doc = _json.loads(calibration.CACHE_FILE.read_text(encoding="utf-8"))
    assert doc["fingerprint"] == calibration.fingerprint(), \
        "stale: python -m pldr_ref.harness.policy.calibration --write"
    dtypes = ("float32", "bfloat16", "float16")
    missing = [c.name for c in iter_cases(DEFAULT_GOLDEN_DIR)
               if c.kind in RUNNERS and not beyond_float32(c)
               and set(doc["cases"].get(calibration.case_digest(c), {}))
               != {dt for dt in dtypes if not inputs_beyond(c, dt)}]
    assert not missing, f"not in the store: {missing[:5]} (python -m pldr_ref.harness.policy.calibration --write)"
    case = load_case(DEFAULT_GOLDEN_DIR / "model/tiny_identity_g_short")
    fresh = _allowance_numbers(case, "float16")
    stored = doc["cases"][calibration.case_digest(case)]["float16"]
    stored = {k: ensemble._decode(v, "float16") for k, v in stored.items() if isinstance(v, list) and ":" not in k}
    assert _numbers(stored) == fresh


def test_inputs_beyond_the_dtype_range_leave_the_case_not_applicable():
    """op/layer_norm_large_offset's rows of 1e6 overflow float16 (largest 65504): a float16 backend is handed inf
    and its NaN is legitimate, so the case is not applicable in float16 (no allowance, no gross error); in bfloat16
    the same rows are representable and the case keeps its statistics (negative control)."""
    from pldr_ref.harness.policy.tolerance import case_statistics, inputs_beyond

    case = load_case(DEFAULT_GOLDEN_DIR / "op/layer_norm_large_offset")
    assert inputs_beyond(case, "float16") == "input 'x'"
    assert inputs_beyond(case, "bfloat16") is None
    stats, why = case_statistics(case, "float16")
    assert stats == {} and "beyond the float16 range" in why
    stats, _ = case_statistics(case, "bfloat16")
    assert stats
