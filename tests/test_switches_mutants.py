"""Issue 12: every switch value has a golden case the harness uses to tell it apart from a wrong value.

The switches and their values come from the switch table (:mod:`pldr_ref.switches`): a value added there is
covered here without editing this file (its case and mutant are generated when no hand-written one exists).

The switch cases (:mod:`pldr_ref.fixtures.suite_switches`) are built once into a temporary folder; the float64
reference passes each of them, and each switch mutant (:mod:`pldr_ref.harness.switch_mutants`) fails its case.
"""

from __future__ import annotations

import numpy as np
import pytest

from pldr_ref.backends.reference import ReferenceBackend
from pldr_ref.config import EMULATIONS
from pldr_ref.fixtures.build import build, verify
from pldr_ref.fixtures.case import load_case
from pldr_ref.fixtures.suite import build_suite
from pldr_ref.harness.switch_mutants import all_mutations, mutant_backend
from pldr_ref.harness.validate import validate_case
from pldr_ref.switches import ENGINE_SWITCHES, SWITCHES


@pytest.fixture(scope="module")
def switch_golden(tmp_path_factory):
    root = tmp_path_factory.mktemp("switch_golden")
    build(root, "full", select=lambda s: "switch" in s.tags, progress=None)
    return root


def _seen_values(configs) -> set[tuple[str, str]]:
    """(switch, value) pairs the configs exercise, the RoPE table source and arithmetic taken as in effect."""
    seen = {(sw.name, getattr(c, sw.name)) for c in configs for sw in SWITCHES}
    seen |= {("rope_table", c.rope_table_source) for c in configs}
    seen |= {("rope_arithmetic", c.rope_arithmetic_dtype) for c in configs}
    return seen


def _missing_values(configs) -> list[tuple[str, str]]:
    """Every value of every engine switch of the table that no config exercises (``auto`` resolves to a concrete
    value; a value the table marks uncased runs a user's callable that no stored case can carry)."""
    seen = _seen_values(configs)
    return [(sw.name, v) for sw in SWITCHES if sw.name in ENGINE_SWITCHES for v in sw.concrete
            if (sw.name, v) not in seen and v not in sw.uncased]


def test_every_switch_value_and_profile_has_a_case() -> None:
    names = {s.name for s in build_suite("full") if "switch" in s.tags}
    for profile in EMULATIONS:
        assert f"model/emulate_{profile.replace('-', '_')}" in names
    configs = [s.config for s in build_suite("full") if s.config is not None]
    assert not _missing_values(configs)
    # negative control: without the switch cases, the emulation values they alone exercise are reported missing
    plain = [s.config for s in build_suite("full") if s.config is not None and "switch" not in s.tags]
    missing = _missing_values(plain)
    assert ("score_scale", "reciprocal") in missing and ("masked_row", "nan") in missing
    assert all(name in ENGINE_SWITCHES for name, _ in missing)


def test_switch_cases_verify(switch_golden) -> None:
    assert verify(switch_golden, progress=None) == []


def test_nan_case_really_holds_nan(switch_golden) -> None:
    case = load_case(switch_golden / "model" / "switch_masked_row_nan")
    assert np.isnan(case.outputs["logits"][0]).all() and np.isfinite(case.outputs["logits"][1]).all()


@pytest.mark.parametrize("mutation", all_mutations(), ids=lambda m: m.name)
def test_switch_mutant_fails_and_reference_passes(switch_golden, mutation) -> None:
    group = "cache" if mutation.switch == "mode" else "model"
    case = load_case(switch_golden / group / mutation.case)
    assert validate_case(ReferenceBackend(), case, "float64").status == "pass"
    result = validate_case(mutant_backend(mutation), case, "float64")
    assert result.status == "fail", (mutation.name, result.reason)


def test_every_switch_case_has_a_mutant() -> None:
    cases = {s.name.split("/", 1)[1] for s in build_suite("full") if "switch" in s.tags}
    covered = {m.case for m in all_mutations()}
    assert {c for c in cases if c.startswith("switch_")} == covered
