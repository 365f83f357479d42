"""Validate a backend on golden cases: end-to-end comparison of every output, stage isolation,
and a verdict per case and dtype.

Case status: ``pass`` (every judged output and isolated stage within its allowance), ``fail``
(an output or a stage outside it, or a required output missing), ``unsupported`` (the backend
declares it cannot run the case in that dtype, or raised :class:`Unsupported`), ``error`` (the
backend crashed), ``not_applicable`` (nothing could be judged, e.g. the dtype cannot represent
the case).  Nothing is skipped silently: every case x dtype gets exactly one status.
"""

from __future__ import annotations

import dataclasses
import re
import time
from collections.abc import Iterable
from typing import Any

import numpy as np

from pldr_ref.harness.localize import OutputResult, StageResult, first_failing_stage, isolate_stages, judge
from pldr_ref.harness.protocol import Unsupported, primary_outputs, unsupported_reason
from pldr_ref.harness.tolerance import case_baselines, output_allowance
from pldr_ref.layer import LAYER_STAGES
from pldr_ref.stages import stage_of_output

CASE_STATUSES = ("pass", "fail", "error", "unsupported", "not_applicable")

_PREFIX = re.compile(r"^(prefill\.|steps\.(\d+)\.)")
_GROUP_RANK = {"": 0, "prefill": 0, "steps": 1, "kv_cache": 2, "g_cache": 3}


@dataclasses.dataclass(frozen=True)
class CaseResult:
    """The verdict on one case in one dtype (see module docstring)."""

    case: str
    group: str
    kind: str
    tier: str
    dtype: str
    status: str
    reason: str
    outputs: tuple[OutputResult, ...]
    stages: tuple[StageResult, ...]
    first_failure: dict[str, Any] | None
    seconds: float | None = None

    def to_dict(self) -> dict[str, Any]:
        """JSON-able form (``seconds`` only when timing was requested)."""
        out = {"case": self.case, "group": self.group, "kind": self.kind, "tier": self.tier, "dtype": self.dtype,
               "status": self.status, "reason": self.reason, "first_failure": self.first_failure,
               "outputs": [o.to_dict() for o in self.outputs], "stages": [s.to_dict() for s in self.stages]}
        if self.seconds is not None:
            out["seconds"] = self.seconds
        return out


def output_stage(case: Any, name: str) -> str | None:
    """The forward stage that produces output ``name`` (from case.json when recorded, else from its name)."""
    info = (getattr(case, "meta", None) or {}).get("outputs", {}).get(name) or {}
    if info.get("stage"):
        return str(info["stage"])
    leaf = name.rsplit(".", 1)[-1]
    if leaf == "new_logits":
        return "lm_head"
    try:
        return stage_of_output(name).name
    except KeyError:
        return None


def trace_sort_key(name: str) -> tuple:
    """Forward order of output names: prefill < steps.0 < steps.1 < caches; inside a trace embed, x0,
    layers by index and stage order, logits; anything else after, by name."""
    m = _PREFIX.match(name)
    group, step, rest = "", 0, name
    if m:
        group = "steps" if m.group(2) is not None else "prefill"
        step = int(m.group(2) or 0)
        rest = name[m.end():]
    else:
        head = name.split(".", 1)[0]
        if head in ("kv_cache", "g_cache"):
            group, rest = head, name.split(".", 1)[1]
    parts = rest.split(".")
    if parts[0] == "embed":
        inner: tuple = (0,)
    elif parts[0] == "x0":
        inner = (1,)
    elif parts[0] == "layers" and len(parts) == 3 and parts[1].isdigit():
        leaf = parts[2]
        inner = (2, int(parts[1]), LAYER_STAGES.index(leaf) if leaf in LAYER_STAGES else 99, leaf)
    elif parts[0] in ("logits", "new_logits"):
        inner = (3, parts[0])
    else:
        inner = (4, rest)
    return (_GROUP_RANK.get(group, 9), step, inner)


