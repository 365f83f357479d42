"""Issue 30 item 3: a backend that declares exactly a released code base's switch values gets verdicts.

The float32 NumPy backend configured to each profile (:class:`pldr_ref.backends.profiled.ProfiledBackend`, which
declares the profile's value of every switch it sets) is judged on the templates instantiated at that profile.
Default run: one cheap template per profile (a verdict, where the committed suite gives none: every committed
case differs from the profile in some switch value).  Slow run (``python -m pytest -m slow``): the whole profile
suite of the kinds numpy32 runs, judged on at least 80 % of its templates, every judged case passing.
"""

from __future__ import annotations

import pytest

from pldr_ref.backends.profiled import numpy32_profile
from pldr_ref.fixtures.case import DEFAULT_GOLDEN_DIR
from pldr_ref.fixtures.profile_suite import SUITE_FOLDER, ensure_suite
from pldr_ref.fixtures.templates import all_templates, profile_target
from pldr_ref.harness.profile_suites import calibrate_entry, left_out, use_calibration
from pldr_ref.harness.suite_loading import load_suite
from pldr_ref.harness.validate import validate

#: The profiles issue 30 names, each judged with numpy32 configured to it.
PROFILES = ("pt-v510-float32", "tf-v500", "tf-v900", "hf-sdpa", "hf-eager")
#: Fraction of the templates of the kinds a backend runs that must be judged (pass or fail, not unsupported).
MIN_JUDGED = 0.8
#: The cheap template of the default run: tiny with the learned G_LM (every profile runs one), 7 tokens.
CHEAP = "layer/tiny_v900"


def judge(profile: str, root, names: tuple[str, ...] | None = None):
    """(results, number of templates of numpy32's kinds) of numpy32@profile on the profile suite."""
    backend = numpy32_profile(profile)
    caps = backend.capabilities()
    templates = [t for t in all_templates() if names is None or t.name in names]
    entry = ensure_suite(profile_target(profile), templates=templates, kinds=caps.kinds, root=root, progress=None,
                         calibrate=lambda e: calibrate_entry(e, ("float32",)))
    use_calibration(entry)
    cases = load_suite(entry / SUITE_FOLDER, None, None)
    n_templates = len([t for t in templates if t.kind in caps.kinds])
    return validate(backend, cases, ["float32"]), n_templates, entry


def test_the_committed_suite_gives_a_profile_backend_no_verdict_on_the_cheap_case():
    """The problem issue 30 starts from: the committed instance of the cheap template is unsupported for a backend
    declaring any of the profiles (its switch values are the reference defaults), with every differing switch
    named."""
    cases = load_suite(DEFAULT_GOLDEN_DIR, None, f"^{CHEAP}$")
    for profile in PROFILES:
        (result,) = validate(numpy32_profile(profile), cases, ["float32"])
        assert result.status == "unsupported" and result.reason.count("not supported") >= 3, (profile, result.reason)


@pytest.mark.parametrize("profile", PROFILES)
def test_a_profile_backend_gets_a_verdict_on_its_profile_suite(profile, tmp_path):
    results, n, _ = judge(profile, tmp_path, (CHEAP,))
    assert n == 1 and [(r.case, r.status) for r in results] == [(CHEAP, "pass")], [r.reason for r in results]


def test_a_profile_backend_declaring_another_profile_is_refused_not_misjudged(tmp_path):
    """Negative control: the pt-v510-float32 backend on the hf-sdpa suite gets no verdict, with every difference."""
    backend = numpy32_profile("pt-v510-float32")
    entry = ensure_suite(profile_target("hf-sdpa"), templates=[t for t in all_templates() if t.name == CHEAP],
                         root=tmp_path, progress=None)
    (result,) = validate(backend, load_suite(entry / SUITE_FOLDER, None, None), ["float32"])
    assert result.status == "unsupported"
    for part in ("score_scale='reciprocal'", "mask_mode='ideal'", "masked_row='zeros'", "pad_source='attention_mask'"):
        assert part in result.reason


#: Measured (issue 30): with the float32 policy of this branch the HF suites are mostly "not covered" (hf-sdpa 29
#: pass + 17 not judgeable of 55, hf-eager 27 + 20 of 55, no failure): the goal is not met there yet.  Strict: the
#: test fails as soon as the goal is met, so the mark is dropped then.
BELOW_GOAL = {p: pytest.mark.xfail(strict=True, reason=f"{p}: about half its templates are not judgeable in float32 "
                                   "under the current low-precision policy (docs/backends.md section 11)")
              for p in ("hf-sdpa", "hf-eager")}


@pytest.mark.slow
@pytest.mark.parametrize("profile", [pytest.param(p, marks=BELOW_GOAL.get(p, ())) for p in PROFILES])
def test_a_profile_backend_is_judged_on_most_of_its_profile_suite(profile, tmp_path):
    results, n, entry = judge(profile, tmp_path)
    judged = [r for r in results if r.status in ("pass", "fail")]
    failed = [(r.case, r.reason) for r in results if r.status in ("fail", "error")]
    assert len(judged) >= MIN_JUDGED * n, (len(judged), n, left_out(entry / SUITE_FOLDER),
                                           [(r.case, r.status, r.reason) for r in results if r not in judged])
    assert failed == []


def test_a_fully_masked_row_that_the_inner_backend_cannot_give_is_unsupported_not_misjudged():
    import types

    import numpy as np

    from pldr_ref.backends.profiled import has_fully_masked_row
    from pldr_ref.config import PLDRConfig
    from pldr_ref.harness.protocol import Unsupported

    cfg = PLDRConfig.preset("tiny").emulate("hf-eager")  # masked_row='nan': HF eager's NaN rows
    ids = np.array([[3, 4, 5, 6], [7, 8, 9, 10]])
    left = types.SimpleNamespace(kind="forward", config=cfg, args={}, inputs={
        "token_ids": ids, "attention_mask": np.array([[1, 1, 1, 1], [0, 1, 1, 1]])})
    right = types.SimpleNamespace(kind="forward", config=cfg, args={}, inputs={
        "token_ids": ids, "attention_mask": np.array([[1, 1, 1, 1], [1, 1, 1, 0]])})
    assert has_fully_masked_row(left) and not has_fully_masked_row(right)
    with pytest.raises(Unsupported, match="masked_row='nan'"):
        numpy32_profile("hf-eager").run_case(left, "float32")
    layer = types.SimpleNamespace(kind="decoder_layer", config=cfg, args={}, inputs={
        "mask": np.array([[[[True, True], [False, True]]]])})
    assert has_fully_masked_row(layer)
    # the HF profiles declare the RoPE arithmetic of either pairing (HF's reference_rope is a config field)
    assert numpy32_profile("hf-sdpa").capabilities().switches["rope_arithmetic"] == ("float32", "float64")
