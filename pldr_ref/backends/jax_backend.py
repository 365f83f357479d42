"""PLDR-LLM in JAX on XLA's CPU backend, validated by the harness (``pldr_ref.backends.jax_backend:JaxBackend``).

Written as a JAX user writes a model: pure functions of ``jax.numpy`` arrays, the forward map and every
stage compiled with ``jax.jit`` (the config and the dtype are static arguments), run on the CPU device.

* dtypes: float64 (``jax_enable_x64`` is switched on when the backend is created), float32, bfloat16 and
  float16.  Parameters and activations are held in the dtype.  In bfloat16 / float16 the code follows the
  usual JAX mixed-precision idiom: every matrix product takes 16-bit inputs and asks XLA for a float32
  accumulator (``preferred_element_type=float32``), then rounds its result to the 16-bit dtype; LayerNorm
  statistics, RoPE, the masked softmax and the PLGA powers (A_LM, A_P, G_LM) are computed in float32
  (:data:`WORK_DTYPE_16`) and the activations cast back to the 16-bit dtype -- except A_LM and A_P, which
  stay float32 (float16 cannot hold eps_adj = 1e-9 and A_LM^P overflows it);
* kinds: ``forward``, ``decoder_layer`` (with the KV and G cache hooks of the layer: past keys and values,
  frozen A, frozen G, running Gram offset) and the op kinds of :data:`OP_KINDS`; every stage of
  :data:`pldr_ref.registry.ALL_STAGES` in isolation.  Not implemented (reported unsupported):
  ``cached_generation``, the scoring kinds, the issue-12 emulation switches, per-row ``position_ids``.

Every equation is a method, so an engine mutant (:mod:`pldr_ref.harness.controls.engine_mutants`) overrides exactly
one.  JAX is an optional dependency (``pip install "pldr-ref[jax]"``), imported when the backend is created.
"""

from __future__ import annotations

import collections
import functools
import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from pldr_ref.backends.engine_ops import EngineOps, engine_ops, run_body
from pldr_ref.backends.stage_walk import LayerCache, walk_layer, walk_model
from pldr_ref.harness.protocol import Capabilities, StageRequest, Unsupported
from pldr_ref.params import FIXED_G_KEY, Params
from pldr_ref.registry import ALL_STAGES, OPS_BY_NAME, Stage, read_view
from pldr_ref.switches import ENGINE_SWITCHES, declared_switches

#: Harness dtype names this backend computes in.
JAX_DTYPES = ("float64", "float32", "bfloat16", "float16")

#: The float32 work dtype of LayerNorm statistics, RoPE, softmax and PLGA powers in a 16-bit run.
WORK_DTYPE_16 = "float32"

#: Op kinds this backend runs (each maps onto the method of the same equation).
OP_KINDS = ("sigmoid", "silu", "iswiglu", "layer_norm", "linear", "glu", "apply_rope", "density_operator",
            "cumulative_density_operator", "metric_tensor", "potential_tensor", "energy_curvature",
            "attention_scores", "causal_padding_mask", "apply_mask", "masked_softmax", "mix_values", "embedding",
            "lm_head", "residual_unit", "metric_learner", "metric_learner_v500", "metric_learner_v900")

#: Op kinds whose method takes the op's registry inputs (in order) then its scalar arguments: kind -> method.
DIRECT_OP_METHODS = {
    "sigmoid": "sigmoid", "silu": "silu", "iswiglu": "iswiglu", "layer_norm": "layer_norm", "linear": "linear",
    "density_operator": "density", "cumulative_density_operator": "cumulative_density",
    "metric_tensor": "metric_tensor", "potential_tensor": "potential_tensor", "energy_curvature": "energy_curvature",
    "attention_scores": "attention_scores", "causal_padding_mask": "causal_padding_mask", "mix_values": "mix_values",
}

#: Every fixture kind this backend runs (:meth:`JaxBackend.capabilities`).
KINDS = ("forward", "decoder_layer", *OP_KINDS)

#: Registry ops (fixture kinds) and stages this backend does not implement: name -> why.
UNSUPPORTED_KINDS: dict[str, str] = {
    "cached_generation": "no cache-generation driver (the layer takes the KV / G cache hooks; decode loops are "
                         "the torch backend's)",
    **{name: "no scoring driver (scoring composes forward calls; the torch backend runs it)"
       for name in ("scoring_blockwise", "scoring_blockwise_hf", "scoring_sequential", "scoring_one_pass",
                    "scoring_prompt_frozen")},
}
UNSUPPORTED_STAGES: dict[str, str] = {}

#: Registry stage name -> Stage.
STAGES_BY_NAME = {s.name: s for s in ALL_STAGES}

#: The structure stage that builds a forward call's positions and mask.
SEQUENCE_MASK = STAGES_BY_NAME["sequence_mask"]

#: Activations a 16-bit run keeps in the float32 work dtype (see module docstring).
WORK_HELD = ("A_LM", "A_P", "frozen_A_LM", "frozen_A_P", "a_lm")

