"""Every engine against the registry (issue 22 item 4): for every registry op and stage, each engine implements it
or declares it unsupported with a reason; an implemented op runs the op's samples (``Op.sample_cases``,
:mod:`pldr_ref.op_samples`) and agrees with the float64 engine at a tolerance that fits the engine; an op or stage
an engine declares unsupported is refused by it, never silently run.

Engines: float64 (the runners of :mod:`pldr_ref.fixtures.runners`, the stage reference), mpmath
(:mod:`pldr_ref.fixtures.exact_tier` over :mod:`pldr_ref.exact`, dps 30 without the guard: the samples are
small and well conditioned), arb (:mod:`pldr_ref.exact.arb`, every op: the samples take milliseconds), torch
(float64 and float32), numpy32, JAX (eager, float64 and float32), the ONNX export (float32) and the Triton
attention kernel (float64; on the CPU in Triton's interpreter unless a GPU is present).  The test ids name the
engine and the op or stage: ``test_engine_op[torch-float32-glu]``.  The engines of an optional extra skip
without it (fail under ``PLDR_REF_REQUIRE_ENGINES=1``, :mod:`engine_support`).
"""

from __future__ import annotations

import dataclasses
import fnmatch
import os
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import numpy as np
import pytest
from engine_support import missing, require

from pldr_ref import registry
from pldr_ref.backends.engine_ops import runnable_stages
from pldr_ref.fixtures.case import Case
from pldr_ref.fixtures.runners import RUNNERS, run_kind
from pldr_ref.harness.protocol import StageRequest, Unsupported
from pldr_ref.op_samples import OpSample
from pldr_ref.params import init_params
from pldr_ref.switches import ENGINES as SWITCH_ENGINES

os.environ.setdefault("TRITON_INTERPRET", "1")  # as tests/test_engine_triton.py: the kernel on the CPU interpreter

#: mpmath working precision of the sample runs (the golden values use 50 digits and the 2x guard).
SAMPLE_DPS = 30

#: Tolerances (rtol, atol) against the float64 engine, measured on the samples (every op and stage of every
#: engine; ``TRITON_INTERPRET=1 python tests/test_engine_registry.py`` prints the table): the exact tiers and
#: the float64 engines stay below 0.03 of TIGHT (float64 rounding of small, well-conditioned samples), the
#: float32 engines below 0.2 of FLOAT32 (worst: torch's float32 scores after a two-layer prefill and two cached
#: steps).
TIGHT = (1e-11, 1e-13)
FLOAT32 = (3e-4, 3e-5)


@dataclasses.dataclass(frozen=True)
class Engine:
    """How the test drives one engine.

    kinds / unsupported_kinds: the registry ops it claims and the ones it declares unsupported (name -> why);
    stages / unsupported_stages: the same for isolated stages; run: (op name, sample) -> outputs, raising
    :class:`Unsupported` / ``ValueError`` for what it does not run; run_stage: a stage request -> outputs (None:
    no isolated-stage entry); tol: (rtol, atol) against float64; extra: the optional extra it needs; slow: its
    matrix runs with ``-m slow`` only (a second dtype of an engine whose first dtype runs by default).
    """

    name: str
    kinds: Callable[[], Iterable[str]]
    unsupported_kinds: Callable[[], Mapping[str, str]]
    stages: Callable[[], Iterable[str]]
    unsupported_stages: Callable[[], Mapping[str, str]]
    run: Callable[[str, OpSample], Mapping[str, np.ndarray]]
    run_stage: Callable[[StageRequest], Mapping[str, np.ndarray]] | None
    tol: tuple[float, float]
    extra: str | None = None
    dtype: str = "float64"
    slow: bool = False


def sample_case(kind: str, sample: OpSample) -> Case:
    """A fixture case object of ``sample`` (what a backend's ``run_case`` takes)."""
    return Case(name=f"sample/{kind}/{sample.label}", group="sample", kind=kind, tier="float64", config=sample.config,
                params=sample.params, args=dict(sample.args), inputs=dict(sample.inputs), outputs={}, tolerance={},
                baselines={}, meta={})


def float64_outputs(kind: str, sample: OpSample) -> dict[str, np.ndarray]:
    return run_kind(kind, sample.config, sample.params, sample.args, sample.inputs)


