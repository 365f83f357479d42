"""An ONNX graph of a PLDR-LLM config + parameters, built with the ``onnx`` package's helpers.

Standard ONNX operators only (default domain, opset :data:`OPSET`), no custom op, so any runtime
(ONNX Runtime, TensorRT, OpenVINO) can load it.  The file follows the contract of ``docs/backends.md``
("ONNX models"):

* inputs: ``token_ids`` int64 [B, S]; ``attention_mask`` int64 [B, S] (1 = a key that may be attended,
  0 = padding); every model parameter under its pldr_ref name (``decoder.embedding.weight`` ...) and
  ``start_pos`` (int64 scalar, the position of the first row) are *overridable initializers*: stored in
  the file (the parameters it was exported with, ``start_pos`` = 0) and also declared as graph inputs, so a
  runtime can feed other values -- one file serves every parameter set of its config;
* node names: ``{stage}/{op}_{n}`` (``layers.0.masked_softmax/Softmax_412``), the stage each node belongs to;
* outputs: ``logits`` [B, S, V] and every traced stage under its golden name (``embed``, ``x0``,
  ``layers.{l}.{q,k,v,q_rot,k_rot,A0,A,A_LM,A_P,G_LM,scores,E,ctx,attn_out,out1,ffn_out,out2}``), so the
  harness can localize a wrong node to its stage;
* metadata: ``pldr_ref.config`` = the config as JSON (:meth:`PLDRConfig.to_dict`).

Precisions: ``float32`` (every tensor float32; the RoPE angle table in float64 for
``rope_precision="exact"``) and ``float16`` (parameters, matrix products and residual sums in float16;
LayerNorm, RoPE, the masked softmax and the PLGA powers run in float32 between ``Cast`` nodes, as an
fp16 export that keeps its numerically sensitive ops in float32 does; A_LM and A_P stay float32).
"""

from __future__ import annotations

import json
import math
from typing import Any

import numpy as np

from pldr_ref.config import PLDRConfig
from pldr_ref.layer import LAYER_TRACE_NAMES
from pldr_ref.params import FIXED_G_KEY, Params

#: The ONNX opset of the exported graph (LayerNormalization needs 17).
OPSET = 17

#: Metadata key holding the config JSON.
CONFIG_KEY = "pldr_ref.config"

#: Export precisions.
EXPORT_DTYPES = ("float32", "float16")

#: Layer trace entries exposed as graph outputs (golden names ``layers.{l}.{entry}``), those the graph computes.
LAYER_OUTPUTS = LAYER_TRACE_NAMES


def import_onnx() -> Any:
    """``import onnx`` or a clear error naming the extra."""
    try:
        import onnx
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise ImportError('ONNX export needs the onnx package: `pip install "pldr-ref[onnx]"`') from exc
    return onnx


class GraphBuilder:
    """Nodes, initializers and inputs of one graph; every ``op`` returns the name of its (first) output."""

    def __init__(self, onnx: Any) -> None:
        self.onnx = onnx
        self.h = onnx.helper
        self.nodes: list[Any] = []
        self.initializers: list[Any] = []
        self.inputs: list[Any] = []
        self.outputs: list[str] = []
        self.scope = "model"  # the stage the next nodes belong to: node names are "{scope}/{op}_{n}"
        self._n = 0

    def fresh(self, hint: str) -> str:
        """A new tensor name."""
        self._n += 1
        return f"{hint}_{self._n}"

    def op(self, op_type: str, inputs: list[str], hint: str | None = None, n_out: int = 1, **attrs: Any) -> Any:
        """Append one node; the output name (a list of names when ``n_out`` > 1)."""
        outs = [self.fresh(hint or op_type.lower()) for _ in range(n_out)]
        self.nodes.append(self.h.make_node(op_type, inputs, outs, name=self.fresh(f"{self.scope}/{op_type}"), **attrs))
        return outs[0] if n_out == 1 else outs

    def const(self, value: Any, dtype: Any, hint: str = "c") -> str:
        """A constant initializer (not a graph input)."""
        name = self.fresh(hint)
        self.initializers.append(self.onnx.numpy_helper.from_array(np.asarray(value, dtype=dtype), name))
        return name

    def overridable(self, name: str, value: np.ndarray, elem_type: int, shape: list[Any]) -> str:
        """An initializer that is also a graph input (fed values replace it)."""
        self.initializers.append(self.onnx.numpy_helper.from_array(value, name))
        self.inputs.append(self.h.make_tensor_value_info(name, elem_type, shape))
        return name

    def output(self, name: str, tensor: str) -> None:
        """Expose ``tensor`` as the graph output ``name``."""
        self.nodes.append(self.h.make_node("Identity", [tensor], [name], name=self.fresh("output/Identity")))
        self.outputs.append(name)


