"""The registry of numerical checks: one :class:`Check` per Lean theorem group or paper result.

Each check names the Lean theorem(s) it mirrors, the paper result, its epistemic label, the
method, the rounding slack it allows and the pldr_ref operators it must call.  ``run(profile)``
returns a one-line detail and raises ``AssertionError`` on failure; ``negative_control(profile)``
drops one Lean hypothesis (``dropped``, one of :data:`proofs_check.catalog.LEAN_HYPOTHESES`) or, where the
statement has none, mutates the function (a "mutation control"), returns the violation it observed, and
raises :class:`proofs_check.profiles.NegativeControlError` if the conclusion unexpectedly survived.

:func:`run_check` runs both under a :class:`proofs_check.tracing.Tracer`: the operators a check calls are
measured, and a check fails when a declared operator is never called or fewer than 90 % of its example
budget reached the operator.
"""

from __future__ import annotations

import dataclasses
import importlib
import time
import traceback
from collections.abc import Callable

from proofs_check import tracing
from proofs_check.catalog import LEAN_HYPOTHESES, LEAN_NAMES, REDUNDANT_HYPOTHESES
from proofs_check.profiles import MIN_REACHED_FRACTION, PROFILES, NegativeControlError, recording

__all__ = ["PROFILES", "Check", "Outcome", "all_checks", "run_check"]

#: Control kinds: the control drops one Lean hypothesis, or (statements without one) mutates the function.
HYPOTHESIS_DROP = "hypothesis drop"
MUTATION_CONTROL = "mutation control"
FLOAT_BOUNDARY = "float-domain boundary"

#: Epistemic labels (paper Section 1 conventions).
THEOREM = "theorem"
CONDITIONAL = "conditional theorem"
MEASUREMENT = "measurement"
LABELS = (THEOREM, CONDITIONAL, MEASUREMENT)

#: Statement kinds (the sharpness column): inequalities are measured, the others are named.
INEQUALITY = "inequality"
IDENTITY = "identity"
LOGICAL = "logical"
STATEMENTS = (INEQUALITY, IDENTITY, LOGICAL)

#: Methods.
HYPOTHESIS = "hypothesis float64"
MPMATH = "mpmath"
SYMPY = "sympy"
EXACT_FLOAT = "float64 exact"
MONTE_CARLO = "monte carlo"
REAL_G_LM = "real G_LM"
PURE_PYTHON = "hypothesis lists"
METHODS = (HYPOTHESIS, MPMATH, SYMPY, EXACT_FLOAT, MONTE_CARLO, REAL_G_LM, PURE_PYTHON)

#: Modules holding ``CHECKS``, one per paper subject (= Lean file); each also holds the subject's results that
#: Lean does not formalize and its exact sympy identities.
CHECK_MODULES = (
    "proofs_check.iswiglu",
    "proofs_check.softmax",
    "proofs_check.density_operator",
    "proofs_check.hadamard_power",
    "proofs_check.rank_one",
    "proofs_check.layernorm",
    "proofs_check.rope",
    "proofs_check.twirl",
    "proofs_check.dag_loss",
    "proofs_check.contraction",
    "proofs_check.inference_collapse",
    "proofs_check.online_contract",
)


@dataclasses.dataclass(frozen=True, kw_only=True)
class Check:
    """One registered numerical mirror of a proved statement (keyword fields only: every module's ``CHECKS``
    table names each field of each check in one place)."""

    name: str
    lean: tuple[str, ...]
    paper: str
    label: str
    method: tuple[str, ...]
    exercises: tuple[str, ...]
    run: Callable[[str], str]
    negative_control: Callable[[str], str]
    slack: str
    dropped: str
    note: str = ""
    #: where the Lean lemma itself is weak (a definitional identity): what it says and which check adds the
    #: meaningful corollary
    weak: str = ""
    #: what the statement is (one of :data:`STATEMENTS`): an inequality gets a sharpness value, an identity
    #: (equality) or a logical statement (a property / its failure on a witness) gets the word in that column
    statement: str = "inequality"

    def __post_init__(self) -> None:
        if self.label not in LABELS:
            raise ValueError(f"check {self.name}: label must be one of {LABELS}, got {self.label!r}")
        if self.statement not in STATEMENTS:
            raise ValueError(f"check {self.name}: statement must be one of {STATEMENTS}, got {self.statement!r}")
        bad = [m for m in self.method if m not in METHODS]
        if bad or not self.method:
            raise ValueError(f"check {self.name}: unknown method(s) {bad}; expected from {METHODS}")
        unknown = [n for n in self.lean if n not in LEAN_NAMES]
        if unknown:
            raise ValueError(f"check {self.name}: unknown Lean name(s) {unknown}")
        bad_ex = [e for e in self.exercises if not e.startswith("pldr_ref.")]
        if bad_ex:
            raise ValueError(f"check {self.name}: exercises must be pldr_ref functions, got {bad_ex}")

    @property
    def hypotheses(self) -> tuple[str, ...]:
        """The Lean hypotheses of the mirrored statements (union, in order)."""
        out: list[str] = []
        for name in self.lean:
            out += [h for h in LEAN_HYPOTHESES[name] if h not in out]
        return tuple(out)

    @property
    def control_kind(self) -> str:
        """'hypothesis drop' when ``dropped`` is a Lean hypothesis of the statement, 'float-domain boundary' when it
        is the float64 domain of a strict real inequality, else 'mutation control'."""
        if self.dropped in self.hypotheses:
            return HYPOTHESIS_DROP
        return FLOAT_BOUNDARY if self.dropped.startswith("float domain") else MUTATION_CONTROL

    @property
    def redundant(self) -> str:
        """Why no hypothesis drop can falsify the statement ('' when one can)."""
        return "; ".join(REDUNDANT_HYPOTHESES[n] for n in self.lean if n in REDUNDANT_HYPOTHESES)


