"""Validate a backend on golden cases: end-to-end comparison of every output, stage isolation,
and a verdict per case and dtype.

Case status: ``pass`` (every judged output and isolated stage within its allowance, and every primary output
judged), ``fail`` (a judged output or a stage outside it, a NaN / inf where the golden value is finite, or a
required output missing), ``not_judgeable`` ("not covered": a primary output's allowance would
exceed the stated fraction of its scale in this dtype, so the dtype cannot tell a right backend from a wrong one
there; never a pass, never covered by isolated stages, and not a failure of the run), ``unsupported`` (the
backend declares it cannot run the case in that dtype, or raised :class:`Unsupported`), ``error`` (the backend
crashed, exited, hung past the time limit or returned something that is not a dict of arrays),
``not_applicable`` (nothing could be judged: the dtype cannot represent a single-stage case, or nothing
representable is left of a multi-stage one).  Below float64 the rows that depend on fully masked rows of an
additive mask are excluded and the rest is judged (:mod:`pldr_ref.harness.verdict.representable`; the reason says
"judged on N of M rows").  Nothing is skipped silently: every case x dtype gets exactly one status.  Backends receive
read-only copies of the case's tensors.
"""

from __future__ import annotations

import contextlib
import dataclasses
import re
import signal
import threading
import time
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

import numpy as np

from pldr_ref.harness.deadline import case_deadline
from pldr_ref.harness.policy.tolerance import (
    RULE_NOT_JUDGEABLE,
    Allowance,
    case_statistics,
    judged_arithmetic,
    judged_as,
    output_allowance,
    output_margins,
)
from pldr_ref.harness.protocol import (
    DEFAULT_ARITHMETIC,
    CaseTimeout,
    Unsupported,
    primary_outputs,
    unsupported_reason,
)
from pldr_ref.harness.verdict.isolation import isolate_stages
from pldr_ref.harness.verdict.localize import (
    OUTSIDE_WIDE,
    OutputResult,
    StageResult,
    first_failing_stage,
    judge,
    read_only,
    unrepresentable_stage,
)
from pldr_ref.harness.verdict.output_types import checked_outputs
from pldr_ref.harness.verdict.representable import representable_part
from pldr_ref.harness.verdict.unresolved_upstream import mark_unresolved_dependents
from pldr_ref.layer import LAYER_TRACE_NAMES
from pldr_ref.registry import CACHES, MODEL_OUTPUTS_AFTER, MODEL_OUTPUTS_BEFORE, output_declaration, stage_of_output

CASE_STATUSES = ("pass", "fail", "error", "not_judgeable", "unsupported", "not_applicable")

#: Statuses that make a run fail (exit status 1).  ``not_judgeable`` ("not covered") does not: it is never a pass
#: and is reported as such, but a correct backend gets it wherever the dtype cannot resolve an output.
FAILING_STATUSES = ("fail", "error")

#: Default per-case time limit in seconds (``--timeout``): generous, a hang is what it catches.
DEFAULT_TIMEOUT_S = 600.0

_PREFIX = re.compile(r"^(prefill\.|steps\.(\d+)\.)")
#: The note of an output judged on its representable part (:attr:`RepresentablePart.note`).
_PART_NOTE = re.compile(r"(nothing representable in \w+: )?judged on \d+ of \d+ rows; excluded: fully masked rows not "
                        r"representable in \w+")
_GROUP_RANK = {"": 0, "prefill": 0, "steps": 1, **{cache: 2 + i for i, cache in enumerate(CACHES)}}


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
    arithmetic: str = ""

    def to_dict(self) -> dict[str, Any]:
        """JSON-able form (``seconds`` only when timing was requested); every compared output carries its
        ``margin`` (:func:`pldr_ref.harness.policy.tolerance.output_margins`)."""
        stages = []
        for st in self.stages:
            d = st.to_dict()
            d["outputs"] = [_with_margin(o) for o in st.outputs]
            stages.append(d)
        out = {"case": self.case, "group": self.group, "kind": self.kind, "tier": self.tier, "dtype": self.dtype,
               "status": self.status, "reason": self.reason, "first_failure": self.first_failure,
               "arithmetic": self.arithmetic, "outputs": [_with_margin(o) for o in self.outputs], "stages": stages}
        if self.seconds is not None:
            out["seconds"] = self.seconds
        return out


