"""The one declarative registry of the forward map's stages and of the fixture kinds (ops).

A stage: name, the golden upstream values it reads (``inputs``), the trace entries it writes
(``outputs``), its float64 function, its equation and paper / Lean reference.  An op (fixture kind):
name, input tensors, scalar arguments, outputs, its float64 function (when it is one public function),
the forward stage it implements, the names of its float64 runner (:mod:`pldr_ref.fixtures.runners`)
and exact runner (:mod:`pldr_ref.fixtures.exact_tier`, :mod:`pldr_ref.exact.op_api`), and its reference.

Every other table derives from here: ``FORWARD_STAGES`` / ``STRUCTURE_STAGES`` / ``OP_FUNCTIONS`` and
:func:`stage_of_output` (used by ``docs/equations.md``, the fixture coverage and stage localisation),
``pldr_ref.harness.verdict.localize.STAGE_INPUTS``, the torch backend's ``STAGE_NAMES``, ``OP_KINDS`` and
``SCORING_KINDS``, ``pldr_ref.harness.policy.tolerance.SINGLE_STAGE_KINDS``, the float64 runner table
``pldr_ref.fixtures.runners.RUNNERS`` (by runner name) and the exact-tier table
``pldr_ref.fixtures.exact_tier.EXACT_RUNNERS`` (exact op called with the registry's inputs and arguments);
``exact.op_api.OPS`` is checked against it (``tests/test_harness_registry.py``).  Adding a stage or an op is
one entry here plus its functions.

The data flow is declared here too, per output (:class:`Output`): its layout, how its rows depend on the layer's
input rows, the cache input that freezes it in a layer case, the cache entry a cached generation keeps it in, and
the depth loop's chaining (:data:`DEPTH_LOOP`).  The harness derives its tables from these facts and spells no
trace name: the stage plan and the frozen / key-axis outputs of :mod:`pldr_ref.harness.verdict.localize`, the layouts
and row dependence of :mod:`pldr_ref.harness.verdict.representable`, the caches, Gram chain and model-level chain of
:mod:`pldr_ref.harness.verdict.unresolved_upstream`, the output order of
:func:`pldr_ref.harness.validate.trace_sort_key` (``tests/test_registry_data_flow.py`` greps them).
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

import pldr_ref.op_samples as op_samples
from pldr_ref import activations, attention, density, glu, layer, linear_map, metric_learner, model, norms, plga, rope
from pldr_ref.config import PLDRConfig
from pldr_ref.ops import FLOAT64_OPS, Ops
from pldr_ref.params import Params
from pldr_ref.switches import switch

#: Parameters of a stage body filled by role, not from the inputs: the model's parameters, this layer's, the config,
#: the arithmetic (:class:`pldr_ref.ops.Ops`).
BODY_ROLES = ("params", "lp", "config", "ops")

#: Layout [B, S, ...]: batch, row (the layer's residual stream; a model-level output's rows are the model's rows).
ROW = "row"
#: Layout [B, H, S, ...]: batch, head, the call's new rows.
HEAD_ROW = "head_row"
#: Layout [B, H, T, ...]: batch, head, every key the call attends to (T = cached + new; cached ones first).
HEAD_KEY = "head_key"
#: Layout of the Gram chain: [B, H, d_k, d_k] (global Gram), [B, H, S, d_k, d_k] (cumulative Gram: one per row).
GRAM = "gram"
#: Every layout.
LAYOUTS = (ROW, HEAD_ROW, HEAD_KEY, GRAM)

#: Row dependence: row i (key row j of a ``HEAD_KEY`` output) is computed from row i (j) of the layer's input only.
ROWS_OWN = "own"
#: Row dependence: computed from the Gram of the sample's rows -- every row (global Gram), the rows up to i
#: (cumulative Gram).
ROWS_GRAM = "gram"
#: Row dependence: row i is computed from input row i, the Gram and every key row, masked or not (the scores).
ROWS_KEYS = "keys"
#: Row dependence: row i is computed from input row i, the Gram and the key rows the mask lets it attend to; a fully
#: masked row i is computed from the mask alone (the attention weights and everything after them in the row).
ROWS_ATTENDED = "attended"
#: Every row dependence.
ROW_DEPENDENCES = (ROWS_OWN, ROWS_GRAM, ROWS_KEYS, ROWS_ATTENDED)

#: Cache use: a later call appends its own rows to the cached ones and computes the entry from both.
EXTENDED = "extended"
#: Cache use: a later call uses the cached value itself and does not recompute it.
FROZEN = "frozen"


@dataclasses.dataclass(frozen=True)
class CacheUse:
    """Where a cached generation keeps an output for later calls: final-cache entry ``{cache}.layers.{l}.{entry}``,
    used by a later call as :data:`EXTENDED` or :data:`FROZEN`."""

    cache: str
    entry: str
    use: str

    def __post_init__(self) -> None:
        if self.use not in (EXTENDED, FROZEN):
            raise ValueError(f"cache use must be {EXTENDED!r} or {FROZEN!r}, got {self.use!r}")


@dataclasses.dataclass(frozen=True)
class Output:
    """The data-flow facts of one trace entry a stage writes (what the harness derives its tables from).

    name: the trace name; layout: one of :data:`LAYOUTS` (a model-level stage's outputs are :data:`ROW`, the
    model-row axes); rows: one of :data:`ROW_DEPENDENCES`, how its rows depend on the layer input's rows (the
    representable part of an additive-mask case follows it); frozen_by: the ``decoder_layer`` cache input under which
    the layer uses a frozen value instead of computing it (its stage is then not isolated); cache: where a cached
    generation keeps it (:class:`CacheUse`); weights: the attention weights, where a dtype's unresolvability starts
    to propagate and the only output whose fully masked rows an isolated run cannot represent; aliases: other names
    of the same value in a case's outputs (the new rows' logits of a cached step); replaces: a trace entry written
    by an earlier stage that every later stage reads as this output instead, when this output exists (a stage that
    transforms a value in the data flow -- a QK-norm's normalized q for ``q`` -- so that the later stages and every
    engine's entries for them need no edit: :func:`read_view`).
    """

    name: str
    layout: str
    rows: str
    frozen_by: str | None = None
    cache: CacheUse | None = None
    weights: bool = False
    aliases: tuple[str, ...] = ()
    replaces: str | None = None

    def __post_init__(self) -> None:
        if self.layout not in LAYOUTS:
            raise ValueError(f"output {self.name!r}: layout {self.layout!r} is not one of {LAYOUTS}")
        if self.rows not in ROW_DEPENDENCES:
            raise ValueError(f"output {self.name!r}: rows {self.rows!r} is not one of {ROW_DEPENDENCES}")


@dataclasses.dataclass(frozen=True)
class Stage:
    """One stage of the forward map.

    name: stable identifier; function: the pldr_ref function of its equation (docs, op fixtures); outputs: trace
    names it produces (per layer unless ``per_layer`` is False), given as :class:`Output` declarations (their
    data-flow facts, kept in ``flow``; ``outputs`` then holds their names) -- every numeric stage declares them;
    equation: the math; paper: section/equation;
    lean: Lean file(s) whose lemmas constrain it; inputs: the golden upstream values an isolated run of
    the stage is guaranteed to receive (``mask``, ``positions`` and ``gram_offset`` are added when the case
    has them); enabled_by: the (config field, values) under which the stage runs (empty: always; e.g. the PLGA
    stages need ``g_mode="learned"``); body: the float64 function that computes the stage, the one
    :func:`pldr_ref.layer.decoder_layer` (or :func:`pldr_ref.model.depth_pass`) calls too.  A body's parameters
    are named after what it reads: :data:`BODY_ROLES` (``params``, ``lp``, ``config``, ``ops``: the arithmetic, a
    :class:`pldr_ref.ops.Ops`) and the names of its inputs (optional ones have defaults); it returns its outputs, in
    ``outputs`` order.  A body is never a primitive of :class:`pldr_ref.ops.Ops`: it computes with ``ops``'s.
    """

    name: str
    function: Callable[..., object]
    outputs: tuple[str, ...]
    equation: str
    paper: str
    lean: str = ""
    per_layer: bool = True
    inputs: tuple[str, ...] = ()
    body: Callable[..., object] | None = None
    enabled_by: tuple[tuple[str, tuple[str, ...]], ...] = ()
    flow: tuple[Output, ...] = ()

    def __post_init__(self) -> None:
        declared = tuple(o for o in self.outputs if isinstance(o, Output))
        if declared:
            if len(declared) != len(self.outputs):
                raise TypeError(f"stage {self.name!r}: declare every output as an Output, or none")
            object.__setattr__(self, "flow", declared)
            object.__setattr__(self, "outputs", tuple(o.name for o in declared))
        if self.flow and tuple(o.name for o in self.flow) != tuple(self.outputs):
            raise ValueError(f"stage {self.name!r}: flow {[o.name for o in self.flow]} != outputs {self.outputs}")

    def enabled(self, config: PLDRConfig) -> bool:
        """Whether ``config`` runs this stage: every (field, values) of ``enabled_by`` holds (empty: always)."""
        return all(getattr(config, field) in values for field, values in self.enabled_by)

    @functools.cached_property
    def body_inputs(self) -> tuple[tuple[str, bool], ...]:
        """(name, required) of every input parameter of the body (the roles excluded)."""
        sig = inspect.signature(self.body)
        return tuple((n, p.default is inspect.Parameter.empty) for n, p in sig.parameters.items()
                     if n not in BODY_ROLES)

    @functools.cached_property
    def body_roles(self) -> tuple[str, ...]:
        """The roles (:data:`BODY_ROLES`) the body takes."""
        return tuple(n for n in inspect.signature(self.body).parameters if n in BODY_ROLES)

    def run(self, params: Params, layer: int | None, config: PLDRConfig,
            inputs: Mapping[str, Any], ops: Ops = FLOAT64_OPS) -> dict[str, np.ndarray]:
        """The stage's outputs {name: array} computed from ``inputs`` (trace names, plus optional
        ``mask``, ``gram_offset``, ``rope_table``, ``on_stage``, ... when the body takes them) for layer ``layer``
        (None for a model-level stage) of ``params``, in the arithmetic ``ops`` (default float64)."""
        if self.per_layer and layer is None:
            raise ValueError(f"stage {self.name!r} needs a layer index")
        missing = [n for n, required in self.body_inputs if required and n not in inputs]
        if missing:
            raise KeyError(f"stage {self.name!r} needs inputs {missing}; got {sorted(inputs)}")
        inputs = read_view(inputs, self)
        roles = {"params": params, "config": config, "ops": ops}
        if "lp" in self.body_roles:
            roles["lp"] = params.layer(layer)
        args = {n: roles[n] for n in self.body_roles}
        args.update({n: inputs[n] for n, _ in self.body_inputs if n in inputs})
        out = self.body(**args)
        values = out if len(self.outputs) > 1 else (out,)
        if len(values) != len(self.outputs):
            raise ValueError(f"stage {self.name!r} body returned {len(values)} values for outputs {self.outputs}")
        return dict(zip(self.outputs, values, strict=True))


#: Structure checked exactly by the harness before the numeric stages (not trace entries of the golden
#: cases): positions and the causal + padding mask of a model call.
STRUCTURE_STAGES: tuple[Stage, ...] = (
    Stage("sequence_mask", model.sequence_mask, ("positions", "mask"),
          "positions = start_pos + [0..S); M[b,0,i,j] = j > i or key j padding (exact)", "spec §7.1-§7.2",
          per_layer=False, inputs=("token_ids",), body=model.positions_and_mask),
)

#: The PLGA stages run only with learned G (their parameters exist only then).
_LEARNED_G = (("g_mode", ("learned",)),)


def _kv_extended(entry: str) -> CacheUse:
    """Kept in the KV cache as ``entry``, extended by a later call's rows."""
    return CacheUse("kv_cache", entry, EXTENDED)


