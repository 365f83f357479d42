"""The explicit inputs of :func:`pldr_ref.model.forward` that every public entry point running the model takes.

``attention_mask`` [B, T] (HF, 1 = keep), ``position_ids`` [B, T] (HF per-row RoPE positions), ``rope_table`` (the
table of ``rope_table="explicit"``), ``softmax_kernel`` (the float32 softmax of ``softmax_precision="explicit"``),
``check_finite_values`` and ``ops`` (the arithmetic, :class:`pldr_ref.ops.Ops`; default the float64 reference): the
same keyword-only arguments, with forward's meaning, in ``forward``, ``cached_forward``, ``prefill``, ``generate``,
``teacher_forced_logits``, ``cache_gap``, every scoring function of :mod:`pldr_ref.inference.scoring` and the
padding helpers of :mod:`pldr_ref.inference.padding` (``tests/test_api_consistency.py`` checks the list). An
HF-replay config (``config.emulate("hf-sdpa", rope_table="explicit")`` with ``position_ids`` and a ``RopeTable``)
thus goes through each of them. :class:`ExplicitInputs` bundles them inside an entry point: a call on the first
``t`` tokens takes :meth:`ExplicitInputs.prefix`, a call on appended tokens :meth:`ExplicitInputs.extended` (mask 1,
each row's positions continuing from its last, as :func:`pldr_ref.inference.modes.advance` does).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from pldr_ref.attention import SoftmaxKernel
from pldr_ref.ops import FLOAT64_OPS, Ops
from pldr_ref.rope import RopeTable

#: The keyword names every entry point takes (the fields of :class:`ExplicitInputs`).
EXPLICIT_INPUTS = ("attention_mask", "position_ids", "rope_table", "softmax_kernel", "check_finite_values", "ops")


@dataclasses.dataclass(frozen=True)
class ExplicitInputs:
    """forward's explicit inputs for one token sequence [B, T] (module docstring); per-token ones may be None."""

    attention_mask: Any = None
    position_ids: Any = None
    rope_table: RopeTable | None = None
    softmax_kernel: SoftmaxKernel | None = None
    check_finite_values: bool = True
    ops: Ops = FLOAT64_OPS

    def __post_init__(self) -> None:
        for name in ("attention_mask", "position_ids"):
            value = getattr(self, name)
            if value is not None:
                arr = np.asarray(value)
                if arr.ndim == 1:  # one sequence given unbatched, like the token ids of the scoring functions
                    arr = arr[None]
                if arr.ndim != 2:
                    raise ValueError(f"{name} must be [B, T] (one per token), got shape {arr.shape}")
                object.__setattr__(self, name, arr)

    def check_length(self, length: int, what: str = "the token ids") -> None:
        """``ValueError`` unless every per-token input covers ``length`` tokens."""
        for name in ("attention_mask", "position_ids"):
            arr = getattr(self, name)
            if arr is not None and arr.shape[1] != length:
                raise ValueError(f"{name} has {arr.shape[1]} tokens per row, {what} {length}")

    def prefix(self, stop: int) -> ExplicitInputs:
        """The inputs of a call on the first ``stop`` tokens."""
        return dataclasses.replace(self, **{n: None if getattr(self, n) is None else getattr(self, n)[:, :stop]
                                            for n in ("attention_mask", "position_ids")})

    def row(self, b: int) -> ExplicitInputs:
        """The inputs of row ``b`` alone (batch of one)."""
        return dataclasses.replace(self, **{n: None if getattr(self, n) is None else getattr(self, n)[b:b + 1]
                                            for n in ("attention_mask", "position_ids")})

    def extended(self, extra: int, mask_value: int = 1) -> ExplicitInputs:
        """The inputs after ``extra`` appended tokens: ``mask_value`` in the mask, each row's positions continuing
        from its last (+1 per token)."""
        mask, pos = self.attention_mask, self.position_ids
        if mask is not None:
            mask = np.concatenate([mask, np.full((mask.shape[0], extra), mask_value, dtype=mask.dtype)], axis=1)
        if pos is not None:
            pos = np.concatenate([pos, pos[:, -1:] + 1 + np.arange(extra)[None, :]], axis=1)
        return dataclasses.replace(self, attention_mask=mask, position_ids=pos)

    def forward_kwargs(self) -> dict[str, Any]:
        """Keyword arguments of :func:`pldr_ref.model.forward` (and of ``prefill`` / ``generate``)."""
        return {n: getattr(self, n) for n in EXPLICIT_INPUTS}


__all__ = ["EXPLICIT_INPUTS", "ExplicitInputs"]