def _with_margin(o: OutputResult) -> dict[str, Any]:
    d = o.to_dict()
    d["margin"] = output_margins(o.comparison, o.allowance)
    return d


def output_stage(case: Any, name: str) -> str | None:
    """The forward stage that produces output ``name`` (from case.json when recorded, else from its name)."""
    kind = getattr(case, "kind", "")
    if kind.startswith("scoring_"):  # scores are not forward stages: label them with the scoring semantics
        return kind
    head = name.split(".", 1)[0]
    if head in CACHES:
        return head
    info = (getattr(case, "meta", None) or {}).get("outputs", {}).get(name) or {}
    if info.get("stage"):
        return str(info["stage"])
    leaf = name.rsplit(".", 1)[-1]
    try:
        declared = output_declaration(leaf)[0]
        if declared is not None and leaf not in declared.outputs:  # an alias (the new rows' logits of a step)
            return declared.name
        return stage_of_output(name).name
    except KeyError:
        return None


def trace_sort_key(name: str) -> tuple:
    """Forward order of output names: prefill < steps.0 < steps.1 < caches (registry order); inside a trace the
    model-level outputs before the layers (embed, x0), layers by index and stage order, the model-level outputs after
    them (logits; an alias right after its name); anything else after, by name (:mod:`pldr_ref.registry`)."""
    m = _PREFIX.match(name)
    group, step, rest = "", 0, name
    if m:
        group = "steps" if m.group(2) is not None else "prefill"
        step = int(m.group(2) or 0)
        rest = name[m.end():]
    else:
        head = name.split(".", 1)[0]
        if head in CACHES:
            group, rest = head, name.split(".", 1)[1]
    parts = rest.split(".")
    if parts[0] in MODEL_OUTPUTS_BEFORE:
        inner: tuple = (0, MODEL_OUTPUTS_BEFORE.index(parts[0]))
    elif parts[0] == "layers" and len(parts) == 3 and parts[1].isdigit():
        leaf = parts[2]
        inner = (1, int(parts[1]), LAYER_TRACE_NAMES.index(leaf) if leaf in LAYER_TRACE_NAMES else 99, leaf)
    elif parts[0] in MODEL_OUTPUTS_AFTER:
        inner = (2, MODEL_OUTPUTS_AFTER.index(parts[0]))
    else:
        inner = (3, rest)
    return (_GROUP_RANK.get(group, 9), step, inner)


def output_allowances(case: Any, dtype: str) -> tuple[dict[str, Any], Any]:
    """(allowance by golden output name, representable part or None) of ``case`` in ``dtype``: the tolerance
    policy's allowance of each output (on its representable part), every output computed from one the dtype cannot
    resolve made not judgeable too (:mod:`pldr_ref.harness.verdict.unresolved_upstream`)."""
    part = representable_part(case, dtype)
    keep = {} if part is None else part.keep
    baselines, source = case_statistics(case, dtype, keep=keep)
    allowances = {}
    for name, want in case.outputs.items():
        if dtype == "float64":
            base: Any = None
        elif baselines is None:
            base = "none computable for this case kind"
        else:
            base = baselines.get(name, "the members' runs do not produce this output" if baselines else source)
        if name in keep:
            if not keep[name].any():
                continue
            want = np.asarray(want)[keep[name]]
        allowances[name] = output_allowance(case, name, dtype, want, base, source=source)
    if dtype != "float64":
        allowances = mark_unresolved_dependents(allowances, dtype)
    return allowances, part