def _g_chain(name: str) -> Output:
    """An output of the learned-G chain after the metric learner: Gram layout, frozen by a G cache."""
    return Output(name, GRAM, ROWS_GRAM, frozen_by="frozen_G_LM", cache=CacheUse("g_cache", name, FROZEN))


def _attended(name: str) -> Output:
    """An output of the residual stream after the attention weights: row layout, the attended rows."""
    return Output(name, ROW, ROWS_ATTENDED)


#: The numeric stages in forward order.
FORWARD_STAGES: tuple[Stage, ...] = (
    Stage("embedding", model.embed, (Output("embed", ROW, ROWS_OWN),), "X0 = E[x] * sqrt(d)", "spec §2.1",
          per_layer=False, inputs=("token_ids",), body=model.embed),
    Stage("input_norm", norms.layer_norm, (Output("x0", ROW, ROWS_OWN),), "X0 <- LN(X0), eps = 1e-6", "spec §2.2",
          "LayerNorm", per_layer=False, inputs=("embed",), body=model.input_norm),
    Stage("qkv_projection", linear_map.linear,
          (Output("q", HEAD_ROW, ROWS_OWN), Output("k", HEAD_ROW, ROWS_OWN),
           Output("v", HEAD_KEY, ROWS_OWN, cache=_kv_extended("v"))),
          "Q = X Wq^T + bq (same for K, V), split heads", "spec §2.4.1-2", inputs=("x",), body=layer.qkv_projection),
    Stage("rope", rope.apply_rope,
          (Output("q_rot", HEAD_ROW, ROWS_OWN), Output("k_rot", HEAD_KEY, ROWS_OWN, cache=_kv_extended("k_rot"))),
          "y = R_p x (interleaved or half pairs)", "Def. 4.3, spec §2.4.3", "RoPE", inputs=("q", "k", "positions"),
          body=layer.rotary),
    Stage("density_operator", density.density_operator,
          (Output("A0", GRAM, ROWS_GRAM, frozen_by="frozen_A", cache=_kv_extended("gram")),), "A0 = Q~^T Q~",
          "eq. 3.2", "DensityOperator", inputs=("q_rot",), body=layer.gram),
    Stage("metric_learner", metric_learner.metric_learner,
          (Output("A", GRAM, ROWS_GRAM, frozen_by="frozen_A", cache=CacheUse("kv_cache", "A", FROZEN)),),
          "A = Res_R(...Res_1(LN(A0)))", "eq. 3.3, Prop. 3.11", "LayerNorm, Contraction", inputs=("A0",),
          body=layer.learned_metric, enabled_by=(("metric_learner", ("v500", "v900")),)),
    Stage("metric_tensor", plga.metric_tensor, (_g_chain("A_LM"),), "A_LM = iSwiGLU(W A + b) + eps_adj",
          "eq. 3.4, Prop. 3.7", "ISwiGLU, HadamardPower", inputs=("A",), body=layer.adjacency, enabled_by=_LEARNED_G),
    Stage("potential_tensor", plga.potential_tensor, (_g_chain("A_P"),), "A_P = A_LM^(o P)", "eq. 3.5",
          "HadamardPower", inputs=("A_LM",), body=layer.potential, enabled_by=_LEARNED_G),
    Stage("energy_curvature", plga.energy_curvature, (_g_chain("G_LM"),), "G_LM = a A_P + b_a", "eq. 3.6", "RankOne",
          inputs=("A_P",), body=layer.curvature, enabled_by=_LEARNED_G),
    Stage("attention_scores", attention.attention_scores, (Output("scores", HEAD_ROW, ROWS_KEYS),),
          "Sc = Q~ G_LM K~^T / sqrt(d_k)", "eq. 3.7", "RoPE (commutant)", inputs=("q_rot", "G_LM", "k_rot"),
          body=layer.scaled_scores),
    Stage("masked_softmax", attention.masked_softmax, (Output("E", HEAD_ROW, ROWS_ATTENDED, weights=True),),
          "E = softmax_j(Sc + mask)", "eq. 3.8", "Softmax", inputs=("scores",), body=layer.softmax_weights),
    Stage("value_mix", attention.mix_values, (_attended("ctx"),), "Z = E V, merge heads", "eq. 3.9",
          inputs=("E", "v"), body=layer.value_mix),
    Stage("output_projection", linear_map.linear, (_attended("attn_out"),), "Y = Z Wo^T + bo", "spec §2.4.10",
          inputs=("ctx",), body=layer.output_projection),
    Stage("post_attention_norm", norms.layer_norm, (_attended("out1"),), "O1 = LN1(Y + X)", "spec §2.3", "LayerNorm",
          inputs=("attn_out", "x"), body=layer.post_attention_norm),
    Stage("ffn", glu.glu, (_attended("ffn_out"),), "FFN = W3(silu(W1 z + b1) * (W2 z + b2)) + b3", "spec §2.3",
          inputs=("out1",), body=layer.ffn),
    Stage("post_ffn_norm", norms.layer_norm, (_attended("out2"),), "O2 = LN2(FFN(O1) + O1)", "spec §2.3",
          "LayerNorm", inputs=("ffn_out", "out1"), body=layer.post_ffn_norm),
    Stage("lm_head", model.lm_head, (Output("logits", ROW, ROWS_OWN, aliases=("new_logits",)),),
          "logits = X^L Wout^T + bout", "spec §2.5", per_layer=False, inputs=("hidden",), body=model.lm_head),
)

