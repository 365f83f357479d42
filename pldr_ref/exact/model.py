"""Exact-tier full forward map (spec §2): every trace entry of the float64 ``forward``, correctly rounded.

``forward(params, token_ids, dps=50)`` evaluates the model over mpmath numbers at ``dps``
significant digits (and, with ``guard=True``, again at ``2 * dps``), and returns a dict
``embed``, ``x0``, ``layers.{l}.{stage}``, ``logits`` -> float64 arrays in which every value is
the computed real rounded once to the nearest binary64 (ties to even).
"""

from __future__ import annotations

from typing import Any

import mpmath
import numpy as np

from pldr_ref.config import PLDRConfig
from pldr_ref.exact.guard import guarded
from pldr_ref.exact.layer import LayerConstants, decoder_layer
from pldr_ref.exact.numbers import round_to_float32, to_float64, to_mp
from pldr_ref.exact.ops import affine, causal_padding_mask, layer_norm
from pldr_ref.exact.params import exact_tree
from pldr_ref.exact.rope import RopeTables
from pldr_ref.inputs import validate_attention_mask, validate_token_ids
from pldr_ref.model import check_rope_table_input, resolve_pad_masking, validate_position_ids
from pldr_ref.params import Params
from pldr_ref.rope import RopeTable, check_table_used


class ExactModel:
    """Parameters of one model converted once to exact ``mpf`` values (valid at every precision)."""

    def __init__(self, params: Params) -> None:
        if not isinstance(params, Params):
            raise TypeError(f"params must be a pldr_ref.Params, got {type(params).__name__}")
        self.config: PLDRConfig = params.config
        self.embedding = params["decoder.embedding.weight"]  # rows are converted on use
        self.in_norm = (to_mp(params["decoder.layernorm1.weight"]), to_mp(params["decoder.layernorm1.bias"]))
        self.layers = [exact_tree(params.layer(i)) for i in range(self.config.num_layers)]
        bias = params.get("final_layer.bias")
        self.head = (to_mp(params["final_layer.weight"]), None if bias is None else to_mp(bias))


def embedding_scale(config: PLDRConfig) -> mpmath.mpf:
    """sqrt(d) as a real number (``"exact"``) or RN32(sqrt(d)) (``"float32"``, spec §12)."""
    s = mpmath.sqrt(config.d_model)
    return round_to_float32(s) if config.embed_scale_precision == "float32" else s


def key_padding_of(ids: np.ndarray, config: PLDRConfig, attention_mask: Any, pad_masking: bool) -> np.ndarray | None:
    """Padding keys [B, S] from an HF attention mask, else from pad ids when ``pad_masking`` (spec §7)."""
    if attention_mask is not None:
        return validate_attention_mask(attention_mask, ids.shape)
    return ids == config.pad_id if pad_masking else None


def forward_mp(model: ExactModel, ids: np.ndarray, *, dps: int, start_pos: int = 0,
               key_padding: np.ndarray | None = None, position_ids: np.ndarray | None = None,
               rope_table: RopeTable | None = None) -> dict[str, Any]:
    """The trace as nested lists of ``mpf`` at ``dps`` digits (no rounding to float64, no guard).

    ``position_ids`` [B, S]: per-row RoPE positions (the mask follows the sequence index);
    ``rope_table``: the table of ``rope_table="explicit"``."""
    c = model.config
    positions = list(range(start_pos, start_pos + ids.shape[1]))
    rope_positions: list[int] | list[list[int]] = positions if position_ids is None else position_ids.tolist()
    with mpmath.workdps(dps):
        k = LayerConstants(c)
        tables = RopeTables(c.d_k, c.rope_base, c.rope_table_source, rope_table)
        scale = embedding_scale(c)
        embed = [[[v * scale for v in to_mp(model.embedding[t])] for t in row] for row in ids.tolist()]
        x = [[layer_norm(r, *model.in_norm, k.eps) for r in xb] for xb in embed]
        out: dict[str, Any] = {"embed": embed, "x0": x}
        mask = [causal_padding_mask(positions, positions, None if key_padding is None else key_padding[b].tolist())
                for b in range(ids.shape[0])]
        for i, lp in enumerate(model.layers):
            trace = decoder_layer(lp, x, c, positions=rope_positions, mask=mask, tables=tables, k=k)
            out.update({f"layers.{i}.{name}": val for name, val in trace.items()})
            x = trace["out2"]
        out["logits"] = [[affine(r, *model.head) for r in xb] for xb in x]
    return out


