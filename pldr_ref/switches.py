"""The switch table: every string switch of :class:`~pldr_ref.config.PLDRConfig`, in one place.

A switch is a ``PLDRConfig`` field with a small set of allowed string values (spec ``equations.md`` §11: each
discrepancy between the released implementations is a named switch, never a silent choice).  :data:`SWITCHES`
holds one :class:`Switch` record per field: its values with a one-line meaning each, its default, what it
means, its group, and which values each engine implements.  Everything else is derived from it:

* ``PLDRConfig``'s allowed values and their validation (:data:`pldr_ref.config._CHOICES`, ``ROPE_LAYOUTS`` ...);
* :data:`pldr_ref.config.EMULATION_SWITCHES` and :func:`pldr_ref.config.switch_defaults`;
* the values a backend declares (:func:`declared_switches`, ``Capabilities.switches``;
  :data:`pldr_ref.harness.protocol.SWITCHES`, ``DEFAULT_EMULATION_SWITCHES``);
* the values the exact engines evaluate (:data:`pldr_ref.exact.arb.model.ARB_SWITCH_VALUES`,
  :func:`require_engine_support` for the mpmath tier);
* the function-level value lists of :mod:`pldr_ref.rope` and :mod:`pldr_ref.attention`, and every error message
  that names allowed values (:meth:`Switch.error`);
* the switch-coverage tests (``tests/test_switches_mutants.py``, ``tests/test_switch_table.py``).

``docs/adding_a_switch.md`` walks a contributor through adding one.  This module imports nothing from
``pldr_ref``, so every module can read the table without an import cycle.
"""

from __future__ import annotations

import dataclasses
import types
from collections.abc import Mapping

#: The engines the table speaks for, with what each is.  A value an engine does not implement is refused by
#: name (the harness reports the case *unsupported*; the exact engines raise ``NotImplementedError``).
ENGINES: Mapping[str, str] = types.MappingProxyType({
    "float64": "the float64 NumPy reference (pldr_ref.forward, harness ReferenceBackend)",
    "mpmath": "the mpmath exact tier (pldr_ref.exact, engine='mpmath'): a value it does not evaluate has no exact "
              "statement there",
    "arb": "the certified ball-arithmetic tier (pldr_ref.exact, engine='arb')",
    "torch": "the bundled torch backend (pldr_ref.backends.torch:TorchBackend)",
    "numpy32": "the float32 NumPy backend (pldr_ref.backends.numpy32)",
    "jax": "the JAX backend (pldr_ref.backends.jax)",
    "onnx": "the ONNX export and ONNX file backends (pldr_ref.backends.onnx_backend)",
    "triton": "the fused Triton attention backend (TorchBackend with a Triton attention core: torch's "
              "capabilities)",
})

#: Switch groups: ``model`` (an architecture choice), ``quirk`` (a spec §11 discrepancy between the released
#: code bases), ``emulation`` (an issue-12 emulation switch: one released-code numerical behaviour, see
#: :data:`pldr_ref.config.EMULATIONS`), ``init`` (parameter initialisation only: no engine computes with it).
GROUPS = ("model", "quirk", "emulation", "init")

#: The value of a switch that follows another switch (``rope_table``, ``rope_arithmetic`` follow
#: ``rope_precision``); the functions of :mod:`pldr_ref.rope` take the resolved (concrete) values.
AUTO = "auto"