#: Every stage the harness can isolate, in the order it walks them.
ALL_STAGES: tuple[Stage, ...] = (*STRUCTURE_STAGES, *FORWARD_STAGES)



def _replacements(stages: tuple[Stage, ...]) -> dict[str, tuple[int, str]]:
    """{replaced trace entry: (index in ``stages`` of the stage writing its replacement, the replacement's name)}
    (:attr:`Output.replaces`)."""
    out: dict[str, tuple[int, str]] = {}
    for i, s in enumerate(stages):
        for o in s.flow:
            if o.replaces is not None:
                if o.replaces in out:
                    raise ValueError(f"trace entry {o.replaces!r} is replaced twice ({out[o.replaces][1]!r}, "
                                     f"{o.name!r})")
                out[o.replaces] = (i, o.name)
    return out


#: {replaced trace entry: (index in :data:`FORWARD_STAGES` of the stage writing the replacement, its name)}.
REPLACED_BY: dict[str, tuple[int, str]] = _replacements(FORWARD_STAGES)
_FORWARD_INDEX: dict[str, int] = {s.name: i for i, s in enumerate(FORWARD_STAGES)}
#: The names of the outputs that replace an entry for later stages (:attr:`Output.replaces`).
REPLACEMENTS: frozenset[str] = frozenset(name for _, name in REPLACED_BY.values())


