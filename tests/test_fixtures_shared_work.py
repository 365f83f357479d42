"""Work shared across the cases of one config (issue 30, the v510-110m ONNX suite): the memoized parameter sets,
rounded parameter sets and perturbation sign patterns give exactly what a fresh computation gives, the chunked
SplitMix64 generator is the definition, the config target's instances share one seed, and a backend still cannot
write into a parameter it is handed as a view."""

from __future__ import annotations

import numpy as np
import pytest

from pldr_ref.config import PLDRConfig
from pldr_ref.fixtures import baselines, splitmix, weights
from pldr_ref.fixtures.build import perturbation_signs
from pldr_ref.fixtures.templates import CONFIG_PARAMS_SEED, Target, all_templates, instantiate
from pldr_ref.harness.localize import read_only

TINY = PLDRConfig.preset("tiny")


@pytest.mark.parametrize("n", [0, 1, 7, splitmix.BLOCK - 1, splitmix.BLOCK, splitmix.BLOCK + 3])
def test_the_chunked_sequence_is_the_counter_definition(n):
    seed = 0xDEADBEEF12345
    want = splitmix.splitmix64_at(seed, np.arange(n, dtype=np.uint64))
    assert np.array_equal(splitmix.splitmix64_sequence(seed, n), want)
    bits = splitmix.splitmix64_at(splitmix.stream_key(3, "w"), np.arange(n, dtype=np.uint64))
    got = splitmix.uniform_symmetric(3, "w", (n,), 0.3)
    assert np.array_equal(got.view(np.uint64), (splitmix.to_symmetric_interval(bits) * 0.3).view(np.uint64))


def test_a_memoized_parameter_set_is_the_generated_one():
    weights._PARAMS_MEMO.clear()
    first = weights.fixture_params(TINY, 5)
    assert weights.fixture_params(TINY, 5) is first  # generated once
    weights._PARAMS_MEMO.clear()
    fresh = weights.fixture_params(TINY, 5)
    assert fresh is not first and all(np.array_equal(fresh[k], first[k]) for k in first)
    scaled = weights.fixture_params(TINY, 5, {"*.mha1.wq.weight": 0.5})
    assert np.array_equal(scaled["decoder.dec_layers.0.mha1.wq.weight"],
                          0.5 * fresh["decoder.dec_layers.0.mha1.wq.weight"])
    # negative control: another seed is another set
    assert not np.array_equal(weights.fixture_params(TINY, 6)["decoder.embedding.weight"],
                              fresh["decoder.embedding.weight"])


def test_a_memoized_rounded_set_is_the_rounded_one():
    params = weights.fixture_params(TINY, 5)
    got = baselines.rounded_params(params, np.float16)
    assert baselines.rounded_params(params, np.float16) is got
    for k, v in params.items():
        assert np.array_equal(got[k], baselines.storage_round(v, np.float16))
    # negative control: another dtype is another rounding
    assert not np.array_equal(baselines.rounded_params(params, np.float32)["decoder.embedding.weight"],
                              got["decoder.embedding.weight"])


def test_kept_perturbation_signs_are_the_stream_signs():
    for shape in [(3, 5), (), (0,), (2, 3, 9)]:
        want = np.where((splitmix.stream_bits(2, "param:x", shape) >> np.uint64(63)) == 1, 1.0, -1.0)
        for _ in range(2):  # drawn, then read back from the kept bits
            got = perturbation_signs(2, "param:x", shape)
            assert got.shape == want.shape and np.array_equal(got, want)
    assert not np.array_equal(perturbation_signs(1, "param:x", (64,)), perturbation_signs(2, "param:x",
                                                                                                        (64,)))


def test_a_config_target_shares_one_seed_and_leaves_out_the_switch_templates():
    target = Target(config=TINY.replace(vocab_size=48))
    made = {}
    for t in all_templates():
        got = instantiate(t, target, max_seq_len=64)
        made[t.name] = got
    specs = [s for s in made.values() if not isinstance(s, str)]
    assert specs and {s.params_seed for s in specs} == {CONFIG_PARAMS_SEED}
    assert made["model/tiny_padded_exact"].baselines  # a small model keeps its naive baselines ...
    big = instantiate(next(t for t in all_templates() if t.name == "model/tiny_padded_exact"),
                      Target(config=PLDRConfig.preset("v510-110m")), max_seq_len=64)
    assert big.params_seed == CONFIG_PARAMS_SEED and not big.baselines  # ... a 110 M-parameter one does not
    assert "switch template" in made["model/switch_score_scale_float32"]
    assert not isinstance(made["model/tiny_padded_exact"], str)
    # negative control: a profile target keeps each template's own seed and its switch templates
    own = instantiate(next(t for t in all_templates() if t.name == "model/switch_score_scale_float32"),
                      Target(profile="pt-v510-float32"))
    assert not isinstance(own, str) and own.params_seed != CONFIG_PARAMS_SEED


def test_a_parameter_handed_as_a_view_cannot_be_made_writeable():
    params = weights.fixture_params(TINY, 5)
    handed = read_only(dict(params.items()))
    w = handed["decoder.embedding.weight"]
    assert np.shares_memory(w, params["decoder.embedding.weight"])  # no copy of a read-only owner
    with pytest.raises(ValueError):
        w.flags.writeable = True
    # negative control: a read-only view of a writeable array is copied (its view could be made writeable)
    base = np.arange(4.0)
    view = base[:]
    view.flags.writeable = False
    got = read_only({"v": view})["v"]
    assert not np.shares_memory(got, base)