@dataclasses.dataclass(frozen=True)
class Outcome:
    """Result of running one check and its negative control, with what the run measured."""

    check: Check
    status: str  # "pass" | "fail" | "error"
    detail: str
    control_status: str  # "violated" (as expected) | "held" (control broken) | "error" | "skipped"
    control_detail: str
    seconds: float
    measured: tuple[str, ...] = ()  # public pldr_ref functions called by the positive run
    budget: int = 0  # hypothesis examples the positive run asked for
    reached: int = 0  # examples that reached the operator
    ratio: float | None = None  # largest observed value / bound of the check's inequalities
    margin: float | None = None  # smallest observed value / scale of its positivity statements

    @property
    def passed(self) -> bool:
        """True when the positive check passed (controls not considered)."""
        return self.status == "pass"

    @property
    def ok(self) -> bool:
        """True when the check passed and its negative control ran and observed the expected violation."""
        return self.status == "pass" and self.control_status == "violated"

    @property
    def reason(self) -> str:
        """Why the outcome is not ok ('' when ok)."""
        parts = []
        if self.status != "pass":
            parts.append(f"{self.status}: {self.detail}")
        if self.control_status != "violated":
            parts.append(f"control {self.control_status}" + (f": {self.control_detail}" if self.control_detail else ""))
        return "; ".join(parts)


def all_checks() -> tuple[Check, ...]:
    """Every registered check, in module order; names are unique."""
    checks: list[Check] = []
    for mod in CHECK_MODULES:
        checks.extend(importlib.import_module(mod).CHECKS)
    names = [c.name for c in checks]
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise ValueError(f"duplicate check names: {dupes}")
    return tuple(checks)


def covered_lean_names(checks: tuple[Check, ...] | None = None) -> set[str]:
    """The Lean names with at least one registered check."""
    return {n for c in (checks or all_checks()) for n in c.lean}


def select(only: str | None, checks: tuple[Check, ...] | None = None) -> tuple[Check, ...]:
    """Checks whose name, Lean name, module or paper result contains ``only`` (all when None)."""
    checks = checks or all_checks()
    if not only:
        return checks
    key = only.lower()
    chosen = tuple(
        c for c in checks if key in c.name.lower() or key in c.paper.lower() or any(key in n.lower() for n in c.lean)
    )
    if not chosen:
        raise ValueError(f"no check matches {only!r}")
    return chosen


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0][:200] if text else ''}"


def run_check(check: Check, profile: str, controls: bool = True) -> Outcome:
    """Run ``check.run`` (traced) and (optionally) its negative control under ``profile``.

    The positive run fails when a declared operator was not called, or when fewer than
    ``MIN_REACHED_FRACTION`` of its hypothesis examples reached the operator.
    """
    t0 = time.perf_counter()
    with tracing.Tracer(frozenset(check.exercises)) as tracer, recording() as rec:
        try:
            detail = check.run(profile) or ""
            status = "pass"
        except AssertionError as exc:
            status, detail = "fail", _first_line(exc)
        except Exception as exc:  # a crash is reported, not hidden: the table shows it as an error
            status, detail = "error", _first_line(exc) + " | " + traceback.format_exc(limit=3).splitlines()[-1]
    missing = sorted(set(check.exercises) - tracer.called)
    if status == "pass" and missing:
        status, detail = "fail", f"declared operator(s) never called: {missing}"
    if status == "pass" and check.exercises and rec.budget and rec.reached < MIN_REACHED_FRACTION * rec.budget:
        status, detail = "fail", f"only {rec.reached}/{rec.budget} examples reached the operator"
    control_status, control_detail = "skipped", ""
    if controls:
        try:
            control_detail = check.negative_control(profile) or ""
            control_status = "violated"
        except NegativeControlError as exc:
            control_status, control_detail = "held", _first_line(exc)
        except Exception as exc:
            control_status, control_detail = "error", _first_line(exc)
    return Outcome(check, status, detail, control_status, control_detail, time.perf_counter() - t0,
                   measured=tracer.public_called(), budget=rec.budget, reached=rec.reached, ratio=rec.ratio,
                   margin=rec.margin)
