"""A stage missing from an array engine's stage table runs the registry's float64 body in the engine's arithmetic
(issue 32 item 6, :mod:`pldr_ref.backends.engine_ops`), and a stage's output can stand for an earlier entry in
every later stage's inputs (:attr:`pldr_ref.registry.Output.replaces`, :func:`pldr_ref.registry.read_view`).

The fallback is checked on a stage whose body is only ``ops`` primitives (the global Gram, ``layer.gram``): with
its table entry removed, a whole case through torch and JAX gives the same values, bit for bit; the negative
controls show the fallback really computes through the engine's ``ops`` (a doubled primitive changes the trace)
and that a body it cannot run is refused with a reason, never skipped or computed in NumPy: a body reading a
layer parameter other than its switch-added tensors, a primitive the engine does not provide, a NumPy function on
the engine's arrays.
"""

from __future__ import annotations

import numpy as np
import pytest
from engine_stage_chain import case_named

from pldr_ref import registry
from pldr_ref.harness.protocol import Unsupported
from pldr_ref.registry import HEAD_ROW, ROWS_OWN, Output, Stage

#: A forward (global Gram, two layers) and a KV-cached layer step (a cached layer replaces the Gram stage: the walk
#: must not run the fallback there).
CASES = ("model/tiny_identity_g_short", "layer/tiny_l1_mask_additive")


def _without(table, *names):
    return {k: v for k, v in table.items() if k not in names}


def _engines():
    out = []
    try:
        from pldr_ref.backends.torch_backend import STAGE_RUNNERS as TORCH_RUNNERS
        from pldr_ref.backends.torch_backend import TorchBackend
        out.append(pytest.param(lambda: TorchBackend(device="cpu", num_threads=1), TORCH_RUNNERS, id="torch"))
    except ImportError:  # pragma: no cover - optional extra
        pass
    try:
        from pldr_ref.backends.jax_backend import STAGE_RUNNERS as JAX_RUNNERS
        from pldr_ref.backends.jax_backend import JaxBackend
        out.append(pytest.param(lambda: JaxBackend(jit=False), JAX_RUNNERS, id="jax"))
    except ImportError:  # pragma: no cover - optional extra
        pass
    return out


ENGINES = _engines()


def _bitwise_params():
    """(engine, case, dtype): torch on every case and dtype by default; JAX (eager, slow on a loaded machine) on
    the layer case in float64 by default, the rest with ``-m slow``."""
    out = []
    for engine in ENGINES:
        make, table = engine.values
        for name in CASES:
            for dtype in ("float64", "float32"):
                slow = engine.id == "jax" and (name != CASES[1] or dtype != "float64")
                out.append(pytest.param(make, table, name, dtype, id=f"{engine.id}-{name}-{dtype}",
                                        marks=[pytest.mark.slow] if slow else []))
    return out


@pytest.mark.parametrize("make, table, name, dtype", _bitwise_params())
def test_missing_entry_runs_the_registry_body_bitwise(make, table, name, dtype):
    case = case_named(name)
    full, fallback = make(), make()
    fallback.stage_runners = _without(table, "density_operator")
    want, got = full.run_case(case, dtype), fallback.run_case(case, dtype)
    assert sorted(got) == sorted(want)
    assert [k for k in want if not np.array_equal(want[k], got[k], equal_nan=True)] == []


@pytest.mark.parametrize("make, table", ENGINES)
def test_fallback_computes_through_the_engines_ops(make, table):
    """Negative control: the same run with the engine's density primitive doubled gives a doubled A0 (the case's G
    is fixed, so nothing downstream reads it)."""
    case = case_named(CASES[0])
    b = make()
    b.stage_runners = _without(table, "density_operator")
    want = b.run_case(case, "float64")
    density = b.ops.density_operator
    b.ops.density_operator = lambda q_rot: 2 * density(q_rot)  # this object's arithmetic only
    got = b.run_case(case, "float64")
    assert np.array_equal(got["layers.0.A0"], 2 * want["layers.0.A0"])
    assert not np.array_equal(got["layers.0.A0"], want["layers.0.A0"])


