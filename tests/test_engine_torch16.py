"""torch in bfloat16 / float16 on the CPU (issue 23): bugs of the 16-bit path are caught at their stage in
those dtypes (the bundled backend's whole-suite 16-bit verdicts are checked by test_harness_torch_backend.py).
Needs torch (skips without it, fails under PLDR_REF_REQUIRE_ENGINES=1)."""

from __future__ import annotations

import pytest
from engine_support import require

require("torch")

from pldr_ref.fixtures.case import DEFAULT_GOLDEN_DIR, load_case  # noqa: E402
from pldr_ref.harness.controls.engine_mutants import ENGINE_MUTATIONS  # noqa: E402
from pldr_ref.harness.validate import validate_case  # noqa: E402

TORCH_MUTATIONS = [m for m in ENGINE_MUTATIONS if m.engine == "torch"]


def test_at_least_five_torch_bugs_per_16_bit_dtype():
    for dtype in ("bfloat16", "float16"):
        assert sum(dtype in m.dtypes for m in TORCH_MUTATIONS) >= 5, dtype


@pytest.mark.parametrize("mutation", TORCH_MUTATIONS, ids=lambda m: m.bug)
def test_torch_bug_is_caught_at_its_stage(mutation):
    case = load_case(DEFAULT_GOLDEN_DIR / mutation.case)
    backend = mutation.build()
    for dtype in mutation.dtypes:
        r = validate_case(backend, case, dtype)
        assert r.status == "fail", (dtype, r.status, r.reason)
        assert r.first_failure["stage"] == mutation.expected_stage, (dtype, r.first_failure)