@dataclasses.dataclass(frozen=True)
class SwitchParam:
    """A parameter tensor that a switch value adds to the model (an optional stage's own weights).

    name: for a per-layer tensor the name after the layer prefix (``"q_norm.weight"`` is
    ``decoder.dec_layers.{i}.q_norm.weight``), for a model-level one the whole name; shape: each axis a ``PLDRConfig``
    size field (``"d_model"``, ``"d_k"``, ``"num_heads"``, ...) or an int.  The tensor exists only while the switch
    has that value, so every config at the default keeps its parameters (and every golden value) unchanged;
    :func:`pldr_ref.params.param_shapes` lists it (after its layer's tensors, or before the LM head), ``init_params``
    initialises it by its name as any other tensor (``*norm*``: gain 1, shift 0), and a per-layer one is in
    :attr:`pldr_ref.params.LayerParams.extra` under ``name``.
    """

    name: str
    shape: tuple[str | int, ...]
    per_layer: bool = True

    def resolve(self, config: object) -> tuple[int, ...]:
        """The shape at ``config`` (size fields read from it)."""
        return tuple(int(getattr(config, a)) if isinstance(a, str) else int(a) for a in self.shape)


@dataclasses.dataclass(frozen=True)
class Switch:
    """One ``PLDRConfig`` string field and its allowed values (see the module docstring).

    name: the ``PLDRConfig`` field; default: its default value; meaning: one line; values: value -> one-line
    meaning, in the order the values are listed everywhere; group: one of :data:`GROUPS`; engines: engine (every
    key of :data:`ENGINES`) -> the values it implements (always including the default); uncased: values no stored
    golden case can carry (they run a user's callable), exempt from the fixture coverage; params: value -> the
    parameter tensors that value adds (:class:`SwitchParam`; never the default's).
    """

    name: str
    default: str
    meaning: str
    values: Mapping[str, str]
    group: str
    engines: Mapping[str, tuple[str, ...]]
    uncased: tuple[str, ...] = ()
    params: Mapping[str, tuple[SwitchParam, ...]] = dataclasses.field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "values", types.MappingProxyType(dict(self.values)))
        object.__setattr__(self, "params", types.MappingProxyType({v: tuple(p) for v, p in self.params.items()}))
        object.__setattr__(self, "engines", types.MappingProxyType({e: tuple(v) for e, v in self.engines.items()}))
        where = f"Switch {self.name!r}"
        if len(self.values) < 2:
            raise ValueError(f"{where}: a switch needs at least two values, got {tuple(self.values)}")
        if self.default not in self.values:
            raise ValueError(f"{where}: default {self.default!r} is not one of {self.choices}")
        if self.group not in GROUPS:
            raise ValueError(f"{where}: group {self.group!r} is not one of {GROUPS}")
        if set(self.engines) != set(ENGINES):
            raise ValueError(f"{where}: engines must name exactly {tuple(ENGINES)}, got {tuple(self.engines)}")
        if not set(self.uncased) <= set(self.values) or self.default in self.uncased:
            raise ValueError(f"{where}: uncased {self.uncased} must be non-default values of {self.choices}")
        if not set(self.params) <= set(self.values) or self.params.get(self.default):
            raise ValueError(f"{where}: params must be keyed by non-default values of {self.choices}")
        for engine, implemented in self.engines.items():
            unknown = [v for v in implemented if v not in self.values]
            if unknown or self.default not in implemented:
                raise ValueError(f"{where}: engine {engine!r} lists {implemented}; it must hold the default "
                                 f"{self.default!r} and only values of {self.choices}")

    @property
    def choices(self) -> tuple[str, ...]:
        """The allowed values, in table order."""
        return tuple(self.values)

    @property
    def concrete(self) -> tuple[str, ...]:
        """The allowed values without :data:`AUTO` (what a function takes once ``auto`` is resolved)."""
        return tuple(v for v in self.values if v != AUTO)

    def implemented_by(self, engine: str) -> tuple[str, ...]:
        """The values ``engine`` implements (``KeyError`` naming the engines for an unknown one)."""
        if engine not in ENGINES:
            raise KeyError(f"unknown engine {engine!r}; the table knows {tuple(ENGINES)}")
        return self.engines[engine]

    def error(self, value: object, owner: str | None = None, allowed: tuple[str, ...] | None = None) -> ValueError:
        """The ``ValueError`` for a value outside ``allowed`` (default: :attr:`choices`), naming the field, the
        value and the allowed values: ``"{owner}.{name}={value!r} is not one of (...)"`` for a config field,
        ``"{name} must be one of (...), got {value!r}"`` for a function argument (``owner`` None)."""
        allowed = self.choices if allowed is None else allowed
        if owner is not None:
            return ValueError(f"{owner}.{self.name}={value!r} is not one of {allowed}")
        return ValueError(f"{self.name} must be one of {allowed}, got {value!r}")

    def check(self, value: object, owner: str | None = None, allowed: tuple[str, ...] | None = None) -> None:
        """Raise :meth:`error` unless ``value`` is in ``allowed`` (default: :attr:`choices`)."""
        if value not in (self.choices if allowed is None else allowed):
            raise self.error(value, owner, allowed)


