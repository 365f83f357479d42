"""Reports of a validation run: a terminal table, a JSON document and JUnit XML.

JSON schema (``schema_version`` = :data:`SCHEMA_VERSION`; documented in ``docs/backends.md``)::

    {
      "schema_version": "pldr-ref-validation-report/1",
      "pldr_ref_version": str,
      "backend": {"spec": "module:attr", "name": str, "capabilities": {dtypes, kinds, stages, caches,
                  switches, full_trace}},
      "suite": {"root": str (as given), "manifest_sha256": str | null, "cases": int},
      "dtypes": [str],
      "policy": {"k_half": float, "k_sqrt": float, "k_min": float, "floor_units": float, "k_rms": float,
                 "k_bias": float, "bias_floor": float, "f32_factor": float, "k_gross": float,
                 "max_allowance_fraction": float, "max_abs_fraction": float,
                 "arithmetic": str | null,  # what the verdicts below float64 assume (the backend's declaration)
                 "float64": "case tolerance (case.json)"},
      "summary": {"total": int, "pass": int, "fail": int, "error": int, "not_judgeable": int, "unsupported": int,
                  "not_applicable": int},
      "passed": bool,                       # no fail or error, something judged, and no problems
      "problems": [str],                    # suite / backend problems, "no case was judged"
      "results": [CaseResult]               # dtype-major, then case name
    }

    CaseResult = {"case", "group", "kind", "tier", "dtype", "status", "reason",
                  "arithmetic": str,  # the arithmetic the verdict assumed ("" for float64, unsupported, error)
                  "first_failure": null | {"stage", "layer", "output", "found_by": "isolation" | "end_to_end",
                                           "note"},
                  "outputs": [OutputResult], "stages": [StageResult], "seconds"?: float (only with timing)}
    OutputResult = {"name", "stage", "status", "note",
                    "comparison": null | {name, dtype, shape, size, max_abs, median_abs, max_rel, median_rel,
                                          max_ulp, ref_max_abs, worst_index, worst_expected, worst_actual,
                                          nan_mismatches, posinf_mismatches, neginf_mismatches, mismatches,
                                          atol, rtol, error},
                    "allowance": null | {"atol", "rtol", "rule", "detail", "judged", "reason", "rms", "offset",
                                         "gain", "gross", "judgeable"},
                    "margin": null | {"max", "rms", "offset", "gain", "gross": observed / allowed (< 1 passes),
                                      "rms_multiple": relative RMS error / reference error, "allowed_multiple"}}
    StageResult = {"stage", "layer", "status", "note", "outputs": [OutputResult]}

Non-finite numbers are written as the strings "inf", "-inf", "nan".  :data:`REPORT_JSON_SCHEMA` is
the same schema as JSON Schema; :func:`schema_errors` checks a report against it.  Nothing in the report depends
on time or the machine unless timing is requested, so two runs of the same backend give
byte-identical files.
"""

from __future__ import annotations

import json
import math
import xml.etree.ElementTree as ET
from collections.abc import Iterable, Mapping
from typing import Any

from pldr_ref.harness.policy import tolerance
from pldr_ref.harness.validate import CASE_STATUSES, FAILING_STATUSES, CaseResult
from pldr_ref.text_escape import escape_text

SCHEMA_VERSION = "pldr-ref-validation-report/1"

_NUM = {"type": ["number", "string", "null"]}  # non-finite numbers are the strings "inf", "-inf", "nan"
_ALLOWANCE = {"type": ["object", "null"], "required": ["atol", "rtol", "rule", "detail", "judged", "reason"],
              "properties": {"atol": _NUM, "rtol": _NUM, "rule": {"type": "string"}, "detail": {"type": "object"},
                             "judged": {"type": "boolean"}, "reason": {"type": "string"},
                             "judgeable": {"type": "boolean"}}}