def compare_outputs(backend: Any, case: Any, dtype: str, produced: Mapping[str, Any]) -> list[OutputResult]:
    """End-to-end verdict on every golden output of ``case`` (forward order)."""
    full_trace = backend.capabilities().full_trace
    required = set(primary_outputs(case))
    allowances, part = output_allowances(case, dtype)
    keep = {} if part is None else part.keep
    results = []
    for name in sorted(case.outputs, key=trace_sort_key):
        want = case.outputs[name]
        stage = output_stage(case, name)
        if name not in produced or produced[name] is None:
            if full_trace or name in required:
                results.append(OutputResult(name, stage, "missing", None, None, note="not returned by the backend"))
            else:
                results.append(OutputResult(name, stage, "not_produced", None, None,
                                            note="intermediate not returned (backend declares full_trace=False)"))
            continue
        got = produced[name]
        if name not in allowances:  # no element of it is representable in the dtype
            if np.shape(got) == np.shape(want):
                results.append(OutputResult(name, stage, "not_applicable", None, None,
                                            note=f"nothing representable in {dtype}: {part.note}"))
            else:  # still a wrong shape: judged without an allowance, the comparison reports it
                results.append(judge(name, stage, want, got, dtype, Allowance(
                    None, 0.0, RULE_NOT_JUDGEABLE, {}, judged=False, reason=f"nothing representable in {dtype}")))
            continue
        if name in keep and np.shape(got) == np.shape(want):  # judged on the representable part only
            want, got = np.asarray(want)[keep[name]], np.asarray(got)[keep[name]]
        res = judge(name, stage, want, got, dtype, allowances[name])
        if name in keep:
            res = dataclasses.replace(res, note="; ".join(x for x in (part.note, res.note) if x))
        results.append(res)
    return results


def _layer_of(name: str) -> int | None:
    m = re.search(r"(?:^|\.)layers\.(\d+)\.", name)
    return int(m.group(1)) if m else None


def case_status(outputs: Iterable[OutputResult], stages: Iterable[StageResult], primary: Iterable[str]) -> str:
    """fail if any output or isolated stage fails; else not_judgeable ("not covered") if a primary output (the
    logits of every call, the layer output, a score) could not be judged -- never a pass, whatever the isolated
    stages say, and not a failure either: the dtype cannot tell a right backend from a wrong one there; else pass
    if a primary output was judged and passed; else not_applicable."""
    outputs = list(outputs)
    stages = list(stages)
    wanted = set(primary)
    out_status = {o.status for o in outputs}
    stage_status = {s.status for s in stages}
    if out_status & {"fail", "missing"} or stage_status & {"fail", "error"}:
        return "fail"
    if any(o.status == "not_judgeable" and o.name in wanted for o in outputs):
        return "not_judgeable"
    if any(o.name in wanted and o.status == "pass" for o in outputs):
        return "pass"
    return "not_applicable"


def _neighbours(stages: list[StageResult], i: int) -> str:
    prev = stages[i - 1].label if i > 0 else "the inputs"
    nxt = stages[i + 1].label if i + 1 < len(stages) else "the outputs"
    return f"{prev} -> {stages[i].label} -> {nxt}"


def describe_first_failure(outputs: list[OutputResult], stages: list[StageResult]) -> dict[str, Any] | None:
    """The first failing isolated stage (forward order), else the first failing end-to-end output; when that
    output's stage passes in isolation the note says so and names the neighbouring stages (glue bug)."""
    st = first_failing_stage(stages)
    if st is not None:
        bad = next((o for o in st.outputs if o.status in ("fail", "missing")), None)
        note = st.note or ("" if bad is None else bad.note)
        return {"stage": st.stage, "layer": st.layer, "output": None if bad is None else bad.name,
                "found_by": "isolation", "note": note}
    # the first failing output in forward order -- or, before it, a not-judgeable one outside even its own wide
    # allowance (in a failing case, where the wrong values start: a wrong score in a 16-bit cached run)
    bad = next((o for o in outputs if o.status in ("fail", "missing")), None)
    if bad is None:
        return None
    failing = bad
    for o in outputs:
        if o is bad:
            break
        if o.status == "not_judgeable" and OUTSIDE_WIDE in o.note:
            bad = o
            break
    layer = _layer_of(bad.name)
    note = bad.note if bad is failing else f"{bad.note}; the case fails at {failing.name}: {failing.note}"
    for i, s in enumerate(stages):
        if s.stage == bad.stage and s.layer == layer and s.status == "pass" and not bad.name.startswith("steps."):
            note = (f"stage correct in isolation; divergence between stages: glue, or accumulated error within "
                    f"tolerance (neighbours: {_neighbours(stages, i)})" + (f"; {bad.note}" if bad.note else ""))
            break
    return {"stage": bad.stage, "layer": layer, "output": bad.name, "found_by": "end_to_end", "note": note}