def backend_engine(name: str, make: Callable[[], Any], module: str, dtype: str, tol: tuple[float, float],
                   extra: str | None, stage_table: Callable[[Any], Iterable[str]] | None,
                   slow: bool = False) -> Engine:
    """An engine that is a harness backend: its claims are its capabilities (kinds) and its stage table."""
    cache: dict[str, Any] = {}

    def backend() -> Any:
        if "b" not in cache:
            cache["b"] = make()
        return cache["b"]

    def mod() -> Any:
        import importlib

        return importlib.import_module(module)

    return Engine(
        name=name, extra=extra, dtype=dtype, tol=tol, slow=slow,
        kinds=lambda: backend().capabilities().kinds,
        unsupported_kinds=lambda: mod().UNSUPPORTED_KINDS,
        stages=lambda: stage_table(backend()) if stage_table is not None else (),
        unsupported_stages=lambda: mod().UNSUPPORTED_STAGES,
        run=lambda kind, s: backend().run_case(sample_case(kind, s), dtype),
        run_stage=None if stage_table is None else (lambda req: backend().run_stage(req)),
    )


def _torch(cls_path: str) -> Callable[[], Any]:
    def make() -> Any:
        import importlib

        module, attr = cls_path.split(":")
        return getattr(importlib.import_module(module), attr)(device=None if "triton" in module else "cpu")
    return make


def _jax() -> Any:
    from pldr_ref.backends.jax_backend import JaxBackend

    return JaxBackend(jit=False)


def _numpy32() -> Any:
    from pldr_ref.backends.numpy32 import Numpy32Backend

    return Numpy32Backend()


def _onnx() -> Any:
    from pldr_ref.backends.onnx_backend import OnnxExportBackend

    return OnnxExportBackend()


def _exact_engine() -> Engine:
    from pldr_ref.fixtures import exact_tier

    return Engine(
        name="mpmath", tol=TIGHT, kinds=lambda: exact_tier.EXACT_RUNNERS,
        unsupported_kinds=lambda: exact_tier.EXACT_UNSUPPORTED, stages=lambda: (),
        unsupported_stages=lambda: exact_tier.EXACT_UNSUPPORTED_STAGES,
        run=lambda kind, s: exact_tier.run_exact(kind, s.config, s.params,
                                                 {**s.args, "dps": SAMPLE_DPS, "guard": False}, s.inputs),
        run_stage=None)


def _arb_engine() -> Engine:
    def cases() -> Any:
        from pldr_ref.exact.arb import cases as arb_cases

        return arb_cases

    return Engine(
        name="arb", tol=TIGHT, kinds=lambda: cases().ARB_RUNNERS, unsupported_kinds=lambda: cases().ARB_UNSUPPORTED,
        stages=lambda: (), unsupported_stages=lambda: cases().ARB_UNSUPPORTED_STAGES,
        run=lambda kind, s: cases().run_arb(kind, s.config, s.params, s.args, s.inputs), run_stage=None)


def _float64_stage(req: StageRequest) -> dict[str, np.ndarray]:
    from pldr_ref.harness.policy.stage_reference import reference_stage

    return reference_stage(req.stage, req.layer, req.config, req.params, req.inputs)


FLOAT64 = Engine(name="float64", tol=TIGHT, kinds=lambda: RUNNERS, unsupported_kinds=lambda: {},
                 stages=lambda: [s.name for s in registry.ALL_STAGES], unsupported_stages=lambda: {},
                 run=float64_outputs, run_stage=_float64_stage)

