"""One stage of the float64 reference, run from given upstream values (the same interface as a
backend's ``run_stage``): the registry stage's own ``run`` (:meth:`pldr_ref.registry.Stage.run`), the body that
:func:`pldr_ref.layer.decoder_layer` calls too.  The harness uses it to measure the naive low-precision baseline of
an isolated stage: upstream values and parameters rounded to the dtype, this function in float64, the output
rounded (the FlashAttention rule applied per stage); and a calibration member's run of the stage, this function with
the member's arithmetic (``ops``)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from pldr_ref import registry
from pldr_ref.config import PLDRConfig
from pldr_ref.ops import FLOAT64_OPS, Ops
from pldr_ref.params import Params
from pldr_ref.rope import RopeTable


def masked_logits_rounding(round_to: Callable[[np.ndarray], np.ndarray]) -> Callable[[str, np.ndarray], np.ndarray]:
    """``on_stage`` hook rounding only the masked logits inside the softmax (``round_to``), as the naive layer run
    does: a ``-1e9 + score`` that the dtype cannot resolve is absorbed there too."""
    return lambda name, arr: round_to(arr) if name == "masked_logits" else arr


def reference_stage(stage: str, layer: int | None, config: PLDRConfig, params: Params,
                    inputs: Mapping[str, np.ndarray],
                    round_to: Callable[[np.ndarray], np.ndarray] | None = None, ops: Ops = FLOAT64_OPS
                    ) -> dict[str, np.ndarray]:
    """Outputs (by leaf name) of ``stage`` of layer ``layer`` from upstream ``inputs`` (see
    :class:`pldr_ref.harness.protocol.StageRequest`; an explicit RoPE table comes as ``rope_cos`` / ``rope_sin``),
    computed by the registry stage's body in the arithmetic ``ops`` (default float64).  ``round_to`` (low-precision
    runs) rounds the masked logits inside ``masked_softmax`` (:func:`masked_logits_rounding`)."""
    if stage not in {s.name for s in registry.ALL_STAGES}:
        raise ValueError(f"unknown stage {stage!r}")
    ins: dict[str, Any] = dict(inputs)
    if "rope_cos" in ins:
        ins["rope_table"] = RopeTable(ins.pop("rope_cos"), ins.pop("rope_sin"))
    if round_to is not None:
        ins["on_stage"] = masked_logits_rounding(round_to)
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        return registry.stage(stage).run(params, layer, config, ins, ops)