def round_trace(trace: dict[str, Any]) -> dict[str, np.ndarray]:
    """Every entry of an ``mpf`` trace correctly rounded to float64."""
    return {name: to_float64(val) for name, val in trace.items()}


#: Engines of :func:`forward`: mpmath (default, independent) and arb (certified ball arithmetic, python-flint).
ENGINES = ("mpmath", "arb")


def forward(params: Params, token_ids: Any, *, dps: int = 50, start_pos: int = 0, guard: bool = True,
            attention_mask: Any = None, pad_masking: bool | None = None, position_ids: Any = None,
            rope_table: RopeTable | None = None, engine: str = "mpmath") -> dict[str, np.ndarray]:
    """Exact forward of PLDR-LLM: trace name -> float64 array, each value correctly rounded.

    Same trace names and shapes as ``pldr_ref.forward(...).flat()``.  With ``guard`` the
    computation is repeated at ``2 * dps`` and a :class:`~pldr_ref.exact.guard.PrecisionError`
    names the first stage whose float64 rounding differs.  A stage whose correctly rounded
    value overflows float64 raises ``FloatingPointError`` naming the stage, as the float64 tier does.
    ``engine="arb"`` evaluates the same map in certified ball arithmetic instead
    (:func:`pldr_ref.exact.arb.forward`; ``dps`` and ``guard`` do not apply: every value carries a
    certificate, and ``pldr_ref.exact.arb.UncertifiedError`` reports one that stays undecided).
    ``rope_table`` is refused unless ``config.rope_table == "explicit"`` (and required then), as in
    :func:`pldr_ref.model.forward`.
    """
    if engine not in ENGINES:
        raise ValueError(f"engine must be one of {ENGINES}, got {engine!r}")
    if not isinstance(params, Params):
        raise TypeError(f"params must be a pldr_ref.Params, got {type(params).__name__}")
    check_table_used(params.config.rope_table_source, rope_table)  # a table the config ignores: refused, as in float64
    if engine == "arb":
        from pldr_ref.exact.arb import forward as arb_forward

        if position_ids is not None or rope_table is not None:
            raise NotImplementedError("engine='arb' takes no position_ids or explicit rope_table; use engine='mpmath'")
        return arb_forward(params, token_ids, start_pos=start_pos, attention_mask=attention_mask,
                           pad_masking=resolve_pad_masking(params.config, pad_masking))
    check_rope_table_input(params.config, rope_table)  # and rope_table="explicit" needs a RopeTable
    model = ExactModel(params)
    ids = validate_token_ids(token_ids, model.config, start_pos)
    key_padding = key_padding_of(ids, model.config, attention_mask, resolve_pad_masking(model.config, pad_masking))
    pos_ids = None if position_ids is None else validate_position_ids(position_ids, ids.shape, model.config)

    def compute(d: int) -> dict[str, np.ndarray]:
        return round_trace(forward_mp(model, ids, dps=d, start_pos=start_pos, key_padding=key_padding,
                                      position_ids=pos_ids, rope_table=rope_table))

    out = guarded(compute, dps) if guard else compute(dps)
    for name, arr in out.items():
        if not np.all(np.isfinite(arr)):
            n_inf = int(np.isinf(arr).sum())
            raise FloatingPointError(f"stage {name!r}: the exact value overflows float64 ({n_inf} inf)")
    return out