@contextlib.contextmanager
def time_limit(seconds: float | None, backend: Any = None) -> Iterator[None]:
    """Raise :class:`CaseTimeout` inside the block after ``seconds``: for a ``backend`` that enforces the deadline
    itself (``enforces_deadline``: :class:`pldr_ref.harness.engine_process.ProcessBackend`, which kills its child
    process at it, whatever native call runs there), that deadline; for any other, a SIGALRM (Python code; only
    in the main thread of a POSIX process, elsewhere no limit)."""
    if getattr(backend, "enforces_deadline", False):
        with case_deadline(seconds):
            yield
        return
    with _alarm(seconds):
        yield


@contextlib.contextmanager
def _alarm(seconds: float | None) -> Iterator[None]:
    """The SIGALRM half of :func:`time_limit`."""
    usable = (seconds is not None and seconds > 0 and hasattr(signal, "setitimer")
              and threading.current_thread() is threading.main_thread())
    if not usable:
        yield
        return

    def expire(signum: int, frame: Any) -> None:
        raise CaseTimeout(f"ran past the per-case time limit of {seconds:g} s")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, float(seconds))
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0.0)
        signal.signal(signal.SIGALRM, previous)


#: (a case's parameter set, its guarded copy) of the last case :func:`guarded_case` guarded.
_GUARDED_PARAMS: list[tuple[Any, Any]] = []
_GUARDED_LOCK = threading.Lock()


def guarded_case(case: Any) -> Any:
    """``case`` with read-only copies of its inputs, outputs and parameters (a backend cannot alter them).  The
    copy of a parameter set is made once and handed again to the next cases with that same (immutable) set: the
    cases of a generated suite share one, 110 M values at ``v510-110m`` -- a copy per case took a second, and a
    child-process backend (:mod:`pldr_ref.harness.engine_process`) receives a set only when it changes."""
    if not dataclasses.is_dataclass(case):
        return case
    changes: dict[str, Any] = {"inputs": read_only(case.inputs), "outputs": read_only(case.outputs)}
    params = getattr(case, "params", None)
    if params is not None:
        from pldr_ref.params import Params

        with _GUARDED_LOCK:
            if _GUARDED_PARAMS and _GUARDED_PARAMS[0][0] is params:
                changes["params"] = _GUARDED_PARAMS[0][1]
            else:
                changes["params"] = Params(params.config, read_only(dict(params.items())))
                _GUARDED_PARAMS[:] = [(params, changes["params"])]
    return dataclasses.replace(case, **changes)


def validate_case(backend: Any, case: Any, dtype: str, *, isolate: bool = True, timing: bool = False,
                  timeout: float | None = DEFAULT_TIMEOUT_S, guarded: Any = None) -> CaseResult:
    """Run ``case`` on ``backend`` in ``dtype`` and judge it (see module docstring).  The backend sees
    ``guarded`` (default :func:`guarded_case` of ``case``: read-only copies); ``timeout`` seconds bound its
    calls for this case (None: no limit)."""
    t0 = time.perf_counter()

    def done(status: str, reason: str, outputs=(), stages=(), first=None) -> CaseResult:
        secs = round(time.perf_counter() - t0, 3) if timing else None
        arith = "" if dtype == "float64" or status in ("unsupported", "error") else judged_arithmetic()
        return CaseResult(case.name, case.group, case.kind, case.tier, dtype, status, reason, tuple(outputs),
                          tuple(stages), first, secs, arith)

    try:
        why = unsupported_reason(backend, case, dtype)
        declared = getattr(backend.capabilities(), "arithmetic", DEFAULT_ARITHMETIC)
    except Exception as exc:
        return done("error", f"capabilities() failed: {type(exc).__name__}: {exc}")
    if why is not None:
        return done("unsupported", why)
    with judged_as(declared):
        return _judged_case(backend, case, dtype, isolate, timeout, guarded, done)