ENGINES: tuple[Engine, ...] = (
    FLOAT64,
    _exact_engine(),
    _arb_engine(),
    backend_engine("torch-float64", _torch("pldr_ref.backends.torch_backend:TorchBackend"),
                   "pldr_ref.backends.torch_backend", "float64", TIGHT, "torch",
                   lambda b: runnable_stages(b.stage_runners, "torch")),
    backend_engine("torch-float32", _torch("pldr_ref.backends.torch_backend:TorchBackend"),
                   "pldr_ref.backends.torch_backend", "float32", FLOAT32, "torch",
                   lambda b: runnable_stages(b.stage_runners, "torch")),
    backend_engine("numpy32", _numpy32, "pldr_ref.backends.numpy32", "float32", FLOAT32, None, None),
    backend_engine("jax-float64", _jax, "pldr_ref.backends.jax_backend", "float64", TIGHT, "jax",
                   lambda b: runnable_stages(b.stage_runners, "jax")),
    backend_engine("jax-float32", _jax, "pldr_ref.backends.jax_backend", "float32", FLOAT32, "jax",
                   lambda b: runnable_stages(b.stage_runners, "jax"), slow=True),
    backend_engine("onnx-float32", _onnx, "pldr_ref.backends.onnx_backend", "float32", FLOAT32, "onnx", None),
    backend_engine("triton-float64", _torch("pldr_ref.backends.triton_attention:TritonAttentionBackend"),
                   "pldr_ref.backends.torch_backend", "float64", TIGHT, "triton",
                   lambda b: runnable_stages(b.stage_runners, "triton")),
)

OP_NAMES = [op.name for op in registry.OPS]
STAGE_NAMES = [s.name for s in registry.ALL_STAGES]


def engine_params() -> list[Any]:
    """The engines as pytest parameters, the slow ones marked ``slow``."""
    return [pytest.param(e, id=e.name, marks=[pytest.mark.slow] if e.slow else []) for e in ENGINES]


# ----------------------------------------------------------------------------- checks (shared with the controls)
def coverage_problem(engine: str, name: str, claimed: Iterable[str], declared: Mapping[str, str]) -> str | None:
    """Why ``engine``'s coverage of registry item ``name`` is wrong, or None: it must be claimed or declared
    unsupported (with a reason), not both."""
    claimed = set(claimed)
    if name in claimed and name in declared:
        return f"{engine}: {name!r} is both implemented and declared unsupported ({declared[name]!r})"
    if name not in claimed and name not in declared:
        return f"{engine}: {name!r} is neither implemented nor declared unsupported"
    if name in declared and not str(declared[name]).strip():
        return f"{engine}: {name!r} is declared unsupported without a reason"
    return None


def compare(where: str, got: Mapping[str, np.ndarray], want: Mapping[str, np.ndarray],
            tol: tuple[float, float], dtype: str = "float64") -> list[str]:
    """Disagreements of ``got`` with the float64 outputs ``want`` (every float64 output must be there).  A float64
    value beyond the engine dtype's range (finfo(float64).min of a ``finfo_min`` mask) must come back as that
    dtype's largest magnitude or infinity, with its sign (the mask constant of that dtype)."""
    rtol, atol = tol
    big = float(np.finfo(np.dtype(dtype)).max)
    problems = []
    for name, w in want.items():
        if name not in got:
            problems.append(f"{where}: output {name!r} missing")
            continue
        g, w = np.asarray(got[name]), np.asarray(w)
        if w.dtype.kind == "f" and g.shape == w.shape and dtype != "float64":
            beyond = np.isfinite(w) & (np.abs(w) > big)
            if np.any(beyond & ((np.abs(g) < big) | (np.sign(g) != np.sign(w)))):
                problems.append(f"{where}: {name} beyond the {dtype} range is not saturated")
            g, w = np.where(beyond, 0.0, g), np.where(beyond, 0.0, w)
        if g.shape != w.shape:
            problems.append(f"{where}: {name} has shape {g.shape}, float64 {w.shape}")
        elif w.dtype.kind in "biu":
            if not np.array_equal(g, w):
                problems.append(f"{where}: {name} differs (exact output)")
        elif not np.allclose(g, w, rtol=rtol, atol=atol, equal_nan=True):
            err = np.nanmax(np.abs(g - w) / (atol + rtol * np.abs(w))) if np.isfinite(g).all() else np.inf
            problems.append(f"{where}: {name} off by {err:.3g} x tolerance (rtol {rtol}, atol {atol})")
    return problems


def output_pattern_problems(op: registry.Op, outputs: Iterable[str]) -> list[str]:
    """The registry's output names of ``op`` (``{l}``, ``{j}`` standing for an index) against the outputs of its
    samples: each output is a registry name, each registry name is produced by some sample."""
    patterns = [p.replace("{l}", "*").replace("{j}", "*") for p in op.outputs]
    names = set(outputs)
    problems = [f"{op.name}: output {n!r} matches no registry output name {op.outputs}" for n in names
                if not any(fnmatch.fnmatchcase(n, p) for p in patterns)]
    problems += [f"{op.name}: registry output {p!r} matches no output" for p in patterns
                 if not any(fnmatch.fnmatchcase(n, p) for n in names)]
    return problems