_COMPARISON = {"type": ["object", "null"],
               "required": ["name", "dtype", "shape", "size", "max_abs", "median_abs", "max_rel", "median_rel",
                            "max_ulp", "ref_max_abs", "worst_index", "worst_expected", "worst_actual",
                            "nan_mismatches", "posinf_mismatches", "neginf_mismatches", "mismatches", "atol", "rtol",
                            "error"],
               "properties": {"shape": {"type": "array", "items": {"type": "integer"}}, "size": {"type": "integer"},
                              "max_abs": _NUM, "median_abs": _NUM, "max_rel": _NUM, "median_rel": _NUM,
                              "max_ulp": _NUM, "mismatches": {"type": "integer"},
                              "nan_mismatches": {"type": "integer"}, "posinf_mismatches": {"type": "integer"},
                              "neginf_mismatches": {"type": "integer"}}}
_OUTPUT = {"type": "object", "required": ["name", "stage", "status", "comparison", "allowance", "note"],
           "properties": {"name": {"type": "string"}, "stage": {"type": ["string", "null"]},
                          "status": {"enum": ["pass", "fail", "not_judgeable", "not_applicable", "missing",
                                                "not_produced"]},
                          "comparison": _COMPARISON, "allowance": _ALLOWANCE, "note": {"type": "string"},
                          "margin": {"type": ["object", "null"]}}}
_STAGE = {"type": "object", "required": ["stage", "layer", "status", "note", "outputs"],
          "properties": {"stage": {"type": "string"}, "layer": {"type": ["integer", "null"]},
                         "status": {"enum": ["pass", "fail", "unsupported", "error", "not_applicable"]},
                         "note": {"type": "string"}, "outputs": {"type": "array", "items": _OUTPUT}}}
_RESULT = {"type": "object",
           "required": ["case", "group", "kind", "tier", "dtype", "status", "reason", "first_failure", "outputs",
                        "stages"],
           "properties": {"status": {"enum": list(CASE_STATUSES)}, "dtype": {"type": "string"},
                          "first_failure": {"type": ["object", "null"],
                                            "required": ["stage", "layer", "output", "found_by", "note"]},
                          "outputs": {"type": "array", "items": _OUTPUT},
                          "stages": {"type": "array", "items": _STAGE}, "seconds": {"type": "number"},
                          "arithmetic": {"type": "string"}}}

#: JSON Schema (draft 2020-12) of the report: machine-readable form of the module docstring.
REPORT_JSON_SCHEMA: dict[str, Any] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "title": "pldr-ref validation report",
    "type": "object",
    "required": ["schema_version", "pldr_ref_version", "backend", "suite", "dtypes", "policy", "summary", "passed",
                 "problems", "results"],
    "properties": {
        "schema_version": {"const": SCHEMA_VERSION},
        "pldr_ref_version": {"type": "string"},
        "backend": {"type": "object", "required": ["spec", "name", "capabilities"]},
        "suite": {"type": "object", "required": ["root", "manifest_sha256", "cases"]},
        "dtypes": {"type": "array", "items": {"type": "string"}},
        "policy": {"type": "object", "required": ["k_half", "k_sqrt", "k_min", "floor_units", "float64"]},
        "summary": {"type": "object", "required": ["total", *CASE_STATUSES]},
        "passed": {"type": "boolean"},
        "problems": {"type": "array", "items": {"type": "string"}},
        "results": {"type": "array", "items": _RESULT},
    },
}

_JSON_TYPES = {"object": dict, "array": list, "string": str, "boolean": bool, "null": type(None)}


def schema_errors(doc: Any, schema: Mapping[str, Any] = REPORT_JSON_SCHEMA, path: str = "$") -> list[str]:
    """Violations of the subset of JSON Schema used above (type, const, enum, required, properties,
    items) -- enough to check a report without the ``jsonschema`` package.  Empty list = valid."""
    errs: list[str] = []
    types = schema.get("type")
    if types is not None:
        types = [types] if isinstance(types, str) else types
        ok = False
        for t in types:
            if t == "integer":
                ok |= isinstance(doc, int) and not isinstance(doc, bool)
            elif t == "number":
                ok |= isinstance(doc, (int, float)) and not isinstance(doc, bool)
            else:
                ok |= isinstance(doc, _JSON_TYPES[t])
        if not ok:
            return [f"{path}: expected {types}, got {type(doc).__name__}"]
    if "const" in schema and doc != schema["const"]:
        errs.append(f"{path}: expected {schema['const']!r}, got {doc!r}")
    if "enum" in schema and doc not in schema["enum"]:
        errs.append(f"{path}: {doc!r} not in {schema['enum']}")
    if isinstance(doc, dict):
        errs += [f"{path}: missing {k!r}" for k in schema.get("required", ()) if k not in doc]
        for k, sub in schema.get("properties", {}).items():
            if k in doc:
                errs += schema_errors(doc[k], sub, f"{path}.{k}")
    if isinstance(doc, list) and "items" in schema:
        for i, item in enumerate(doc):
            errs += schema_errors(item, schema["items"], f"{path}[{i}]")
    return errs