#: Number of (parameters, dtype) conversions kept as device arrays.
PARAMS_CACHE_SIZE = 4


#: The config fields the compiled functions read: the static part of a call, so that configs that differ only
#: elsewhere (seeds, names, vocabulary size) share compiled code.  Every engine switch is in it: the stage walk
#: asks each registry stage whether the config enables it, and a switch this backend does not implement is at
#: its default in every case it runs (it refuses the others), so it costs no recompilation.
TRACED_FIELDS = ("num_heads", "d_k", "d_model", "num_layers", "num_reslayerA", "num_denseA", "rope_base", "eps_adj",
                 "eps_ln", "mask_value", "pad_id", *ENGINE_SWITCHES)

#: A hashable view of those fields (attribute access like a PLDRConfig).
TracedConfig = collections.namedtuple("TracedConfig", TRACED_FIELDS)


def traced_config(config: Any) -> TracedConfig:
    """The static view of ``config`` passed to the compiled functions."""
    return TracedConfig(*(getattr(config, f) for f in TRACED_FIELDS))


def import_jax() -> Any:
    """``import jax`` with x64 enabled, or a clear error naming the extra."""
    try:
        import jax
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise ImportError('the JAX backend needs jax: install it with `pip install "pldr-ref[jax]"`') from exc
    jax.config.update("jax_enable_x64", True)  # float64 runs need it; it changes no float32 / 16-bit result
    return jax


#: The parameter prefix of the PLGA tensors of a layer (layer-relative names, :meth:`JaxBackend.layer_params`).
PLGA = "mha1.plgatt_layer."


def _sequence_mask(b: JaxBackend, P: Mapping[str, Any], c: Any, i: Mapping[str, Any], ids: Any) -> tuple[Any, Any]:
    positions = b.call_positions(i.get("start_pos", 0), ids.shape[1])  # run eagerly: pad_masking is a Python flag
    pad = b.key_padding(ids, c.pad_id, i.get("attention_mask"), bool(i.get("pad_masking", True)))
    return positions, b.causal_padding_mask(positions, positions, pad)


def _post_norm(norm: str) -> Any:
    def run(b: JaxBackend, P: Mapping[str, Any], c: Any, i: Mapping[str, Any], y: Any, x: Any) -> tuple[Any]:
        return (b.layer_norm(b.residual(y, x), P[f"{norm}.weight"], P[f"{norm}.bias"], c.eps_ln),)
    return run


def body_runner(stage: Stage) -> Any:
    """The runner of a stage without an entry in the table: the registry's float64 body in the backend's own
    arithmetic (:func:`pldr_ref.backends.engine_ops.run_body`, :attr:`JaxBackend.ops`; traced like every entry),
    on the stage's inputs and the optional values its body takes; refused (``Unsupported``, with the reason) when
    the body needs more than the backend's primitives and arrays."""
    def run(b: JaxBackend, P: Mapping[str, Any], c: Any, i: Mapping[str, Any], *inputs: Any) -> tuple[Any, ...]:
        values = {n: i[n] for n, _ in stage.body_inputs if i.get(n) is not None}
        values.update(zip(stage.inputs, inputs, strict=True))
        return run_body("jax", stage, b.ops, c, values, param=lambda name: P[name],
                        is_array=lambda v: isinstance(v, b.jax.Array))
    return run


#: Registry stage -> its JAX computation ``runner(backend, P, config, inputs, *stage_inputs)``: ``stage_inputs``
#: are the stage's registry inputs (``Stage.inputs``, in order), ``inputs`` every value of the request (for the
#: optional mask and Gram offset); it returns the stage's outputs in ``Stage.outputs`` order.  Each stage of the
#: registry runs its entry here (today every stage has one); a stage without one (added with only its float64 body)
#: runs that body in the backend's arithmetic (:func:`body_runner`, :meth:`JaxBackend.stage_runner`);
#: ``tests/test_engine_registry.py`` runs both kinds.
STAGE_RUNNERS: dict[str, Any] = {
    "sequence_mask": _sequence_mask,
    "embedding": lambda b, P, c, i, ids: (b.embed(P, c, ids),),
    "input_norm": lambda b, P, c, i, embed: (
        b.layer_norm(embed, P["decoder.layernorm1.weight"], P["decoder.layernorm1.bias"], c.eps_ln),),
    "qkv_projection": lambda b, P, c, i, x: tuple(
        b.split_heads(b.linear(x, P[f"mha1.{w}.weight"], P.get(f"mha1.{w}.bias")), c.num_heads)
        for w in ("wq", "wk", "wv")),
    "rope": lambda b, P, c, i, q, k, positions: tuple(
        b.rope(x, positions, c.rope_layout, c.rope_precision, c.rope_base) for x in (q, k)),
    "density_operator": lambda b, P, c, i, q_rot: (b.gram(q_rot, c.gram_mode, i.get("gram_offset")),),
    "metric_learner": lambda b, P, c, i, a0: (b.metric_learner(P, "mha1.", a0, c),),
    "metric_tensor": lambda b, P, c, i, a: (b.metric_tensor(a, P[f"{PLGA}Wlst"], P[f"{PLGA}blst"], c.eps_adj),),
    "potential_tensor": lambda b, P, c, i, a_lm: (b.potential_tensor(a_lm, P[f"{PLGA}pwlst"]),),
    "energy_curvature": lambda b, P, c, i, a_p: (b.energy_curvature(a_p, P[f"{PLGA}alst"], P[f"{PLGA}balst"]),),
    "attention_scores": lambda b, P, c, i, q_rot, g_lm, k_rot: (b.attention_scores(q_rot, g_lm, k_rot),),
    "masked_softmax": lambda b, P, c, i, scores: (
        b.softmax(b.apply_mask(scores, i.get("mask"), c.mask_mode, c.mask_value)).astype(scores.dtype),),
    "value_mix": lambda b, P, c, i, e, v: (b.merge_heads(b.mix_values(e, v)),),
    "output_projection": lambda b, P, c, i, ctx: (b.linear(ctx, P["mha1.dense.weight"], P.get("mha1.dense.bias")),),
    "post_attention_norm": _post_norm("layernorm1"),
    "ffn": lambda b, P, c, i, out1: (b.glu(out1, P, "ffn."),),
    "post_ffn_norm": _post_norm("layernorm2"),
    "lm_head": lambda b, P, c, i, hidden: (b.lm_head(P, hidden),),
}