def compare_outputs(backend: Any, case: Any, dtype: str, produced: dict[str, np.ndarray]) -> list[OutputResult]:
    """End-to-end verdict on every golden output of ``case`` (forward order)."""
    full_trace = backend.capabilities().full_trace
    required = set(primary_outputs(case))
    baselines, source = case_baselines(case, dtype)
    results = []
    for name in sorted(case.outputs, key=trace_sort_key):
        want = case.outputs[name]
        stage = output_stage(case, name)
        if name not in produced:
            if full_trace or name in required:
                results.append(OutputResult(name, stage, "missing", None, None, note="not returned by the backend"))
            else:
                results.append(OutputResult(name, stage, "not_produced", None, None,
                                            note="intermediate not returned (backend declares full_trace=False)"))
            continue
        if dtype == "float64":
            base: Any = None
        elif baselines is None:
            base = "none stored or computable for this case kind"
        else:
            base = baselines.get(name, "no entry for this output")
        allow = output_allowance(case, name, dtype, want, base, source=source)
        results.append(judge(name, stage, want, produced[name], dtype, allow))
    return results


def case_status(outputs: Iterable[OutputResult], stages: Iterable[StageResult], primary: Iterable[str]) -> str:
    """fail if any output or isolated stage fails; else pass if a primary output (the logits, the
    layer output or an op's result) was judged and passed; else not_applicable."""
    outputs = list(outputs)
    out_status = {o.status for o in outputs}
    stage_status = {s.status for s in stages}
    if out_status & {"fail", "missing"} or stage_status & {"fail", "error"}:
        return "fail"
    wanted = set(primary)
    if any(o.status == "pass" and o.name in wanted for o in outputs):
        return "pass"
    return "not_applicable"


def describe_first_failure(outputs: list[OutputResult], stages: list[StageResult]) -> dict[str, Any] | None:
    """The first failing isolated stage (forward order), else the first failing end-to-end output."""
    st = first_failing_stage(stages)
    if st is not None:
        bad = next((o for o in st.outputs if o.status in ("fail", "missing")), None)
        return {"stage": st.stage, "layer": st.layer, "output": None if bad is None else bad.name,
                "found_by": "isolation", "note": st.note}
    bad = next((o for o in outputs if o.status in ("fail", "missing")), None)
    if bad is None:
        return None
    layer = None
    m = re.search(r"layers\.(\d+)\.", bad.name)
    if m:
        layer = int(m.group(1))
    return {"stage": bad.stage, "layer": layer, "output": bad.name, "found_by": "end_to_end", "note": bad.note}


def validate_case(backend: Any, case: Any, dtype: str, *, isolate: bool = True, timing: bool = False) -> CaseResult:
    """Run ``case`` on ``backend`` in ``dtype`` and judge it (see module docstring)."""
    t0 = time.perf_counter()

    def done(status: str, reason: str, outputs=(), stages=(), first=None) -> CaseResult:
        secs = round(time.perf_counter() - t0, 3) if timing else None
        return CaseResult(case.name, case.group, case.kind, case.tier, dtype, status, reason, tuple(outputs),
                          tuple(stages), first, secs)

    why = unsupported_reason(backend, case, dtype)
    if why is not None:
        return done("unsupported", why)
    try:
        produced = backend.run_case(case, dtype)
    except Unsupported as exc:
        return done("unsupported", str(exc))
    except Exception as exc:  # a crash of the backend is a verdict
        return done("error", f"{type(exc).__name__}: {exc}")
    outputs = compare_outputs(backend, case, dtype, produced)
    stages = isolate_stages(backend, case, dtype) if isolate else []
    status = case_status(outputs, stages, primary_outputs(case))
    first = describe_first_failure(outputs, stages) if status == "fail" else None
    if status == "fail":
        reason = f"first failure at stage {first['stage']}" + (f" (layer {first['layer']})"
                                                                 if first["layer"] is not None else "")
    elif status == "not_applicable":
        reason = "the primary outputs could not be judged in this dtype (see the outputs' notes)"
    else:
        reason = ""
    return done(status, reason, outputs, stages, first)


def validate(backend: Any, cases: Iterable[Any], dtypes: Iterable[str], *, isolate: bool = True,
             timing: bool = False, progress: Any = None) -> list[CaseResult]:
    """:func:`validate_case` for every case x dtype (dtype-major order)."""
    cases = list(cases)
    results = []
    for dtype in dtypes:
        for case in cases:
            r = validate_case(backend, case, dtype, isolate=isolate, timing=timing)
            if progress is not None:
                progress(r)
            results.append(r)
    return results
