"""Acceptance of the low-precision verdicts (issues 11 and 19): logits-only backends on every forward case.

Issue 19 item 3, per dtype (``python -m pldr_ref.harness.controls.verdict_power`` prints the same numbers): at least
:data:`MIN_JUDGEABLE` forward cases judgeable; the golden logits rounded to the dtype pass every judgeable case;
all-zero logits and 3 %-noise logits fail at least 90 % of them.  A not-judgeable case is "not covered": never a
pass, never a failure of the run.  The additive left-padded model case is judged below float64 on its representable
part (``pldr_ref.harness.verdict.representable``)."""

from __future__ import annotations

import pytest

from pldr_ref.fixtures.case import DEFAULT_GOLDEN_DIR, iter_cases
from pldr_ref.harness.controls.verdict_power import GoldenLogits, NoisyLogits, ZeroLogits, measure
from pldr_ref.harness.protocol import DTYPES
from pldr_ref.harness.report import passed
from pldr_ref.harness.validate import FAILING_STATUSES, validate

#: Forward cases that must be judgeable per dtype (issue 19: at least 8 in every dtype).
MIN_JUDGEABLE = {"float32": 8, "bfloat16": 8, "float16": 8}
#: Least share of the judgeable forward cases on which a wrong logits-only backend must fail.
MIN_FAIL_RATE = 0.9


@pytest.fixture(scope="module")
def forward_cases():
    return [c for c in iter_cases(DEFAULT_GOLDEN_DIR) if c.kind == "forward"]


@pytest.fixture(scope="module")
def verdicts(forward_cases):
    """``verdicts(backend_class, dtype)``: ``validate`` of that logits-only backend on every forward case, run once
    per (backend, dtype) in this module (the backends are deterministic): the verdict-power measurement and the
    run-level tests below read the same results."""
    memo: dict[tuple[type, str], list] = {}

    def results(backend: type, dtype: str) -> list:
        if (backend, dtype) not in memo:
            memo[(backend, dtype)] = validate(backend(), forward_cases, [dtype])
        return memo[(backend, dtype)]

    return results


@pytest.fixture(scope="module")
def power(forward_cases, verdicts):
    return {r.dtype: r for r in measure(forward_cases, ["float32", "bfloat16", "float16"], results=verdicts)}


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float16"])
def test_verdict_power(power, dtype):
    r = power[dtype]
    print(r)
    assert r.judgeable >= MIN_JUDGEABLE[dtype], (r.judgeable, r.not_judgeable)
    assert r.golden_pass == r.judgeable
    assert r.zero_fail >= MIN_FAIL_RATE * r.judgeable
    assert r.noise_fail >= MIN_FAIL_RATE * r.judgeable, r.noise_passes


def test_all_zero_logits_fail_every_forward_case_in_float64(forward_cases, verdicts):
    results = verdicts(ZeroLogits, "float64")
    assert len(results) == len(forward_cases)
    assert all(r.status in FAILING_STATUSES for r in results), [(r.case, r.status) for r in results
                                                                if r.status not in FAILING_STATUSES]
    assert not passed(results)


def test_zero_logits_never_pass_and_the_run_fails_in_every_dtype(verdicts):
    """Below float64 a case the dtype cannot judge is "not covered" (never a pass); every run still fails."""
    for dtype in DTYPES:
        results = verdicts(ZeroLogits, dtype)
        assert not [r.case for r in results if r.status == "pass"], dtype
        assert not passed(results), dtype
        for r in results:
            if r.dtype != "float64" and r.case == "model/tiny_left_pad_additive" and r.status == "fail":
                assert "judged on 6 of 12 rows; excluded: fully masked rows not representable in " + dtype in r.reason


def test_three_percent_noise_fails_in_float64_and_float32(verdicts):
    results = verdicts(NoisyLogits, "float64") + verdicts(NoisyLogits, "float32")
    assert not [(r.case, r.dtype) for r in results if r.dtype == "float64" and r.status != "fail"]
    f32 = [r for r in results if r.dtype == "float32"]
    assert not [r.case for r in f32 if r.status == "pass"]


def test_golden_logits_never_fail_and_the_run_passes(verdicts):
    """Negative control: the correctly rounded golden logits never fail, and the run exits 0 in every dtype."""
    for dtype in DTYPES:
        results = verdicts(GoldenLogits, dtype)
        assert not [r.case for r in results if r.status in FAILING_STATUSES], dtype
        assert passed(results), dtype