class NotExpressibleError(ValueError):
    """A config with switch values the exported graph does not compute; the message names each of them."""


def check_expressible(config: PLDRConfig) -> None:
    """Refuse, before any node is built, every switch value of ``config`` that the graph does not compute (the
    switch table's ``onnx`` column, :func:`pldr_ref.switches.unsupported`): exporting it anyway would write a model
    whose logits follow another value of the switch."""
    from pldr_ref.switches import BY_NAME, unsupported

    off = unsupported("onnx", config)
    if off:
        detail = ", ".join(f"{k}={v!r} (the graph computes {' / '.join(BY_NAME[k].engines['onnx'])})"
                           for k, v in sorted(off.items()))
        raise NotExpressibleError(f"cannot export this config to ONNX: {detail}")


class PLDRGraph:
    """The forward map of one config as ONNX nodes (see module docstring)."""

    def __init__(self, config: PLDRConfig, params: Params, dtype: str = "float32") -> None:
        if dtype not in EXPORT_DTYPES:
            raise ValueError(f"ONNX export dtype must be one of {EXPORT_DTYPES}, got {dtype!r}")
        check_expressible(config)
        self.onnx = import_onnx()
        self.T = self.onnx.TensorProto
        self.c = config
        self.params = params
        self.dtype = dtype
        self.np_dt = np.float16 if dtype == "float16" else np.float32
        self.elem = self.T.FLOAT16 if dtype == "float16" else self.T.FLOAT
        self.b = GraphBuilder(self.onnx)
        self.P: dict[str, str] = {}

    # ------------------------------------------------------------------ helpers
    def work(self, x: str) -> str:
        """``x`` in the float32 work dtype (a Cast in a float16 graph)."""
        return self.b.op("Cast", [x], "f32", to=self.T.FLOAT) if self.dtype == "float16" else x

    def back(self, x: str) -> str:
        """``x`` back in the graph dtype (a Cast in a float16 graph)."""
        return self.b.op("Cast", [x], "f16", to=self.elem) if self.dtype == "float16" else x

    def scalar(self, value: float, work: bool = False) -> str:
        """A scalar constant in the graph dtype (or the float32 work dtype)."""
        return self.b.const(value, np.float32 if work else self.np_dt)

    def ints(self, values: list[int]) -> str:
        """An int64 vector constant (shapes, axes)."""
        return self.b.const(np.array(values, dtype=np.int64), np.int64, "shape")

    def linear(self, x: str, w: str, bias: str | None) -> str:
        """y = x W^T + b."""
        y = self.matmul(x, self.b.op("Transpose", [self.P[w]], perm=[1, 0]))
        return y if bias is None or bias not in self.P else self.b.op("Add", [y, self.P[bias]])

    def matmul(self, a: str, b: str) -> str:
        """a @ b (MatMul)."""
        return self.b.op("MatMul", [a, b])

    def layer_norm(self, x: str, prefix: str) -> str:
        """LayerNormalization over the last axis (float32 in a float16 graph)."""
        g, beta = self.work(self.P[f"{prefix}.weight"]), self.work(self.P[f"{prefix}.bias"])
        return self.back(self.b.op("LayerNormalization", [self.work(x), g, beta], "ln", axis=-1,
                                   epsilon=float(self.c.eps_ln)))

    def silu(self, z: str) -> str:
        """z sigma(z)."""
        return self.b.op("Mul", [z, self.b.op("Sigmoid", [z])])

    def glu(self, x: str, prefix: str) -> str:
        """W3 (silu(W1 x + b1) * (W2 x + b2)) + b3."""
        h1 = self.linear(x, f"{prefix}gluw1.weight", f"{prefix}gluw1.bias")
        h2 = self.linear(x, f"{prefix}gluw2.weight", f"{prefix}gluw2.bias")
        return self.linear(self.b.op("Mul", [self.silu(h1), h2]), f"{prefix}gluw3.weight", f"{prefix}gluw3.bias")

    def transpose_last(self, x: str, rank: int) -> str:
        """Swap the last two axes."""
        perm = [*range(rank - 2), rank - 1, rank - 2]
        return self.b.op("Transpose", [x], perm=perm)

    def per_head(self, t: str, rank: int) -> str:
        """[H, d, d] reshaped to broadcast against a rank-``rank`` [B, H, (S,) d, d] tensor."""
        if rank == 4:
            return t
        return self.b.op("Reshape", [t, self.ints([self.c.num_heads, 1, self.c.d_k, self.c.d_k])])

    # ------------------------------------------------------------------ stages
    def rope_table(self, positions: str) -> tuple[str, str]:
        """(cos, sin) [S, d_k/2] in the work dtype: float64 angles (exact) or torchtune's float32 angles."""
        c, b = self.c, self.b
        dk = c.d_k
        if c.rope_precision == "float32":
            exps = np.arange(0, dk, 2, dtype=np.float32) / np.float32(dk)
            omega = np.float32(1) / np.power(np.float32(c.rope_base), exps.astype(np.float64)).astype(np.float32)
            phi = b.op("Mul", [b.op("Unsqueeze", [b.op("Cast", [positions], to=self.T.FLOAT), self.ints([1])]),
                               b.const(omega, np.float32, "omega")])
            phi = b.op("Cast", [phi], to=self.T.DOUBLE)
        else:
            omega = np.power(float(c.rope_base), -np.arange(0, dk, 2) / dk)
            phi = b.op("Mul", [b.op("Unsqueeze", [b.op("Cast", [positions], to=self.T.DOUBLE), self.ints([1])]),
                               b.const(omega, np.float64, "omega")])
        return (b.op("Cast", [b.op("Cos", [phi])], "cos", to=self.T.FLOAT),
                b.op("Cast", [b.op("Sin", [phi])], "sin", to=self.T.FLOAT))

    def rope(self, x: str, cos: str, sin: str) -> str:
        """RoPE of x [B, H, S, d_k] (pairs per ``rope_layout``), computed in float32."""
        b, dk = self.b, self.c.d_k
        xw = self.work(x)
        if self.c.rope_layout == "interleaved":
            pairs = b.op("Reshape", [xw, self.ints([0, 0, 0, dk // 2, 2])])
            x1, x2 = b.op("Split", [pairs, self.ints([1, 1])], n_out=2, axis=-1)
            cos, sin = (b.op("Unsqueeze", [t, self.ints([-1])]) for t in (cos, sin))
        else:
            x1, x2 = b.op("Split", [xw, self.ints([dk // 2, dk // 2])], n_out=2, axis=-1)
        y1 = b.op("Sub", [b.op("Mul", [x1, cos]), b.op("Mul", [x2, sin])])
        y2 = b.op("Add", [b.op("Mul", [x2, cos]), b.op("Mul", [x1, sin])])
        y = b.op("Concat", [y1, y2], axis=-1)
        if self.c.rope_layout == "interleaved":
            y = b.op("Reshape", [y, self.ints([0, 0, 0, dk])])
        return self.back(y)

    def heads(self, x: str, w: str) -> str:
        """[B, S, H d_k] projection -> [B, H, S, d_k]."""
        y = self.linear(x, f"{w}.weight", f"{w}.bias")
        y = self.b.op("Reshape", [y, self.ints([0, 0, self.c.num_heads, self.c.d_k])])
        return self.b.op("Transpose", [y], perm=[0, 2, 1, 3])

    def gram(self, q_rot: str) -> str:
        """A0: symmetrised Q~^T Q~ [B, H, d, d] (global) or the running sums [B, H, S, d, d] (cumulative)."""
        b = self.b
        if self.c.gram_mode == "cumulative":
            q = self.work(q_rot)
            outer = b.op("Mul", [b.op("Unsqueeze", [q, self.ints([-1])]), b.op("Unsqueeze", [q, self.ints([-2])])])
            return self.back(b.op("CumSum", [outer, self.b.const(np.array(2, dtype=np.int64), np.int64, "axis")]))
        a0 = self.matmul(self.transpose_last(q_rot, 4), q_rot)
        return b.op("Mul", [b.op("Add", [a0, self.transpose_last(a0, 4)]), self.scalar(0.5)])

    def metric_learner(self, a0: str, m: str) -> str:
        """v500: Res_R(... Res_1(LN(A0))); v900: LN2(Dense(Res_R(... LN1(Dense(A0)))))."""
        c = self.c
        if c.metric_learner == "v900":
            a = self.layer_norm(self.linear(a0, f"{m}A_dff_dense1.weight", f"{m}A_dff_dense1.bias"), f"{m}layernorm1")
        else:
            a = self.layer_norm(a0, f"{m}layernorm1")
        for r in range(c.num_reslayerA):
            unit = f"{m}reslayerAs.{r}."
            hdn = a
            for j in range(c.num_denseA):
                hdn = self.glu(hdn, f"{unit}denseAs.{j}.")
            a = self.layer_norm(self.b.op("Add", [hdn, a]), f"{unit}layernormA")
        if c.metric_learner == "v900":
            a = self.layer_norm(self.linear(a, f"{m}A_dff_dense2.weight", f"{m}A_dff_dense2.bias"), f"{m}layernorm2")
        return a

    def plga(self, a: str, g: str, rank: int, scope: Any) -> tuple[str, str, str]:
        """(A_LM, A_P, G_LM): iSwiGLU(W A + b) + eps_adj, A_LM ** P, a A_P + b_a (powers in float32);
        ``scope(stage)`` names the stage of the nodes that follow."""
        b = self.b
        scope("metric_tensor")
        z = b.op("Add", [self.matmul(self.per_head(self.P[f"{g}Wlst"], rank), a),
                         self.per_head(self.P[f"{g}blst"], rank)])
        z = self.work(z)
        a_lm = b.op("Add", [b.op("Mul", [z, self.silu(z)]), self.scalar(self.c.eps_adj, work=True)], "A_LM")
        scope("potential_tensor")
        a_p = b.op("Pow", [a_lm, self.work(self.per_head(self.P[f"{g}pwlst"], rank))], "A_P")
        scope("energy_curvature")
        g_lm = b.op("Add", [self.matmul(self.work(self.per_head(self.P[f"{g}alst"], rank)), a_p),
                            self.work(self.per_head(self.P[f"{g}balst"], rank))])
        return a_lm, a_p, self.back(g_lm)

    def scores(self, q_rot: str, g_lm: str, k_rot: str, rank: int) -> str:
        """(Q~ G) K~^T / sqrt(d_k)."""
        b = self.b
        if rank == 5:
            qg = b.op("Squeeze", [self.matmul(b.op("Unsqueeze", [q_rot, self.ints([-2])]), g_lm), self.ints([-2])])
        else:
            qg = self.matmul(q_rot, g_lm)
        return b.op("Div", [self.matmul(qg, self.transpose_last(k_rot, 4)), self.scalar(math.sqrt(self.c.d_k))])

    def masked_softmax(self, scores: str, mask: str) -> str:
        """Softmax over the keys of the masked scores (float32); a fully masked ideal row gives zeros."""
        b, c = self.b, self.c
        s = self.work(scores)
        if c.mask_mode == "ideal":
            logits = b.op("Where", [mask, self.scalar(-np.inf, work=True), s])
        else:
            const = float(np.finfo(np.float32).min) if c.mask_mode == "finfo_min" else float(c.mask_value)
            logits = b.op("Where", [mask, b.op("Add", [s, self.scalar(const, work=True)]), s])
        e = b.op("Softmax", [logits], "E", axis=-1)
        e = b.op("Where", [b.op("IsNaN", [e]), self.scalar(0.0, work=True), e])  # all -inf row: 0, not NaN
        return self.back(e)

    def fixed_g(self, li: int, token_ids: str) -> str:
        """The fixed G of layer ``li`` (``decoder.past_G_values[li, 2, 0]``) expanded to [B, H, d, d]."""
        b, c = self.b, self.c
        g = b.op("Gather", [b.op("Gather", [self.P[FIXED_G_KEY], self.b.const(np.array(li), np.int64, "i")], axis=0),
                            self.b.const(np.array(2), np.int64, "i")], axis=0)  # [1, H, d, d]
        batch = b.op("Slice", [b.op("Shape", [token_ids]), self.ints([0]), self.ints([1])])
        shape = b.op("Concat", [batch, self.ints([c.num_heads, c.d_k, c.d_k])], axis=0)
        return b.op("Expand", [g, shape])

    # ------------------------------------------------------------------ model
    def build(self) -> Any:
        """The ONNX ModelProto."""
        onnx, b, c, T = self.onnx, self.b, self.c, self.T
        ids = "token_ids"
        b.inputs.append(onnx.helper.make_tensor_value_info(ids, T.INT64, ["batch", "seq"]))
        b.inputs.append(onnx.helper.make_tensor_value_info("attention_mask", T.INT64, ["batch", "seq"]))
        start = b.overridable("start_pos", np.array(0, dtype=np.int64), T.INT64, [])
        for name, value in self.params.items():
            arr = np.asarray(value, dtype=np.float64).astype(self.np_dt)
            self.P[name] = b.overridable(name, arr, self.elem, list(arr.shape))
        b.scope = "sequence_mask"
        seq = b.op("Squeeze", [b.op("Slice", [b.op("Shape", [ids]), self.ints([1]), self.ints([2])]), self.ints([0])])
        positions = b.op("Range", [start, b.op("Add", [start, seq]), b.const(np.array(1), np.int64, "one")], "pos")
        look = b.op("Greater", [b.op("Unsqueeze", [positions, self.ints([0])]),
                                b.op("Unsqueeze", [positions, self.ints([1])])])  # key pos > query pos
        pad = b.op("Unsqueeze", [b.op("Equal", ["attention_mask", b.const(np.array(0), np.int64, "zero")]),
                                 self.ints([1, 2])])
        mask = b.op("Or", [b.op("Unsqueeze", [look, self.ints([0, 1])]), pad], "mask")
        b.scope = "embedding"
        scale = math.sqrt(c.d_model) if c.embed_scale_precision != "float32" else float(np.sqrt(np.float32(c.d_model)))
        emb = b.op("Mul", [b.op("Gather", [self.P["decoder.embedding.weight"], ids], axis=0), self.scalar(scale)])
        b.output("embed", emb)
        b.scope = "input_norm"
        x = self.layer_norm(emb, "decoder.layernorm1")
        b.output("x0", x)
        b.scope = "rope"
        cos, sin = self.rope_table(positions)
        rank = 5 if c.gram_mode == "cumulative" else 4
        for li in range(c.num_layers):
            pre = f"decoder.dec_layers.{li}."
            m = f"{pre}mha1."
            t: dict[str, str] = {"x": x}

            def scope(stage: str, li: int = li) -> None:
                b.scope = f"layers.{li}.{stage}"

            scope("qkv_projection")
            t["q"], t["k"], t["v"] = (self.heads(x, f"{m}{w}") for w in ("wq", "wk", "wv"))
            scope("rope")
            t["q_rot"], t["k_rot"] = self.rope(t["q"], cos, sin), self.rope(t["k"], cos, sin)
            scope("density_operator")
            t["A0"] = self.gram(t["q_rot"])  # computed in every G mode (the trace holds it)
            if c.metric_learner != "none":
                scope("metric_learner")
                t["A"] = self.metric_learner(t["A0"], m)
            if c.g_mode == "learned":
                t["A_LM"], t["A_P"], t["G_LM"] = self.plga(t["A"], f"{m}plgatt_layer.", rank, scope)
            else:
                scope("energy_curvature")
                t["G_LM"] = self.fixed_g(li, ids)
                rank = 4
            scope("attention_scores")
            t["scores"] = self.scores(t["q_rot"], t["G_LM"], t["k_rot"], rank)
            scope("masked_softmax")
            t["E"] = self.masked_softmax(t["scores"], mask)
            scope("value_mix")
            z = b.op("Transpose", [self.matmul(t["E"], t["v"])], perm=[0, 2, 1, 3])
            t["ctx"] = b.op("Reshape", [z, self.ints([0, 0, c.num_heads * c.d_k])])
            scope("output_projection")
            t["attn_out"] = self.linear(t["ctx"], f"{m}dense.weight", f"{m}dense.bias")
            scope("post_attention_norm")
            t["out1"] = self.layer_norm(b.op("Add", [t["attn_out"], x]), f"{pre}layernorm1")
            scope("ffn")
            t["ffn_out"] = self.glu(t["out1"], f"{pre}ffn.")
            scope("post_ffn_norm")
            t["out2"] = self.layer_norm(b.op("Add", [t["ffn_out"], t["out1"]]), f"{pre}layernorm2")
            for entry in LAYER_OUTPUTS:
                if entry in t:
                    b.output(f"layers.{li}.{entry}", t[entry])
            x = t["out2"]
        b.scope = "lm_head"
        b.output("logits", self.linear(x, "final_layer.weight", "final_layer.bias"))
        return self.model()

    def model(self) -> Any:
        """Assemble the graph; output types come from ONNX shape inference."""
        onnx, b = self.onnx, self.b
        used = {i for n in b.nodes for i in n.input}
        b.initializers = [t for t in b.initializers if t.name in used]  # a switch may leave a parameter unused
        kept = {t.name for t in b.initializers}
        b.inputs = [v for v in b.inputs if v.name in kept or v.name in ("token_ids", "attention_mask")]
        graph = onnx.helper.make_graph(b.nodes, "pldr_llm", b.inputs, [], b.initializers)
        probe = onnx.helper.make_model(graph, opset_imports=[onnx.helper.make_opsetid("", OPSET)])
        inferred = onnx.shape_inference.infer_shapes(probe)
        infos = {v.name: v for v in inferred.graph.value_info}
        missing = [n for n in b.outputs if n not in infos]
        if missing:
            raise RuntimeError(f"ONNX shape inference gave no type for output(s) {missing}")
        outputs = [infos[n] for n in b.outputs]
        graph = onnx.helper.make_graph(b.nodes, "pldr_llm", b.inputs, outputs, b.initializers)
        model = onnx.helper.make_model(graph, opset_imports=[onnx.helper.make_opsetid("", OPSET)],
                                       producer_name="pldr_ref")
        model.ir_version = min(model.ir_version, 9)  # readable by the ONNX Runtime releases of the last years
        onnx.helper.set_model_props(model, {CONFIG_KEY: json.dumps(self.c.to_dict(), sort_keys=True)})
        onnx.checker.check_model(model)
        return model


def export_model(config: PLDRConfig, params: Params, dtype: str = "float32") -> Any:
    """The ONNX ModelProto of ``config`` with ``params`` stored as overridable initializers."""
    return PLDRGraph(config, params, dtype).build()
