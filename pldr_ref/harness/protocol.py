"""What a backend is: an object named ``module:attr`` that declares its capabilities and runs cases.

A backend implements three members (duck typing; :class:`Backend` is the typing protocol):

* ``name: str`` -- shown in reports;
* ``capabilities() -> Capabilities`` -- the dtypes, case kinds, isolated stages, caches, G modes
  and config switch values it supports.  Anything outside is reported as *unsupported*, never
  skipped silently;
* ``run_case(case, dtype) -> dict[str, np.ndarray]`` -- run a fixture case (``case.kind``,
  ``case.config``, ``case.params``, ``case.args``, ``case.inputs``; see ``docs/fixtures.md``) in
  ``dtype`` and return named outputs (the golden names: ``embed``, ``x0``, ``layers.{l}.{stage}``,
  ``logits`` for model cases, ``out`` for op cases).  Returning fewer trace entries than the
  golden case holds is allowed only when ``capabilities().full_trace`` is False; then only the
  case's primary outputs (:func:`primary_outputs`) are required;
* ``run_stage(request: StageRequest) -> dict[str, np.ndarray]`` (optional; needed for every stage
  listed in ``capabilities().stages``) -- run ONE stage of the forward map from golden upstream
  values and return that stage's outputs by leaf name (e.g. ``{"q_rot": .., "k_rot": ..}``).

A backend may also raise :class:`Unsupported` from ``run_case`` / ``run_stage`` for a feature it
only discovers at run time; the harness records it as unsupported with the message.

``module:attr`` may name an instance, a class or a zero-argument factory (see :func:`load_backend`).
"""

from __future__ import annotations

import dataclasses
import importlib
import os
import sys
from collections.abc import Mapping
from typing import Any, Protocol, runtime_checkable

import numpy as np

from pldr_ref.config import PLDRConfig, switch_defaults
from pldr_ref.params import Params
from pldr_ref.switches import BY_NAME, ENGINE_SWITCHES

#: Every dtype name the harness knows (backend outputs are compared with ULPs in that dtype).
DTYPES = ("float64", "float32", "bfloat16", "float16")

#: Cache features a backend may declare: KV-cache steps and G-cache steps (spec §8).
CACHE_FEATURES = ("kv", "g")

#: Config switches whose values a backend declares (PLDRConfig field -> values), spec §11: every switch of the
#: switch table (:mod:`pldr_ref.switches`) that an engine computes with (all but ``init_scheme``).
SWITCHES = ENGINE_SWITCHES

#: The arithmetic a backend may declare (``docs/tolerances.md``, "The policy"): ``float32-accumulate`` -- what GPU
#: kernels do (cuBLAS, ``tl.dot``, FlashAttention): products and reductions accumulated in float32, softmax and
#: LayerNorm statistics and every elementwise op in float32, stage outputs stored in the dtype (the default);
#: ``dtype-accumulate`` -- some sums (a matrix product, P@V, Q G K^T, a reduction) accumulated in the 16-bit dtype;
#: ``dtype-elementwise`` -- every op's output stored in the dtype (a matrix product's inside a stage included, and
#: elementwise work: softmax, LayerNorm, activations, powers), as eager 16-bit frameworks do (the bundled torch and
#: JAX backends).  A backend declaring either dtype arithmetic is judged against every
#: calibration member, those making these choices included (a wider allowance); in float32 they coincide.
ARITHMETICS = ("float32-accumulate", "dtype-accumulate", "dtype-elementwise")
#: What a backend that declares nothing is judged against.
DEFAULT_ARITHMETIC = ("float32-accumulate",)

#: The issue-12 emulation switches at the values a backend computes when it implements none of them
#: (float64 table and rotation, exact scale, mask added and softmax taken in the compute dtype, masked rows
#: as the arithmetic gives them, pads from the token id).  Since a switch a backend does not declare means its
#: default only, declaring these is the same as leaving them out; they stay for backends written before.  The
#: bundled backends declare theirs from the switch table (:func:`pldr_ref.switches.declared_switches`).
DEFAULT_EMULATION_SWITCHES: dict[str, tuple[str, ...]] = {k: (v,) for k, v in switch_defaults().items()}


def every_value(*switches: str) -> dict[str, tuple[str, ...]]:
    """``Capabilities.switches`` claiming every value of each of ``switches`` (in the switch table today): what a
    backend writes for the switches it implements in full, e.g. ``every_value("rope_layout", "mask_mode")``.  A
    switch it does not name keeps its default only, so a switch added to the table later is never claimed by a
    backend written before it.  ``ValueError`` naming the known switches for an unknown one."""
    bad = [s for s in switches if s not in SWITCHES]
    if bad:
        raise ValueError(f"unknown switch(es) {bad}; known: {SWITCHES}")
    return {s: BY_NAME[s].choices for s in switches}