def summarize(results: Iterable[CaseResult]) -> dict[str, int]:
    """Counts per status plus ``total``."""
    results = list(results)
    out = {"total": len(results)}
    out.update({s: sum(1 for r in results if r.status == s) for s in CASE_STATUSES})
    return out


def run_problems(results: Iterable[CaseResult], problems: Iterable[str] = ()) -> list[str]:
    """Why a run cannot pass beyond its failing cases: the given suite / backend problems, plus "no case was
    judged" when no case passed or failed (everything unsupported, not applicable or not judgeable)."""
    results = list(results)
    out = list(problems)
    if not any(r.status in ("pass", "fail") for r in results):
        s = summarize(results)
        out.append(f"no case was judged ({s['total']} checks: {s['unsupported']} unsupported, "
                   f"{s['not_applicable']} not applicable, {s['not_judgeable']} not judgeable, {s['error']} error): "
                   "nothing was validated")
    return out


def passed(results: Iterable[CaseResult], problems: Iterable[str] = ()) -> bool:
    """True when no case failed or errored and :func:`run_problems` is empty (a ``not_judgeable`` case is not
    covered: never a pass, not a failure)."""
    results = list(results)
    return all(r.status not in FAILING_STATUSES for r in results) and not run_problems(results, problems)


def build_report(results: list[CaseResult], *, backend_spec: str, backend: Any, dtypes: list[str],
                 suite_root: str, manifest_sha256: str | None, num_cases: int,
                 problems: Iterable[str] = ()) -> dict[str, Any]:
    """The JSON report document (see module docstring)."""
    from pldr_ref import __version__

    try:
        caps = backend.capabilities().to_dict()
    except Exception as exc:  # the report is written whatever the backend does
        caps = {"error": f"{type(exc).__name__}: {exc}"}
    return {
        "schema_version": SCHEMA_VERSION,
        "pldr_ref_version": __version__,
        "backend": {"spec": backend_spec, "name": str(getattr(backend, "name", "?")), "capabilities": caps},
        "suite": {"root": suite_root, "manifest_sha256": manifest_sha256, "cases": num_cases},
        "dtypes": list(dtypes),
        "policy": {"k_half": tolerance.K_HALF, "k_sqrt": tolerance.K_SQRT, "k_min": tolerance.K_MIN,
                   "floor_units": tolerance.FLOOR_UNITS, "k_rms": dict(tolerance.K_RMS), "k_bias": tolerance.K_BIAS,
                   "max_allowance_fraction": tolerance.MAX_ALLOWANCE_FRACTION,
                   "max_abs_fraction": tolerance.MAX_ABS_FRACTION, "f32_factor": tolerance.F32_FACTOR,
                   "bias_floor": tolerance.BIAS_FLOOR, "k_gross": tolerance.K_GROSS,
                   "arithmetic": _judged_arithmetic(backend),
                   "float64": "case tolerance (case.json)"},
        "summary": summarize(results),
        "passed": passed(results, problems),
        "problems": run_problems(results, problems),
        "results": [r.to_dict() for r in results],
    }


def _judged_arithmetic(backend: Any) -> str | None:
    """The arithmetic key the backend's verdicts below float64 assume (None if its capabilities fail)."""
    from pldr_ref.harness.policy.ensemble import arithmetic_key

    try:
        return arithmetic_key(backend.capabilities().arithmetic)
    except Exception:  # the report is written whatever the backend does
        return None


