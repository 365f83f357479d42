"""proofs_check registry: exactly the 79 Lean names are covered, the committed catalog copy agrees with
the bundled ``pldr_ref/resources/lean_catalog.md``, and every record is well formed."""

from __future__ import annotations

import pytest

from proofs_check.catalog import LEAN_FILES, LEAN_NAMES, default_catalog_path, parse_catalog
from proofs_check.registry import LABELS, METHODS, Check, all_checks, covered_lean_names, select


def test_committed_catalog_has_79_unique_names():
    assert len(LEAN_NAMES) == 79
    assert len(set(LEAN_NAMES)) == 79
    assert len(LEAN_FILES) == 12


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
        assert c.paper and c.slack and c.dropped and c.exercises
        assert callable(c.run) and callable(c.negative_control)
        assert c.run.__doc__, f"{c.name}: the positive check must document its statement"
    beyond = [c for c in checks if not c.lean]
    assert {c.paper.split()[0] for c in beyond} >= {"Thm.", "Prop.", "Lem.", "Sec."}


def test_check_rejects_unknown_lean_name_and_label():
    def noop(profile: str) -> str:
        """noop"""
        return ""

    with pytest.raises(ValueError, match="unknown Lean name"):
        Check("x", ("not_a_lean_theorem",), "p", "theorem", ("sympy",), ("f",), noop, noop, "s", "d")
    with pytest.raises(ValueError, match="label"):
        Check("x", (), "p", "lemma", ("sympy",), ("f",), noop, noop, "s", "d")
    with pytest.raises(ValueError, match="method"):
        Check("x", (), "p", "theorem", ("guess",), ("f",), noop, noop, "s", "d")


def test_select_by_lean_name_and_unknown():
    assert [c.name for c in select("rowClone_det_eq_zero")] == ["rowClone_det_eq_zero"]
    with pytest.raises(ValueError, match="no check matches"):
        select("definitely-not-a-check")


def test_parse_catalog_missing_file_is_a_clear_error(tmp_path):
    with pytest.raises(FileNotFoundError, match="Lean catalog not found"):
        parse_catalog(tmp_path / "absent.md")
