"""JAX / XLA engine (issue 23): the jitted JaxBackend passes the golden suite, and bugs written in jax.numpy
are caught and localized.  Needs the [jax] extra (skips without it, fails under PLDR_REF_REQUIRE_ENGINES=1).

Default run: representative cases in float32 (jitted), every JAX mutant in float32 and bfloat16 (eager mode, which
runs the same jnp code op by op).  ``-m slow``: the whole suite in every dtype and every
mutant jitted in each of its dtypes.
"""

from __future__ import annotations

import collections

import pytest
from engine_support import require

require("jax")

from pldr_ref.backends.jax_backend import JaxBackend  # noqa: E402
from pldr_ref.fixtures.case import DEFAULT_GOLDEN_DIR, iter_cases, load_case  # noqa: E402
from pldr_ref.harness.controls.engine_mutants import ENGINE_MUTATIONS, jax_mutant_classes  # noqa: E402
from pldr_ref.harness.validate import FAILING_STATUSES, validate, validate_case  # noqa: E402


@pytest.fixture(scope="module")
def suite():
    return list(iter_cases(DEFAULT_GOLDEN_DIR))


def check_suite(results) -> collections.Counter:
    counts = collections.Counter(r.status for r in results)
    bad = [f"{r.dtype} {r.case}: {r.status} {r.reason}" for r in results if r.status in FAILING_STATUSES]
    assert not bad, "\n".join(bad)
    assert counts["pass"] >= 40, counts  # forward, layer, op cases and every stage in isolation
    return counts


#: The jitted float32 cases of the default run (each case is one XLA compilation, seconds on 2 cores): a forward
#: case with several key tiles and a learned G_LM, a left-padded finfo_min one, a decoder layer with an additive
#: mask, op cases of the PLGA chain, and cases the backend declares unsupported (cached generation, scoring, an
#: emulation switch).  The whole suite in float32 is the ``-m slow`` test below.
DEFAULT_CASES = ("model/tiny_exact", "model/tiny_left_pad_finfo_min", "layer/tiny_l1_mask_additive",
                 "op/metric_learner", "op/potential_tensor", "op/masked_softmax_long_rows",
                 "cache/tiny_kv", "scoring/tiny_one_pass", "model/switch_softmax_float32")


def test_jax_passes_representative_cases_in_float32():
    cases = [load_case(DEFAULT_GOLDEN_DIR / name) for name in DEFAULT_CASES]
    results = validate(JaxBackend(), cases, ["float32"])
    bad = [f"{r.case}: {r.status} {r.reason}" for r in results if r.status in FAILING_STATUSES]
    assert not bad, "\n".join(bad)
    status = {r.case: r.status for r in results}
    declared = ("cache/tiny_kv", "scoring/tiny_one_pass", "model/switch_softmax_float32")
    assert [n for n in declared if status[n] != "unsupported"] == [], status  # declared, not run
    assert [n for n in DEFAULT_CASES[:6] if status[n] != "pass"] == [], status


@pytest.mark.slow
def test_jax_passes_the_whole_suite_in_float32(suite):
    counts = check_suite(validate(JaxBackend(), suite, ["float32"]))
    assert counts["unsupported"] > 0  # cached generation, scoring, emulation switches: declared, not run


@pytest.mark.slow
@pytest.mark.parametrize("dtype", ["float64", "bfloat16", "float16"])
def test_jax_passes_the_whole_suite(suite, dtype):
    check_suite(validate(JaxBackend(), suite, [dtype]))


JAX_MUTATIONS = [m for m in ENGINE_MUTATIONS if m.engine == "jax"]


def test_at_least_five_jax_bugs_per_dtype():
    for dtype in ("float64", "float32", "bfloat16", "float16"):
        assert sum(dtype in m.dtypes for m in JAX_MUTATIONS) >= 5, dtype


@pytest.fixture(scope="module")
def eager_control():
    """The unmutated eager backend's float32 result on a case (the mutants' negative control), run once per case."""
    results = {}

    def control(name):
        if name not in results:
            results[name] = validate_case(JaxBackend(jit=False), load_case(DEFAULT_GOLDEN_DIR / name), "float32")
        return results[name]
    return control


@pytest.mark.parametrize("mutation", JAX_MUTATIONS, ids=lambda m: m.bug)
def test_jax_bug_is_caught_at_its_stage_eager(mutation, eager_control):
    case = load_case(DEFAULT_GOLDEN_DIR / mutation.case)
    backend = jax_mutant_classes()[mutation.bug](jit=False)
    for dtype in [d for d in ("float32", "bfloat16") if d in mutation.dtypes]:
        r = validate_case(backend, case, dtype)
        assert r.status == "fail", (dtype, r.status, r.reason)
        assert r.first_failure["stage"] == mutation.expected_stage, (dtype, r.first_failure)
    control = eager_control(mutation.case)
    assert control.status == "pass", control.reason


@pytest.mark.slow
@pytest.mark.parametrize("mutation", JAX_MUTATIONS, ids=lambda m: m.bug)
def test_jax_bug_is_caught_at_its_stage_jitted(mutation):
    case = load_case(DEFAULT_GOLDEN_DIR / mutation.case)
    backend = jax_mutant_classes()[mutation.bug]()
    for dtype in mutation.dtypes:
        r = validate_case(backend, case, dtype)
        assert r.status == "fail" and r.first_failure["stage"] == mutation.expected_stage, (dtype, r.first_failure)


def test_eager_and_jitted_agree_in_float32():
    case = load_case(DEFAULT_GOLDEN_DIR / "model/tiny_exact")
    a = JaxBackend().run_case(case, "float32")
    b = JaxBackend(jit=False).run_case(case, "float32")
    assert a.keys() == b.keys()
    worst = max(float(abs(a[k] - b[k]).max()) / max(1.0, float(abs(b[k]).max())) for k in a)
    # the same float32 math; XLA may fuse differently: within 1e-4 relative to each output's largest magnitude
    # (measured: 2.1e-5, layers.1.A_P, 1.09e-4 absolute on values up to 5.2, when this test runs first)
    assert worst < 1e-4


def test_params_and_activations_are_held_in_the_dtype():
    case = load_case(DEFAULT_GOLDEN_DIR / "model/tiny_exact")
    backend = JaxBackend(jit=False)
    P = backend.params(case.params, "bfloat16")
    assert {str(v.dtype) for v in P.values()} == {"bfloat16"}
    out = backend._forward(P, case.inputs["token_ids"], 0, None, c=case.params.config, dt="bfloat16",
                           pad_masking=True)
    assert str(out["layers.0.q"].dtype) == "bfloat16"
    assert str(out["layers.0.A_LM"].dtype) == "float32"  # the PLGA powers stay in the float32 work dtype
    assert str(out["logits"].dtype) == "bfloat16"


def test_issue_command_through_the_alias_exits_0_in_bfloat16(tmp_path):
    """The acceptance command's spelling (``pldr_ref.backends.jax:JaxBackend``) through the CLI, on the long-row
    and real-width kernel cases (the whole suite is the test above and the ``-m slow`` one)."""
    from pldr_ref.cli import main

    out = tmp_path / "r.json"
    argv = ["validate", "--backend", "pldr_ref.backends.jax:JaxBackend", "--dtype", "bfloat16", "--group", "model",
            "-k", "rows_s128|real_width", "--out", str(out), "--quiet"]
    assert main(argv) == 0
    import json

    statuses = [r["status"] for r in json.loads(out.read_text())["results"]]
    assert statuses and "pass" in statuses and "fail" not in statuses, statuses