class Unsupported(Exception):  # noqa: N818 - a verdict, not an error
    """Raised by a backend for a feature it does not implement; reported as *unsupported*."""


class CaseTimeout(BaseException):  # raised into a backend: `except Exception` in it must not catch it
    """Raised inside a backend call that ran past the per-case time limit (``--timeout``)."""


@dataclasses.dataclass(frozen=True)
class Capabilities:
    """What a backend can run.

    dtypes: compute dtypes (subset of :data:`DTYPES`); kinds: case kinds it runs end to end
    (``forward``, ``decoder_layer``, op names of ``pldr_ref.registry.OP_FUNCTIONS``, cache kinds);
    stages: ``pldr_ref.registry.FORWARD_STAGES`` names it can run in isolation; caches: subset of
    :data:`CACHE_FEATURES`; switches: PLDRConfig switch -> supported values (a switch absent here means its
    default value only: a switch added to the table later, or one the backend forgot, is never claimed; a
    switch it implements in full is listed with every value, :func:`every_value`; G modes are declared as
    ``switches={"g_mode": (...)}``); full_trace:
    returns every trace entry, not only the primary outputs; position_ids: honours per-row RoPE
    positions given as the case input ``position_ids`` (issue 12; cases with that input are
    unsupported otherwise, never silently run with default positions); arithmetic: the arithmetic its
    16-bit kernels use (:data:`ARITHMETICS`; default :data:`DEFAULT_ARITHMETIC`, the GPU kernels' float32
    accumulation), which sets the calibration members it is judged against.
    """

    dtypes: tuple[str, ...]
    kinds: tuple[str, ...]
    stages: tuple[str, ...] = ()
    caches: tuple[str, ...] = ()
    switches: Mapping[str, tuple[str, ...]] = dataclasses.field(default_factory=dict)
    full_trace: bool = True
    position_ids: bool = False
    arithmetic: tuple[str, ...] = DEFAULT_ARITHMETIC

    def __post_init__(self) -> None:
        bad = [d for d in self.dtypes if d not in DTYPES]
        if bad:
            raise ValueError(f"Capabilities.dtypes has unknown dtype(s) {bad}; known: {DTYPES}")
        bad = [c for c in self.caches if c not in CACHE_FEATURES]
        if bad:
            raise ValueError(f"Capabilities.caches has unknown feature(s) {bad}; known: {CACHE_FEATURES}")
        bad = [s for s in self.switches if s not in SWITCHES]
        if bad:
            raise ValueError(f"Capabilities.switches has unknown switch(es) {bad}; known: {SWITCHES}")
        if isinstance(self.arithmetic, str) or not self.arithmetic:
            raise ValueError(f"Capabilities.arithmetic must be a non-empty tuple of {ARITHMETICS}, "
                             f"got {self.arithmetic!r}")
        bad = [a for a in self.arithmetic if a not in ARITHMETICS]
        if bad:
            raise ValueError(f"Capabilities.arithmetic has unknown arithmetic(s) {bad}; known: {ARITHMETICS}")

    def supported(self, switch: str) -> tuple[str, ...]:
        """The values of ``switch`` the backend supports: those declared, else the switch's default alone."""
        return tuple(self.switches.get(switch, (BY_NAME[switch].default,)))

    @property
    def g_modes(self) -> tuple[str, ...]:
        """The G modes the backend supports (``switches["g_mode"]``, else the default ``learned`` alone)."""
        return self.supported("g_mode")

    def to_dict(self) -> dict[str, Any]:
        """JSON-able form (for reports)."""
        return {"dtypes": list(self.dtypes), "kinds": sorted(self.kinds), "stages": list(self.stages),
                "caches": list(self.caches), "switches": {k: list(v) for k, v in sorted(self.switches.items())},
                "full_trace": self.full_trace, "arithmetic": list(self.arithmetic)}


@dataclasses.dataclass(frozen=True)
class StageRequest:
    """One stage to run in isolation from golden upstream values.

    stage: a ``FORWARD_STAGES`` name; layer: decoder layer index (None for ``embedding``,
    ``input_norm``, ``lm_head``); config/params: the case's model; dtype: compute dtype;
    inputs: golden float64 / int64 / bool arrays by leaf name -- every trace entry of the
    layer that precedes the stage (``x``, ``q``, ``k``, ``v``, ``q_rot``, ``k_rot``, ``A0``, ``A``,
    ``A_LM``, ``A_P``, ``G_LM``, ``scores``, ``E``, ``ctx``, ``attn_out``, ``out1``, ``ffn_out``) plus
    ``positions`` [S] (absolute positions of the rows), ``mask`` (bool [B|1, 1, S, T], True =
    forbidden; absent when the case has no mask), ``token_ids`` (``embedding``), ``embed``
    (``input_norm``) and ``hidden`` (``lm_head``).  See ``STAGE_INPUTS`` in
    :mod:`pldr_ref.harness.verdict.localize` for what each stage is guaranteed to receive.
    """

    stage: str
    layer: int | None
    config: PLDRConfig
    params: Params
    dtype: str
    inputs: Mapping[str, np.ndarray]


