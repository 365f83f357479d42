"""Realistic bugs injected into the real engines, in each engine's own terms: the negative controls of
``docs/engines.md``.

* JAX (:class:`~pldr_ref.backends.jax_backend.JaxBackend` subclasses): a ``jnp`` reduction over the wrong
  axis, an ``einsum`` index typo, ``jnp.where`` arguments swapped, a half-split ``jnp.split`` for the
  interleaved RoPE layout, a bfloat16 accumulation in the vocabulary projection;
* ONNX (rewrites of the exported graph, run by :class:`~pldr_ref.backends.onnx_backend.OnnxExportBackend`):
  a Softmax on the wrong axis, a LayerNormalization over the wrong axes, a dropped 1/sqrt(d_k) divisor, the
  mask's Where with its branches swapped, MatMul operands in the wrong order, a negated Pow exponent, a
  residual Add wired to the wrong input, a RoPE Sub exported as Add;
* Triton (fault codes of :func:`~pldr_ref.backends.triton_attention.plga_attention_kernel`): a key tile
  starting one key late, no running-max rescaling, the mask never applied, no 1/sqrt(d_k), G read
  transposed, V read from K's buffer;
* torch in bfloat16 / float16 (:class:`~pldr_ref.backends.torch_backend.TorchBackend` subclasses):
  the vocabulary projection accumulated in the 16-bit dtype, plus bugs of :mod:`pldr_ref.harness.controls.mutants`.

Each :class:`EngineMutation` names the engine, the golden case, the dtypes in which it must be caught and
the stage the harness must name first.  ``tests/test_engine_mutants.py`` runs them; ``python -m
pldr_ref.harness.tools.engine_report`` puts the outcomes in ``docs/engines.md``.  The engine modules are imported
only when a mutant is built (the extras are optional).
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from typing import Any

#: Engines with injected bugs.
ENGINES = ("jax", "onnx", "triton", "torch")


# ---------------------------------------------------------------------------------------------- JAX
@functools.cache
def jax_mutant_classes() -> dict[str, type]:
    """The JAX mutant classes (built on first use: importing them imports jax)."""
    from pldr_ref.backends.jax_backend import JaxBackend

    class SoftmaxSumAxis(JaxBackend):
        """The softmax denominator sums over the query axis: ``jnp.sum(e, axis=-2)``."""

        name = "jax-mutant-softmax-sum-axis"

        def softmax(self, logits: Any) -> Any:
            jnp = self.jnp
            m = jnp.max(logits, axis=-1, keepdims=True)
            e = jnp.exp(logits - jnp.where(jnp.isfinite(m), m, 0))
            z = jnp.sum(e, axis=-2, keepdims=True)
            return jnp.where(z > 0, e / jnp.where(z > 0, z, 1), 0)

    class LayerNormAxis(JaxBackend):
        """LayerNorm statistics over the sequence axis (``axis=-2``) instead of the features."""

        name = "jax-mutant-layernorm-axis"

        def layer_norm(self, x: Any, gamma: Any, beta: Any, eps: float) -> Any:
            jnp = self.jnp
            xw = x.astype(jnp.float32) if self.is_low(x) else x
            mu = jnp.mean(xw, axis=-2, keepdims=True)
            var = jnp.mean(jnp.square(xw - mu), axis=-2, keepdims=True)
            y = (xw - mu) * self.jax.lax.rsqrt(var + eps)
            return (y * gamma.astype(xw.dtype) + beta.astype(xw.dtype)).astype(x.dtype)

    class GramEinsumTypo(JaxBackend):
        """``jnp.einsum("...sd,...te->...de", q, q)``: the row index of the second factor mistyped, so A0 is the
        outer product of the column sums instead of Q~^T Q~."""

        name = "jax-mutant-gram-einsum"

        def density(self, q_rot: Any) -> Any:
            a0 = self.jnp.einsum("...sd,...te->...de", q_rot, q_rot)
            return 0.5 * (a0 + self.jnp.swapaxes(a0, -1, -2))

    class MaskWhereSwapped(JaxBackend):
        """``jnp.where(mask, scores, -inf)``: the branches swapped, the allowed positions masked."""

        name = "jax-mutant-mask-where"

        def apply_mask(self, scores: Any, mask: Any | None, mode: str, value: float) -> Any:
            logits = super().apply_mask(scores, None, mode, value)
            return logits if mask is None else self.jnp.where(mask, logits, -self.jnp.inf)

    class RopeSplitLayout(JaxBackend):
        """``jnp.split(x, 2, axis=-1)`` (half-split pairs) for every layout, and interleaving for half-split."""

        name = "jax-mutant-rope-split"

        def rope(self, x: Any, positions: Any, layout: str, precision: str, base: float) -> Any:
            other = "half" if layout == "interleaved" else "interleaved"
            return super().rope(x, positions, other, precision, base)

    class VocabBf16Accumulation(JaxBackend):
        """The vocabulary projection multiplies in bfloat16 and accumulates in bfloat16
        (``preferred_element_type=bfloat16``), whatever the model's dtype."""

        name = "jax-mutant-vocab-bf16"

        def lm_head(self, P: Any, hidden: Any) -> Any:
            jnp = self.jnp
            w = P["final_layer.weight"]
            y = jnp.matmul(hidden.astype(jnp.bfloat16), w.T.astype(jnp.bfloat16), preferred_element_type=jnp.bfloat16)
            b = P.get("final_layer.bias")
            return (y.astype(hidden.dtype) + (0 if b is None else b.astype(hidden.dtype))).astype(hidden.dtype)

    class PowerLog1p(JaxBackend):
        """A_P = exp(P log1p(A_LM)) (``jnp.log1p`` for ``jnp.log``)."""

        name = "jax-mutant-power-log1p"

        def potential_tensor(self, a_lm: Any, P: Any) -> Any:
            jnp = self.jnp
            return jnp.exp(self.per_head(P, a_lm).astype(a_lm.dtype) * jnp.log1p(a_lm))

    classes = (SoftmaxSumAxis, LayerNormAxis, GramEinsumTypo, MaskWhereSwapped, RopeSplitLayout,
               VocabBf16Accumulation, PowerLog1p)
    return {cls.__name__: cls for cls in classes}