@pytest.mark.parametrize("make, table", ENGINES)
@pytest.mark.parametrize("stage, why", [
    ("post_attention_norm", "beyond its switch-added tensors"),  # reads lp.norm1
    ("value_mix", "not written only with ops primitives"),  # NumPy's transpose signature on the engine's arrays
    ("attention_scores", "has no primitive 'attention_scores'"),
])
def test_a_body_the_engine_cannot_run_is_unsupported(make, table, stage, why):
    case = case_named(CASES[0])
    b = make()
    b.stage_runners = _without(table, stage)
    if stage == "value_mix" and b.name == "jax":
        # JAX arrays take NumPy's transpose(0, 2, 1, 3), so the body is portable there: the fallback runs it
        want = make().run_case(case, "float64")
        got = b.run_case(case, "float64")
        for name in ("layers.0.ctx", "logits"):
            assert np.allclose(got[name], want[name], rtol=1e-12, atol=1e-12), name
        return
    with pytest.raises(Unsupported, match=why):
        b.run_case(case, "float64")


def _numpy_body(q: np.ndarray, ops) -> np.ndarray:
    """A body that leaves the engine's arrays (NumPy's tanh on a CPU tensor returns a NumPy array)."""
    return np.tanh(np.asarray(q))


@pytest.mark.parametrize("make, table", ENGINES)
def test_a_body_leaving_the_engines_arrays_is_unsupported(make, table):
    from pldr_ref.backends.engine_ops import run_body

    b = make()
    st = Stage("trial_tanh", _numpy_body, (Output("q_t", HEAD_ROW, ROWS_OWN),), "tanh(q)", "test", inputs=("q",),
               body=_numpy_body)
    q = b.ops.linear(*(_engine_array(b, np.ones(s)) for s in ((1, 2, 3), (3, 3))))
    cfg = case_named(CASES[0]).config
    with pytest.raises(Unsupported, match="left the engine's arrays"):
        run_body(b.name, st, b.ops, cfg, {"q": q}, param=lambda n: None,
                 is_array=lambda v: not isinstance(v, np.ndarray))


def _engine_array(b, a: np.ndarray):
    return b.tensor(a, b.dtype("float64")) if hasattr(b, "tensor") else b.cast("x", a, "float64")


# ---------------------------------------------------------------------------------------------- Output.replaces
def _stages():
    return (
        Stage("a", None, (Output("q", HEAD_ROW, ROWS_OWN),), "", ""),
        Stage("norm", None, (Output("q_n", HEAD_ROW, ROWS_OWN, replaces="q"),), "", ""),
        Stage("b", None, (Output("q_r", HEAD_ROW, ROWS_OWN),), "", ""),
    )


def test_a_replacing_output_is_read_by_later_stages_only():
    repl = registry._replacements(_stages())
    assert repl == {"q": (1, "q_n")}
    values = {"q": "raw", "q_n": "normed"}
    assert registry.read_at(values, 2, repl)["q"] == "normed"
    # negative controls: the stage itself and earlier ones read the raw entry; an absent replacement changes nothing
    assert registry.read_at(values, 1, repl)["q"] == "raw"
    assert registry.read_at({"q": "raw", "q_n": None}, 2, repl)["q"] == "raw"


def test_an_entry_replaced_twice_is_refused():
    st = (*_stages(), Stage("c", None, (Output("q_m", HEAD_ROW, ROWS_OWN, replaces="q"),), "", ""))
    with pytest.raises(ValueError, match="replaced twice"):
        registry._replacements(st)


def test_the_committed_registry_replaces_nothing():
    """No committed stage replaces an entry: ``read_view`` hands every stage its values as they are."""
    values = {"q": 1}
    assert registry.REPLACED_BY == {}
    assert all(registry.read_view(values, s) is values for s in registry.FORWARD_STAGES)