def _engines(values: Mapping[str, str], default: str, *, every: tuple[str, ...],
             only: Mapping[str, tuple[str, ...]] | None = None) -> dict[str, tuple[str, ...]]:
    """Engine -> implemented values: the engines in ``every`` implement every value, those in ``only`` the values
    given, every other engine the default alone (no engine claims a value its record does not name)."""
    only = dict(only or {})
    return {e: tuple(values) if e in every else only.get(e, (default,)) for e in ENGINES}


def _switch(name: str, default: str, group: str, meaning: str, values: Mapping[str, str], *,
            every: tuple[str, ...], only: Mapping[str, tuple[str, ...]] | None = None,
            uncased: tuple[str, ...] = (), params: Mapping[str, tuple[SwitchParam, ...]] | None = None) -> Switch:
    return Switch(name, default, meaning, values, group, _engines(values, default, every=every, only=only), uncased,
                  dict(params or {}))


#: Every engine: the ``every=`` of a switch each engine implements in full (the model and quirk switches).
_ALL = tuple(ENGINES)

#: The engines that implement every issue-12 emulation switch value (the float64 reference and the mpmath tier);
#: every other engine computes them at their defaults.
_EMULATING = ("float64", "mpmath")

#: The table, in ``PLDRConfig`` field order (the order of the derived value tuples and of the backends'
#: declared switches).
SWITCHES: tuple[Switch, ...] = (
    _switch("rope_layout", "interleaved", "model", "which coordinates RoPE rotates together", {
        "interleaved": "pairs (x_2i, x_2i+1): torchtune, PT-v510, HF reference_rope=True",
        "half": "pairs (x_i, x_i+d_k/2): keras-nlp rotate_half, TF-v500/v900, HF reference_rope=False",
    }, every=_ALL),
    _switch("rope_precision", "exact", "quirk", "the legacy RoPE switch: table and rotation together", {
        "exact": "angles p * omega_i and the rotation in float64",
        "float32": "the float32 table (every step correctly rounded) and a float32 rotation",
    }, every=_ALL),
    _switch("mask_mode", "ideal", "quirk", "how a masked key enters the logits", {
        "ideal": "-inf where masked: an exact zero weight",
        "additive": "scores + mask_value (-1e9) where masked (PT-v510, TF)",
        "finfo_min": "scores + finfo(float64).min where masked (HF eager)",
    }, every=_ALL),
    _switch("embed_scale_precision", "exact", "quirk", "the embedding scale sqrt(d)", {
        "exact": "sqrt(d) in float64",
        "float32": "the float32 sqrt(d) (PT-v510, TF)",
    }, every=_ALL),
    _switch("metric_learner", "v500", "model", "the residual network that learns A from A0", {
        "v500": "residual GLU units on d_k-wide rows (PLDRv5)",
        "v900": "lifted to A_dff_depth, residual units, dropped back to d_k (PLDRv9)",
        "none": "no metric learner (a fixed G needs none)",
    }, every=_ALL),
    _switch("g_mode", "learned", "model", "where the energy-curvature tensor G_LM comes from", {
        "learned": "PLGA: A -> A_LM -> A_P -> G_LM from the layer's parameters",
        "identity": "G_LM = I (scaled dot-product attention)",
        "random": "a fixed random G_LM buffer",
        "external": "a fixed G_LM given by the user (e.g. a trained one)",
    }, every=_ALL),
    _switch("gram_mode", "global", "model", "which query rows form the density operator A0", {
        "global": "one Gram of every row per head",
        "cumulative": "a running Gram per query row (causal A0)",
    }, every=_ALL),
    _switch("init_scheme", "torch", "init", "how init_params draws parameters (never the forward map)", {
        "torch": "torch nn.Linear / nn.Embedding defaults",
        "keras": "Keras glorot_uniform / zeros",
        "hf": "HF xavier_uniform",
    }, every=_ALL),
    _switch("rope_table", AUTO, "emulation", "the RoPE cos/sin table source", {
        AUTO: "follow rope_precision",
        "exact": "real angles p * omega_i in float64",
        "float32": "the torchtune / keras-nlp float32 table, every step correctly rounded",
        "keras-0.6.4": "keras-nlp 0.6.4's omega = 1 / base^e evaluated in float64",
        "explicit": "a table given by the user (pldr_ref.rope.RopeTable)",
    }, every=_EMULATING),
    _switch("rope_arithmetic", AUTO, "emulation", "the arithmetic of the RoPE rotation", {
        AUTO: "follow rope_precision (exact -> float64, float32 -> float32)",
        "float64": "q, k and table used as they are",
        "float32": "q, k and table rounded to float32, rotation in float32 (torchtune, float32 buffers)",
        "float64_qk_f32": "q, k rounded to float32, rotation in float64 (torchtune after model.double())",
    }, every=_EMULATING),
    _switch("score_scale", "exact", "emulation", "how 1/sqrt(d_k) is applied to the scores", {
        "exact": "divide by sqrt(d_k) in float64",
        "float32": "divide by the float32 sqrt(d_k) (PT-v510, TF)",
        "reciprocal": "multiply by 1/sqrt(d_k) rounded in the model dtype (HF scaling)",
    }, every=_EMULATING),
    _switch("mask_add_dtype", "float64", "emulation", "the dtype in which the additive mask is added", {
        "float64": "added in float64",
        "float32": "added in float32 (TF, PT float32 training; needs mask_mode='additive')",
    }, every=_EMULATING),
    _switch("softmax_precision", "float64", "emulation", "the precision of the attention softmax", {
        "float64": "softmax in float64",
        "float32": "the correctly rounded float32 softmax of the float32 logits",
        "explicit": "a float32 softmax kernel given by the user (pldr_ref.attention.SoftmaxKernel)",
    }, every=("float64",), only={"mpmath": ("float64", "float32")}, uncased=("explicit",)),
    _switch("masked_row", "arithmetic", "emulation", "a query row whose every key is masked", {
        "arithmetic": "what the mask arithmetic and the softmax give",
        "zeros": "forced to zeros (HF sdpa's safe softmax)",
        "uniform": "forced to 1/T",
        "nan": "forced to NaN (HF eager with a -inf mask)",
    }, every=_EMULATING),
    _switch("pad_source", "token", "emulation", "where padding keys come from by default", {
        "token": "ids equal to pad_id (native code)",
        "attention_mask": "only an explicit HF attention mask (HF never masks without one)",
    }, every=(*_EMULATING, "arb")),  # arb: the padding is resolved before the engine runs
)