# ---------------------------------------------------------------------------------------------- ONNX
def _nodes(model: Any, stage: str, op_type: str) -> list[Any]:
    """Nodes of ``op_type`` in a stage of every layer (node names ``{scope}/{op}_{n}``)."""
    return [n for n in model.graph.node if n.op_type == op_type and n.name.split("/")[0].endswith(stage)]


def _set_attr(node: Any, name: str, value: int) -> None:
    for a in node.attribute:
        if a.name == name:
            a.i = value
            return
    import onnx

    node.attribute.append(onnx.helper.make_attribute(name, value))


def onnx_softmax_axis(model: Any) -> Any:
    """Every Softmax over axis -2 (the queries) instead of -1 -- one attribute of one node type."""
    for n in _nodes(model, "masked_softmax", "Softmax"):
        _set_attr(n, "axis", -2)
    return model


def onnx_layernorm_axis(model: Any) -> Any:
    """The input LayerNormalization normalises over (S, d) (``axis=1``) instead of d (``axis=-1``)."""
    for n in _nodes(model, "input_norm", "LayerNormalization"):
        _set_attr(n, "axis", 1)
    return model


def onnx_no_scale(model: Any) -> Any:
    """The scores' Div by sqrt(d_k) divides by a constant 1 (the scale folded away twice by an exporter)."""
    import numpy as np
    import onnx

    for i, n in enumerate(_nodes(model, "attention_scores", "Div")):
        one = f"mutant_one_{i}"
        dtype = _initializer_dtype(model, n.input[1])
        model.graph.initializer.append(onnx.numpy_helper.from_array(np.asarray(1.0, dtype=dtype), one))
        n.input[1] = one
    return model


def _initializer_dtype(model: Any, name: str) -> Any:
    import onnx

    for t in model.graph.initializer:
        if t.name == name:
            return onnx.numpy_helper.to_array(t).dtype
    raise KeyError(name)


