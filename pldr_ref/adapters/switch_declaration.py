"""The switch values a wrapped model computes, as ``Capabilities.switches`` (the existing declaration mechanism).

A wrapped model follows one released code base: a profile of :data:`pldr_ref.config.EMULATIONS`
(``pt-v510-float32``, ``hf-sdpa`` ...) plus explicit values for what the profile does not fix (the metric learner,
G mode and Gram mode; every switch neither names is taken at its default).  A case whose config sets another
value is *unsupported* -- except, for a model declared only below float64, values that compute the same numbers
within the rounding of float32 (:data:`ROUNDING_EQUIVALENT`): a float32 model with torchtune's float32 RoPE table
computes the exact-table model as well as float32 can tell.  The mask modes ``ideal`` / ``additive`` /
``finfo_min`` agree except on a query row whose every key is masked; a case with such a row and another mask mode is
unsupported at run time (:func:`mask_mode_difference`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from pldr_ref.config import profile_switches
from pldr_ref.switches import BY_NAME, ENGINE_SWITCHES


def _values_but(switch: str, *excluded: str) -> frozenset[str]:
    """Every value of ``switch`` in the switch table (:mod:`pldr_ref.switches`) except ``excluded``."""
    return frozenset(v for v in BY_NAME[switch].values if v not in excluded)


#: Values of one switch that give the same numbers within float32 rounding (each group, one frozenset).  The RoPE
#: table and arithmetic, the score and embedding scales, the dtype the mask is added in and the softmax precision
#: differ by a few float32 ulps; tables from another formula (``keras-0.6.4``) or given by the user are not here.
ROUNDING_EQUIVALENT: Mapping[str, frozenset[str]] = {
    "rope_precision": _values_but("rope_precision"),
    "rope_table": _values_but("rope_table", "keras-0.6.4", "explicit"),
    "rope_arithmetic": _values_but("rope_arithmetic"),
    "score_scale": _values_but("score_scale"),
    "embed_scale_precision": _values_but("embed_scale_precision"),
    "mask_add_dtype": _values_but("mask_add_dtype"),
    "softmax_precision": _values_but("softmax_precision", "explicit"),
}

#: Mask modes that agree on every row that keeps at least one key (checked per case: :func:`mask_mode_difference`):
#: every mode of the table (-inf, an additive -1e9 and finfo.min all give an exact zero weight after the softmax).
MASK_MODES_ON_UNMASKED_ROWS = _values_but("mask_mode")


def computed_switches(profile: str | None, switches: Mapping[str, Any] | None) -> dict[str, str]:
    """Switch -> the one value the wrapped model computes: ``profile``'s values, then ``switches`` (a value or a
    one-element tuple), every other engine switch at its default.  ``ValueError`` for an unknown profile, switch
    or value."""
    values = {name: BY_NAME[name].default for name in ENGINE_SWITCHES}
    if profile is not None:
        values.update({k: v for k, v in profile_switches(profile).items() if k in values})
    for name, value in (switches or {}).items():
        if name not in values:
            raise ValueError(f"unknown switch {name!r}; known: {', '.join(ENGINE_SWITCHES)}")
        if isinstance(value, (tuple, list)):
            if len(value) != 1:
                raise ValueError(f"switch {name!r}: a wrapped model computes one value, got {tuple(value)}")
            value = value[0]
        BY_NAME[name].check(value)
        values[name] = value
    return values


def declared_values(computed: Mapping[str, str], below_float64_only: bool) -> dict[str, tuple[str, ...]]:
    """``Capabilities.switches``: each switch's computed value, widened by :data:`ROUNDING_EQUIVALENT` (and the mask
    modes) when the model runs only below float64 (``below_float64_only``)."""
    out = {}
    for name, value in computed.items():
        allowed = {value}
        if below_float64_only and value in ROUNDING_EQUIVALENT.get(name, ()):
            allowed |= ROUNDING_EQUIVALENT[name]
        if below_float64_only and name == "mask_mode" and value in MASK_MODES_ON_UNMASKED_ROWS:
            allowed |= MASK_MODES_ON_UNMASKED_ROWS
        out[name] = tuple(v for v in BY_NAME[name].choices if v in allowed)
    return out


def fully_masked_rows(mask: np.ndarray) -> int:
    """The number of query rows of a boolean mask ``[B|1, 1, S, T]`` (True = forbidden) whose every key is masked."""
    return int(np.all(np.asarray(mask, dtype=bool), axis=-1).sum())


def mask_mode_difference(config: Any, computed: Mapping[str, str], mask: np.ndarray | None) -> str | None:
    """Why the case's ``mask_mode`` cannot stand for the computed one (a fully masked row), or None."""
    if mask is None or config.mask_mode == computed["mask_mode"]:
        return None
    rows = fully_masked_rows(mask)
    if rows:
        return (f"mask_mode={config.mask_mode!r} differs from the model's {computed['mask_mode']!r} on {rows} fully "
                "masked row(s) of this case")
    return None