def op_problems(engine: Engine, op: registry.Op) -> list[str]:
    """Everything wrong with ``engine`` on registry op ``op``: its coverage, then its values on the samples (or,
    declared unsupported, that it refuses them)."""
    claimed = set(engine.kinds())
    declared = engine.unsupported_kinds()
    problem = coverage_problem(engine.name, op.name, claimed, declared)
    if problem:
        return [problem]
    problems = []
    for sample in op.sample_cases():
        where = f"{engine.name} x {op.name} [{sample.label}]"
        if op.name in declared:
            try:
                engine.run(op.name, sample)
            except (Unsupported, ValueError, NotImplementedError):
                continue
            problems.append(f"{where}: declared unsupported but ran")
            continue
        want = float64_outputs(op.name, sample)
        try:
            got = engine.run(op.name, sample)
        except Unsupported as exc:
            problems.append(f"{where}: implemented but refused: {exc}")
            continue
        problems += compare(where, got, want, engine.tol, engine.dtype)
    return problems


def declared_stages(engine: Engine) -> Mapping[str, str]:
    """The stages ``engine`` declares unsupported: its own, and those the switch table gates off for it."""
    table_engine = engine.name.split("-")[0]
    gated = registry.switch_gated_stages(table_engine) if table_engine in SWITCH_ENGINES else {}
    return {**gated, **engine.unsupported_stages()}


def stage_samples() -> dict[str, tuple[int | None, dict[str, np.ndarray], dict[str, np.ndarray], Any]]:
    """One stage request per registry stage: the stage plan of the forward op's larger sample (every stage is
    in it), upstream values and golden outputs from the float64 engine."""
    from pldr_ref.harness.verdict.localize import stage_plan

    sample = registry.OPS_BY_NAME["forward"].sample_cases()[-1]
    case = dataclasses.replace(sample_case("forward", sample), outputs=float64_outputs("forward", sample))
    plan: dict[str, Any] = {}
    for stage, layer, inputs, golden in stage_plan(case):
        plan.setdefault(stage, (layer, inputs, golden, case))
    # an optional stage (enabled_by) not in that sample: the same sample with every registry stage enabled
    every = {f: values[0] for st in registry.ALL_STAGES for f, values in st.enabled_by}
    config = sample.config.replace(**every)
    sample = dataclasses.replace(sample, params=init_params(config, 0))
    case = dataclasses.replace(sample_case("forward", sample), outputs=float64_outputs("forward", sample))
    for stage, layer, inputs, golden in stage_plan(case):
        plan.setdefault(stage, (layer, inputs, golden, case))
    return plan


STAGE_PLAN = stage_samples()


def stage_problems(engine: Engine, stage: str) -> list[str]:
    """Coverage of ``stage`` by ``engine``, then (implemented, with an isolated-stage entry) its value on the
    stage sample against the float64 trace."""
    problem = coverage_problem(engine.name, stage, engine.stages(), declared_stages(engine))
    if problem:
        return [problem]
    if stage in declared_stages(engine) or engine.run_stage is None:
        return []
    layer, inputs, golden, case = STAGE_PLAN[stage]
    req = StageRequest(stage, layer, case.config, case.params, engine.dtype, inputs)
    try:
        got = engine.run_stage(req)
    except Unsupported as exc:
        return [f"{engine.name} x {stage}: implemented but refused: {exc}"]
    return compare(f"{engine.name} x {stage}", got, golden, engine.tol, engine.dtype)


def _need(engine: Engine) -> None:
    if engine.extra is not None:
        require(engine.extra)
    if engine.name.startswith("triton"):
        import torch

        if not torch.cuda.is_available() and os.environ.get("TRITON_INTERPRET") != "1":
            pytest.skip("the Triton kernel needs a GPU or TRITON_INTERPRET=1")