#: Switch name -> record.
BY_NAME: Mapping[str, Switch] = types.MappingProxyType({s.name: s for s in SWITCHES})


def switch(name: str) -> Switch:
    """The record of switch ``name`` (``KeyError`` naming the known switches)."""
    if name not in BY_NAME:
        raise KeyError(f"unknown switch {name!r}; the table has {tuple(BY_NAME)}")
    return BY_NAME[name]


def added_params(config: object, *, per_layer: bool) -> tuple[SwitchParam, ...]:
    """The parameter tensors the switch values of ``config`` add (:attr:`Switch.params`), per layer or model-level,
    in table order."""
    return tuple(p for s in SWITCHES for p in s.params.get(getattr(config, s.name, s.default), ())
                 if p.per_layer == per_layer)


def choices() -> dict[str, tuple[str, ...]]:
    """Switch name -> allowed values (``PLDRConfig``'s validation table)."""
    return {s.name: s.choices for s in SWITCHES}


def names(*groups: str) -> tuple[str, ...]:
    """The switch names of ``groups`` (every group when none is given), in table order."""
    bad = [g for g in groups if g not in GROUPS]
    if bad:
        raise ValueError(f"unknown switch group(s) {bad}; known: {GROUPS}")
    return tuple(s.name for s in SWITCHES if not groups or s.group in groups)


