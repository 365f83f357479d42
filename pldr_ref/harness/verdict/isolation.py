"""Stage isolation: every isolatable stage of a case run on the backend from golden upstream values, each judged
on its own (``docs/tolerances.md``).

The plan (which stages, with which golden inputs and outputs) and the per-stage allowances come from
:mod:`pldr_ref.harness.verdict.localize`; below float64 the rows a dtype cannot represent (fully masked rows of an
additive mask) are left out of the judgement (:mod:`pldr_ref.harness.verdict.representable`).  It sits above both, so
neither imports the other's caller.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

import numpy as np

from pldr_ref.harness.protocol import CaseTimeout, StageRequest, Unsupported
from pldr_ref.harness.verdict.localize import (
    OutputResult,
    StageResult,
    ensemble_stage,
    judge,
    read_only,
    stage_allowance,
    stage_plan,
)
from pldr_ref.harness.verdict.representable import representable_part


def isolate_stages(backend: Any, case: Any, dtype: str) -> list[StageResult]:
    """Run every isolatable stage of ``case`` on ``backend`` from golden upstream values (forward order)."""
    plan = stage_plan(case)
    if not plan:
        return []
    declared = set(backend.capabilities().stages)
    if not declared:
        return [StageResult("*", None, "unsupported", (), note="the backend declares no isolated stages")]
    results: list[StageResult] = []
    params_cache: dict = {}
    part = representable_part(case, dtype)
    for stage, layer, inputs, golden in plan:
        if stage not in declared:
            results.append(StageResult(stage, layer, "unsupported", (), note="stage not declared by the backend"))
            continue
        req = StageRequest(stage, layer, case.config, case.params, dtype, read_only(inputs))
        try:
            got = backend.run_stage(req)
        except Unsupported as exc:
            results.append(StageResult(stage, layer, "unsupported", (), note=str(exc)))
            continue
        except CaseTimeout:
            raise
        except BaseException as exc:  # a crash (or exit) of the backend is a verdict, not a harness error
            if isinstance(exc, KeyboardInterrupt):
                raise
            results.append(StageResult(stage, layer, "error", (), note=f"{type(exc).__name__}: {exc}"))
            continue
        if not isinstance(got, Mapping):
            results.append(StageResult(stage, layer, "error", (),
                                       note=f"run_stage returned {type(got).__name__}, expected a dict of arrays"))
            continue
        def member_runs(stage=stage, layer=layer, inputs=inputs) -> list[dict[str, np.ndarray] | None]:
            return ensemble_stage(case, stage, layer, inputs, dtype, params_cache)

        outs = []
        for leaf, want in golden.items():
            full = leaf if layer is None else f"layers.{layer}.{leaf}"
            if leaf not in got:
                outs.append(OutputResult(full, stage, "missing", None, None, note="not returned by run_stage"))
                continue
            got_leaf = got[leaf]
            sel = None if part is None else part.isolated_keep(stage, leaf, np.shape(want))
            if sel is not None and np.shape(got_leaf) == np.shape(want) and sel.any():
                # judged on the representable rows only (pldr_ref.harness.verdict.representable)
                want, got_leaf = np.asarray(want)[sel], np.asarray(got_leaf)[sel]
                def kept_runs(runs=member_runs, leaf=leaf, sel=sel) -> list[dict[str, np.ndarray] | None]:
                    return [None if r is None or leaf not in r else {leaf: np.asarray(r[leaf])[sel]} for r in runs()]

                allow = stage_allowance(case, stage, layer, leaf, inputs, want, dtype, params_cache, kept_runs)
                res = judge(full, stage, want, got_leaf, dtype, allow)
                outs.append(dataclasses.replace(res, note="; ".join(
                    x for x in (f"judged on the rows that are not fully masked ({part.dtype} cannot represent "
                                "those)", res.note) if x)))
                continue
            allow = stage_allowance(case, stage, layer, leaf, inputs, want, dtype, params_cache, member_runs)
            outs.append(judge(full, stage, want, got_leaf, dtype, allow))
        statuses = {o.status for o in outs}
        if statuses & {"fail", "missing"}:
            status = "fail"
        elif statuses and statuses <= {"pass"}:
            status = "pass"
        else:
            status = "not_applicable"
        results.append(StageResult(stage, layer, status, tuple(outs)))
    return results