def _judged_case(backend: Any, case: Any, dtype: str, isolate: bool, timeout: float | None, guarded: Any,
                 done: Any) -> CaseResult:
    """:func:`validate_case` once the backend's capabilities are known (inside :func:`judged_as`)."""
    seen = guarded if guarded is not None else guarded_case(case)
    stages: list[StageResult] = []
    try:
        with time_limit(timeout, backend):
            produced = backend.run_case(seen, dtype)
            if not isinstance(produced, Mapping):
                return done("error", f"run_case returned {type(produced).__name__}, expected a dict of arrays")
            produced = checked_outputs(case.outputs, produced)  # OutputTypeError: an error verdict naming them
            outputs = compare_outputs(backend, case, dtype, produced)
            if isolate:
                stages = isolate_stages(backend, seen, dtype)
    except Unsupported as exc:
        return done("unsupported", str(exc))
    except CaseTimeout as exc:
        return done("error", f"timeout: the backend {exc}", stages=stages)
    except KeyboardInterrupt:
        raise
    except BaseException as exc:  # a crash or exit of the backend is a verdict (SystemExit included)
        return done("error", f"{type(exc).__name__}: {exc}", stages=stages)
    status = case_status(outputs, stages, primary_outputs(case))
    part = next((m.group(0) for o in outputs if o.name in set(primary_outputs(case))
                 for m in [_PART_NOTE.match(o.note)] if m), None)
    if status == "not_judgeable" and (part is None or part.startswith("nothing")):
        bad_stage = unrepresentable_stage(case, dtype)
        if bad_stage is not None:
            return done("not_applicable", f"{dtype} cannot represent stage {bad_stage}: the case is judged in "
                                          "float64 only (NaN/inf outputs still fail)", outputs, stages)
    first = describe_first_failure(outputs, stages) if status == "fail" else None
    if status == "fail":
        where = first["stage"] or first["output"] or "?"
        reason = (f"first failure at stage {where}" + (f" (layer {first['layer']})" if first["layer"] is not None
                                                      else "")
                  + (f": {first['output']}: {first['note']}" if first["output"] and first["note"] else ""))
    elif status == "not_judgeable":
        wanted = set(primary_outputs(case))
        bad = [o for o in outputs if o.status == "not_judgeable" and o.name in wanted]
        reason = (f"not covered: {len(bad)} primary output(s) not judgeable in {dtype}, within their own allowance "
                  f"(first: {bad[0].name}: {bad[0].note})")
    elif status == "not_applicable":
        reason = "the primary outputs could not be judged in this dtype (see the outputs' notes)"
    else:
        reason = ""
    if part is not None:  # judged on the representable part only (pldr_ref.harness.verdict.representable)
        reason = "; ".join(x for x in (reason, part) if x)
    return done(status, reason, outputs, stages, first)


def validate(backend: Any, cases: Iterable[Any], dtypes: Iterable[str], *, isolate: bool = True,
             timing: bool = False, progress: Any = None, timeout: float | None = DEFAULT_TIMEOUT_S
             ) -> list[CaseResult]:
    """:func:`validate_case` for every case x dtype (dtype-major order)."""
    cases = list(cases)
    guarded: dict[int, Any] = {}
    results = []
    for dtype in dtypes:
        for case in cases:
            if id(case) not in guarded:
                guarded[id(case)] = guarded_case(case)
            r = validate_case(backend, case, dtype, isolate=isolate, timing=timing, timeout=timeout,
                              guarded=guarded[id(case)])
            if progress is not None:
                progress(r)
            results.append(r)
    return results

