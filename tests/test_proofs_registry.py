"""proofs_check registry: exactly the 79 Lean names are covered, the committed catalog copy agrees with the bundled
``pldr_ref/resources/lean_catalog.md``, every record is well formed, every control drops a real Lean hypothesis
where one can be dropped, and the modules import without a cycle."""

from __future__ import annotations

import subprocess
import sys

import pytest
from proofs_support import make_check

from proofs_check.catalog import (
    LEAN_FILES,
    LEAN_HYPOTHESES,
    LEAN_NAMES,
    REDUNDANT_HYPOTHESES,
    default_catalog_path,
    parse_catalog,
)
from proofs_check.profiles import record_lower, record_margin, record_ratio, recording
from proofs_check.registry import (
    HYPOTHESIS_DROP,
    IDENTITY,
    INEQUALITY,
    LABELS,
    LOGICAL,
    METHODS,
    Outcome,
    all_checks,
    covered_lean_names,
    select,
)
from proofs_check.report import sharpness_text


def test_committed_catalog_has_79_unique_names():
    assert len(LEAN_NAMES) == 79
    assert len(set(LEAN_NAMES)) == 79
    assert len(LEAN_FILES) == 12
    assert set(LEAN_HYPOTHESES) == set(LEAN_NAMES)
    assert set(REDUNDANT_HYPOTHESES) <= {n for n, h in LEAN_HYPOTHESES.items() if h}


def test_lean_file_names_match_the_catalog_spelling():
    assert "Iswiglu" in LEAN_FILES and "Rope" in LEAN_FILES
    assert "ISwiGLU" not in LEAN_FILES and "RoPE" not in LEAN_FILES


def test_committed_catalog_matches_bundled_catalog():
    assert parse_catalog(default_catalog_path()) == LEAN_FILES


def test_registry_covers_exactly_the_catalog():
    covered = covered_lean_names()
    assert covered == set(LEAN_NAMES), (sorted(set(LEAN_NAMES) - covered), sorted(covered - set(LEAN_NAMES)))


def test_records_are_well_formed():
    checks = all_checks()
    assert len({c.name for c in checks}) == len(checks)
    for c in checks:
        assert c.label in LABELS and c.method and set(c.method) <= set(METHODS)
        assert c.paper and c.slack and c.dropped
        assert all(e.startswith("pldr_ref.") for e in c.exercises)
        assert callable(c.run) and callable(c.negative_control)
        assert c.run.__doc__, f"{c.name}: the positive check must document its statement"
        assert c.negative_control.__doc__, f"{c.name}: the control must document what it drops"
    beyond = [c for c in checks if not c.lean]
    assert {c.paper.split()[0] for c in beyond} >= {"Thm.", "Prop.", "Lem.", "Sec."}


def test_controls_drop_a_lean_hypothesis_where_one_can_be_dropped():
    """Issue 13 item 3: a check mirroring a Lean statement with hypotheses drops one of them, unless every drop
    is vacuous (REDUNDANT_HYPOTHESES, with the reason in the table)."""
    wrong = []
    for c in all_checks():
        if len(c.lean) != 1 or not c.hypotheses:
            continue
        if c.control_kind != HYPOTHESIS_DROP and not c.redundant:
            wrong.append((c.name, c.dropped, c.hypotheses))
    assert not wrong, wrong


def test_exercised_operators_cover_the_model_stack():
    """The mirrors together call every operator of the forward pass they are about."""
    declared = {e for c in all_checks() for e in c.exercises}
    for op in ("pldr_ref.norms.layer_norm", "pldr_ref.metric_learner.metric_learner", "pldr_ref.plga.metric_tensor",
               "pldr_ref.plga.potential_tensor", "pldr_ref.plga.energy_curvature", "pldr_ref.attention.masked_softmax",
               "pldr_ref.attention.apply_mask", "pldr_ref.attention.attention_scores", "pldr_ref.rope.apply_rope",
               "pldr_ref.density.density_operator", "pldr_ref.dag.notears_h", "pldr_ref.model.forward"):
        assert op in declared, op


def test_check_rejects_unknown_lean_name_label_method_and_operator():
    def noop(profile: str) -> str:
        """noop"""
        return ""

    with pytest.raises(ValueError, match="unknown Lean name"):
        make_check("x", ("not_a_lean_theorem",), "p", "theorem", ("sympy",), (), noop, noop, "s", "d")
    with pytest.raises(ValueError, match="label"):
        make_check("x", (), "p", "lemma", ("sympy",), (), noop, noop, "s", "d")
    with pytest.raises(ValueError, match="method"):
        make_check("x", (), "p", "theorem", ("guess",), (), noop, noop, "s", "d")
    with pytest.raises(ValueError, match="pldr_ref functions"):
        make_check("x", (), "p", "theorem", ("sympy",), ("numpy.linalg.det",), noop, noop, "s", "d")
    with pytest.raises(ValueError, match="statement must be one of"):
        make_check("x", (), "p", "theorem", ("sympy",), (), noop, noop, "s", "d", statement="equation")


def test_sharpness_records_upper_lower_and_margin():
    with recording() as rec:
        record_ratio(0.5, 2.0)  # upper bound lhs <= rhs: lhs / rhs
        record_lower(4.0, 3.0)  # lower bound lhs >= rhs: rhs / lhs = 0.75 > 0.25
        record_ratio(1.0, 0.0)  # no information: ignored
        record_margin(3.0, 2.0)
        record_margin(1.0, 4.0)  # the smallest value / scale is kept
        record_margin(1.0, 0.0)  # ignored
    assert rec.ratio == 0.75 and rec.margin == 0.25
    with recording() as empty:
        pass
    assert empty.ratio is None and empty.margin is None
    record_margin(1.0)  # outside a recording: no effect, no error


def test_sharpness_text_per_statement_kind():
    def noop(profile: str) -> str:
        """noop"""
        return ""

    def outcome(statement: str, ratio: float | None = None, margin: float | None = None) -> Outcome:
        check = make_check("x", (), "p", "theorem", ("sympy",), (), noop, noop, "s", "d", statement=statement)
        return Outcome(check, "pass", "", "violated", "", 0.0, ratio=ratio, margin=margin)

    assert sharpness_text(outcome(INEQUALITY, ratio=0.86)) == "0.86"
    assert sharpness_text(outcome(INEQUALITY, margin=1.5e-5)) == "min 1.5e-05"
    assert sharpness_text(outcome(INEQUALITY, ratio=1.0, margin=0.0)) == "1; min 0"
    assert sharpness_text(outcome(INEQUALITY)) == "-"
    assert sharpness_text(outcome(IDENTITY)) == "identity"
    assert sharpness_text(outcome(IDENTITY, ratio=0.062)) == "identity (err/tol 0.062)"
    assert sharpness_text(outcome(LOGICAL)) == "logical"


def test_select_by_lean_name_and_unknown():
    assert [c.name for c in select("rowClone_det_eq_zero")] == ["rowClone_det_eq_zero"]
    with pytest.raises(ValueError, match="no check matches"):
        select("definitely-not-a-check")


def test_parse_catalog_missing_file_is_a_clear_error(tmp_path):
    with pytest.raises(FileNotFoundError, match="Lean catalog not found"):
        parse_catalog(tmp_path / "absent.md")


@pytest.mark.parametrize("module", ["proofs_check.profiles", "proofs_check.registry", "proofs_check.report",
                                    "proofs_check.cli", "proofs_check.mutants"])
def test_modules_import_alone(module):
    """No import cycle: each module imports first in a fresh interpreter."""
    subprocess.run([sys.executable, "-c", f"import {module}"], check=True)
