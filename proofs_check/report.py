"""Coverage report: run the registry and render the Lean-name -> check -> status table (terminal and markdown)."""

from __future__ import annotations

import time
from collections.abc import Callable

from proofs_check.catalog import LEAN_FILE_OF, LEAN_FILES, LEAN_NAMES
from proofs_check.registry import INEQUALITY, Check, Outcome, all_checks, run_check


def run_all(
    checks: tuple[Check, ...], profile: str, controls: bool = True, progress: Callable[[Outcome], None] | None = None
) -> list[Outcome]:
    """Run every check (and its negative control) under ``profile``; ``progress`` sees each outcome."""
    outcomes = []
    for check in checks:
        outcome = run_check(check, profile, controls=controls)
        outcomes.append(outcome)
        if progress is not None:
            progress(outcome)
    return outcomes


def status_word(outcome: Outcome) -> str:
    """'pass' / 'FAIL' / 'ERROR' for the check, with ' (control HELD|ERROR|skipped)' unless its negative control
    observed the violation."""
    word = {"pass": "pass", "fail": "FAIL", "error": "ERROR"}[outcome.status]
    if outcome.control_status in ("held", "error"):
        word += f" (control {outcome.control_status.upper()})"
    elif outcome.control_status == "skipped":
        word += " (control skipped)"
    return word


def lean_rows(outcomes: list[Outcome]) -> list[tuple[str, str, str, str]]:
    """(Lean file, Lean name, check names, status) for every catalog name, in catalog order."""
    by_name: dict[str, list[Outcome]] = {}
    for o in outcomes:
        for name in o.check.lean:
            by_name.setdefault(name, []).append(o)
    rows = []
    for name in LEAN_NAMES:
        found = by_name.get(name, [])
        checks = ", ".join(o.check.name for o in found) or "-"
        if not found:
            status = "not run" if outcomes and len(outcomes) < len(all_checks()) else "MISSING"
        else:
            words = {status_word(o) for o in found}
            status = "pass" if words == {"pass"} else "; ".join(sorted(words))
        rows.append((LEAN_FILE_OF[name], name, checks, status))
    return rows


def format_table(rows: list[tuple[str, ...]], header: tuple[str, ...]) -> str:
    """Plain fixed-width table."""
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]
    line = "  ".join(h.ljust(w) for h, w in zip(header, widths, strict=True))
    out = [line, "  ".join("-" * w for w in widths)]
    out += ["  ".join(str(c).ljust(w) for c, w in zip(r, widths, strict=True)) for r in rows]
    return "\n".join(out)


def lean_names_ok(outcomes: list[Outcome]) -> tuple[int, int]:
    """(Lean names whose every check is fully ok, Lean names with at least one check run)."""
    by_name: dict[str, list[Outcome]] = {}
    for o in outcomes:
        for name in o.check.lean:
            by_name.setdefault(name, []).append(o)
    return sum(all(o.ok for o in found) for found in by_name.values()), len(by_name)


def summary(outcomes: list[Outcome]) -> str:
    """'N checks: a pass, b fail/error; controls: ...; x fully ok; Lean names fully ok y/79 (z run)'.

    "fully ok" needs the check to pass and its control to observe the violation, so the Lean count is below 79
    whenever a check or control fails (or controls were skipped)."""
    n_pass = sum(o.status == "pass" for o in outcomes)
    n_ok = sum(o.ok for o in outcomes)
    count = {k: sum(o.control_status == k for o in outcomes) for k in ("violated", "held", "error", "skipped")}
    lean_ok, lean_run = lean_names_ok(outcomes)
    return (f"{len(outcomes)} checks: {n_pass} pass, {len(outcomes) - n_pass} fail/error; negative controls: "
            f"{count['violated']} violated as expected, {count['held']} held, {count['error']} error, "
            f"{count['skipped']} skipped; {n_ok}/{len(outcomes)} fully ok; Lean names fully ok "
            f"{lean_ok}/{len(LEAN_NAMES)} ({lean_run} run)")


def failure_reasons(outcomes: list[Outcome]) -> list[str]:
    """One line per outcome that is not fully ok: its name and reason."""
    return [f"{o.check.name}: {o.reason}" for o in outcomes if not o.ok]


def format_ratio(ratio: float | None) -> str:
    """Largest observed value / bound, two significant digits ('-' when none)."""
    return "-" if ratio is None else f"{ratio:.2g}"


def sharpness_text(o: Outcome) -> str:
    """Sharpness column: the ratio of the check's bounds (two significant digits), 'min x' for the smallest
    value / scale of a positivity statement, 'identity' / 'logical' for equality / logical statements (with
    'err/tol r' when the run measured its rounding error against a tolerance), '-' when nothing was recorded."""
    parts = []
    if o.ratio is not None:
        parts.append(("err/tol " if o.check.statement != INEQUALITY else "") + format_ratio(o.ratio))
    if o.margin is not None:
        parts.append(f"min {o.margin:.2g}")
    if o.check.statement != INEQUALITY:
        return o.check.statement + (f" ({'; '.join(parts)})" if parts else "")
    return "; ".join(parts) or "-"


def reached_text(o: Outcome) -> str:
    """'25/25' (examples that reached the operator / budget), '-' for checks without examples or operators."""
    return f"{o.reached}/{o.budget}" if o.budget and o.check.exercises else "-"


