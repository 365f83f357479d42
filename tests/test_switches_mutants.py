"""Issue 12: every switch value has a golden case the harness uses to tell it apart from a wrong value.

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
from pldr_ref.harness.switch_mutants import SWITCH_MUTATIONS, mutant_backend
from pldr_ref.harness.validate import validate_case


@pytest.fixture(scope="module")
def switch_golden(tmp_path_factory):
    root = tmp_path_factory.mktemp("switch_golden")
    build(root, "full", select=lambda s: "switch" in s.tags, progress=None)
    return root


def test_every_switch_value_and_profile_has_a_case() -> None:
    names = {s.name for s in build_suite("full") if "switch" in s.tags}
    for profile in EMULATIONS:
        assert f"model/emulate_{profile.replace('-', '_')}" in names
    configs = [s.config for s in build_suite("full") if s.config is not None]
    seen = {(f, getattr(c, f)) for c in configs for f in ("rope_table", "rope_arithmetic", "score_scale",
                                                         "mask_add_dtype", "softmax_precision", "masked_row",
                                                         "pad_source")}
    seen |= {("rope_table", c.rope_table_source) for c in configs}
    seen |= {("rope_arithmetic", c.rope_arithmetic_dtype) for c in configs}
    from pldr_ref.config import (
        MASK_ADD_DTYPES,
        MASKED_ROWS,
        PAD_SOURCES,
        ROPE_ARITHMETICS,
        ROPE_TABLES,
        SCORE_SCALES,
        SOFTMAX_PRECISIONS,
    )

    for field, values in (("rope_table", ROPE_TABLES), ("rope_arithmetic", ROPE_ARITHMETICS),
                          ("score_scale", SCORE_SCALES), ("mask_add_dtype", MASK_ADD_DTYPES),
                          ("softmax_precision", SOFTMAX_PRECISIONS), ("masked_row", MASKED_ROWS),
                          ("pad_source", PAD_SOURCES)):
        # softmax_precision="explicit" runs a user's kernel (a callable): no stored case can carry it
        missing = [v for v in values if (field, v) not in seen and (field, v) != ("softmax_precision", "explicit")]
        assert not missing, (field, missing)


def test_switch_cases_verify(switch_golden) -> None:
    assert verify(switch_golden, progress=None) == []


def test_nan_case_really_holds_nan(switch_golden) -> None:
    case = load_case(switch_golden / "model" / "switch_masked_row_nan")
    assert np.isnan(case.outputs["logits"][0]).all() and np.isfinite(case.outputs["logits"][1]).all()


@pytest.mark.parametrize("mutation", SWITCH_MUTATIONS, ids=lambda m: m.name)
def test_switch_mutant_fails_and_reference_passes(switch_golden, mutation) -> None:
    group = "cache" if mutation.switch == "mode" else "model"
    case = load_case(switch_golden / group / mutation.case)
    assert validate_case(ReferenceBackend(), case, "float64").status == "pass"
    result = validate_case(mutant_backend(mutation), case, "float64")
    assert result.status == "fail", (mutation.name, result.reason)


def test_every_switch_case_has_a_mutant() -> None:
    cases = {s.name.split("/", 1)[1] for s in build_suite("full") if "switch" in s.tags}
    covered = {m.case for m in SWITCH_MUTATIONS}
    assert {c for c in cases if c.startswith("switch_")} == covered
