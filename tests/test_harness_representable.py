"""The representable part of the additive left-padded cases below float64 (pldr_ref.harness.verdict.representable):
which rows are excluded, that they are reported, that a bug in a kept row fails and that nothing else is skipped."""

from __future__ import annotations

import numpy as np
import pytest

from pldr_ref.fixtures.case import DEFAULT_GOLDEN_DIR, iter_cases
from pldr_ref.harness.policy.tolerance import round_to
from pldr_ref.harness.protocol import DTYPES, SWITCHES, Capabilities, every_value
from pldr_ref.harness.validate import validate
from pldr_ref.harness.verdict.representable import _layer_taint, fully_masked_rows, representable_part


@pytest.fixture(scope="module")
def cases():
    want = ("model/tiny_left_pad_additive", "layer/tiny_left_pad_additive", "model/tiny_left_pad_finfo_min")
    found = {c.name: c for c in iter_cases(DEFAULT_GOLDEN_DIR) if c.name in want}
    assert set(found) == set(want)
    return found


def test_taint_follows_the_layer_math():
    """Global Gram: one tainted input row taints the whole sample; cumulative: the rows from it on; a fully masked
    row taints only itself in the first layer (its keys are masked for every other query)."""
    s = 4
    causal = np.triu(np.ones((s, s), dtype=bool), 1)
    mask = np.broadcast_to(causal, (2, 1, s, s)).copy()
    mask[1, 0, :, 0] = True  # sample 1: position 0 is padding ...
    mask[1, 0, 0, :] = True  # ... and its query row is fully masked
    assert fully_masked_rows(mask, 2).tolist() == [[False] * 4, [True, False, False, False]]
    clean = np.zeros((2, s), dtype=bool)
    first = _layer_taint(clean, mask, "global")
    assert first["out2"].tolist() == [[False] * 4, [True, False, False, False]]
    assert not first["G_LM"].any() and not first["A0"].any() and not first["scores"].any()
    second = _layer_taint(first["out2"], mask, "global")
    assert second["out2"].tolist() == [[False] * 4, [True] * 4] and second["G_LM"][1].all()
    row2 = np.array([[False] * 4, [False, False, True, False]])
    cum = _layer_taint(row2, np.broadcast_to(causal, (2, 1, s, s)), "cumulative")
    assert cum["out2"].tolist() == [[False] * 4, [False, False, True, True]]
    assert cum["q"].tolist() == row2.tolist()


def test_excluded_rows_of_the_committed_cases(cases):
    model, layer = cases["model/tiny_left_pad_additive"], cases["layer/tiny_left_pad_additive"]
    for dtype in ("float32", "bfloat16", "float16"):
        pm, pl = representable_part(model, dtype), representable_part(layer, dtype)
        assert (pm.judged_rows, pm.total_rows) == (6, 12) and (pl.judged_rows, pl.total_rows) == (10, 12)
        assert pm.keep["logits"][0].all() and not pm.keep["logits"][1].any()
        assert pm.keep["layers.0.out2"][1, 2:].all() and not pm.keep["layers.0.out2"][1, :2].any()
        assert pm.keep["layers.0.G_LM"].all() and not pm.keep["layers.1.G_LM"][1].any()
        assert pl.keep["layers.0.out2"][0].all() and not pl.keep["layers.0.out2"][1, :2].any()
        assert pm.note == f"judged on 6 of 12 rows; excluded: fully masked rows not representable in {dtype}"
    # negative controls: float64, and a representable mask mode, exclude nothing
    assert representable_part(model, "float64") is None
    assert representable_part(cases["model/tiny_left_pad_finfo_min"], "float32") is None


class _Logits:
    name = "logits"

    def __init__(self, fn):
        self.fn = fn

    def capabilities(self) -> Capabilities:
        return Capabilities(dtypes=DTYPES, kinds=("forward",), full_trace=False, switches=every_value(*SWITCHES))

    def run_case(self, case, dtype):
        return {"logits": self.fn(round_to(dtype, case.outputs["logits"]).copy())}


def test_a_bug_in_a_kept_row_fails_and_the_excluded_rows_are_not_judged(cases):
    case = cases["model/tiny_left_pad_additive"]
    scale = float(np.max(np.abs(case.outputs["logits"])))

    def kept_bug(g):
        g[0, 3] += 0.01 * scale
        return g

    def excluded_only(g):
        g[1] = 0.0  # sample 1 depends on the fully masked rows through the global Gram of layer 1
        return g

    bad = validate(_Logits(kept_bug), [case], ["float64", "float32"])
    assert all(r.status == "fail" for r in bad), [(r.dtype, r.status) for r in bad]
    r64, r32 = validate(_Logits(excluded_only), [case], ["float64", "float32"])
    assert r64.status == "fail"  # float64 judges every row
    assert r32.status == "pass" and "judged on 6 of 12 rows" in r32.reason
    out = next(o for o in r32.outputs if o.name == "logits")
    assert out.comparison.size == case.outputs["logits"][0].size