# ----------------------------------------------------------------------------- the engine x registry matrix
@pytest.mark.parametrize("op", OP_NAMES)
@pytest.mark.parametrize("engine", engine_params())
def test_engine_op(engine: Engine, op: str):
    _need(engine)
    problems = op_problems(engine, registry.OPS_BY_NAME[op])
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("stage", STAGE_NAMES)
@pytest.mark.parametrize("engine", engine_params())
def test_engine_stage(engine: Engine, stage: str):
    _need(engine)
    problems = stage_problems(engine, stage)
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("engine", engine_params())
def test_engine_names_only_registry_ops_and_stages(engine: Engine):
    _need(engine)
    for names, known in ((engine.kinds(), OP_NAMES), (engine.unsupported_kinds(), OP_NAMES),
                         (engine.stages(), STAGE_NAMES), (engine.unsupported_stages(), STAGE_NAMES)):
        stale = sorted(set(names) - set(known))
        assert not stale, f"{engine.name} names {stale}, which the registry does not have"


def test_every_op_has_samples_with_an_edge_shape_first():
    for op in registry.OPS:
        samples = op.sample_cases()
        assert samples, f"{op.name} has no samples"
        assert len({s.label for s in samples}) == len(samples), op.name
        again = op.sample_cases()  # seeded: the same inputs on every call
        for a, b in zip(samples, again, strict=True):
            assert a.inputs.keys() == b.inputs.keys()
            assert all(np.array_equal(a.inputs[k], b.inputs[k]) for k in a.inputs), op.name
        outputs: set[str] = set()
        for s in samples:
            outputs |= set(float64_outputs(op.name, s))
            names = {n.rstrip("?") for n in op.inputs}
            required = {n for n in op.inputs if not n.endswith("?")}
            assert set(s.inputs) <= names and required <= set(s.inputs), (op.name, s.label, sorted(s.inputs))
            if op.category == "op":  # the scalar arguments of a one-stage op are all required
                assert set(op.args) <= set(s.args), (op.name, s.label)
        assert output_pattern_problems(op, outputs) == [], op.name
    # the smallest shapes: one position, one head, d_k = 2
    q = registry.OPS_BY_NAME["density_operator"].sample_cases()[0].inputs["q_rot"]
    assert q.shape == (1, 1, 1, 2)
    assert registry.OPS_BY_NAME["decoder_layer"].sample_cases()[0].params.config.num_heads == 1


def call_problems(engine: str, ops: Mapping[str, Callable[..., Any]]) -> list[str]:
    """Registry plumbing an exact engine's op table cannot take: an op missing, or a registry input / scalar
    argument its function cannot receive as :func:`pldr_ref.fixtures.exact_tier.op_call` passes it."""
    import inspect

    from pldr_ref.fixtures.exact_tier import op_call

    problems = []
    exact_ops = [op for op in registry.OPS if op.exact not in (None, "runner")]
    for op in exact_ops:
        fn = ops.get(op.exact)
        if fn is None:
            problems.append(f"{engine}: no op {op.exact!r} (registry op {op.name})")
            continue
        params = inspect.signature(fn).parameters.values()
        positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
        var_pos = any(p.kind == p.VAR_POSITIONAL for p in params)
        names = {p.name for p in params if p.kind != p.VAR_POSITIONAL} | (
            {"*"} if any(p.kind == p.VAR_KEYWORD for p in params) else set())
        inputs, _, keywords = op_call(op)
        if not var_pos and len(positional) < len(inputs):
            problems.append(f"{engine}: {op.exact} takes {len(positional)} positional inputs, the registry passes "
                            f"{len(inputs)} {inputs}")
        missing_kw = [k for k in keywords if k not in names and "*" not in names]
        if missing_kw:
            problems.append(f"{engine}: {op.exact} takes no keyword {missing_kw} (registry args of {op.name})")
    stale = sorted(set(ops) - {op.exact for op in exact_ops})
    problems += [f"{engine}: op {name!r} is no registry op's exact op" for name in stale]
    return problems