def read_view(values: Mapping[str, Any], stage: Stage) -> Mapping[str, Any]:
    """``values`` as ``stage`` reads them: an entry another output replaces (:attr:`Output.replaces`) reads as that
    output when it is there (not None) and its stage precedes ``stage`` in forward order.  Every stage input
    passes here -- :meth:`Stage.run` and the engines' stage walk and isolated stages
    (:mod:`pldr_ref.backends.stage_walk`) -- so a stage that replaces a value edits no later stage.  Returns
    ``values`` itself when nothing is replaced."""
    at = _FORWARD_INDEX.get(stage.name) if REPLACED_BY else None
    return values if at is None else read_at(values, at, REPLACED_BY)


def read_at(values: Mapping[str, Any], at: int, replaced_by: Mapping[str, tuple[int, str]]) -> Mapping[str, Any]:
    """:func:`read_view` for the stage at index ``at`` of the stages ``replaced_by`` indexes
    (:func:`_replacements`): each replaced entry reads as its replacement when that is there (not None) and written
    by a stage before ``at``."""
    swap = {n: values[r] for n, (i, r) in replaced_by.items() if i < at and values.get(r) is not None}
    return {**values, **swap} if swap else values


def check_declared(stages: tuple[Stage, ...]) -> None:
    """Refuse (``TypeError``) numeric stages whose outputs are plain names: the harness judges an output by its
    declared layout and row dependence, so an undeclared one would be silently judged on every row."""
    missing = [s.name for s in stages if not s.flow]
    if missing:
        raise TypeError(f"numeric stages {missing} declare no Output (layout, rows, caches) for their outputs")