def dumps_report(report: Mapping[str, Any]) -> str:
    """Canonical JSON text (sorted keys, no NaN literals, trailing newline)."""
    return json.dumps(report, sort_keys=True, indent=1, allow_nan=False) + "\n"


# ----------------------------------------------------------------------------- terminal table
def _fmt(x: float | None) -> str:
    if x is None:
        return "-"
    if isinstance(x, str):
        return x
    if math.isnan(x):
        return "nan"
    if math.isinf(x):
        return "inf" if x > 0 else "-inf"
    return f"{x:.2e}"


def worst_output(result: CaseResult) -> tuple[str, float | None, float | None]:
    """(name, normwise relative error, max ULPs) of the end-to-end output with the largest
    error relative to its allowance (else the largest normwise error)."""
    best: tuple[float, str, float | None, float | None] = (-1.0, "-", None, None)
    for o in result.outputs:
        c = o.comparison
        if c is None or c.error is not None:
            continue
        atol = o.allowance.atol if o.allowance is not None else None
        if c.class_mismatches:
            score = math.inf
        elif atol:
            score = c.max_abs / (atol + (o.allowance.rtol or 0.0) * c.ref_max_abs)
        else:
            score = c.max_rel_normwise
        if score > best[0]:
            best = (score, o.name, c.shown_rel_error, c.max_ulp)
    return best[1], best[2], best[3]


def _first_sentence(note: str) -> str:
    """The first failing test's sentence of an output note (tests are joined by "; ")."""
    parts = [p for p in note.split("; ") if " x " in p or "gross" in p]
    return parts[0] if parts else note


def table(results: list[CaseResult], problems: Iterable[str] = ()) -> str:
    """A readable fixed-width table: one row per case x dtype, then the run's problems and the summary."""
    rows = [("STATUS", "DTYPE", "CASE", "WORST OUTPUT", "REL", "ULP", "FIRST FAILURE / REASON")]
    for r in results:
        name, rel, ulp = worst_output(r)
        if r.first_failure:
            f = r.first_failure
            where = str(f["stage"] or f["output"] or "?") + (f" (layer {f['layer']})" if f["layer"] is not None else "")
            note = (f"{where} [{f['found_by']}]" + (" glue?" if "correct in isolation" in (f.get("note") or "") else "")
                    + (f": {f['output']}: {_first_sentence(f.get('note') or '')}" if f.get("output") else ""))
        else:
            note = r.reason
        ulp_text = "-" if ulp is None else (_fmt(ulp) if not math.isfinite(ulp) else f"{ulp:.0f}")
        rows.append(tuple(escape_text(cell, one_line=True)
                          for cell in (r.status.upper(), r.dtype, r.case, name, _fmt(rel), ulp_text, note)))
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]) - 1)]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(row[:-1], widths, strict=True)) + "  " + row[-1]
             for row in rows]
    s = summarize(results)
    lines.append("")
    for msg in run_problems(results, problems):
        lines.append(f"PROBLEM: {escape_text(msg, one_line=True)}")
    assumed = sorted({r.arithmetic for r in results if r.arithmetic})
    if assumed:
        lines.append(f"verdicts below float64 assume {' / '.join(assumed)} arithmetic (the backend's declared "
                     "Capabilities.arithmetic; docs/tolerances.md)")
    lines.append(f"{s['total']} checks: {s['pass']} pass, {s['fail']} fail, {s['error']} error, "
                 f"{s['not_judgeable']} not judgeable (not covered), {s['unsupported']} unsupported, "
                 f"{s['not_applicable']} not applicable -> " + ("PASSED" if passed(results, problems) else "FAILED"))
    return "\n".join(lines)


