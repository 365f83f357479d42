"""What LayerTrace holds in A0, A, A_LM, A_P under the cache hooks of decoder_layer, and that its docstring says so.

Each case runs :func:`pldr_ref.layer.decoder_layer` with one cache hook and checks the trace fields; the docstring
test then requires the sentence that states each case (and not the earlier, wrong "A0/A are None when frozen").
"""

from __future__ import annotations

import numpy as np
from core_support import model_params, small_config

from pldr_ref.density import cumulative_density_operator
from pldr_ref.layer import LayerTrace, decoder_layer

S = 3
POSITIONS = np.arange(2, 2 + S)


def layer_inputs(**fields: object):
    config = small_config(**fields)
    params = model_params(config)
    x = np.random.default_rng(0).standard_normal((1, S, config.d_model))
    block = np.random.default_rng(1).uniform(0.5, 1.5, (1, config.num_heads, config.d_k, config.d_k))
    return config, params.layer(0), x, block


def test_kv_cache_frozen_a_gives_no_a0_and_the_frozen_a() -> None:
    config, lp, x, frozen = layer_inputs()
    t = decoder_layer(lp, x, config, positions=POSITIONS, mask=None, frozen_A=frozen)
    assert t.A0 is None
    np.testing.assert_array_equal(t.A, frozen)


def test_g_cache_keeps_its_tensors_and_still_computes_a0_and_a_from_the_new_rows() -> None:
    config, lp, x, frozen = layer_inputs()
    t = decoder_layer(lp, x, config, positions=POSITIONS, mask=None, frozen_G=(frozen, None, 2 * frozen))
    assert t.A0 is not None and t.A is not None  # not frozen: the metric learner ran on the new rows
    np.testing.assert_array_equal(t.A_LM, frozen)
    assert t.A_P is None  # the cache kept none (HF's buffer)
    np.testing.assert_array_equal(t.G_LM, 2 * frozen)
    plain = decoder_layer(lp, x, config, positions=POSITIONS, mask=None)
    np.testing.assert_array_equal(t.A, plain.A)


def test_g_cache_without_a_metric_learner_has_no_a0_and_no_a() -> None:
    config, lp, x, frozen = layer_inputs(metric_learner="none", g_mode="identity")
    t = decoder_layer(lp, x, config, positions=POSITIONS, mask=None, frozen_G=(None, None, frozen))
    assert t.A0 is None and t.A is None and t.A_LM is None and t.A_P is None


def test_cumulative_gram_with_an_offset_includes_the_cached_rows() -> None:
    config, lp, x, offset = layer_inputs(gram_mode="cumulative")
    t = decoder_layer(lp, x, config, positions=POSITIONS, mask=None, gram_offset=offset)
    np.testing.assert_array_equal(t.A0, cumulative_density_operator(t.q_rot) + offset[:, :, None])
    assert t.A is not None


def test_docstring_states_the_cache_cases() -> None:
    doc = " ".join((LayerTrace.__doc__ or "").split())
    assert "A0/A are None when frozen by a cache" not in doc
    for sentence in ("with ``frozen_A`` (a KV cache step) A0 is None and A is the cache's frozen A",
                     "with ``frozen_G`` (a G cache step) A_LM, A_P and G_LM are the cache's",
                     "A0 and A are still computed from the new rows when a metric learner exists",
                     "A0 is each new row's Gram including the cached rows'"):
        assert sentence in doc, sentence