check_declared(FORWARD_STAGES)


@dataclasses.dataclass(frozen=True)
class DepthLoop:
    """How the depth loop (:func:`pldr_ref.model.depth_pass`) chains the stages: the model-level stages before the
    layers leave ``model_input``, which the first layer reads as its ``layer_input``; each layer's ``layer_output`` is
    the next layer's input; the model-level stages after the layers read the last layer's output as
    ``model_output``."""

    model_input: str
    layer_input: Output
    layer_output: str
    model_output: str


#: The depth loop's chaining (trace names of the float64 forward map).
DEPTH_LOOP = DepthLoop(model_input="x0", layer_input=Output("x", ROW, ROWS_OWN), layer_output="out2",
                       model_output="hidden")


def stage_of_output(trace_name: str) -> Stage:
    """The stage producing trace entry ``trace_name`` (``layers.{l}.X`` or a top-level name); a layer's input
    (:attr:`DepthLoop.layer_input`) is attributed to the stage leaving the layers' input (the input norm)."""
    leaf = trace_name.rsplit(".", 1)[-1]
    for stage in FORWARD_STAGES:
        if leaf in stage.outputs:
            return stage
    if leaf == DEPTH_LOOP.layer_input.name:
        return stage_of_output(DEPTH_LOOP.model_input)
    raise KeyError(f"no stage produces trace entry {trace_name!r}")