@runtime_checkable
class Backend(Protocol):
    """Typing protocol of a backend (see module docstring)."""

    name: str

    def capabilities(self) -> Capabilities: ...

    def run_case(self, case: Any, dtype: str) -> dict[str, np.ndarray]: ...


def primary_outputs(case: Any) -> tuple[str, ...]:
    """Outputs every backend must produce for ``case``: the logits of every call (``forward``,
    ``cached_generation``), the layer output ``layers.{l}.out2`` (``decoder_layer``), else every
    golden output (op and scoring kinds)."""
    names = tuple(case.outputs)
    if case.kind in ("forward", "cached_generation"):
        return tuple(n for n in names if n == "logits" or n.endswith(".logits"))
    if case.kind == "decoder_layer":
        return tuple(n for n in names if n.endswith(".out2"))
    return names


def unsupported_reason(backend: Any, case: Any, dtype: str) -> str | None:
    """Why ``backend`` cannot run ``case`` in ``dtype`` according to its declared capabilities, or None."""
    caps = backend.capabilities()
    if dtype not in caps.dtypes:
        return f"dtype {dtype} not supported (declared: {', '.join(caps.dtypes)})"
    if case.kind not in caps.kinds:
        return f"case kind {case.kind!r} not supported"
    config = getattr(case, "config", None)
    if config is not None:
        differing = differing_switches(caps, config)
        if differing:
            return "; ".join(f"{switch}={value!r} not supported ("
                             + (f"declared: {', '.join(values)})" if switch in caps.switches
                                else f"not declared: its default {values[0]!r} only)")
                             for switch, value, values in differing)
    if "position_ids" in (getattr(case, "inputs", {}) or {}) and not caps.position_ids:
        return "per-row position_ids not supported (Capabilities.position_ids is False)"
    needed = case_cache_features(case)
    missing = [f for f in needed if f not in caps.caches]
    if missing:
        return f"cache feature(s) {', '.join(missing)} not supported"
    return None


def differing_switches(caps: Capabilities, config: Any) -> list[tuple[str, Any, tuple[str, ...]]]:
    """Every (switch, the config's value, the supported values) where the config's value is not supported (a switch
    the backend does not declare supports its default only: :meth:`Capabilities.supported`), in the switch table's
    order (all of them: a backend learns at once everything that keeps it from a case)."""
    out = []
    for switch in SWITCHES:
        values = caps.supported(switch)
        if getattr(config, switch) not in values:
            out.append((switch, getattr(config, switch), values))
    return out


def case_cache_features(case: Any) -> tuple[str, ...]:
    """Cache features a case exercises: ``kv`` / ``g`` from its args or its cache inputs."""
    args = getattr(case, "args", {}) or {}
    inputs = getattr(case, "inputs", {}) or {}
    feats = []
    if args.get("kv_cache") or args.get("kv") or "past_k" in inputs or "frozen_A" in inputs:
        feats.append("kv")
    if args.get("g_cache") or args.get("g") or "frozen_G_LM" in inputs:
        feats.append("g")
    return tuple(feats)


def load_backend(spec: str) -> Any:
    """The backend named ``module:attr``: an instance is returned as is; a class or factory is called
    with no arguments.  The module is imported from the current folder or the Python path.  Raises
    ``ValueError`` with the reason if the name or the object is wrong."""
    if not isinstance(spec, str) or spec.count(":") != 1:
        raise ValueError(f"backend must be given as MODULE:ATTR, got {spec!r}")
    module_name, attr = spec.split(":")
    if os.getcwd() not in sys.path:  # like `python -m`: a backend module in the current folder is importable
        sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ValueError(f"cannot import backend module {module_name!r}: {exc}") from exc
    obj = module
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise ValueError(f"module {module_name!r} has no attribute {attr!r}")
        obj = getattr(obj, part)
    if isinstance(obj, type) or (callable(obj) and not hasattr(obj, "run_case")):
        obj = obj()
    missing = [m for m in ("name", "capabilities", "run_case") if not hasattr(obj, m)]
    if missing:
        raise ValueError(f"{spec} is not a backend: it lacks {', '.join(missing)} (see pldr_ref.harness.protocol)")
    caps = obj.capabilities()
    if not isinstance(caps, Capabilities):
        raise ValueError(f"{spec}.capabilities() must return pldr_ref.harness.protocol.Capabilities, "
                         f"got {type(caps).__name__}")
    if caps.stages and not hasattr(obj, "run_stage"):
        raise ValueError(f"{spec} declares isolated stages but has no run_stage method")
    return obj
