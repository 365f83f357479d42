"""Issue 19 item 4: legitimate low-precision backends outside the calibration ensemble never fail.

Default run: a fixed subset -- per dtype one emulated battery backend (a different one per dtype: reordered sums,
the tiled online softmax, tiles of 8 with an online softmax over 8 keys) on the layer cases and the long-row kernel
cases (``model/rows_*``), and torch's own 16-bit matmul kernels on every model, layer and G-mode case but the three
largest (:data:`LARGE_CASES`, as in ``tests/test_harness_torch_backend.py``).  ``-m slow``: every battery
backend (``pldr_ref.harness.controls.battery.battery()``) over the whole default suite in float32, bfloat16 and float16
(also ``python -m pldr_ref.harness.controls.battery``)."""

from __future__ import annotations

import pytest

from pldr_ref.fixtures.case import DEFAULT_GOLDEN_DIR, iter_cases
from pldr_ref.harness.controls.battery import BATTERY_ARITHMETIC, BATTERY_DTYPES, EmulatedBackend, battery, run_battery
from pldr_ref.harness.policy.calibration import ENSEMBLE, TF32_MEMBER
from pldr_ref.harness.validate import FAILING_STATUSES

#: Emulated battery backend of the default run, per dtype (index into BATTERY_ARITHMETIC).
DEFAULT_SUBSET = {"float32": 0, "bfloat16": 1, "float16": 2}
#: The largest model / G-mode cases: the torch kernels run them in the slow whole-battery test only.
LARGE_CASES = ("g_mode/external_pldrv51_110m_1", "model/medium", "model/rows_s1024_learned_g")


@pytest.fixture(scope="module")
def all_cases():
    return list(iter_cases(DEFAULT_GOLDEN_DIR))


def _failures(results):
    return [(name, r.case, r.dtype, r.reason) for name, rs in results.items() for r in rs
            if r.status in FAILING_STATUSES]


def test_battery_is_large_and_outside_the_ensemble():
    calib = {tuple(v for k, v in vars(m).items() if k != "name") for m in (*ENSEMBLE, TF32_MEMBER)}
    for a in BATTERY_ARITHMETIC:
        assert tuple(v for k, v in vars(a).items() if k != "name") not in calib, a.name
    assert len(battery(include_torch=True)) >= 12
    names = {a.name for a in BATTERY_ARITHMETIC}
    assert {"reordered-sums", "tiled-online-softmax"} <= names


@pytest.mark.parametrize("dtype", BATTERY_DTYPES)
def test_default_subset_of_the_battery_never_fails(all_cases, dtype):
    cases = [c for c in all_cases if c.group in ("model", "layer", "g_mode")]
    emulated = [c for c in cases if c.group == "layer" or c.name.startswith("model/rows_")]
    results = run_battery([EmulatedBackend(BATTERY_ARITHMETIC[DEFAULT_SUBSET[dtype]])], emulated, [dtype])
    if dtype != "float32":
        pytest.importorskip("torch")
        from pldr_ref.harness.controls.battery import torch_native_matmul_backend

        assert set(LARGE_CASES) <= {c.name for c in cases}
        small = [c for c in cases if c.name not in LARGE_CASES]
        results.update(run_battery([torch_native_matmul_backend()], small, [dtype]))
    assert not _failures(results)
    assert all(any(r.status == "pass" for r in rs) for rs in results.values())


@pytest.mark.slow
def test_whole_battery_passes_the_whole_suite_in_every_dtype(all_cases):
    results = run_battery(battery(include_torch=True), all_cases, BATTERY_DTYPES)
    assert not _failures(results)
