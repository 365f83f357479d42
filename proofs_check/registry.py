"""The registry of numerical checks: one :class:`Check` per Lean theorem group or paper result.

Each check names the Lean theorem(s) it mirrors, the paper result, its epistemic label, the
method, the rounding slack it allows and the pldr_ref functions it exercises.  ``run(profile)``
returns a one-line detail and raises ``AssertionError`` on failure; ``negative_control(profile)``
drops a hypothesis, returns the violation it observed, and raises
:class:`proofs_check.profiles.NegativeControlError` if the conclusion unexpectedly survived.
"""

from __future__ import annotations

import dataclasses
import importlib
import time
import traceback
from collections.abc import Callable

from proofs_check.catalog import LEAN_NAMES

#: Run profiles (hypothesis settings per profile live in :mod:`proofs_check.profiles`).
PROFILES = ("ci", "thorough")

#: Epistemic labels (paper Section 1 conventions).
THEOREM = "theorem"
CONDITIONAL = "conditional theorem"
MEASUREMENT = "measurement"
LABELS = (THEOREM, CONDITIONAL, MEASUREMENT)

#: Methods.
HYPOTHESIS = "hypothesis float64"
MPMATH = "mpmath"
SYMPY = "sympy"
EXACT_FLOAT = "float64 exact"
MONTE_CARLO = "monte carlo"
REAL_G_LM = "real G_LM"
PURE_PYTHON = "hypothesis lists"
METHODS = (HYPOTHESIS, MPMATH, SYMPY, EXACT_FLOAT, MONTE_CARLO, REAL_G_LM, PURE_PYTHON)

#: Modules holding ``CHECKS``: one per Lean file, then the results Lean does not cover.
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
    "proofs_check.beyond_lean",
    "proofs_check.beyond_lean_lipschitz",
    "proofs_check.symbolic",
)


@dataclasses.dataclass(frozen=True)
class Check:
    """One registered numerical mirror of a proved statement."""

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

    def __post_init__(self) -> None:
        if self.label not in LABELS:
            raise ValueError(f"check {self.name}: label must be one of {LABELS}, got {self.label!r}")
        bad = [m for m in self.method if m not in METHODS]
        if bad or not self.method:
            raise ValueError(f"check {self.name}: unknown method(s) {bad}; expected from {METHODS}")
        unknown = [n for n in self.lean if n not in LEAN_NAMES]
        if unknown:
            raise ValueError(f"check {self.name}: unknown Lean name(s) {unknown}")
        if not self.exercises:
            raise ValueError(f"check {self.name}: must name the pldr_ref function(s) it exercises")


@dataclasses.dataclass(frozen=True)
class Outcome:
    """Result of running one check and its negative control."""

    check: Check
    status: str  # "pass" | "fail" | "error"
    detail: str
    control_status: str  # "violated" (as expected) | "held" (control broken) | "error" | "skipped"
    control_detail: str
    seconds: float

    @property
    def ok(self) -> bool:
        """True when the check passed and its negative control observed the expected violation."""
        return self.status == "pass" and self.control_status in ("violated", "skipped")


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
    """Run ``check.run`` and (optionally) its negative control under ``profile``."""
    t0 = time.perf_counter()
    try:
        detail = check.run(profile) or ""
        status = "pass"
    except AssertionError as exc:
        status, detail = "fail", _first_line(exc)
    except Exception as exc:  # a crash is reported, not hidden: the table shows it as an error
        status, detail = "error", _first_line(exc) + " | " + traceback.format_exc(limit=3).splitlines()[-1]
    control_status, control_detail = "skipped", ""
    if controls:
        from proofs_check.profiles import NegativeControlError

        try:
            control_detail = check.negative_control(profile) or ""
            control_status = "violated"
        except NegativeControlError as exc:
            control_status, control_detail = "held", _first_line(exc)
        except Exception as exc:
            control_status, control_detail = "error", _first_line(exc)
    return Outcome(check, status, detail, control_status, control_detail, time.perf_counter() - t0)