# ----------------------------------------------------------------------------- JUnit XML
def _failure_text(r: CaseResult) -> str:
    lines = []
    for o in r.outputs:
        if o.status in ("fail", "missing"):
            c = o.comparison
            if c is None or c.atol is None:
                lines.append(f"{o.name} [{o.stage}]: {o.note}")
            else:
                lines.append(f"{o.name} [{o.stage}]: {o.note}; max_abs {_fmt(c.max_abs)} vs atol {_fmt(c.atol)} + rtol "
                             f"{_fmt(c.rtol)}|golden|, {c.mismatches}/{c.size} mismatches, worst at "
                             f"{c.worst_index} (got {c.worst_actual}, golden {c.worst_expected}), max ULP "
                             f"{_fmt(c.max_ulp)}, NaN/+inf/-inf class mismatches {c.nan_mismatches}/"
                             f"{c.posinf_mismatches}/{c.neginf_mismatches}")
    if r.first_failure and r.first_failure.get("note"):
        lines.append(f"first failure note: {r.first_failure['note']}")
    for s in r.stages:
        if s.status in ("fail", "error"):
            bad = [o.name for o in s.outputs if o.status in ("fail", "missing")]
            lines.append(f"isolated stage {s.label}: {s.status} {s.note} {' '.join(bad)}".rstrip())
    return "\n".join(lines)


def junit_xml(results: list[CaseResult], *, backend_name: str, problems: Iterable[str] = ()) -> str:
    """JUnit XML: one ``testsuite`` per dtype, one ``testcase`` per case.

    Every string of the results (case names, reasons, backend messages) goes through
    :func:`~pldr_ref.text_escape.escape_text`: control characters and lone surrogates, which XML 1.0 cannot hold,
    become visible escapes, so the document always parses.

    fail -> ``<failure>``, error -> ``<error>``, unsupported / not_applicable / not_judgeable (not covered) ->
    ``<skipped>`` (with the reason).  Attributes ``tests``, ``failures``, ``errors``, ``skipped`` are the counts.
    """
    x = escape_text
    backend_name = x(backend_name, one_line=True)
    root = ET.Element("testsuites", name=f"pldr-ref validate {backend_name}")
    dtypes = list(dict.fromkeys(r.dtype for r in results))
    totals = {"tests": 0, "failures": 0, "errors": 0, "skipped": 0}
    for dtype in dtypes:
        rs = [r for r in results if r.dtype == dtype]
        counts = {"tests": len(rs), "failures": sum(r.status == "fail" for r in rs),
                  "errors": sum(r.status == "error" for r in rs),
                  "skipped": sum(r.status in ("unsupported", "not_applicable", "not_judgeable") for r in rs)}
        suite = ET.SubElement(root, "testsuite", name=x(f"pldr_ref.{backend_name}.{dtype}"),
                              **{k: str(v) for k, v in counts.items()})
        for r in rs:
            attrs = {"classname": x(f"pldr_ref.{backend_name}.{dtype}.{r.group}"), "name": x(r.case)}
            if r.seconds is not None:
                attrs["time"] = f"{r.seconds:.3f}"
            tc = ET.SubElement(suite, "testcase", **attrs)
            if r.status == "fail":
                ET.SubElement(tc, "failure", message=x(r.reason), type="ToleranceExceeded").text = x(_failure_text(r))
            elif r.status == "error":
                ET.SubElement(tc, "error", message=x(r.reason), type="BackendError")
            elif r.status in ("unsupported", "not_applicable", "not_judgeable"):
                ET.SubElement(tc, "skipped", message=x(f"{r.status}: {r.reason}"))
        for k in totals:
            totals[k] += counts[k]
    msgs = run_problems(results, problems)
    if msgs:
        suite = ET.SubElement(root, "testsuite", name=f"pldr_ref.{backend_name}.run", tests=str(len(msgs)),
                              failures=str(len(msgs)), errors="0", skipped="0")
        for i, msg in enumerate(msgs):
            tc = ET.SubElement(suite, "testcase", classname=f"pldr_ref.{backend_name}.run", name=f"problem_{i}")
            ET.SubElement(tc, "failure", message=x(msg), type="RunProblem")
        totals["tests"] += len(msgs)
        totals["failures"] += len(msgs)
    for k, v in totals.items():
        root.set(k, str(v))
    ET.indent(root)
    return '<?xml version="1.0" encoding="utf-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"