def operators_text(o: Outcome) -> str:
    """The measured operators: the declared ones that the traced run called (a declared operator that is not
    called fails the check), marked NOT CALLED otherwise."""
    called = set(o.measured)
    items = [f"`{e.removeprefix('pldr_ref.')}`" + ("" if e in called or not o.measured else " NOT CALLED")
             for e in o.check.exercises]
    return ", ".join(items) or "(none: Lean definitions on lists / exact algebra)"


def _md_escape(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def markdown(outcomes: list[Outcome], profile: str, mutants: list | None = None) -> str:
    """``docs/lean_coverage.md``: Lean coverage table, the per-check record, and the mutation table."""
    lines = [
        "# Lean coverage of `proofs_check`",
        "",
        f"Generated by `pldr-ref prove --profile {profile} --mutants --out docs/lean_coverage.md`; do not edit by "
        "hand (`tests/test_proofs_docs.py` checks it is current).",
        "",
        "Every theorem of the Lean 4 development (burcgokden/PLDR-LLM-Math-Foundations, catalogued in",
        "`pldr_ref/resources/lean_catalog.md`) has a numerical mirror on the real `pldr_ref` operators. Each check",
        "has a negative control: a **hypothesis drop** removes one Lean hypothesis (named below) and runs the same",
        "property on the same operator; where the statement has no hypothesis (or dropping it cannot falsify the",
        "conclusion: reason given) the control is a **mutation control** (the operator or the statement is",
        "mutated) or a **float-domain boundary** (a strict real inequality at the edge of float64).",
        "",
        "Columns: *operators* are the pldr_ref functions the run was traced calling (a check fails when a declared",
        "operator is not called); *reached* counts hypothesis examples that reached the operator out of the",
        "budget (a check fails below 90 %); *sharpness* says how close the search came to the boundary of the",
        "statement: for an upper bound `lhs <= rhs` (`<`, rank <=, diam <=, Lipschitz) the largest lhs / rhs over",
        "the examples; for a lower bound `lhs >= rhs` (trace >=, entry floor) the largest rhs / lhs (1 = tight,",
        "0 or negative = the search stayed far from the bound); for positivity / nonnegativity `x > 0` (`>= 0`)",
        "`min m`, the smallest x / (natural scale of x) found (0 = the boundary was reached, as nonnegativity allows;",
        "the scale is named in the check's docstring); *identity* marks equality statements and *logical* logical",
        "ones (a property such as prefix consistency, or its failure on a witness), with `err/tol r` the largest",
        "rounding error / tolerance where the run measures one.",
        "",
        f"**Summary ({profile} profile):** {summary(outcomes)}.",
        "",
        "## Lean theorem -> check",
        "",
        "| Lean file | Lean name | check | status |",
        "|---|---|---|---|",
    ]
    lines += [f"| {f} | `{n}` | {c} | {st} |" for f, n, c, st in lean_rows(outcomes)]
    lines += [
        "",
        "## Checks",
        "",
        "| check | Lean | hypotheses | operators (measured) | reached | control | sharpness | status |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for o in outcomes:
        c = o.check
        control = f"{c.control_kind}: {c.dropped}"
        if c.redundant:
            control += f" (no drop can falsify it: {c.redundant})"
        lines.append("| " + " | ".join(_md_escape(x) for x in (
            f"`{c.name}`", ", ".join(c.lean) or f"(beyond Lean: {c.paper})", "; ".join(c.hypotheses) or "none",
            operators_text(o), reached_text(o), control, sharpness_text(o), status_word(o),
        )) + " |")
    weak = [o for o in outcomes if o.check.weak]
    if weak:
        lines += ["", "## Weak Lean statements (definitional) and the corollary tested", ""]
        lines += [f"- `{o.check.name}`: {_md_escape(o.check.weak)}" for o in weak]
    notes = [o for o in outcomes if o.check.note]
    if notes:
        lines += ["", "## Where floating point breaks a strict statement", ""]
        lines += [f"- `{o.check.name}`: {_md_escape(o.check.note)}" for o in notes]
    if mutants is not None:
        from proofs_check.mutants import mutation_table

        caught = sum(r.caught for r in mutants)
        lines += ["", MUTATION_HEADING, "",
                  f"{caught}/{len(mutants)} operator mutants caught by a mirror of their own Lean file "
                  "(`pldr-ref prove --mutants`; a mirror that fails without the bug is not counted).", "",
                  "| mutant | operator | bug | Lean file | caught by (own-file mirrors) |", "|---|---|---|---|---|"]
        lines += ["| " + " | ".join(_md_escape(x) for x in row) + " |" for row in mutation_table(mutants)]
    lines += ["", "## Lean files", ""]
    lines += [f"- {f}: {len(names)} theorems" for f, names in LEAN_FILES.items()]
    return "\n".join(lines) + "\n"


#: Heading of the mutation section of ``docs/lean_coverage.md``.
MUTATION_HEADING = "## Operator mutation run"


def timed_run(checks: tuple[Check, ...], profile: str, **kwargs) -> tuple[list[Outcome], float]:
    """:func:`run_all` plus the wall time in seconds."""
    t0 = time.perf_counter()
    outcomes = run_all(checks, profile, **kwargs)
    return outcomes, time.perf_counter() - t0
