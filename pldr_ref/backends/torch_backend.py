"""An independent PyTorch implementation of PLDR-LLM, validated by the harness.

Backend name for the harness: ``pldr_ref.backends.torch_backend:TorchBackend``.

Written from the spec (``equations.md`` §2, §7, §8, §11-§12), not by calling the float64
NumPy reference: every equation is re-implemented with torch operations.  Only data plumbing
is shared (parameter names of :func:`pldr_ref.params.param_shapes`, the case format).

* dtypes: float64 and float32 (parameters and inputs rounded to the dtype, every op in it; the RoPE
  angle table in float64 for ``rope_precision="exact"``); bfloat16 and float16 in the mixed-precision
  style of real GPU code (torch autocast): parameters and inputs stored in the 16-bit dtype, every
  matrix product takes 16-bit inputs, accumulates in float32 and returns its result rounded to the
  16-bit dtype, every elementwise op (LayerNorm, RoPE, softmax, PLGA powers, residuals) runs in float32
  (:meth:`TorchBackend.matmul`);
* device: ``TorchBackend(device=...)``, else ``$PLDR_REF_TORCH_DEVICE``, else CUDA when present,
  else CPU;
* every switch of :class:`~pldr_ref.config.PLDRConfig` (RoPE layouts and precisions, mask
  modes, metric learners v500/v900, G modes, global and cumulative Gram);
* caches: KV (rotated keys, values, frozen A or running Gram) and G (A_LM, A_P, G_LM) with the
  semantics of :func:`pldr_ref.inference.cached_forward`.

Every step of the model is a method, so a variant can override exactly one equation (the
mutation suite in :mod:`pldr_ref.harness.controls.mutants` does this).  The code is split by concern: this module
holds the protocol, the data plumbing (dtypes, mixed precision, parameters) and the layer / model / cached
call; :mod:`pldr_ref.backends.torch_math` the equations; :mod:`pldr_ref.backends.torch_cases` the runners
of layer, cache, scoring and op cases.  PyTorch is an optional
dependency (``pip install "pldr-ref[torch]"``); it is imported when the backend is created.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from pldr_ref.backends.engine_ops import EngineOps, engine_ops, run_body
from pldr_ref.backends.stage_walk import LayerCache, walk_layer, walk_model
from pldr_ref.backends.torch_cases import GENERATION_MODES, HF_IGNORE_INDEX, TorchCases
from pldr_ref.backends.torch_math import TorchMath
from pldr_ref.env_vars import read_env
from pldr_ref.harness.protocol import Capabilities, StageRequest, Unsupported
from pldr_ref.layer import LAYER_TRACE_NAMES
from pldr_ref.params import FIXED_G_KEY, Params
from pldr_ref.registry import ALL_STAGES, Stage, op_kinds, read_view
from pldr_ref.switches import declared_switches

#: Every op kind of the fixture suite that this backend runs (plus ``decoder_layer``, ``forward``).
OP_KINDS = op_kinds("op")

#: The scoring semantics of paper §4.5 (fixture kinds).
SCORING_KINDS = op_kinds("scoring")

STAGE_NAMES = tuple(s.name for s in ALL_STAGES)

#: Every fixture kind this backend runs (:meth:`TorchBackend.capabilities`).
KINDS = (*OP_KINDS, "decoder_layer", "forward", "cached_generation", *SCORING_KINDS)

#: Registry ops (fixture kinds) and stages this backend does not implement: name -> why (none).
UNSUPPORTED_KINDS: dict[str, str] = {}
UNSUPPORTED_STAGES: dict[str, str] = {}

#: Registry stage name -> Stage.
STAGES_BY_NAME = {s.name: s for s in ALL_STAGES}

#: The attention core a fused kernel computes as one call in a layer (:meth:`TorchBackend.fuses_attention`).
ATTENTION_CORE = ("attention_scores", "masked_softmax", "value_mix")

#: Number of (parameters, dtype) conversions kept on the device.
PARAMS_CACHE_SIZE = 4

#: Trace entries of one layer, in forward order (the golden names ``layers.{l}.{entry}``).
LAYER_ENTRIES = LAYER_TRACE_NAMES


class StageWeights:
    """The parameters a stage reads, by name relative to its layer (``mha1.wq.weight``) or, for a model-level
    stage, by full name (``decoder.layernorm1.weight``)."""

    def __init__(self, P: Mapping[str, Any], prefix: str) -> None:
        self.all, self.prefix = P, prefix

    def __call__(self, name: str) -> Any:
        return self.all[f"{self.prefix}{name}"]

    def get(self, name: str) -> Any:
        """An optional parameter (a bias), or None."""
        return self.all.get(f"{self.prefix}{name}")


class StageExtras:
    """The optional values of a stage beyond its registry inputs (the mask, a cumulative Gram's offset, the keys of
    the density operator's row hook, the sequence-mask call arguments): a request's NumPy values (converted on use)
    or, inside a layer, the layer's tensors (used as they are)."""

    def __init__(self, backend: TorchBackend, inputs: Mapping[str, Any], dt: Any) -> None:
        self.backend, self.inputs, self.dt = backend, inputs, dt

    def tensor(self, name: str) -> Any:
        """The value as a tensor in the compute dtype, or None when absent."""
        value = self.inputs.get(name)
        if value is None or isinstance(value, self.backend.torch.Tensor):
            return value
        return self.backend.tensor(value, self.dt)

    def mask(self) -> Any:
        """The boolean mask (True = forbidden), or None."""
        value = self.inputs.get("mask")
        if value is None:
            return None
        return (value if isinstance(value, self.backend.torch.Tensor) else self.backend.tensor(value)).bool()

    def raw(self, name: str, default: Any = None) -> Any:
        """The value as given (a NumPy value of a request), or ``default``."""
        return self.inputs.get(name, default)


def _sequence_mask(b: TorchBackend, w: StageWeights, c: Any, extra: StageExtras, ids: Any) -> tuple[Any, Any]:
    positions = b.call_positions(int(extra.raw("start_pos", 0)), ids.shape[1])
    pad = b.key_padding(ids, c, extra.raw("attention_mask"), bool(extra.raw("pad_masking", True)))
    return positions, b.causal_padding_mask(positions, positions, pad)


def _density_operator(b: TorchBackend, w: StageWeights, c: Any, extra: StageExtras, q_rot: Any) -> tuple[Any]:
    k_rot = extra.tensor("k_rot")
    k_new = None if k_rot is None else k_rot[:, :, -q_rot.shape[2]:]
    return (b.gram(b.gram_rows(q_rot, k_new), c, extra.tensor("gram_offset")),)


def _post_norm(norm: str) -> Any:
    def run(b: TorchBackend, w: StageWeights, c: Any, extra: StageExtras, y: Any, x: Any) -> tuple[Any]:
        return (b.layer_norm(b.residual(y, x), w(f"{norm}.weight"), w(f"{norm}.bias"), c.eps_ln),)
    return run


def body_runner(stage: Stage) -> Any:
    """The runner of a stage without an entry in the table: the registry's float64 body in the backend's own
    arithmetic (:func:`pldr_ref.backends.engine_ops.run_body`, :attr:`TorchBackend.ops`), on the stage's inputs and
    the optional values its body takes, as tensors in the compute dtype; refused (``Unsupported``, with the reason)
    when the body needs more than the backend's primitives and arrays."""
    def run(b: TorchBackend, w: StageWeights, c: Any, extra: StageExtras, *inputs: Any) -> tuple[Any, ...]:
        def value(n: str) -> Any:  # arrays as tensors in the compute dtype; other values (a table object) as given
            raw = extra.raw(n)
            if n == "mask":
                return extra.mask()
            return extra.tensor(n) if isinstance(raw, np.ndarray | b.torch.Tensor) else raw

        values = {n: value(n) for n, _ in stage.body_inputs if extra.raw(n) is not None}
        values.update(zip(stage.inputs, inputs, strict=True))
        return run_body(b.name, stage, b.ops, c, values, param=w, is_array=lambda v: isinstance(v, b.torch.Tensor))
    return run


#: Registry stage -> its torch computation ``runner(backend, weights, config, extras, *inputs)``: ``inputs`` are
#: the stage's registry inputs (``Stage.inputs``, in order, as tensors in the compute dtype); it returns the
#: stage's outputs in ``Stage.outputs`` order.  Each stage of the registry runs its entry here (today every stage
#: has one); a stage without one (added with only its float64 body) runs that body in the backend's arithmetic
#: (:func:`body_runner`, :meth:`TorchBackend.stage_runner`); ``tests/test_engine_registry.py`` runs both kinds.
STAGE_RUNNERS: dict[str, Any] = {
    "sequence_mask": _sequence_mask,
    "embedding": lambda b, w, c, extra, ids: (b.embed(w.all, c, ids),),
    "input_norm": lambda b, w, c, extra, embed: (
        b.layer_norm(embed, w("decoder.layernorm1.weight"), w("decoder.layernorm1.bias"), c.eps_ln),),
    "qkv_projection": lambda b, w, c, extra, x: tuple(
        b.split_heads(b.linear(x, w(f"mha1.{p}.weight"), w.get(f"mha1.{p}.bias")), c.num_heads)
        for p in ("wq", "wk", "wv")),
    "rope": lambda b, w, c, extra, q, k, positions: (b.rope(q, positions, c), b.rope(k, positions, c)),
    "density_operator": _density_operator,
    "metric_learner": lambda b, w, c, extra, a0: (b.metric_learner(w.all, w.prefix, a0, c),),
    "metric_tensor": lambda b, w, c, extra, a: (
        b.metric_tensor(a, w("mha1.plgatt_layer.Wlst"), w("mha1.plgatt_layer.blst"), c.eps_adj),),
    "potential_tensor": lambda b, w, c, extra, a_lm: (b.potential_tensor(a_lm, w("mha1.plgatt_layer.pwlst")),),
    "energy_curvature": lambda b, w, c, extra, a_p: (
        b.energy_curvature(a_p, w("mha1.plgatt_layer.alst"), w("mha1.plgatt_layer.balst")),),
    "attention_scores": lambda b, w, c, extra, q_rot, g_lm, k_rot: (b.attention_scores(q_rot, g_lm, k_rot),),
    "masked_softmax": lambda b, w, c, extra, scores: (b.softmax(b.apply_mask(scores, extra.mask(), c)),),
    "value_mix": lambda b, w, c, extra, e, v: (b.merge_heads(b.mix_values(e, v)),),
    "output_projection": lambda b, w, c, extra, ctx: (b.linear(ctx, w("mha1.dense.weight"), w.get("mha1.dense.bias")),),
    "post_attention_norm": _post_norm("layernorm1"),
    "ffn": lambda b, w, c, extra, out1: (b.glu(out1, w.all, f"{w.prefix}ffn."),),
    "post_ffn_norm": _post_norm("layernorm2"),
    "lm_head": lambda b, w, c, extra, hidden: (b.lm_head(w.all, hidden),),
}


def import_torch() -> Any:
    """``import torch`` with a clear error when the optional extra is missing."""
    try:
        import torch
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise ImportError(
            "the torch backend needs PyTorch: install it with `pip install \"pldr-ref[torch]\"` or `pip install torch`"
        ) from exc
    return torch


class TorchBackend(TorchCases, TorchMath):
    """PLDR-LLM in PyTorch (see module docstring).

    ``device``: "cpu", "cuda", "cuda:1", ... or None (``$PLDR_REF_TORCH_DEVICE``, else CUDA when present,
    else CPU).  ``num_threads`` (or ``$PLDR_REF_TORCH_THREADS``): calls ``torch.set_num_threads`` --
    process-wide; 1 is much faster for the small fixture tensors on a busy CPU.
    """

    name = "torch"

    #: Registry stage -> its computation (:data:`STAGE_RUNNERS`; a fused-kernel subclass replaces entries).
    stage_runners: Mapping[str, Any] = STAGE_RUNNERS

    def __init__(self, device: str | None = None, num_threads: int | None = None) -> None:
        torch = import_torch()
        self.torch = torch
        dev = device or read_env("PLDR_REF_TORCH_DEVICE") or ("cuda" if torch.cuda.is_available() else "cpu")
        self.device = torch.device(dev)
        threads = num_threads if num_threads is not None else read_env("PLDR_REF_TORCH_THREADS")
        if threads:
            torch.set_num_threads(int(threads))
        self._params_cache: dict[tuple[int, str], tuple[Params, dict[str, Any]]] = {}
        self._mm: Any = None  # the 16-bit storage / matmul-input dtype of the current call (None: no mixing)
        #: This backend's arithmetic as an Ops: what a registry body without a table entry computes with.
        self.ops: EngineOps = engine_ops(self.name, self)

    def stage_runner(self, stage: Stage) -> Any:
        """The computation of ``stage``: its entry of :attr:`stage_runners`, else its registry body in this
        backend's arithmetic (:func:`body_runner`)."""
        return self.stage_runners.get(stage.name) or body_runner(stage)

    # ------------------------------------------------------------------ protocol
    def capabilities(self) -> Capabilities:
        """All dtypes, every fixture kind, every stage in isolation, KV and G caches, every switch."""
        return Capabilities(
            dtypes=("float64", "float32", "bfloat16", "float16"),
            kinds=KINDS,
            stages=STAGE_NAMES,
            caches=("kv", "g"),
            switches=declared_switches("torch"),  # the issue-12 emulation switches are not implemented here
            # every op's output (each matrix product's included) is stored in the 16-bit dtype, as eager
            # frameworks do: judged against every calibration member (docs/tolerances.md, "The policy")
            arithmetic=("dtype-elementwise",),
        )

    def run_case(self, case: Any, dtype: str) -> dict[str, np.ndarray]:
        """Outputs of a fixture case (golden names) computed in ``dtype``."""
        dt = self.dtype(dtype)
        kind = case.kind
        inputs = {k: np.asarray(v) for k, v in case.inputs.items()}
        args = dict(case.args or {})
        if kind == "forward":
            P = self.params(case.params, dt)
            trace = self.forward(P, case.params.config, inputs["token_ids"], start_pos=int(args.get("start_pos", 0)),
                                 attention_mask=inputs.get("attention_mask"),
                                 pad_masking=bool(args.get("pad_masking", True)))
            return self.numpy_dict(trace)
        if kind == "decoder_layer":
            return self.numpy_dict(self._run_layer_case(case.params, args, inputs, dt))
        if kind == "cached_generation":
            return self.numpy_dict(self._run_cached_generation(case, args, inputs, dt))
        if kind in SCORING_KINDS:
            return self.numpy_dict(self._run_scoring(kind, case, args, inputs, dt))
        if kind in OP_KINDS:
            return self.numpy_dict(self._run_op(kind, case.params, args, inputs, dt))
        raise Unsupported(f"case kind {kind!r} is not implemented by the torch backend")

    def run_stage(self, request: StageRequest) -> dict[str, np.ndarray]:
        """One stage from golden upstream values (see :class:`~pldr_ref.harness.protocol.StageRequest`): the
        stage's registry inputs (``Stage.inputs``) go to its entry of :attr:`stage_runners`, whose results are
        named by the stage's registry outputs (``Stage.outputs``)."""
        stage = STAGES_BY_NAME.get(request.stage)
        if stage is None:
            raise Unsupported(f"stage {request.stage!r} is not known to the torch backend")
        runner = self.stage_runner(stage)
        dt = self.dtype(request.dtype)
        P = self.params(request.params, dt)
        pre = "" if request.layer is None else f"decoder.dec_layers.{request.layer}."
        inputs = read_view(request.inputs, stage)  # an entry a replacing output stands for (a QK-norm's q)
        extra = StageExtras(self, inputs, dt)
        out = runner(self, StageWeights(P, pre), request.config, extra,
                     *(self.tensor(inputs[name], dt) for name in stage.inputs))
        return self.numpy_dict(dict(zip(stage.outputs, out, strict=True)))

    # ------------------------------------------------------------------ data plumbing
    def dtype(self, name: str) -> Any:
        """torch compute dtype of a harness dtype name (float32 for bfloat16 / float16, whose 16-bit dtype becomes
        the storage and matmul-input dtype of the call, :meth:`matmul`)."""
        torch = self.torch
        table = {"float64": torch.float64, "float32": torch.float32, "bfloat16": torch.bfloat16,
                 "float16": torch.float16}
        if name not in table:
            raise Unsupported(f"dtype {name!r} is not supported by the torch backend")
        self._mm = table[name] if name in ("bfloat16", "float16") else None
        return torch.float32 if self._mm is not None else table[name]

    def storage_dtype(self, dt: Any) -> Any:
        """The dtype values are stored in: the 16-bit dtype of a mixed-precision call, else ``dt``."""
        return self._mm if self._mm is not None else dt

    def tensor(self, arr: Any, dt: Any = None) -> Any:
        """NumPy array -> torch tensor on the device; floats go to ``dt`` (rounded through the 16-bit storage dtype
        in a mixed-precision call), ints to int64, bools stay (always a private copy)."""
        a = np.asarray(arr)
        if a.dtype == np.bool_:
            return self.torch.as_tensor(np.array(a, copy=True), device=self.device)
        if np.issubdtype(a.dtype, np.integer):
            return self.torch.as_tensor(a.astype(np.int64), device=self.device)
        t = self.torch.as_tensor(a.astype(np.float64), device=self.device)
        if dt is None:
            return t
        if self._mm is not None and dt == self.torch.float32:
            return self.storage_round(t).to(dt)
        return t.to(dt)

    def storage_round(self, t: Any) -> Any:
        """``t`` rounded to the 16-bit storage dtype, except values that dtype cannot hold as normal numbers
        (eps_adj-sized A_LM, huge A_P in float16), which stay float32 as in real mixed-precision code."""
        torch = self.torch
        info = torch.finfo(self._mm)
        low = t.to(self._mm).to(torch.float32)
        mag = t.abs()
        outside = torch.isfinite(t) & ((mag > info.max) | ((mag > 0) & (mag < info.tiny)))
        return torch.where(outside, t.to(torch.float32), low)

    def matmul(self, a: Any, b: Any) -> Any:
        """a @ b; in a mixed-precision call both inputs are rounded to the 16-bit dtype, the products are
        accumulated in float32 and the result is rounded to the 16-bit dtype (autocast semantics)."""
        torch = self.torch
        if self._mm is None or a.dtype != torch.float32:  # a float64 / pure 16-bit call: no mixing
            return torch.matmul(a, b)
        return self.storage_round(torch.matmul(self.storage_round(a), self.storage_round(b)))

    def numpy_dict(self, out: Mapping[str, Any]) -> dict[str, np.ndarray]:
        """torch tensors -> NumPy float64 (bool stays bool); exact widening of every dtype."""
        res = {}
        for k, v in out.items():
            if v is None:
                continue
            v = v.detach().to("cpu")
            if v.dtype == self.torch.bool:
                res[k] = v.numpy()
            elif not v.dtype.is_floating_point:
                res[k] = v.to(self.torch.int64).numpy()
            else:
                res[k] = v.to(self.torch.float64).numpy()
        return res

    def params(self, params: Params, dt: Any) -> dict[str, Any]:
        """Every parameter as a torch tensor in ``dt`` (cached per Params object and dtype)."""
        key = (id(params), f"{dt}/{self._mm if dt == self.torch.float32 else None}")
        hit = self._params_cache.get(key)
        if hit is not None and hit[0] is params:
            return hit[1]
        tensors = {name: self.tensor(arr, dt) for name, arr in params.items()}
        if len(self._params_cache) >= PARAMS_CACHE_SIZE:  # a suite holds many models: keep the recent ones
            self._params_cache.pop(next(iter(self._params_cache)))
        self._params_cache[key] = (params, tensors)
        return tensors

    # ------------------------------------------------------------------ layer and model
    def residual(self, y: Any, x: Any) -> Any:
        """The residual sum y + x before a post-norm."""
        return y + x

    def value_rows(self, v: Any, positions: Any, config: Any) -> Any:
        """The values V as projected (no rotation: RoPE acts on queries and keys only)."""
        return v

    def frozen_g(self, g_cache: list[tuple[Any, Any, Any]] | None, layer: int,
                 cached_step: bool) -> tuple[Any, Any, Any] | None:
        """The G-cache entry (A_LM, A_P, G_LM) a call uses for ``layer`` (None without a G cache).

        ``cached_step`` is True for every call after the prompt pass.
        """
        return None if g_cache is None else g_cache[layer]

    def decoder_layer(self, P: Mapping[str, Any], layer: int, x: Any, config: Any, *, positions: Any, mask: Any,
                      past_k: Any = None, past_v: Any = None, frozen_A: Any = None,
                      frozen_G: tuple[Any, Any, Any] | None = None, gram_offset: Any = None) -> dict[str, Any]:
        """Y = MHA_PLGA(X); O1 = LN1(Y + X); O2 = LN2(FFN(O1) + O1), with the cache hooks of the spec §8: the
        registry's per-layer stages walked in order (:func:`pldr_ref.backends.stage_walk.walk_layer`), each run by
        its entry of :attr:`stage_runners` -- the entry :meth:`run_stage` runs in isolation.

        Returns the trace entries of :data:`LAYER_ENTRIES` (those that exist) as torch tensors.
        """
        weights = StageWeights(P, f"decoder.dec_layers.{layer}.")
        fused: dict[str, Any] = {}

        def run(stage: Stage, values: Mapping[str, Any]) -> tuple[Any, ...]:
            if stage.name in ATTENTION_CORE and self.fuses_attention():  # one fused call for the three stages
                if not fused:
                    scores, e, z = self.attention(values["q_rot"], values["G_LM"], values["k_rot"], values["v"],
                                                  values["mask"], config)
                    fused.update(scores=scores, E=e, ctx=self.merge_heads(z))
                return tuple(fused[o] for o in stage.outputs)
            return self.stage_runner(stage)(self, weights, config, StageExtras(self, values, None),
                                            *(values[n] for n in stage.inputs))

        def glue(name: str, values: dict[str, Any]) -> None:
            if name == "qkv_projection":  # layer glue: the values as the attention reads them
                values["v"] = self.value_rows(values["v"], values["positions"], config)

        cache = LayerCache(past_k, past_v, frozen_A, frozen_G, gram_offset)
        return walk_layer(run, config, {"x": x, "positions": positions, "mask": mask}, cache,
                          fixed_g=lambda: self.fixed_g(P, layer, x.shape[0]),
                          join_keys=lambda past, new: self.torch.cat([past, new], dim=2), after_stage=glue)

    def fixed_g(self, P: Mapping[str, Any], layer: int, batch: int) -> Any:
        """G_LM without PLGA parameters (``g_mode`` identity / random / external): the layer's fixed [H, d_k, d_k]
        operator repeated over the batch."""
        fixed = P[FIXED_G_KEY][layer, 2, 0]
        return fixed.expand(batch, *fixed.shape).clone()

    def fuses_attention(self) -> bool:
        """True when a subclass replaces :meth:`attention` (a fused kernel): a layer then runs the stages of
        :data:`ATTENTION_CORE` as that one call."""
        return type(self).attention is not TorchBackend.attention

    def attention(self, q_rot: Any, g_lm: Any, k_rot: Any, v: Any, mask: Any, config: Any) -> tuple[Any, Any, Any]:
        """(scores, E, Z = E V per head): the attention core of a layer, one equation at a time (a fused kernel,
        e.g. :mod:`pldr_ref.backends.triton_attention`, overrides it as a whole)."""
        scores = self.attention_scores(q_rot, g_lm, k_rot)
        e = self.softmax(self.apply_mask(scores, mask, config))
        return scores, e, self.mix_values(e, v)

    def embedding_scale(self, config: Any) -> float:
        """sqrt(d): exact, or rounded to float32 (PT-v510 / TF)."""
        if config.embed_scale_precision == "float32":
            return float(self.torch.sqrt(self.torch.tensor(float(config.d_model), dtype=self.torch.float32)))
        return math.sqrt(config.d_model)

    def embed(self, P: Mapping[str, Any], config: Any, ids: Any) -> Any:
        """X0 = E[x] * sqrt(d)."""
        return P["decoder.embedding.weight"][ids] * self.embedding_scale(config)

    def lm_head(self, P: Mapping[str, Any], hidden: Any) -> Any:
        """logits = X W_out^T + b_out."""
        return self.linear(hidden, P["final_layer.weight"], P.get("final_layer.bias"))

    def key_padding(self, ids: Any, config: Any, attention_mask: Any | None, pad_masking: bool) -> Any:
        """Padding keys [B, S]: from the HF attention_mask (1 = keep), else token id pad_id, else none."""
        if attention_mask is not None:
            return self.tensor(attention_mask) == 0
        if pad_masking:
            return ids == config.pad_id
        return self.torch.zeros(ids.shape, dtype=self.torch.bool, device=self.device)

    def forward(self, P: Mapping[str, Any], config: Any, token_ids: np.ndarray, *, start_pos: int = 0,
                attention_mask: np.ndarray | None = None, pad_masking: bool = True) -> dict[str, Any]:
        """Full forward: trace with the golden names (``embed``, ``x0``, ``layers.{l}.*``, ``logits``)."""
        trace, _, _ = self.step(P, config, token_ids, start_pos=start_pos, attention_mask=attention_mask,
                                pad_masking=pad_masking)
        return trace

    def step(self, P: Mapping[str, Any], config: Any, token_ids: np.ndarray, *, kv: dict | None = None,
             g_cache: list | None = None, start_pos: int = 0, attention_mask: np.ndarray | None = None,
             pad_masking: bool = True, cached_mask: str = "none",
             cached_step: bool = False) -> tuple[dict[str, Any], dict, list | None]:
        """A (possibly cached) forward of new tokens; returns (trace, new KV cache, new G cache).

        KV cache: ``{"layers": [{"k_rot", "v", "A", "gram"}], "key_padding": [B, T]}``; G cache: per layer
        (A_LM, A_P, G_LM).  Semantics of :func:`pldr_ref.inference.cached_forward` (spec §8): new rows at
        positions T0.., cached keys prepended, A frozen (global Gram) or the running Gram added
        (cumulative), a G cache replaces PLGA, cached mask None (native) or causal + padding (HF).
        """
        torch = self.torch
        c = config
        ids = self.tensor(np.asarray(token_ids))
        s = ids.shape[1]
        cumulative = c.gram_mode == "cumulative"
        weights = StageWeights(P, "")

        def run(stage: Stage, values: Mapping[str, Any]) -> tuple[Any, ...]:
            return self.stage_runner(stage)(self, weights, c, StageExtras(self, values, None),
                                            *(values[n] for n in stage.inputs))

        pad = self.key_padding(ids, c, attention_mask, pad_masking)
        if kv is None:  # the sequence-mask stage
            call = {"start_pos": start_pos, "attention_mask": attention_mask, "pad_masking": pad_masking}
            positions, mask = run(STAGES_BY_NAME["sequence_mask"], {"token_ids": ids, **call})
        else:  # a cached step: new rows after the cache, and (HF) the mask over cached and new keys
            positions = self.cached_positions(int(kv["layers"][0]["k_rot"].shape[2]), s)
            mask = None
        if kv is not None and cached_mask != "none":
            t_all = int(kv["layers"][0]["k_rot"].shape[2]) + s
            keys = torch.arange(t_all, device=self.device)
            mask = self.causal_padding_mask(positions, keys, torch.cat([kv["key_padding"], pad], dim=1))
        new_layers = []
        new_g = []

        def layer(i: int, x: Any) -> dict[str, Any]:
            lk = None if kv is None else kv["layers"][i]
            t = self.decoder_layer(
                P, i, x, c, positions=positions, mask=mask,
                past_k=None if lk is None else lk["k_rot"], past_v=None if lk is None else lk["v"],
                frozen_A=None if lk is None or cumulative else lk["A"],
                frozen_G=self.frozen_g(g_cache, i, cached_step),
                gram_offset=None if lk is None or not cumulative else lk["gram"],
            )
            new_layers.append({"k_rot": t["k_rot"], "v": t["v"], "A": None if cumulative else t.get("A"),
                               "gram": t["A0"][:, :, -1] if cumulative else None})
            new_g.append((t.get("A_LM"), t.get("A_P"), t["G_LM"]))
            return t

        trace = walk_model(run, c, {"token_ids": ids}, layer)
        all_pad = pad if kv is None else torch.cat([kv["key_padding"], pad], dim=1)
        new_kv = {"layers": new_layers, "key_padding": all_pad}
        out_g = None if cumulative else (g_cache if g_cache is not None else new_g)
        return trace, new_kv, out_g


__all__ = ["GENERATION_MODES", "HF_IGNORE_INDEX", "OP_KINDS", "SCORING_KINDS", "STAGE_NAMES", "STAGE_RUNNERS",
           "TorchBackend", "import_torch"]