class JaxBackend:
    """PLDR-LLM in jitted ``jax.numpy`` on the CPU (see module docstring).

    ``jit=False`` runs the same functions op by op (JAX's eager mode, every primitive still an XLA
    computation): no per-config compilation, for quick negative controls; validation uses the default.
    """

    name = "jax"

    #: Registry stage -> its computation (:data:`STAGE_RUNNERS`): what an isolated stage, a layer and the forward run.
    stage_runners: Mapping[str, Any] = STAGE_RUNNERS

    def __init__(self, jit: bool = True) -> None:
        jax = import_jax()
        self.jax = jax
        self.jnp = jax.numpy
        self.cpu = jax.devices("cpu")[0]
        self.jit = jit

        def compiled(fn: Any, *static: str) -> Any:
            return jax.jit(fn, static_argnames=static) if jit else functools.partial(fn)

        self._forward = compiled(self.forward, "c", "dt", "pad_masking")
        self._layer = compiled(self.decoder_layer, "c", "dt")
        self._stage = compiled(self.stage, "name", "c", "dt")
        self._op = compiled(self.op, "kind", "dt", "args")
        self._params_cache: dict[tuple[int, str], tuple[Params, dict[str, Any]]] = {}
        #: This backend's arithmetic as an Ops: what a registry body without a table entry computes with.
        self.ops: EngineOps = engine_ops("jax", self)

    def stage_runner(self, stage: Stage) -> Any:
        """The computation of ``stage``: its entry of :attr:`stage_runners`, else its registry body in this
        backend's arithmetic (:func:`body_runner`)."""
        return self.stage_runners.get(stage.name) or body_runner(stage)

    # ------------------------------------------------------------------ protocol
    def capabilities(self) -> Capabilities:
        """Four dtypes; forward, decoder_layer and op kinds; every stage; KV / G cache hooks of layer cases."""
        return Capabilities(dtypes=JAX_DTYPES, kinds=KINDS,
                            stages=tuple(s.name for s in ALL_STAGES), caches=("kv", "g"),
                            switches=declared_switches("jax"),
                            # every op's output stored in the 16-bit dtype (eager): docs/tolerances.md, "The policy"
                            arithmetic=("dtype-elementwise",))

    def run_case(self, case: Any, dtype: str) -> dict[str, np.ndarray]:
        """Outputs of a fixture case (golden names) computed in ``dtype``."""
        self.check_dtype(dtype)
        inputs = {k: np.asarray(v) for k, v in case.inputs.items()}
        args = dict(case.args or {})
        with self.jax.default_device(self.cpu):
            if case.kind == "forward":
                c = case.params.config
                am = inputs.get("attention_mask")
                out = self._forward(self.params(case.params, dtype), inputs["token_ids"].astype(np.int64),
                                    int(args.get("start_pos", 0)), None if am is None else am.astype(np.int64),
                                    c=traced_config(c), dt=dtype, pad_masking=bool(args.get("pad_masking", True)))
            elif case.kind == "decoder_layer":
                li = int(args["layer"])
                feed = {k: self.cast(k, v, dtype) for k, v in inputs.items()}
                t = self._layer(self.layer_params(self.params(case.params, dtype), li), feed,
                                c=traced_config(case.params.config), dt=dtype)
                out = {f"layers.{li}.{k}": v for k, v in t.items()}
            elif case.kind in OP_KINDS:
                P = None if case.params is None else self.params(case.params, dtype)
                feed = {k: self.cast(k, v, dtype) for k, v in inputs.items()}
                frozen_args = tuple(sorted((k, v if isinstance(v, str | int | float | bool) else str(v))
                                           for k, v in args.items()))
                cfg = None if case.params is None else traced_config(case.params.config)
                out = self._op(P, feed, kind=case.kind, dt=dtype, args=(frozen_args, cfg))
            else:
                raise Unsupported(f"case kind {case.kind!r} is not implemented by the JAX backend")
        return self.numpy_dict(out)

    def run_stage(self, request: StageRequest) -> dict[str, np.ndarray]:
        """One stage from golden upstream values (see :class:`~pldr_ref.harness.protocol.StageRequest`)."""
        self.check_dtype(request.dtype)
        feed = {k: self.cast(k, v, request.dtype) for k, v in request.inputs.items()}
        with self.jax.default_device(self.cpu):
            run = self.stage if request.stage == "sequence_mask" else self._stage
            P = self.params(request.params, request.dtype)
            out = run(P if request.layer is None else self.layer_params(P, request.layer), feed, name=request.stage,
                      c=traced_config(request.config), dt=request.dtype)
        return self.numpy_dict(out)

    # ------------------------------------------------------------------ data plumbing
    def check_dtype(self, dtype: str) -> None:
        """Raise :class:`Unsupported` for a dtype outside :data:`JAX_DTYPES`."""
        if dtype not in JAX_DTYPES:
            raise Unsupported(f"dtype {dtype!r} is not supported by the JAX backend")

    def low(self, dt: str) -> bool:
        """True for a 16-bit (mixed-precision) dtype."""
        return dt in ("bfloat16", "float16")

    def work(self, dt: str) -> str:
        """The dtype of LayerNorm statistics, RoPE, softmax and PLGA powers: float32 for 16-bit dtypes."""
        return WORK_DTYPE_16 if self.low(dt) else dt

    def cast(self, name: str, value: Any, dt: str) -> Any:
        """A golden input as a device array: floats in ``dt`` (A_LM / A_P in the work dtype), ints int64."""
        a = np.asarray(value)
        if a.dtype == np.bool_:
            return self.jnp.asarray(a)
        if np.issubdtype(a.dtype, np.integer):
            return self.jnp.asarray(a.astype(np.int64))
        held = self.work(dt) if name in WORK_HELD else dt
        return self.jnp.asarray(a.astype(np.float64)).astype(held)

    def params(self, params: Params, dt: str) -> dict[str, Any]:
        """Every parameter as a device array in ``dt`` (cached per Params object and dtype)."""
        key = (id(params), dt)
        hit = self._params_cache.get(key)
        if hit is not None and hit[0] is params:
            return hit[1]
        with self.jax.default_device(self.cpu):
            arrays = {k: self.jnp.asarray(np.asarray(v, dtype=np.float64)).astype(dt) for k, v in params.items()}
        if len(self._params_cache) >= PARAMS_CACHE_SIZE:
            self._params_cache.pop(next(iter(self._params_cache)))
        self._params_cache[key] = (params, arrays)
        return arrays

    def numpy_dict(self, out: Mapping[str, Any]) -> dict[str, np.ndarray]:
        """Device arrays -> NumPy float64 (bool stays bool, ints int64); exact widening of every dtype."""
        res = {}
        for k, v in out.items():
            if v is None:
                continue
            a = np.asarray(v)
            if a.dtype == np.bool_:
                res[k] = a
            elif np.issubdtype(a.dtype, np.integer):
                res[k] = a.astype(np.int64)
            else:
                res[k] = a.astype(np.float32).astype(np.float64) if a.dtype.itemsize == 2 else a.astype(np.float64)
        return res

    # ------------------------------------------------------------------ building blocks
    def matmul(self, a: Any, b: Any) -> Any:
        """a @ b; 16-bit inputs accumulate in float32 and the result is rounded to the inputs' dtype."""
        jnp = self.jnp
        if a.dtype in (jnp.bfloat16, jnp.float16):
            return jnp.matmul(a, b.astype(a.dtype), preferred_element_type=jnp.float32).astype(a.dtype)
        return jnp.matmul(a, b.astype(a.dtype))

    def linear(self, x: Any, w: Any, b: Any | None) -> Any:
        """y = x W^T + b (W is [out, in])."""
        y = self.matmul(x, w.T)
        return y if b is None else y + b.astype(y.dtype)

    def sigmoid(self, z: Any) -> Any:
        """sigma(z) = 1 / (1 + exp(-z)) (``jax.nn.sigmoid``)."""
        return self.jax.nn.sigmoid(z)

    def silu(self, z: Any) -> Any:
        """silu(z) = z sigma(z)."""
        return z * self.sigmoid(z)

    def iswiglu(self, z: Any) -> Any:
        """iSwiGLU(z) = z * silu(z)."""
        return z * self.silu(z)

    def glu(self, x: Any, P: Mapping[str, Any], prefix: str) -> Any:
        """W3 (silu(W1 x + b1) * (W2 x + b2)) + b3 with weights ``{prefix}gluw{1,2,3}``."""
        h1 = self.linear(x, P[f"{prefix}gluw1.weight"], P.get(f"{prefix}gluw1.bias"))
        h2 = self.linear(x, P[f"{prefix}gluw2.weight"], P.get(f"{prefix}gluw2.bias"))
        return self.linear(self.silu(h1) * h2, P[f"{prefix}gluw3.weight"], P.get(f"{prefix}gluw3.bias"))

    def layer_norm(self, x: Any, gamma: Any, beta: Any, eps: float) -> Any:
        """(x - mean) / sqrt(var + eps) * gamma + beta over the last axis; statistics in the work dtype."""
        jnp = self.jnp
        xw = x.astype(jnp.float32) if x.dtype in (jnp.bfloat16, jnp.float16) else x
        mu = jnp.mean(xw, axis=-1, keepdims=True)
        var = jnp.mean(jnp.square(xw - mu), axis=-1, keepdims=True)
        y = (xw - mu) * self.jax.lax.rsqrt(var + eps)
        return (y * gamma.astype(xw.dtype) + beta.astype(xw.dtype)).astype(x.dtype)

    def split_heads(self, x: Any, num_heads: int) -> Any:
        """[B, S, H d_k] -> [B, H, S, d_k]."""
        b, s, d = x.shape
        return x.reshape(b, s, num_heads, d // num_heads).transpose(0, 2, 1, 3)

    def merge_heads(self, z: Any) -> Any:
        """[B, H, S, d_k] -> [B, S, H d_k]."""
        b, h, s, dk = z.shape
        return z.transpose(0, 2, 1, 3).reshape(b, s, h * dk)

    # ------------------------------------------------------------------ RoPE, mask, positions
    def rope_table(self, positions: Any, d_k: int, base: float, precision: str) -> tuple[Any, Any]:
        """(cos, sin) of p * base^(-2i/d_k), [S, d_k/2]: float64 (``exact``) or torchtune's float32 angle."""
        jnp = self.jnp
        if precision == "float32":  # base ** (i / d_k) as float32 powf rounds it (XLA's float32 pow is looser)
            exps = (jnp.arange(0, d_k, 2, dtype=jnp.float32) / jnp.float32(d_k)).astype(jnp.float64)
            omega = jnp.float32(1) / jnp.power(jnp.float64(np.float32(base)), exps).astype(jnp.float32)
            phi = (positions.astype(jnp.float32)[..., None] * omega).astype(jnp.float64)
            return jnp.cos(phi).astype(jnp.float32), jnp.sin(phi).astype(jnp.float32)
        omega = jnp.power(jnp.float64(base), -jnp.arange(0, d_k, 2, dtype=jnp.float64) / d_k)
        phi = positions.astype(jnp.float64)[..., None] * omega
        return jnp.cos(phi), jnp.sin(phi)

    def rope(self, x: Any, positions: Any, layout: str, precision: str, base: float) -> Any:
        """Rotate each pair (interleaved (2i, 2i+1) or half (i, i + d/2)) by its angle."""
        jnp = self.jnp
        cos, sin = self.rope_table(positions, x.shape[-1], base, precision)
        work = jnp.float32 if precision == "float32" or x.dtype in (jnp.bfloat16, jnp.float16) else x.dtype
        xw, cos, sin = x.astype(work), cos.astype(work), sin.astype(work)
        if layout == "interleaved":
            x1, x2 = xw[..., 0::2], xw[..., 1::2]
        else:
            x1, x2 = jnp.split(xw, 2, axis=-1)
        y1, y2 = x1 * cos - x2 * sin, x2 * cos + x1 * sin
        y = jnp.stack([y1, y2], axis=-1).reshape(x.shape) if layout == "interleaved" else jnp.concatenate([y1, y2], -1)
        return y.astype(x.dtype)

    def causal_padding_mask(self, query_positions: Any, key_positions: Any, key_padding: Any | None) -> Any:
        """M[b, 0, i, j] = key position > query position, or key j is padding (True = forbidden)."""
        look = (key_positions[None, :] > query_positions[:, None])[None, None]
        return look if key_padding is None else look | key_padding.astype(bool)[:, None, None, :]

    def key_padding(self, ids: Any, pad_id: int, attention_mask: Any | None, pad_masking: bool) -> Any:
        """Padding keys [B, S]: HF attention_mask == 0, else token id == pad_id, else none."""
        if attention_mask is not None:
            return attention_mask == 0
        if pad_masking:
            return ids == pad_id
        return self.jnp.zeros(ids.shape, dtype=bool)

    def mask_constant(self, mode: str, value: float, dt: Any) -> float:
        """The additive constant (mask_value or finfo(dt).min), clamped to dt's finite range."""
        lowest = float(self.jnp.finfo(dt).min)
        return lowest if mode == "finfo_min" else max(float(value), lowest)

    def apply_mask(self, scores: Any, mask: Any | None, mode: str, value: float) -> Any:
        """Masked logits in the work dtype: -inf (``ideal``) or scores + constant (additive modes)."""
        jnp = self.jnp
        logits = scores.astype(jnp.float32) if scores.dtype in (jnp.bfloat16, jnp.float16) else scores
        if mask is None:
            return logits
        if mode == "ideal":
            return jnp.where(mask, -jnp.inf, logits)
        return jnp.where(mask, logits + self.mask_constant(mode, value, logits.dtype), logits)

    def softmax(self, logits: Any) -> Any:
        """Row softmax over the last axis with max subtraction; an all -inf row gives zeros."""
        jnp = self.jnp
        m = jnp.max(logits, axis=-1, keepdims=True)
        m = jnp.where(jnp.isfinite(m), m, 0)
        e = jnp.exp(logits - m)
        z = jnp.sum(e, axis=-1, keepdims=True)
        return jnp.where(z > 0, e / jnp.where(z > 0, z, 1), 0)

    # ------------------------------------------------------------------ density operator, metric learner
    def density(self, q_rot: Any) -> Any:
        """A0 = Q~^T Q~ per (batch, head), symmetrised."""
        a0 = self.matmul(self.jnp.swapaxes(q_rot, -1, -2), q_rot)
        return 0.5 * (a0 + self.jnp.swapaxes(a0, -1, -2))

    def cumulative_density(self, q_rot: Any) -> Any:
        """A0_i = sum_{s <= i} q~_s q~_s^T (running sums in the work dtype)."""
        q = q_rot.astype(self.jnp.float32) if self.is_low(q_rot) else q_rot
        return self.jnp.cumsum(q[..., :, None] * q[..., None, :], axis=-3).astype(q_rot.dtype)

    def is_low(self, x: Any) -> bool:
        """True for a 16-bit array."""
        return x.dtype in (self.jnp.bfloat16, self.jnp.float16)

    def gram(self, q_rot: Any, gram_mode: str, offset: Any | None) -> Any:
        """The Gram of ``gram_mode`` (cumulative: plus the cached running Gram)."""
        if gram_mode == "cumulative":
            a0 = self.cumulative_density(q_rot)
            return a0 if offset is None else a0 + offset[:, :, None].astype(a0.dtype)
        return self.density(q_rot)

    def residual_unit(self, a: Any, P: Mapping[str, Any], prefix: str, num_dense: int, eps: float) -> Any:
        """A <- LN(GLU_D(... GLU_1(A)) + A)."""
        h = a
        for j in range(num_dense):
            h = self.glu(h, P, f"{prefix}denseAs.{j}.")
        return self.layer_norm(h + a, P[f"{prefix}layernormA.weight"], P[f"{prefix}layernormA.bias"], eps)

    def metric_learner(self, P: Mapping[str, Any], m: str, a0: Any, c: Any, version: str | None = None) -> Any:
        """v500: Res_R(... Res_1(LN(A0))); v900: LN2(Dense(Res_R(... LN1(Dense(A0)))))."""
        version = version or c.metric_learner
        if version == "v900":
            a = self.layer_norm(self.linear(a0, P[f"{m}A_dff_dense1.weight"], P[f"{m}A_dff_dense1.bias"]),
                                P[f"{m}layernorm1.weight"], P[f"{m}layernorm1.bias"], c.eps_ln)
        elif version == "v500":
            a = self.layer_norm(a0, P[f"{m}layernorm1.weight"], P[f"{m}layernorm1.bias"], c.eps_ln)
        else:
            raise Unsupported("metric_learner='none' computes no A")
        for r in range(c.num_reslayerA):
            a = self.residual_unit(a, P, f"{m}reslayerAs.{r}.", c.num_denseA, c.eps_ln)
        if version == "v900":
            a = self.layer_norm(self.linear(a, P[f"{m}A_dff_dense2.weight"], P[f"{m}A_dff_dense2.bias"]),
                                P[f"{m}layernorm2.weight"], P[f"{m}layernorm2.bias"], c.eps_ln)
        return a

    # ------------------------------------------------------------------ PLGA and attention
    def per_head(self, t: Any, like: Any) -> Any:
        """[H, d, d] viewed to broadcast against [B, H, (S,) d, d]."""
        return t.reshape(t.shape[0], *([1] * (like.ndim - 4)), *t.shape[-2:])

    def metric_tensor(self, a: Any, W: Any, b: Any, eps_adj: float) -> Any:
        """A_LM = iSwiGLU(W A + b) + eps_adj, in the work dtype."""
        z = self.matmul(self.per_head(W, a).astype(a.dtype), a) + self.per_head(b, a).astype(a.dtype)
        zw = z.astype(self.jnp.float32) if self.is_low(z) else z
        return self.iswiglu(zw) + eps_adj

    def potential_tensor(self, a_lm: Any, P: Any) -> Any:
        """A_P = A_LM ** P elementwise, in A_LM's (work) dtype."""
        return self.jnp.power(a_lm, self.per_head(P, a_lm).astype(a_lm.dtype))

    def energy_curvature(self, a_p: Any, a: Any, b_a: Any) -> Any:
        """G_LM = a A_P + b_a (matrix product per head) in A_P's dtype, returned in the parameters' dtype."""
        g = self.matmul(self.per_head(a, a_p).astype(a_p.dtype), a_p) + self.per_head(b_a, a_p).astype(a_p.dtype)
        return g.astype(a.dtype)

    def attention_scores(self, q_rot: Any, g_lm: Any, k_rot: Any) -> Any:
        """Sc = (Q~ G) K~^T / sqrt(d_k); G per head [B|1, H, d, d] or per row [B, H, S, d, d]."""
        jnp = self.jnp
        g = g_lm.astype(q_rot.dtype)
        qg = self.matmul(q_rot[..., None, :], g)[..., 0, :] if g.ndim == 5 else self.matmul(q_rot, g)
        return self.matmul(qg, jnp.swapaxes(k_rot, -1, -2).astype(qg.dtype)) / jnp.asarray(
            math.sqrt(q_rot.shape[-1]), qg.dtype)

    def mix_values(self, e: Any, v: Any) -> Any:
        """Z = E V per head (E in V's dtype)."""
        return self.matmul(e.astype(v.dtype), v)

    def embedding_scale(self, c: Any) -> float:
        """sqrt(d): exact, or rounded to float32 (PT-v510 / TF)."""
        return float(np.sqrt(np.float32(c.d_model))) if c.embed_scale_precision == "float32" else math.sqrt(c.d_model)

    def embed(self, P: Mapping[str, Any], c: Any, ids: Any) -> Any:
        """X0 = E[x] * sqrt(d)."""
        e = self.jnp.take(P["decoder.embedding.weight"], ids, axis=0)
        return e * self.jnp.asarray(self.embedding_scale(c), e.dtype)

    def lm_head(self, P: Mapping[str, Any], hidden: Any) -> Any:
        """logits = X W_out^T + b_out."""
        return self.linear(hidden, P["final_layer.weight"], P.get("final_layer.bias"))

    def residual(self, y: Any, x: Any) -> Any:
        """The residual sum y + x before a post-norm."""
        return y + x

    # ------------------------------------------------------------------ layer and model (jitted)
    def decoder_layer(self, P: Mapping[str, Any], feed: Mapping[str, Any], *, c: Any, dt: str) -> dict[str, Any]:
        """Y = MHA_PLGA(X); O1 = LN1(Y + X); O2 = LN2(FFN(O1) + O1) with the cache hooks of spec §8: the registry's
        per-layer stages walked in order (:func:`pldr_ref.backends.stage_walk.walk_layer`), each run by its entry of
        :attr:`stage_runners` -- the entry :meth:`stage` runs in isolation.

        ``feed``: ``x``, ``positions``, optional ``mask``, ``past_k``, ``past_v``, ``frozen_A``,
        ``frozen_G_LM`` (+ ``frozen_A_LM``, ``frozen_A_P``), ``gram_offset``.  ``P``: this layer's parameters under
        layer-relative names (:meth:`layer_params`).
        """
        jnp = self.jnp
        x = feed["x"]
        frozen_g = feed.get("frozen_G_LM")
        cache = LayerCache(feed.get("past_k"), feed.get("past_v"), feed.get("frozen_A"),
                           None if frozen_g is None else (feed.get("frozen_A_LM"), feed.get("frozen_A_P"), frozen_g),
                           feed.get("gram_offset"))
        values = {"x": x, "positions": feed["positions"], "mask": feed.get("mask")}
        fixed_shape = (x.shape[0], c.num_heads, c.d_k, c.d_k)  # no PLGA parameters: the fixed G over the batch
        return walk_layer(self.stage_caller(P, c), c, values, cache,
                          fixed_g=lambda: jnp.broadcast_to(P[FIXED_G_KEY], fixed_shape),
                          join_keys=lambda past, new: jnp.concatenate([past, new], axis=2))

    def stage_caller(self, P: Mapping[str, Any], c: Any) -> Any:
        """``run(stage, values)`` of the stage walk: the stage's entry of :attr:`stage_runners` on its registry
        inputs read from ``values`` (``values`` also gives the optional mask and Gram offset)."""
        def run(stage: Stage, values: Mapping[str, Any]) -> tuple[Any, ...]:
            return self.stage_runner(stage)(self, P, c, values, *(values[n] for n in stage.inputs))
        return run

    def layer_params(self, P: Mapping[str, Any], li: int) -> dict[str, Any]:
        """Layer ``li``'s parameters under layer-relative names (``mha1.wq.weight`` ...) plus its fixed G
        (``decoder.past_G_values``), so that one compiled layer serves every layer of the model."""
        pre = f"decoder.dec_layers.{li}."
        out = {k[len(pre):]: v for k, v in P.items() if k.startswith(pre)}
        if FIXED_G_KEY in P:
            out[FIXED_G_KEY] = P[FIXED_G_KEY][li, 2, 0]
        return out

    def call_positions(self, start_pos: Any, num: int) -> Any:
        """Absolute positions of the rows of an uncached call: start_pos .. start_pos + S - 1."""
        return start_pos + self.jnp.arange(num)

    def forward(self, P: Mapping[str, Any], token_ids: Any, start_pos: Any, attention_mask: Any | None, *, c: Any,
                dt: str, pad_masking: bool) -> dict[str, Any]:
        """Full forward: trace with the golden names (``embed``, ``x0``, ``layers.{l}.*``, ``logits``): the
        sequence mask, then the registry's model-level stages and the layers in order
        (:func:`pldr_ref.backends.stage_walk.walk_model`), each stage run by its entry of :attr:`stage_runners`."""
        run = self.stage_caller(P, c)
        call = {"token_ids": token_ids, "start_pos": start_pos, "attention_mask": attention_mask,
                "pad_masking": pad_masking}
        positions, mask = run(SEQUENCE_MASK, call)

        def layer(li: int, x: Any) -> dict[str, Any]:
            return self._layer(self.layer_params(P, li), {"x": x, "positions": positions, "mask": mask}, c=c, dt=dt)

        return walk_model(run, c, {"token_ids": token_ids}, layer)

    def stage(self, P: Mapping[str, Any], i: Mapping[str, Any], *, name: str, c: Any, dt: str) -> dict[str, Any]:
        """One stage of the forward map from the golden upstream values ``i`` (leaf names); ``P``: the model's
        parameters, or one layer's under layer-relative names for a layer stage (:meth:`layer_params`).  The
        stage's registry inputs (``Stage.inputs``) go to its entry of :attr:`stage_runners`, whose results are
        named by the stage's registry outputs (``Stage.outputs``)."""
        stage = STAGES_BY_NAME.get(name)
        if stage is None:
            raise Unsupported(f"stage {name!r} is not known to the JAX backend")
        i = read_view(i, stage)  # an entry a replacing output stands for (a QK-norm's q)
        out = self.stage_runner(stage)(self, P, c, i, *(i[n] for n in stage.inputs))
        return dict(zip(stage.outputs, out, strict=True))

    def op(self, P: Mapping[str, Any] | None, i: Mapping[str, Any], *, kind: str, dt: str,
           args: tuple) -> dict[str, Any]:
        """An op-level case (input names of :mod:`pldr_ref.fixtures.runners`); ``args`` = (sorted scalar
        arguments, config or None)."""
        a = dict(args[0])
        c = args[1]
        if kind in DIRECT_OP_METHODS:  # the method takes the registry's inputs, then its scalar arguments
            op = OPS_BY_NAME[kind]
            values = [i.get(n[:-1]) if n.endswith("?") else i[n] for n in op.inputs]
            return {"out": getattr(self, DIRECT_OP_METHODS[kind])(*values, *(float(a[n]) for n in op.args))}
        if kind == "glu":
            Pg = {f"gluw{j}.weight": i[f"w{j}"] for j in (1, 2, 3)}
            Pg.update({f"gluw{j}.bias": i[f"b{j}"] for j in (1, 2, 3) if f"b{j}" in i})
            return {"out": self.glu(i["x"], Pg, "")}
        if kind == "apply_rope":
            return {"out": self.rope(i["x"], i["positions"], a["layout"], a["precision"], float(a["base"]))}
        if kind == "apply_mask":
            return {"out": self.apply_mask(i["scores"], i["mask"].astype(bool), a["mode"], float(a["mask_value"]))}
        if kind == "masked_softmax":
            lg = i["logits"]
            return {"out": self.softmax(self.apply_mask(lg, None, "ideal", 0.0)).astype(lg.dtype)}
        if P is None or c is None:
            raise Unsupported(f"op kind {kind!r} needs model parameters")
        if kind == "embedding":
            return {"out": self.embed(P, c, i["token_ids"])}
        if kind == "lm_head":
            return {"out": self.lm_head(P, i["hidden"])}
        m = f"decoder.dec_layers.{int(a['layer'])}.mha1."
        if kind == "residual_unit":
            return {"out": self.residual_unit(i["a"], P, f"{m}reslayerAs.{int(a['unit'])}.", c.num_denseA, c.eps_ln)}
        if kind in ("metric_learner_v500", "metric_learner_v900"):
            return {"out": self.metric_learner(P, m, i["a0"], c, kind[-4:])}
        if kind == "metric_learner":
            return {"out": self.metric_learner(P, m, i["a0"], c)}
        raise Unsupported(f"op kind {kind!r} is not implemented by the JAX backend")


__all__ = ["JAX_DTYPES", "OP_KINDS", "STAGE_RUNNERS", "JaxBackend", "import_jax"]