def onnx_mask_where_swapped(model: Any) -> Any:
    """The mask's Where(mask, masked, scores) with its two branches swapped."""
    for n in _nodes(model, "masked_softmax", "Where"):
        if not n.input[0].startswith("isnan"):  # the NaN fix-up Where stays
            n.input[1], n.input[2] = n.input[2], n.input[1]
    return model


def onnx_plga_operand_order(model: Any) -> Any:
    """MatMul(A, W) instead of MatMul(W, A) in the metric tensor (operand order of a per-head product)."""
    for n in _nodes(model, "metric_tensor", "MatMul"):
        n.input[0], n.input[1] = n.input[1], n.input[0]
    return model


def onnx_negated_power(model: Any) -> Any:
    """A_P = A_LM ** (-P): a Neg node on the Pow exponent."""
    import onnx

    for i, n in enumerate(_nodes(model, "potential_tensor", "Pow")):
        neg = f"mutant_neg_{i}"
        model.graph.node.append(onnx.helper.make_node("Neg", [n.input[1]], [neg], name=f"mutant/Neg_{i}"))
        n.input[1] = neg
    return _toposort(model)


def _toposort(model: Any) -> Any:
    """Reorder nodes so every input is produced before it is used (an appended node breaks the order)."""
    known = {i.name for i in model.graph.input} | {t.name for t in model.graph.initializer}
    pending = list(model.graph.node)
    ordered = []
    while pending:
        rest = []
        for n in pending:
            if all(not x or x in known for x in n.input):
                ordered.append(n)
                known.update(n.output)
            else:
                rest.append(n)
        if len(rest) == len(pending):
            raise ValueError("ONNX graph has a cycle or a dangling input")
        pending = rest
    del model.graph.node[:]
    model.graph.node.extend(ordered)
    return model


def onnx_residual_dropped(model: Any) -> Any:
    """The post-attention residual Add(attn_out, x) adds attn_out to itself (a wrong input wired)."""
    for n in _nodes(model, "post_attention_norm", "Add"):
        n.input[1] = n.input[0]
    return model


def onnx_rope_sign(model: Any) -> Any:
    """RoPE's y_a = x_a cos - x_b sin becomes x_a cos + x_b sin (a Sub node exported as Add)."""
    for n in _nodes(model, "rope", "Sub"):
        n.op_type = "Add"
    return model


ONNX_REWRITES: dict[str, Callable[[Any], Any]] = {
    "softmax_axis": onnx_softmax_axis, "layernorm_axis": onnx_layernorm_axis, "no_scale": onnx_no_scale,
    "mask_where_swapped": onnx_mask_where_swapped, "plga_operand_order": onnx_plga_operand_order,
    "negated_power": onnx_negated_power, "residual_dropped": onnx_residual_dropped, "rope_sign": onnx_rope_sign,
}


def onnx_mutant(rewrite: str) -> Any:
    """An :class:`OnnxExportBackend` whose exported graphs get ``rewrite``."""
    from pldr_ref.backends.onnx_backend import OnnxExportBackend

    backend = OnnxExportBackend(rewrite=ONNX_REWRITES[rewrite])
    backend.name = f"onnx-mutant-{rewrite}"
    return backend


# ---------------------------------------------------------------------------------------------- Triton
def triton_mutant(fault: str) -> Any:
    """A :class:`TritonAttentionBackend` whose kernel is compiled with fault ``fault``."""
    from pldr_ref.backends.triton_attention import TritonAttentionBackend

    backend = TritonAttentionBackend()
    backend.fault = fault
    backend.name = f"triton-mutant-{fault}"
    return backend


