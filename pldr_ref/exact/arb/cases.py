"""Golden-case kinds through the arb engine: the same inputs and arguments as the mpmath exact-tier runners.

:func:`run_arb` mirrors :func:`pldr_ref.fixtures.exact_tier.run_exact` (fixture kind, config, params,
args, inputs -> outputs) so that every committed exact-tier case can be recomputed by the second
engine and compared bit for bit with its golden values (``tests/test_exact_arb_golden.py``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from pldr_ref.config import PLDRConfig
from pldr_ref.exact.arb import stages as st
from pldr_ref.exact.arb.balls import balls
from pldr_ref.exact.arb.model import (
    UncertifiedError,
    check_arb_supports,
    decoder_layer,
    embedding_scale,
    forward,
    initial_precision,
)
from pldr_ref.exact.arb.ops import arb_op
from pldr_ref.exact.arb.ziv import DEFAULT_MAX_PREC, Stages, certify
from pldr_ref.fixtures.exact_tier import EXACT_UNSUPPORTED, EXACT_UNSUPPORTED_STAGES, op_call
from pldr_ref.model import resolve_pad_masking
from pldr_ref.params import Params
from pldr_ref.registry import OPS as REGISTRY_OPS
from pldr_ref.registry import OPS_BY_NAME, Op

ArbRunner = Callable[[PLDRConfig | None, Params | None, Mapping[str, Any], Mapping[str, np.ndarray]],
                     dict[str, np.ndarray]]


def _op(name: str, *positional: str, extra: Callable[..., list] | None = None,
        keywords: tuple[str, ...] = ()) -> ArbRunner:
    def run(config, params, args, inputs):
        values = [inputs.get(n) for n in positional]
        if extra is not None:
            values.extend(extra(params, args, inputs))
        return {"out": arb_op(name, *values, **{k: args[k] for k in keywords})}
    return run


def _derived_runner(op: Op) -> ArbRunner:
    """``arb_op(op.exact, ...)`` called on a case as :func:`pldr_ref.fixtures.exact_tier.op_call` says (the same
    inputs, parameter arguments and keywords as the mpmath engine's runner)."""
    positional, build, keywords = op_call(op)
    return _op(op.exact, *positional, extra=build, keywords=keywords)


def _metric_learner(config, params, args, inputs):
    kind = params.config.metric_learner
    op = OPS_BY_NAME.get(f"metric_learner_{kind}")
    if op is None:
        raise ValueError(f"no arb metric learner for metric_learner={kind!r}")
    return _derived_runner(op)(config, params, args, inputs)


def _staged(compute_stages: Callable[[bool], Stages], config: PLDRConfig) -> dict[str, np.ndarray]:
    res = certify(lambda _p, final: compute_stages(final), prec=initial_precision(config),
                  max_prec=max(DEFAULT_MAX_PREC, initial_precision(config)))
    if not res.all_certified:
        raise UncertifiedError(res)
    return res.values


def _embedding(config, params, args, inputs):
    rows = params["decoder.embedding.weight"][np.asarray(inputs["token_ids"])]

    def stages(final: bool) -> Stages:
        rn32 = st.Float32Rounder(final)
        yield "out", balls(rows) * embedding_scale(params.config, rn32), False, rn32.undecided > 0

    return _staged(stages, params.config)


def _lm_head(config, params, args, inputs):
    return {"out": arb_op("linear", inputs["hidden"], params["final_layer.weight"], params.get("final_layer.bias"))}


def _decoder_layer(config, params, args, inputs):
    if any(k in inputs for k in ("past_k", "past_v", "frozen_A", "frozen_G_LM", "gram_offset")):
        raise ValueError("the exact tier has no cache hooks: exact decoder_layer cases take x, positions, mask")
    c = params.config
    li = int(args["layer"])
    lp = params.layer(li)
    x = np.asarray(inputs["x"], dtype=np.float64)
    positions = [int(p) for p in np.asarray(inputs["positions"]).reshape(-1)]
    mask = inputs.get("mask")

    def stages(final: bool) -> Stages:
        rn32 = st.Float32Rounder(final)
        for name, val in decoder_layer(lp, balls(x), c, positions=positions, mask=mask, rn32=rn32):
            yield f"layers.{li}.{name}", val, name in ("E", "A_LM", "A_P"), rn32.undecided > 0

    return _staged(stages, c)


def _forward(config, params, args, inputs):
    if params is None:
        raise ValueError("exact forward needs parameters")
    return forward(params, inputs["token_ids"], start_pos=int(args.get("start_pos", 0)),
                   attention_mask=inputs.get("attention_mask"),
                   pad_masking=resolve_pad_masking(params.config, args.get("pad_masking")))


#: Registry ops whose arb runner is not one arb op on the case's tensors (registry ``exact="runner"``).
CUSTOM_ARB_RUNNERS: dict[str, ArbRunner] = {
    "metric_learner": _metric_learner,
    "embedding": _embedding,
    "lm_head": _lm_head,
    "decoder_layer": _decoder_layer,
    "forward": _forward,
}

#: Registry ops the arb engine does not run: kind -> why (the mpmath engine's list: both exact engines cover the
#: same kinds).
ARB_UNSUPPORTED: dict[str, str] = dict(EXACT_UNSUPPORTED)

#: Registry stages the arb engine does not run in isolation: name -> why (the mpmath engine's reasons).
ARB_UNSUPPORTED_STAGES: dict[str, str] = dict(EXACT_UNSUPPORTED_STAGES)

#: kind -> arb-engine runner, for every registry op with an exact tier (``exact`` not None), derived from the
#: registry: its custom runner (``exact="runner"``) or ``arb_op(op.exact, ...)`` with the registry's plumbing.
ARB_RUNNERS: dict[str, ArbRunner] = {
    op.name: CUSTOM_ARB_RUNNERS[op.name] if op.exact == "runner" else _derived_runner(op)
    for op in REGISTRY_OPS if op.exact is not None and op.name not in ARB_UNSUPPORTED
}


def run_arb(kind: str, config: PLDRConfig | None, params: Params | None, args: Mapping[str, Any],
            inputs: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Certified correctly rounded outputs of fixture kind ``kind`` from the arb engine."""
    runner = ARB_RUNNERS.get(kind)
    if runner is None:
        raise ValueError(f"no arb-engine runner for fixture kind {kind!r}; kinds: {sorted(ARB_RUNNERS)}")
    cfg = config if config is not None else (params.config if params is not None else None)
    if cfg is not None:
        check_arb_supports(cfg)
    unsupported = sorted({"position_ids", "rope_cos", "rope_sin"} & set(inputs))
    if unsupported:
        raise NotImplementedError(f"the arb engine takes no {unsupported} inputs; use the mpmath engine")
    return runner(config, params, args, inputs)


__all__ = ["ARB_RUNNERS", "ARB_UNSUPPORTED", "ARB_UNSUPPORTED_STAGES", "run_arb"]
