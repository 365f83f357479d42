"""A registry stage an engine's stage table lacks, run as the registry's float64 body in the engine's own
arithmetic (issue 32 item 6).

Since issue 32 item 2 a stage body (:attr:`pldr_ref.registry.Stage.body`) computes with the primitives of an
``ops`` argument (:class:`pldr_ref.ops.Ops`).  An array engine that walks the registry (torch, JAX:
:mod:`pldr_ref.backends.stage_walk`) builds an :class:`EngineOps` over its own building blocks
(:func:`engine_ops`), and a stage missing from its stage table runs the body with it (:func:`run_body`).  A new
stage written only with ``ops`` primitives and array methods then costs those engines no edit: the switch table
says which engines implement its switch value, and each of them computes it in its own dtype and device.

Nothing is silently wrong: a primitive the engine cannot provide with the reference's meaning raises
:class:`~pldr_ref.harness.protocol.Unsupported` naming it; a body that reads a layer parameter other than its
switch-added tensors (``lp.extra``), a model parameter in a per-layer stage, or that leaves the engine's arrays
(a NumPy function on a torch tensor returns a NumPy array) is refused the same way, so the harness reports the
case *unsupported* with the reason, never a number the engine did not compute.  Array-library free.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import Any

from pldr_ref.constants import EPS_ADJ, EPS_LN
from pldr_ref.harness.protocol import Unsupported
from pldr_ref.ops import PRIMITIVES, Ops
from pldr_ref.registry import ALL_STAGES, Stage, switch_gated_stages
from pldr_ref.switches import added_params

#: Primitives an engine's building blocks do not provide with the reference's signature: name -> why.
NOT_PROVIDED: dict[str, str] = {
    "attention_scores": "the engines' scores fix the 1/sqrt(d_k) scale and take no score_scale or out argument",
    "attention_weights": "the engines' softmax takes no mask, masked_row or precision argument",
    "rope_angles": "the engines build their own RoPE table inside their rope entry",
    "rotate_pairs": "the engines rotate inside their rope entry",
}


def _refuse(engine: str, name: str, why: str) -> Callable[..., Any]:
    def refused(*args: Any, **kwargs: Any) -> Any:
        raise Unsupported(f"the {engine} engine's arithmetic (pldr_ref.backends.engine_ops) has no primitive "
                          f"{name!r} for a registry stage body: {why}; give the stage an entry in its stage table")
    return refused


class EngineOps(Ops):
    """An engine's arithmetic as an :class:`~pldr_ref.ops.Ops`: each primitive of :data:`pldr_ref.ops.PRIMITIVES`
    is the engine's function given in ``provided`` (same signature as the reference's), or one that raises
    :class:`~pldr_ref.harness.protocol.Unsupported` naming it."""

    def __init__(self, engine: str, provided: Mapping[str, Callable[..., Any]]) -> None:
        unknown = set(provided) - set(PRIMITIVES)
        if unknown:
            raise ValueError(f"not primitives of pldr_ref.ops.Ops: {sorted(unknown)}")
        self.engine = engine
        for name in PRIMITIVES:  # instance attributes: this object's arithmetic, no class or module is changed
            setattr(self, name, provided.get(name) or _refuse(engine, name, NOT_PROVIDED.get(name, "not provided")))

    def __repr__(self) -> str:
        return f"EngineOps({self.engine!r})"


def engine_ops(engine: str, backend: Any) -> EngineOps:
    """The :class:`EngineOps` of an engine whose building blocks have the torch / JAX backends' names and
    signatures (``linear(x, w, b)``, ``layer_norm(x, gamma, beta, eps)``, ``glu(x, P, prefix)``, ``density``,
    ``metric_tensor``, ...); the primitives of :data:`NOT_PROVIDED` are refused."""
    b = backend

    def glu(x: Any, p: Any) -> Any:
        weights = {f"gluw{j}.{kind}": t for j, (w, bias) in enumerate(((p.w1, p.b1), (p.w2, p.b2), (p.w3, p.b3)), 1)
                   for kind, t in (("weight", w), ("bias", bias)) if t is not None}
        return b.glu(x, weights, "")

    return EngineOps(engine, {
        "linear": lambda x, weight, bias=None: b.linear(x, weight, bias),
        "glu": glu,
        "layer_norm": lambda x, gamma, beta, eps=EPS_LN: b.layer_norm(x, gamma, beta, eps),
        "sigmoid": b.sigmoid,
        "silu": b.silu,
        "iswiglu": b.iswiglu,
        "density_operator": b.density,
        "cumulative_density_operator": b.cumulative_density,
        "metric_tensor": lambda a, W, bias, eps_adj=EPS_ADJ: b.metric_tensor(a, W, bias, eps_adj),
        "potential_tensor": b.potential_tensor,
        "energy_curvature": b.energy_curvature,
        "mix_values": b.mix_values,
    })


class _Refused:
    """A body role the fallback cannot give (the engine's parameters beyond what it hands over)."""

    def __init__(self, why: str) -> None:
        self._why = why

    def __getattr__(self, name: str) -> Any:
        raise Unsupported(f"{self._why} (it reads .{name})")

    def __getitem__(self, name: str) -> Any:
        raise Unsupported(f"{self._why} (it reads [{name!r}])")


class BodyLayerParams(_Refused):
    """The ``lp`` a fallback body gets: the layer's switch-added tensors (``extra``, by name after the layer prefix,
    as :attr:`pldr_ref.params.LayerParams.extra`) in the engine's arrays; any other field is refused."""

    def __init__(self, extra: Mapping[str, Any], why: str) -> None:
        super().__init__(why)
        self.extra = MappingProxyType(dict(extra))


def run_body(engine: str, stage: Stage, ops: Ops, config: Any, values: Mapping[str, Any], *,
             param: Callable[[str], Any], is_array: Callable[[Any], bool]) -> tuple[Any, ...]:
    """``stage``'s float64 body run in ``ops`` on the engine's arrays: its outputs in ``Stage.outputs`` order.

    ``values``: the stage's inputs by trace name (as the stage reads them, :func:`pldr_ref.registry.read_view`) and
    the optional ones its body takes; ``param(name)``: the engine's tensor of a parameter, named after the layer
    prefix for a per-layer stage (the body's ``lp.extra``: the switch-added tensors of ``config``), in full for a
    model-level one (the body's ``params[name]``); ``is_array(v)``: whether ``v`` is one of the engine's arrays.
    Raises :class:`~pldr_ref.harness.protocol.Unsupported` with the reason when the body needs what the fallback
    cannot give or leaves the engine's arrays.
    """
    where = f"the {engine} engine has no entry for stage {stage.name!r} and runs its registry body"
    roles: dict[str, Any] = {"config": config, "ops": ops}
    if stage.per_layer:
        extra = {p.name: param(p.name) for p in added_params(config, per_layer=True)}
        roles["lp"] = BodyLayerParams(extra, f"{where}, which reads a layer parameter beyond its switch-added "
                                             f"tensors (lp.extra); give the stage an entry in the engine's table")
        roles["params"] = _Refused(f"{where}, which reads the model's parameters in a per-layer stage")
    else:
        roles["params"] = _ModelParams(param, where)
        roles["lp"] = _Refused(f"{where}, which reads a layer's parameters in a model-level stage")
    args = {n: roles[n] for n in stage.body_roles}
    missing = [n for n, required in stage.body_inputs if required and values.get(n) is None]
    if missing:
        raise Unsupported(f"{where}, which needs inputs {missing} the engine does not hold")
    args.update({n: values[n] for n, _ in stage.body_inputs if values.get(n) is not None})
    try:
        out = stage.body(**args)
    except (TypeError, AttributeError) as exc:  # a NumPy-only call on the engine's arrays
        raise Unsupported(f"{where}, which is not written only with ops primitives and array methods: "
                          f"{type(exc).__name__}: {exc}") from exc
    outs = tuple(out) if len(stage.outputs) > 1 else (out,)
    bad = [n for n, v in zip(stage.outputs, outs, strict=False) if not is_array(v)]
    if len(outs) != len(stage.outputs) or bad:
        raise Unsupported(f"{where}, which left the engine's arrays for outputs {bad or list(stage.outputs)} "
                          f"(a NumPy function on the engine's arrays): give the stage an entry in the engine's table")
    return tuple(outs)


class _ModelParams(_Refused):
    """The ``params`` a model-level fallback body gets: the engine's tensors by full name."""

    def __init__(self, param: Callable[[str], Any], where: str) -> None:
        super().__init__(f"{where}, which reads the model's parameters as attributes")
        self._param = param

    def __getitem__(self, name: str) -> Any:
        return self._param(name)


def runnable_stages(table: Mapping[str, Any], engine: str) -> tuple[str, ...]:
    """The registry stages an engine with stage table ``table`` runs, in registry order: its entries, and every other
    stage the switch table does not gate off for ``engine`` (a key of :data:`pldr_ref.switches.ENGINES`;
    :func:`pldr_ref.registry.switch_gated_stages`), which it runs through its registry body (:func:`run_body`) --
    or refuses at run time with the reason."""
    gated = switch_gated_stages(engine)
    return tuple(s.name for s in ALL_STAGES if s.name in table or s.name not in gated)


__all__ = ["NOT_PROVIDED", "BodyLayerParams", "EngineOps", "engine_ops", "run_body", "runnable_stages"]