def test_exact_engines_op_tables_take_the_registry_plumbing():
    from pldr_ref.exact.arb.ops import ARB_OPS
    from pldr_ref.exact.op_api import OPS as MPMATH_OPS

    assert call_problems("mpmath", MPMATH_OPS) == []
    assert call_problems("arb", ARB_OPS) == []
    # negative controls: a dropped op, a renamed keyword, a stale entry
    assert call_problems("arb", {k: v for k, v in ARB_OPS.items() if k != "glu"}) == [
        "arb: no op 'glu' (registry op glu)"]

    def layer_norm(x, gamma, beta, epsilon=1e-6, *, rn32=None):
        return x

    assert call_problems("arb", {**ARB_OPS, "layer_norm": layer_norm}) == [
        "arb: layer_norm takes no keyword ['eps'] (registry args of layer_norm)"]
    assert call_problems("arb", {**ARB_OPS, "qk_norm": layer_norm}) == [
        "arb: op 'qk_norm' is no registry op's exact op"]


# ----------------------------------------------------------------------------- negative controls
def test_control_a_missing_or_doubly_declared_op_is_named():
    claimed = set(OP_NAMES) - {"silu"}
    message = "fake: 'silu' is neither implemented nor declared unsupported"
    assert coverage_problem("fake", "silu", claimed, {}) == message
    assert "both implemented and declared" in coverage_problem("fake", "glu", claimed, {"glu": "no"})
    assert "without a reason" in coverage_problem("fake", "silu", claimed, {"silu": " "})
    assert coverage_problem("fake", "silu", claimed, {"silu": "a reason"}) is None


def test_control_an_output_name_the_registry_does_not_list_is_named():
    op = registry.OPS_BY_NAME["forward"]
    assert output_pattern_problems(op, ["embed", "x0", "layers.0.x", "logits"]) == []
    assert output_pattern_problems(op, ["embed", "x0", "layers.0.x", "logits", "extra"])
    assert output_pattern_problems(op, ["embed", "x0", "layers.0.x"])  # logits missing


def test_control_a_wrong_value_fails_the_op_check():
    require("torch")
    from pldr_ref.backends.torch_backend import TorchBackend

    class WrongSilu(TorchBackend):
        def silu(self, z: Any) -> Any:
            return z * self.sigmoid(z) * (1 + 1e-6)  # a relative error far above float64 rounding

    engine = backend_engine("wrong-silu", lambda: WrongSilu(device="cpu"), "pldr_ref.backends.torch_backend",
                            "float64", TIGHT, "torch", lambda b: b.stage_runners)
    problems = op_problems(engine, registry.OPS_BY_NAME["silu"])
    assert problems and all("wrong-silu x silu" in p and "off by" in p for p in problems), problems
    assert op_problems(engine, registry.OPS_BY_NAME["sigmoid"]) == []  # the other ops still agree


def test_control_a_missing_stage_entry_fails_the_stage_check():
    require("torch")
    from pldr_ref.backends.torch_backend import STAGE_RUNNERS, TorchBackend

    class NoFfn(TorchBackend):
        stage_runners: Mapping[str, Any] = {k: v for k, v in STAGE_RUNNERS.items() if k != "ffn"}

    engine = backend_engine("no-ffn", lambda: NoFfn(device="cpu"), "pldr_ref.backends.torch_backend", "float64",
                            TIGHT, "torch", lambda b: b.stage_runners)
    assert stage_problems(engine, "ffn") == ["no-ffn: 'ffn' is neither implemented nor declared unsupported"]
    assert stage_problems(engine, "post_ffn_norm") == []
    # claimed through the registry-body fallback (as the matrix claims it), the missing entry runs the float64 body in
    # torch's arithmetic, which reads a layer parameter the fallback does not hand over: refused with the reason
    engine = backend_engine("no-ffn", lambda: NoFfn(device="cpu"), "pldr_ref.backends.torch_backend", "float64",
                            TIGHT, "torch", lambda b: runnable_stages(b.stage_runners, "torch"))
    problems = stage_problems(engine, "ffn")
    assert len(problems) == 1 and "implemented but refused" in problems[0] and "lp.extra" in problems[0], problems
    # a table entry computing the wrong thing is caught by value
    class WrongFfn(TorchBackend):
        stage_runners: Mapping[str, Any] = {**STAGE_RUNNERS, "ffn": lambda b, w, c, extra, out1: (out1,)}

    engine = backend_engine("wrong-ffn", lambda: WrongFfn(device="cpu"), "pldr_ref.backends.torch_backend",
                            "float64", TIGHT, "torch", lambda b: b.stage_runners)
    problems = stage_problems(engine, "ffn")
    assert problems and "wrong-ffn x ffn" in problems[0], problems


