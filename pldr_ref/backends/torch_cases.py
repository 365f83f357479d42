"""How the torch backend (:class:`~pldr_ref.backends.torch_backend.TorchBackend`) runs each fixture kind
other than ``forward``: decoder-layer cases, cached generation (KV and G caches, spec §8), the five
scoring semantics (paper §4.5) and op-level cases.  A mixin over the backend's layer, model and equation
methods.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from typing import Any

import numpy as np

from pldr_ref.harness.protocol import Unsupported
from pldr_ref.params import Params
from pldr_ref.registry import OPS_BY_NAME

#: HF cross-entropy ignore label.
HF_IGNORE_INDEX = -100

#: Cache modes of the ``cached_generation`` kind (spec §8.1-§8.2):
#: name -> (KV cache, G cache, cached-step mask, HF cache_first_G, padding from token id).
GENERATION_MODES = {
    "kv+g": (True, True, "none", False, True),
    "kv": (True, False, "none", False, True),
    "g": (False, True, "none", False, True),
    "none": (False, False, "none", False, True),
    "hf": (True, True, "causal", False, False),
    "hf-first-G": (True, True, "causal", True, False),
}


#: Op kinds whose torch method takes the op's registry inputs (in order) then its scalar arguments:
#: kind -> method name.
DIRECT_OP_METHODS = {
    "sigmoid": "sigmoid", "silu": "silu", "iswiglu": "iswiglu", "layer_norm": "layer_norm", "linear": "linear",
    "density_operator": "density", "cumulative_density_operator": "cumulative_density",
    "metric_tensor": "metric_tensor", "potential_tensor": "potential_tensor", "energy_curvature": "energy_curvature",
    "attention_scores": "attention_scores", "masked_softmax": "softmax", "mix_values": "mix_values",
}


class TorchCases:
    """Case runners of the torch backend (see module docstring)."""

    torch: Any
    device: Any

    # ------------------------------------------------------------------ case runners
    def _run_layer_case(self, params: Params, args: Mapping[str, Any], inputs: Mapping[str, np.ndarray],
                        dt: Any) -> dict[str, Any]:
        c = params.config
        P = self.params(params, dt)
        li = int(args["layer"])

        def opt(name: str) -> Any:
            return self.tensor(inputs[name], dt) if name in inputs else None

        frozen = None
        if "frozen_G_LM" in inputs:
            frozen = (opt("frozen_A_LM"), opt("frozen_A_P"), opt("frozen_G_LM"))
        mask = self.tensor(inputs["mask"]).bool() if "mask" in inputs else None
        t = self.decoder_layer(P, li, self.tensor(inputs["x"], dt), c, positions=self.tensor(inputs["positions"]),
                               mask=mask, past_k=opt("past_k"), past_v=opt("past_v"), frozen_A=opt("frozen_A"),
                               frozen_G=frozen, gram_offset=opt("gram_offset"))
        return {f"layers.{li}.{n}": v for n, v in t.items()}

    def decode(self, P: Mapping[str, Any], config: Any, prompt: np.ndarray, chunks: list[np.ndarray], mode: str,
               full_mask: np.ndarray | None = None,
               initial_g: Any = None) -> tuple[dict, list, dict | None, list | None]:
        """Prefill on ``prompt`` then one call per chunk of new tokens in cache ``mode`` (spec §8.1-§8.2).

        Returns (prefill trace, [(step trace, logits of the new rows)], final KV cache, final G cache).
        ``initial_g`` [L, H, d_k, d_k] is a PT-v510 ``Gcachelst_init`` used from the prompt pass on.
        """
        if mode not in GENERATION_MODES:
            raise Unsupported(f"cache mode {mode!r} is not implemented by the torch backend")
        kv_on, g_on, cached_mask, first_g, pad_from_token = GENERATION_MODES[mode]
        t = prompt.shape[1]
        init = None if initial_g is None else [(None, None, initial_g[i][None]) for i in range(config.num_layers)]
        trace, kv, g = self.step(P, config, prompt, g_cache=init, pad_masking=pad_from_token,
                                 attention_mask=None if full_mask is None else full_mask[:, :t])
        prefill_trace = trace
        if init is not None:
            g = init
        elif g_on:
            g = [tuple(None if a is None else a[:1] for a in lg) for lg in g] if first_g else g
        else:
            g = None
        kv = kv if kv_on else None
        ids = prompt
        steps = []
        for chunk in chunks:
            ids = np.concatenate([ids, chunk], axis=1)
            mask = None if full_mask is None else np.asarray(full_mask)[:, : ids.shape[1]]
            if kv_on:
                trace, kv, _ = self.step(P, config, chunk, kv=kv, g_cache=g, cached_mask=cached_mask,
                                         attention_mask=None if mask is None else mask[:, -chunk.shape[1]:],
                                         pad_masking=pad_from_token, cached_step=True)
                logits = trace["logits"]
            else:
                trace, _, _ = self.step(P, config, ids, g_cache=g, attention_mask=mask, pad_masking=pad_from_token,
                                        cached_step=True)
                logits = trace["logits"][:, -chunk.shape[1]:]
            steps.append((trace, logits))
        return prefill_trace, steps, kv, g

    def _run_cached_generation(self, case: Any, args: Mapping[str, Any], inputs: Mapping[str, np.ndarray],
                               dt: Any) -> dict[str, Any]:
        """The fixture kind ``cached_generation``: prefill on ``prompt_ids``, then cached steps over ``new_ids``
        in chunks ``args.step_sizes`` in mode ``args.mode``; traces, new logits and the final caches."""
        c = case.params.config
        P = self.params(case.params, dt)
        prompt, new = np.asarray(inputs["prompt_ids"]), np.asarray(inputs["new_ids"])
        bounds = np.cumsum([0, *[int(n) for n in args["step_sizes"]]])
        chunks = [new[:, a:b] for a, b in itertools.pairwise(bounds)]
        init = self.tensor(inputs["initial_G_LM"], dt) if "initial_G_LM" in inputs else None
        prefill, steps, kv, g = self.decode(P, c, prompt, chunks, args["mode"], inputs.get("attention_mask"), init)
        out = {f"prefill.{k}": v for k, v in prefill.items()}
        for j, (trace, logits) in enumerate(steps):
            out.update({f"steps.{j}.{k}": v for k, v in trace.items()})
            out[f"steps.{j}.new_logits"] = logits
        if kv is not None:
            out["kv_cache.key_padding"] = kv["key_padding"]
            for i, lk in enumerate(kv["layers"]):
                out.update({f"kv_cache.layers.{i}.{n}": v for n, v in lk.items() if v is not None})
        if g is not None:
            for i, lg in enumerate(g):
                out.update({f"g_cache.layers.{i}.{n}": v for n, v in zip(("A_LM", "A_P", "G_LM"), lg, strict=True)
                            if v is not None})
        return out

    # ------------------------------------------------------------------ scoring (paper §4.5)
    def log_softmax(self, logits: Any) -> Any:
        """log p over the last axis (float32 work dtype for 16-bit logits)."""
        return self.torch.log_softmax(logits.to(self.softmax_dtype(logits.dtype)), dim=-1)

    def token_nll(self, logits: Any, targets: Any) -> Any:
        """CE = logsumexp(z) - z[y] per row: logits [B, T, V], targets [B, T] -> [B, T]."""
        return -self.torch.gather(self.log_softmax(logits), -1, targets[..., None])[..., 0]

    def final_rows(self, P: Mapping[str, Any], config: Any, ids: np.ndarray, start: int) -> Any:
        """[B, T-start+1, V]: row j is the last row of the forward on ids[:, :start+j] (one call per prefix)."""
        rows = [self.forward(P, config, ids[:, :t])["logits"][:, -1] for t in range(start, ids.shape[1] + 1)]
        return self.torch.stack(rows, dim=1)

    def _scores(self, nll: Any, mask: Any) -> dict[str, Any]:
        total = self.torch.where(mask, nll, self.torch.zeros_like(nll)).sum().reshape(1)
        return {"nll": nll, "mask": mask, "total": total, "mean": total / mask.sum()}

    def _run_scoring(self, kind: str, case: Any, args: Mapping[str, Any], inputs: Mapping[str, np.ndarray],
                     dt: Any) -> dict[str, Any]:
        """The five scoring semantics of paper §4.5 (fixture kinds ``scoring_*``)."""
        torch = self.torch
        c = case.params.config
        P = self.params(case.params, dt)
        if kind in ("scoring_blockwise", "scoring_sequential"):
            ids = np.asarray(inputs["token_ids"])
            targets = self.tensor(ids[:, 1:])
            if kind == "scoring_blockwise":
                logits = self.forward(P, c, ids[:, :-1])["logits"]
            else:
                logits = self.final_rows(P, c, ids[:, :-1], 1)
            out = self._scores(self.token_nll(logits, targets), targets != int(args["pad_id"]))
            out["logits"] = logits
            return out
        if kind == "scoring_blockwise_hf":
            ids = np.asarray(inputs["input_ids"])
            logits = self.forward(P, c, ids, attention_mask=inputs.get("attention_mask"), pad_masking=False)["logits"]
            labels = self.tensor(inputs["labels"])[:, 1:]
            keep = labels != HF_IGNORE_INDEX
            nll = self.token_nll(logits[:, :-1], torch.where(keep, labels, torch.zeros_like(labels)))
            return self._scores(torch.where(keep, nll, torch.zeros_like(nll)), keep)
        if kind == "scoring_one_pass":
            ctx = np.asarray(inputs["context"]).reshape(-1)
            n = ctx.size
            one, seq = [], []
            for row, length in zip(inputs["candidates"], inputs["candidate_lengths"], strict=True):
                cand = np.asarray(row[: int(length)])
                ids = np.concatenate([ctx, cand])[None]
                idx = self.tensor(cand)
                lp = self.log_softmax(self.forward(P, c, ids)["logits"][0, n - 1:-1])
                one.append(lp[torch.arange(cand.size, device=self.device), idx].sum())
                lp = self.log_softmax(self.final_rows(P, c, ids[:, :-1], n)[0])
                seq.append(lp[torch.arange(cand.size, device=self.device), idx].sum())
            return {"scores": torch.stack(one), "sequential_scores": torch.stack(seq)}
        if kind == "scoring_prompt_frozen":
            prompt, cont = np.asarray(inputs["prompt_ids"]), np.asarray(inputs["continuation"])
            chunks = [cont[:, j:j + 1] for j in range(cont.shape[1] - 1)]
            prefill, steps, _, _ = self.decode(P, c, prompt, chunks, args["mode"])
            logits = torch.stack([prefill["logits"][:, -1], *[lg[:, -1] for _, lg in steps]], dim=1)
            return {"logprobs": -self.token_nll(logits, self.tensor(cont))}
        raise Unsupported(f"scoring kind {kind!r} is not implemented by the torch backend")

    def _run_op(self, kind: str, params: Params | None, args: Mapping[str, Any], inputs: Mapping[str, np.ndarray],
                dt: Any) -> dict[str, Any]:
        """Op-level cases with the input names of :mod:`pldr_ref.fixtures.runners`."""
        def t(name: str) -> Any:
            return self.tensor(inputs[name], dt)

        def opt(name: str) -> Any:
            return t(name) if name in inputs else None

        if kind in DIRECT_OP_METHODS:  # the method takes the registry's inputs, then its scalar arguments
            op = OPS_BY_NAME[kind]
            values = [opt(n[:-1]) if n.endswith("?") else t(n) for n in op.inputs]
            return {"out": getattr(self, DIRECT_OP_METHODS[kind])(*values, *(float(args[a]) for a in op.args))}
        if kind == "glu":
            P = {f"gluw{j}.weight": t(f"w{j}") for j in (1, 2, 3)}
            P.update({f"gluw{j}.bias": opt(f"b{j}") for j in (1, 2, 3) if f"b{j}" in inputs})
            return {"out": self.glu(t("x"), P, "")}
        if kind == "apply_rope":
            cfg = _RopeConfig(args["layout"], args["precision"], float(args["base"]))
            return {"out": self.rope(t("x"), self.tensor(inputs["positions"]), cfg)}
        if kind == "causal_padding_mask":
            pad = self.tensor(inputs["key_padding"]).bool() if "key_padding" in inputs else None
            return {"out": self.causal_padding_mask(self.tensor(inputs["query_positions"]),
                                                    self.tensor(inputs["key_positions"]), pad)}
        if kind == "apply_mask":
            cfg = _MaskConfig(args["mode"], float(args["mask_value"]))
            return {"out": self.apply_mask(t("scores"), self.tensor(inputs["mask"]).bool(), cfg)}
        if params is None:
            raise Unsupported(f"op kind {kind!r} needs model parameters")
        c = params.config
        P = self.params(params, dt)
        if kind == "embedding":
            return {"out": self.embed(P, c, self.tensor(inputs["token_ids"]))}
        if kind == "lm_head":
            return {"out": self.lm_head(P, t("hidden"))}
        pre = f"decoder.dec_layers.{int(args['layer'])}."
        if kind == "residual_unit":
            unit = f"{pre}mha1.reslayerAs.{int(args['unit'])}."
            return {"out": self.residual_unit(t("a"), P, unit, c.num_denseA, c.eps_ln)}
        if kind in ("metric_learner_v500", "metric_learner_v900"):
            return {"out": self.metric_learner(P, pre, t("a0"), c.replace(metric_learner=kind[-4:]))}
        if kind == "metric_learner":
            return {"out": self.metric_learner(P, pre, t("a0"), c)}
        raise Unsupported(f"op kind {kind!r} is not implemented by the torch backend")


class _RopeConfig:
    """The three RoPE fields of a config, for op cases that give them as arguments."""

    def __init__(self, layout: str, precision: str, base: float) -> None:
        self.rope_layout, self.rope_precision, self.rope_base = layout, precision, base


class _MaskConfig:
    """The two mask fields of a config, for op cases that give them as arguments."""

    def __init__(self, mode: str, value: float) -> None:
        self.mask_mode, self.mask_value = mode, value