def _layered() -> tuple[int, int]:
    """(index of the first, one past the last) per-layer stage in :data:`FORWARD_STAGES`."""
    idx = [i for i, s in enumerate(FORWARD_STAGES) if s.per_layer]
    return idx[0], idx[-1] + 1


#: Model-level stages the depth loop runs before the layers, and after them, in forward order.
MODEL_STAGES_BEFORE: tuple[Stage, ...] = FORWARD_STAGES[:_layered()[0]]
MODEL_STAGES_AFTER: tuple[Stage, ...] = FORWARD_STAGES[_layered()[1]:]
#: The per-layer data flow in forward order: the layer's input, then every per-layer stage's outputs.
LAYER_FLOW: tuple[Output, ...] = (DEPTH_LOOP.layer_input,
                                  *(o for s in FORWARD_STAGES if s.per_layer for o in s.flow))


def names_with_aliases(outputs: tuple[Output, ...]) -> tuple[str, ...]:
    """Every name of ``outputs`` (each name, then its aliases), in order."""
    return tuple(n for o in outputs for n in (o.name, *o.aliases))


#: Names of the model-level outputs before the layers and after them (aliases included), in forward order.
MODEL_OUTPUTS_BEFORE: tuple[str, ...] = names_with_aliases(tuple(o for s in MODEL_STAGES_BEFORE for o in s.flow))
MODEL_OUTPUTS_AFTER: tuple[str, ...] = names_with_aliases(tuple(o for s in MODEL_STAGES_AFTER for o in s.flow))
#: Every trace name the registry declares: the layer's input and every numeric stage's outputs and their aliases.
TRACE_NAMES: frozenset[str] = frozenset(
    names_with_aliases((DEPTH_LOOP.layer_input, *(o for s in FORWARD_STAGES for o in s.flow))))
#: The caches of a cached generation (``{cache}.layers.{l}.{entry}`` entries), in forward order of their entries.
CACHES: tuple[str, ...] = tuple(dict.fromkeys(o.cache.cache for o in LAYER_FLOW if o.cache is not None))


def output_declaration(name: str) -> tuple[Stage | None, Output]:
    """(the stage writing it, its :class:`Output`) for a trace leaf or alias (the layer input: no stage)."""
    leaf = name.rsplit(".", 1)[-1]
    for s in FORWARD_STAGES:
        for o in s.flow:
            if leaf == o.name or leaf in o.aliases:
                return s, o
    if leaf == DEPTH_LOOP.layer_input.name:
        return None, DEPTH_LOOP.layer_input
    raise KeyError(f"no stage declares trace entry {name!r}")


def switch_gated_stages(engine: str) -> dict[str, str]:
    """Stage -> why ``engine`` (a key of :data:`pldr_ref.switches.ENGINES`) cannot run it, for every stage that
    only switch values the engine does not implement enable (the switch table declares them): an optional stage is
    declared unsupported by the table, not by each engine."""
    out = {}
    for st in ALL_STAGES:
        for field, values in st.enabled_by:
            lacking = not set(values) & set(switch(field).implemented_by(engine))
            if lacking:
                out[st.name] = f"enabled by {field} in {values}: the switch table says {engine} implements none"
    return out


@dataclasses.dataclass(frozen=True)
class Op:
    """One fixture kind.

    name: the kind; category: ``op`` (one stage), ``layer``, ``model``, ``cache`` or ``scoring``;
    inputs: input tensors (a trailing ``?`` marks an optional one); args: scalar arguments; outputs: output
    names (``out`` for op cases; trace-shaped kinds list their leading names); function: the public float64
    function it evaluates (None when it is a composition); stage: the forward stage it implements;
    runner: name of its float64 runner in :mod:`pldr_ref.fixtures.runners`; exact: name of its exact op in
    :data:`pldr_ref.exact.op_api.OPS` (``"runner"``: an exact-tier runner of its own, None: no exact tier);
    reference: paper / Lean reference; samples: its sample generator (:mod:`pldr_ref.op_samples`: a few small
    seeded cases, edge shapes first), run through every engine by ``tests/test_engine_registry.py``.
    """

    name: str
    category: str
    inputs: tuple[str, ...]
    runner: str
    function: Callable[..., object] | None = None
    stage: str | None = None
    args: tuple[str, ...] = ()
    outputs: tuple[str, ...] = ("out",)
    exact: str | None = None
    reference: str = ""
    samples: op_samples.SampleGenerator | None = None

    @property
    def single_stage(self) -> bool:
        """True for the op category (one stage: its naive run rounds inputs once)."""
        return self.category == "op"

    def sample_cases(self) -> list[op_samples.OpSample]:
        """The op's sample cases, drawn from a generator seeded by the op's name (the same on every run)."""
        return [] if self.samples is None else op_samples.draw(self.samples, self.name)