def test_control_a_declared_unsupported_op_that_runs_is_named():
    fake = dataclasses.replace(FLOAT64, name="liar", unsupported_kinds=lambda: {"sigmoid": "claims it cannot"},
                               kinds=lambda: set(OP_NAMES) - {"sigmoid"})
    problems = op_problems(fake, registry.OPS_BY_NAME["sigmoid"])
    assert problems and all("declared unsupported but ran" in p for p in problems)


def test_optional_engines_are_reported_when_missing():
    # the extras each engine needs are the ones engine_support knows (a typo would make an engine skip forever)
    from engine_support import EXTRAS

    assert {e.extra for e in ENGINES if e.extra} <= set(EXTRAS)


# ----------------------------------------------------------------------------- the measured margins
def worst_error(engine: Engine) -> tuple[float, str]:
    """The largest error of ``engine`` over its op and stage samples, in units of its tolerance, and where."""
    rtol, atol = engine.tol
    big = float(np.finfo(np.dtype(engine.dtype)).max)
    worst, where = 0.0, ""

    def update(label: str, got: Mapping[str, np.ndarray], want: Mapping[str, np.ndarray]) -> None:
        nonlocal worst, where
        for k, w in want.items():
            w, g = np.asarray(w), np.asarray(got[k])
            ok = (np.isfinite(w) & (np.abs(w) <= big) & np.isfinite(g)) if w.dtype.kind == "f" else None
            if ok is None or not ok.any():
                continue
            r = float(np.max(np.abs(g[ok] - w[ok]) / (atol + rtol * np.abs(w[ok]))))
            if r > worst:
                worst, where = r, f"{label}.{k}"

    for op in registry.OPS:
        if op.name not in engine.unsupported_kinds():
            for s in op.sample_cases():
                update(f"{op.name}[{s.label}]", engine.run(op.name, s), float64_outputs(op.name, s))
    if engine.run_stage is not None:
        for stage, (layer, inputs, golden, case) in STAGE_PLAN.items():
            if stage not in declared_stages(engine):
                req = StageRequest(stage, layer, case.config, case.params, engine.dtype, inputs)
                update(f"stage {stage}", engine.run_stage(req), golden)
    return worst, where


if __name__ == "__main__":
    for e in ENGINES:
        if e.extra is None or missing(e.extra) is None:
            w, at = worst_error(e)
            print(f"{e.name:16s} rtol={e.tol[0]:g} atol={e.tol[1]:g}: worst error {w:.3g} x tolerance at {at}")


def test_layer_trace_names_have_one_source():
    """The trace names of a layer are pldr_ref.layer.LAYER_TRACE_NAMES in every engine (the 18 of LAYER_STAGES and an
    optional stage's outputs, in forward order; the decoder_layer samples above check the names each engine returns
    against the float64 trace)."""
    from pldr_ref.backends import numpy32
    from pldr_ref.exact import layer as exact_layer
    from pldr_ref.export import onnx_graph
    from pldr_ref.layer import LAYER_TRACE_NAMES

    assert onnx_graph.LAYER_OUTPUTS is LAYER_TRACE_NAMES
    assert numpy32.LAYER_TRACE_NAMES is LAYER_TRACE_NAMES and exact_layer.LAYER_TRACE_NAMES is LAYER_TRACE_NAMES
    if missing("torch") is None:
        from pldr_ref.backends import torch_backend

        assert torch_backend.LAYER_ENTRIES is LAYER_TRACE_NAMES
    # the engines' layers walk the registry's stages (pldr_ref.backends.stage_walk): their stage tables name
    # registry stages only, so every trace name they return is a registry output
    from pldr_ref.registry import ALL_STAGES

    names = {s.name for s in ALL_STAGES}
    for extra, module in (("torch", "pldr_ref.backends.torch_backend"), ("jax", "pldr_ref.backends.jax_backend")):
        if missing(extra) is None:
            table = __import__(module, fromlist=["x"]).STAGE_RUNNERS
            assert table and set(table) <= names, (module, sorted(set(table) - names))