# ---------------------------------------------------------------------------------------------- torch 16-bit
@functools.cache
def torch_mutant_classes() -> dict[str, type]:
    """torch mutants of the 16-bit path (built on first use: importing them imports torch)."""
    from pldr_ref.backends.torch_backend import TorchBackend

    class VocabLowAccumulation(TorchBackend):
        """The vocabulary projection accumulates in the 16-bit dtype (every partial sum rounded), where a
        16-bit GEMM should accumulate in float32; float32 / float64 runs accumulate in bfloat16."""

        name = "torch-mutant-vocab-16bit-accumulation"

        def lm_head(self, P: Any, hidden: Any) -> Any:
            torch = self.torch
            low = self._mm or torch.bfloat16
            w = P["final_layer.weight"].to(low)
            h = hidden.to(low)
            acc = torch.zeros((*h.shape[:-1], w.shape[0]), dtype=low, device=h.device)
            for j in range(h.shape[-1]):  # one rounding per partial sum, as a 16-bit accumulator does
                acc = acc + h[..., j:j + 1] * w[:, j]
            b = P.get("final_layer.bias")
            y = acc.to(hidden.dtype)
            return y if b is None else y + b

    return {"VocabLowAccumulation": VocabLowAccumulation}


def torch_mutant(name: str) -> Any:
    """A torch mutant: one of :func:`torch_mutant_classes` or a class of :mod:`pldr_ref.harness.controls.mutants`."""
    classes = torch_mutant_classes()
    if name in classes:
        return classes[name](device="cpu")
    from pldr_ref.harness.controls import mutants

    return getattr(mutants, name)(device="cpu")


# ---------------------------------------------------------------------------------------------- the table
@dataclasses.dataclass(frozen=True)
class EngineMutation:
    """One injected bug: engine, id (class / rewrite / fault name), golden case, the dtypes it must be caught
    in, and the stage the harness must name first."""

    engine: str
    bug: str
    case: str
    dtypes: tuple[str, ...]
    expected_stage: str

    def build(self, jax_eager: bool = False) -> Any:
        """The mutated backend (``jax_eager``: a JAX mutant runs op by op, without jit compilation)."""
        if self.engine == "jax":
            return jax_mutant_classes()[self.bug](jit=not jax_eager)
        if self.engine == "onnx":
            return onnx_mutant(self.bug)
        if self.engine == "triton":
            return triton_mutant(self.bug)
        return torch_mutant(self.bug)

    @property
    def description(self) -> str:
        """One line saying what the bug is."""
        if self.engine == "jax":
            doc = jax_mutant_classes()[self.bug].__doc__
        elif self.engine == "onnx":
            doc = ONNX_REWRITES[self.bug].__doc__
        elif self.engine == "triton":
            doc = TRITON_FAULT_DOCS[self.bug]
        else:
            doc = type(torch_mutant(self.bug)).__doc__
        return " ".join((doc or "").split())


TRITON_FAULT_DOCS = {
    "tile_off_by_one": "every key tile starts one key late (offs_n = start_n + 1 + arange)",
    "no_rescale": "the accumulator and the running sum are not rescaled by exp(m_old - m_new) when the max grows",
    "mask_ignored": "the mask tile is never loaded: masked keys take part in the softmax",
    "no_scale": "the scores tile is not divided by sqrt(d_k)",
    "g_transposed": "the G tile is loaded with its two strides swapped (G^T)",
    "v_from_k": "the V tile is loaded from K's buffer",
}

ALL4 = ("float64", "float32", "bfloat16", "float16")
F32_F16 = ("float32", "float16")
LOW = ("bfloat16", "float16")
TINY = "model/tiny_exact"

