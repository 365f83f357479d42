"""Issue 12: every switch value has a golden case the harness uses to tell it apart from a wrong value.

The switches and their values come from the switch table (:mod:`pldr_ref.switches`): a value added there is
covered here without editing this file (its case and mutant are generated when no hand-written one exists).

The switch cases (:mod:`pldr_ref.fixtures.suite_switches`) committed in golden/ are read from there (the committed
suite's tests verify them and compare them with a fresh build); the ones built on demand only (``committed=False``)
are built once into a temporary folder and verified.  The float64 reference passes each case, and each switch mutant
(:mod:`pldr_ref.harness.controls.switch_mutants`) fails its case.  The slow
:func:`test_every_switch_case_builds_and_verifies` builds and verifies all of them afresh.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from pldr_ref.backends.reference import ReferenceBackend
from pldr_ref.config import EMULATIONS
from pldr_ref.fixtures.build import build, verify
from pldr_ref.fixtures.case import DEFAULT_GOLDEN_DIR, load_case
from pldr_ref.fixtures.suite import build_suite
from pldr_ref.harness.controls.switch_mutants import all_mutations, mutant_backend
from pldr_ref.harness.validate import validate_case
from pldr_ref.switches import ENGINE_SWITCHES, SWITCHES


def _switch_specs(committed: bool | None = None):
    """The switch cases of the full suite (``committed``: only those committed in golden/, or only the others)."""
    return [s for s in build_suite("full") if "switch" in s.tags and committed in (None, s.committed)]


@pytest.fixture(scope="module")
def on_demand_switch_golden(tmp_path_factory) -> Path:
    """The switch cases that golden/ does not hold, built into a temporary suite."""
    names = {s.name for s in _switch_specs(committed=False)}
    root = tmp_path_factory.mktemp("switch_golden")
    build(root, "full", select=lambda s: s.name in names, progress=None)
    return root


@pytest.fixture(scope="module")
def switch_case_dir(on_demand_switch_golden):
    """Case name -> its folder: in golden/ when committed, else in the on-demand build."""
    committed = {s.name for s in _switch_specs(committed=True)}
    return lambda name: (DEFAULT_GOLDEN_DIR if name in committed else on_demand_switch_golden) / name


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


def test_switch_cases_verify(on_demand_switch_golden) -> None:
    """The on-demand switch cases build and verify; the committed ones are in golden/ (verified there)."""
    on_demand = _switch_specs(committed=False)
    assert on_demand, "no on-demand switch case: build them all here instead"
    assert {p.parent.name + "/" + p.name for p in on_demand_switch_golden.glob("*/*")} == {s.name for s in on_demand}
    assert verify(on_demand_switch_golden, progress=None) == []
    manifest = json.loads((DEFAULT_GOLDEN_DIR / "MANIFEST.json").read_text())
    assert {s.name for s in _switch_specs(committed=True)} <= set(manifest["cases"])


@pytest.mark.slow
def test_every_switch_case_builds_and_verifies(tmp_path) -> None:
    build(tmp_path, "full", select=lambda s: "switch" in s.tags, progress=None)
    assert verify(tmp_path, progress=None) == []


def test_nan_case_really_holds_nan(switch_case_dir) -> None:
    case = load_case(switch_case_dir("model/switch_masked_row_nan"))
    assert np.isnan(case.outputs["logits"][0]).all() and np.isfinite(case.outputs["logits"][1]).all()


@pytest.mark.parametrize("mutation", all_mutations(), ids=lambda m: m.name)
def test_switch_mutant_fails_and_reference_passes(switch_case_dir, mutation) -> None:
    group = "cache" if mutation.switch == "mode" else "model"
    case = load_case(switch_case_dir(f"{group}/{mutation.case}"))
    assert validate_case(ReferenceBackend(), case, "float64").status == "pass"
    result = validate_case(mutant_backend(mutation), case, "float64")
    assert result.status == "fail", (mutation.name, result.reason)


def test_every_switch_case_has_a_mutant() -> None:
    cases = {s.name.split("/", 1)[1] for s in build_suite("full") if "switch" in s.tags}
    covered = {m.case for m in all_mutations()}
    assert {c for c in cases if c.startswith("switch_")} == covered