OPS: tuple[Op, ...] = (
    Op("sigmoid", "op", ("z",), "run_sigmoid", activations.sigmoid, exact="sigmoid", reference="spec §2.3",
       samples=op_samples.pointwise),
    Op("silu", "op", ("z",), "run_silu", activations.silu, "ffn", exact="silu", reference="spec §2.3",
       samples=op_samples.pointwise),
    Op("iswiglu", "op", ("z",), "run_iswiglu", activations.iswiglu, "metric_tensor", exact="iswiglu",
       reference="eq. 3.4; Lean Iswiglu", samples=op_samples.pointwise),
    Op("layer_norm", "op", ("x", "gamma", "beta"), "run_layer_norm", norms.layer_norm, "input_norm", ("eps",),
       exact="layer_norm", reference="spec §2.2; Lean LayerNorm", samples=op_samples.layer_norm),
    Op("linear", "op", ("x", "weight", "bias?"), "run_linear", linear_map.linear, "qkv_projection", exact="linear",
       reference="spec §2.4.1", samples=op_samples.linear),
    Op("glu", "op", ("x", "w1", "b1?", "w2", "b2?", "w3", "b3?"), "run_glu", glu.glu, "ffn", exact="glu",
       reference="spec §2.3", samples=op_samples.glu),
    Op("apply_rope", "op", ("x", "positions"), "run_apply_rope", rope.apply_rope, "rope",
       ("layout", "precision", "base"), exact="apply_rope", reference="Def. 4.3; Lean Rope",
       samples=op_samples.apply_rope),
    Op("density_operator", "op", ("q_rot",), "run_density", density.density_operator, "density_operator",
       exact="density_operator", reference="eq. 3.2; Lean DensityOperator", samples=op_samples.density),
    Op("cumulative_density_operator", "op", ("q_rot",), "run_cumulative_density",
       density.cumulative_density_operator, "density_operator", exact="cumulative_density_operator",
       reference="spec §11 (gram_mode cumulative)", samples=op_samples.density),
    Op("residual_unit", "op", ("a",), "run_residual_unit", metric_learner.residual_unit, "metric_learner",
       ("layer", "unit"), exact="residual_unit", reference="eq. 3.3", samples=op_samples.residual_unit),
    Op("metric_learner_v500", "op", ("a0",), "run_metric_learner_v500", metric_learner.metric_learner_v500,
       "metric_learner", ("layer",), exact="metric_learner_v500", reference="eq. 3.3, Prop. 3.11",
       samples=op_samples.metric_learner_v500),
    Op("metric_learner_v900", "op", ("a0",), "run_metric_learner_v900", metric_learner.metric_learner_v900,
       "metric_learner", ("layer",), exact="metric_learner_v900", reference="spec §11 (TF v900)",
       samples=op_samples.metric_learner_v900),
    Op("metric_learner", "op", ("a0",), "run_metric_learner", None, "metric_learner", ("layer",),
       exact="runner", reference="eq. 3.3", samples=op_samples.metric_learner),
    Op("metric_tensor", "op", ("a", "W", "b"), "run_metric_tensor", plga.metric_tensor, "metric_tensor",
       ("eps_adj",), exact="metric_tensor", reference="eq. 3.4, Prop. 3.7", samples=op_samples.metric_tensor),
    Op("potential_tensor", "op", ("a_lm", "P"), "run_potential_tensor", plga.potential_tensor, "potential_tensor",
       exact="potential_tensor", reference="eq. 3.5; Lean HadamardPower", samples=op_samples.potential_tensor),
    Op("energy_curvature", "op", ("a_p", "a", "b_a"), "run_energy_curvature", plga.energy_curvature,
       "energy_curvature", exact="energy_curvature", reference="eq. 3.6; Lean RankOne",
       samples=op_samples.energy_curvature),
    Op("attention_scores", "op", ("q_rot", "g_lm", "k_rot"), "run_attention_scores", attention.attention_scores,
       "attention_scores", exact="attention_scores", reference="eq. 3.7", samples=op_samples.attention_scores),
    Op("causal_padding_mask", "op", ("query_positions", "key_positions", "key_padding?"),
       "run_causal_padding_mask", attention.causal_padding_mask, "sequence_mask", reference="spec §7.1",
       samples=op_samples.causal_padding_mask_samples),
    Op("apply_mask", "op", ("scores", "mask"), "run_apply_mask", attention.apply_mask, "masked_softmax",
       ("mode", "mask_value"), exact="apply_mask", reference="spec §7.2", samples=op_samples.apply_mask),
    Op("masked_softmax", "op", ("logits",), "run_masked_softmax", attention.masked_softmax, "masked_softmax",
       exact="masked_softmax", reference="eq. 3.8; Lean Softmax", samples=op_samples.masked_softmax),
    Op("mix_values", "op", ("e", "v"), "run_mix_values", attention.mix_values, "value_mix", exact="mix_values",
       reference="eq. 3.9", samples=op_samples.mix_values),
    Op("embedding", "op", ("token_ids",), "run_embedding", None, "embedding", exact="runner",
       reference="spec §2.1", samples=op_samples.embedding),
    Op("lm_head", "op", ("hidden",), "run_lm_head", None, "lm_head", exact="runner", reference="spec §2.5",
       samples=op_samples.lm_head),
    Op("decoder_layer", "layer", ("x", "positions", "mask?", "past_k?", "past_v?", "frozen_A?", "frozen_G_LM?",
                                  "frozen_A_LM?", "frozen_A_P?", "gram_offset?"), "run_decoder_layer",
       layer.decoder_layer, args=("layer",), outputs=("layers.{l}.*",), exact="runner", reference="spec §2.3",
       samples=op_samples.decoder_layer),
    Op("forward", "model", ("token_ids", "attention_mask?"), "run_forward", model.forward,
       args=("start_pos", "pad_masking"), outputs=("embed", "x0", "layers.{l}.*", "logits"), exact="runner",
       reference="spec §2", samples=op_samples.forward),
    Op("cached_generation", "cache", ("prompt_ids", "new_ids", "attention_mask?", "initial_G_LM?"),
       "run_cached_generation", args=("mode", "step_sizes"),
       outputs=("prefill.*", "steps.{j}.*", "steps.{j}.new_logits", "kv_cache.*", "g_cache.*"),
       reference="spec §8", samples=op_samples.cached_generation),
    Op("scoring_blockwise", "scoring", ("token_ids",), "run_scoring_blockwise", args=("pad_id",),
       outputs=("nll", "mask", "total", "mean", "logits"), reference="paper §4.5",
       samples=op_samples.scoring_blockwise),
    Op("scoring_blockwise_hf", "scoring", ("input_ids", "labels", "attention_mask?"), "run_scoring_blockwise_hf",
       outputs=("nll", "mask", "total", "mean"), reference="paper §4.5", samples=op_samples.scoring_blockwise_hf),
    Op("scoring_sequential", "scoring", ("token_ids",), "run_scoring_sequential", args=("pad_id",),
       outputs=("nll", "mask", "total", "mean", "logits"), reference="paper §4.5",
       samples=op_samples.scoring_sequential),
    Op("scoring_one_pass", "scoring", ("context", "candidates", "candidate_lengths"), "run_scoring_one_pass",
       outputs=("scores", "sequential_scores"), reference="paper §4.5", samples=op_samples.scoring_one_pass),
    Op("scoring_prompt_frozen", "scoring", ("prompt_ids", "continuation"), "run_scoring_prompt_frozen",
       args=("mode",), outputs=("logprobs",), reference="paper §4.5", samples=op_samples.scoring_prompt_frozen),
)

#: Op name -> Op.
OPS_BY_NAME: dict[str, Op] = {op.name: op for op in OPS}


def op_kinds(*categories: str) -> tuple[str, ...]:
    """Names of the ops of the given categories, in registry order."""
    return tuple(op.name for op in OPS if op.category in categories)


def stage(name: str) -> Stage:
    """The stage called ``name`` (structure or numeric)."""
    for s in ALL_STAGES:
        if s.name == name:
            return s
    raise KeyError(f"unknown stage {name!r}; known: {[s.name for s in ALL_STAGES]}")


#: Ops whose float64 function is one public pldr_ref function with an op-level fixture (``OP_FUNCTIONS``).
OP_FUNCTIONS: dict[str, Callable[..., object]] = {op.name: op.function for op in OPS if op.function is not None}