#: The switches an engine computes with (every group but ``init``): what a backend's capabilities may declare.
ENGINE_SWITCHES = names("model", "quirk", "emulation")


def declared_switches(engine: str) -> dict[str, tuple[str, ...]]:
    """The ``Capabilities.switches`` of ``engine``: every switch an engine computes with (:data:`ENGINE_SWITCHES`),
    with the values it implements (a switch a backend leaves out means its default only, so every one is listed)."""
    if engine not in ENGINES:
        raise KeyError(f"unknown engine {engine!r}; the table knows {tuple(ENGINES)}")
    return {s.name: s.engines[engine] for s in SWITCHES if s.name in ENGINE_SWITCHES}


def partial_switches(engine: str) -> dict[str, tuple[str, ...]]:
    """The switches of :func:`declared_switches` that ``engine`` implements at some values only, with those."""
    return {k: v for k, v in declared_switches(engine).items() if v != BY_NAME[k].choices}


def pinned_values(engine: str) -> dict[str, str]:
    """Switch -> the one value ``engine`` evaluates, for every switch it implements at a single value only.

    ``ValueError`` if the engine implements some switch at several but not all values (that engine then needs
    :func:`declared_switches`, which this flat form cannot express)."""
    declared = partial_switches(engine)
    several = {k: v for k, v in declared.items() if len(v) > 1}
    if several:
        raise ValueError(f"engine {engine!r} implements {several}: more than one value but not every value")
    return {k: v[0] for k, v in declared.items()}


def unsupported(engine: str, config: object) -> dict[str, object]:
    """Switch -> the config's value, for every value of ``config`` that ``engine`` does not implement."""
    return {name: getattr(config, name) for name, values in partial_switches(engine).items()
            if getattr(config, name) not in values}


def require_engine_support(engine: str, config: object) -> None:
    """``NotImplementedError`` naming each switch value of ``config`` that ``engine`` does not implement (never a
    silent evaluation at another value)."""
    off = unsupported(engine, config)
    if off:
        detail = "; ".join(f"{k}={v!r} (it evaluates {BY_NAME[k].engines[engine]})" for k, v in off.items())
        raise NotImplementedError(f"the {engine} engine does not evaluate {detail}: {ENGINES[engine]}")


def markdown() -> str:
    """The table as Markdown: one row per value (switch, group, value, meaning, the engines that implement it)
    (``docs/adding_a_switch.md`` holds it, checked by a test)."""
    engines = tuple(ENGINES)
    lines = ["| switch | group | value | meaning | implemented by |", "|---|---|---|---|---|"]
    for s in SWITCHES:
        for i, (value, meaning) in enumerate(s.values.items()):
            who = [e for e in engines if value in s.engines[e]]
            by = "every engine" if len(who) == len(engines) else ", ".join(who)
            if s.group == "init":
                by = "– (parameter initialisation only)"
            default = " (default)" if value == s.default else ""
            head = (f"`{s.name}`", s.group) if i == 0 else ("", "")
            lines.append(f"| {head[0]} | {head[1]} | `\"{value}\"`{default} | {meaning} | {by} |")
    return "\n".join(lines) + "\n"