ENGINE_MUTATIONS: tuple[EngineMutation, ...] = (
    EngineMutation("jax", "SoftmaxSumAxis", TINY, ALL4, "masked_softmax"),
    EngineMutation("jax", "LayerNormAxis", TINY, ALL4, "input_norm"),
    EngineMutation("jax", "GramEinsumTypo", TINY, ALL4, "density_operator"),
    EngineMutation("jax", "MaskWhereSwapped", TINY, ALL4, "masked_softmax"),
    EngineMutation("jax", "RopeSplitLayout", TINY, ALL4, "rope"),
    EngineMutation("jax", "VocabBf16Accumulation", TINY, ("float64", "float32"), "lm_head"),
    EngineMutation("jax", "PowerLog1p", TINY, ALL4, "potential_tensor"),
    EngineMutation("onnx", "softmax_axis", TINY, F32_F16, "masked_softmax"),
    EngineMutation("onnx", "layernorm_axis", TINY, F32_F16, "input_norm"),
    EngineMutation("onnx", "no_scale", TINY, ("float32",), "attention_scores"),
    EngineMutation("onnx", "mask_where_swapped", TINY, F32_F16, "masked_softmax"),
    EngineMutation("onnx", "plga_operand_order", TINY, F32_F16, "metric_tensor"),
    EngineMutation("onnx", "negated_power", TINY, ("float32",), "potential_tensor"),
    EngineMutation("onnx", "residual_dropped", TINY, F32_F16, "post_attention_norm"),
    EngineMutation("onnx", "rope_sign", TINY, F32_F16, "rope"),
    EngineMutation("triton", "tile_off_by_one", TINY, ALL4, "attention_scores"),
    EngineMutation("triton", "no_rescale", TINY, ALL4, "masked_softmax"),
    EngineMutation("triton", "mask_ignored", TINY, ALL4, "masked_softmax"),
    EngineMutation("triton", "no_scale", TINY, ALL4, "attention_scores"),
    EngineMutation("triton", "g_transposed", TINY, ALL4, "attention_scores"),
    EngineMutation("triton", "v_from_k", TINY, ALL4, "value_mix"),
    EngineMutation("torch", "VocabLowAccumulation", TINY, ("float32",), "lm_head"),
    EngineMutation("torch", "SoftmaxAxisMutant", TINY, LOW, "masked_softmax"),
    EngineMutation("torch", "NoScaleMutant", TINY, LOW, "attention_scores"),
    EngineMutation("torch", "RopeLayoutMutant", TINY, LOW, "rope"),
    EngineMutation("torch", "KeyGramMutant", TINY, LOW, "density_operator"),
    EngineMutation("torch", "ElementwiseGMutant", TINY, LOW, "energy_curvature"),
    EngineMutation("torch", "MaskIgnoredMutant", TINY, LOW, "masked_softmax"),
)


@dataclasses.dataclass(frozen=True)
class EngineOutcome:
    """What the harness said about one mutation in one dtype."""

    mutation: EngineMutation
    dtype: str
    status: str
    stage: str | None
    found_by: str | None

    @property
    def ok(self) -> bool:
        """Caught (fail) and localized to the expected stage first."""
        return self.status == "fail" and self.stage == self.mutation.expected_stage


def run_engine_mutations(engines: tuple[str, ...] = ENGINES, dtypes: tuple[str, ...] | None = None,
                         root: Any = None, bugs: tuple[str, ...] | None = None,
                         jax_eager: bool = False) -> list[EngineOutcome]:
    """Validate every mutation of ``engines`` (only ``bugs`` if given) on its case in each of its dtypes (those
    in ``dtypes``); ``jax_eager``: JAX mutants without jit (same jnp code, no compilation)."""
    from pldr_ref.fixtures.case import DEFAULT_GOLDEN_DIR, load_case
    from pldr_ref.harness.validate import validate_case

    base = DEFAULT_GOLDEN_DIR if root is None else root
    cases: dict[str, Any] = {}
    manifests: dict[Any, dict[str, Any]] = {}  # MANIFEST.json read and checked once
    out = []
    for m in ENGINE_MUTATIONS:
        if m.engine not in engines or (bugs is not None and m.bug not in bugs):
            continue
        if m.case not in cases:
            cases[m.case] = load_case(base / m.case, manifests=manifests)
        backend = m.build(jax_eager)
        for dt in m.dtypes:
            if dtypes is not None and dt not in dtypes:
                continue
            r = validate_case(backend, cases[m.case], dt)
            f = r.first_failure or {}
            out.append(EngineOutcome(m, dt, r.status, f.get("stage"), f.get("found_by")))
    return out


__all__ = ["ENGINES", "ENGINE_MUTATIONS", "ONNX_REWRITES", "EngineMutation", "EngineOutcome", "run_engine_mutations"]
