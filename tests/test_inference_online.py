"""Online contract, historical-row prefix consistency, padding at the Gram boundary (issue 3 items 3-5)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from inference_models import model, rel_err, tokens

from pldr_ref import forward
from pldr_ref.inference.padding import (
    append_right_padding,
    final_real_row_effect,
    real_lengths,
    strip_right_padding,
    stripped_logits,
)
from pldr_ref.inference.scoring import (
    blockwise_cross_entropy,
    prefix_consistency_gap,
    prefix_final_row_logits,
    prompt_frozen_scores,
    scoring_gap,
    sequential_nll,
)

LEARNED = model("tiny")
IDENTITY = model("tiny", g_mode="identity")
CUMULATIVE = model("tiny", gram_mode="cumulative")


# ------------------------------------------------------------------ item 3: online contract
@given(t=st.integers(1, 7), seed=st.integers(0, 10_000))
def test_online_conditional_depends_only_on_prefix(t, seed):
    """Step-t conditional (final row of the call on x_{1:t}) ignores every later token, exactly."""
    x = tokens(2, 8, 64, seed=seed)
    y = x.copy()
    y[:, t:] = tokens(2, 8 - t, 64, seed=seed + 1)
    lx = prefix_final_row_logits(LEARNED, x)
    ly = prefix_final_row_logits(LEARNED, y)
    assert np.array_equal(lx[:, :t], ly[:, :t])


def test_block_rows_are_not_online_with_learned_global_gram():
    """Negative control: the historical rows of ONE block call do change with later tokens (global Gram)."""
    x = tokens(1, 8, 64)
    y = x.copy()
    y[:, 6:] = (y[:, 6:] % 63) + 1
    bx, by = forward(LEARNED, x).logits, forward(LEARNED, y).logits
    assert rel_err(bx[:, :6], by[:, :6]) > 1e-6
    # ... and with a row-causal model they do not (up to the different reduction shapes)
    cx, cy = forward(CUMULATIVE, x).logits, forward(CUMULATIVE, y).logits
    assert rel_err(cx[:, :6], cy[:, :6]) <= 1e-12


def test_cached_decoding_conditional_depends_only_on_prefix():
    prompt = tokens(1, 5, 64)
    c1 = tokens(1, 6, 64, seed=3)
    c2 = c1.copy()
    c2[:, 3:] = (c2[:, 3:] % 63) + 1
    a = prompt_frozen_scores(LEARNED, prompt, c1)
    b = prompt_frozen_scores(LEARNED, prompt, c2)
    # log p(y_j | prompt, y_<j) for j <= 3 sees only tokens that agree
    assert np.array_equal(a[:, :3], b[:, :3])
    assert not np.array_equal(a[:, 3:], b[:, 3:])


# ------------------------------------------------------------------ item 4: prefix consistency
@pytest.mark.parametrize("params", [IDENTITY, CUMULATIVE, model("small", gram_mode="cumulative")],
                         ids=["identity", "cumulative-tiny", "cumulative-small"])
def test_prefix_consistency_holds_for_consistent_models(params):
    ids = tokens(2, 10, params.config.vocab_size)
    assert prefix_consistency_gap(params, ids) <= 1e-12
    block = blockwise_cross_entropy(params, ids)
    seq = sequential_nll(params, ids)
    assert abs(block.total - seq.total) <= 1e-12 * abs(seq.total)
    assert abs(block.mean - seq.mean) <= 1e-12 * abs(seq.mean)


@pytest.mark.parametrize("preset", ["tiny", "small"])
def test_global_gram_learned_g_violates_prefix_consistency(preset):
    params = model(preset)
    ids = tokens(2, 10, params.config.vocab_size)
    gap = prefix_consistency_gap(params, ids)
    sg = scoring_gap(params, ids)
    print(f"global Gram, learned G ({preset}): prefix-consistency gap {gap:.3e} (relative, max over rows); "
          f"blockwise total NLL {sg.blockwise.total:.6f} vs sequential {sg.sequential.total:.6f} "
          f"(relative gap {sg.relative_total_gap:.3e})")
    assert gap > 1e-4
    assert sg.relative_total_gap > 1e-6


def test_prefix_consistency_gap_is_zero_at_length_one():
    """A single-row call is its own prefix: the gap is exactly 0 (boundary case of Definition 4.8)."""
    assert prefix_consistency_gap(LEARNED, tokens(3, 1, 64)) == 0.0


# ------------------------------------------------------------------ item 5: padding
def test_strip_right_padding_restores_unpadded_calls_bitwise():
    rows = [tokens(1, 7, 64, seed=1)[0], tokens(1, 4, 64, seed=2)[0]]
    padded = np.zeros((2, 7), dtype=np.int64)
    padded[0, :7], padded[1, :4] = rows[0], rows[1]
    for strip_args in ({}, {"attention_mask": (padded != 0).astype(int)}):
        got = stripped_logits(LEARNED, padded, **strip_args)
        for g, r in zip(got, rows, strict=True):
            assert np.array_equal(g, forward(LEARNED, r[None]).logits[0])
    # negative control: scoring the padded batch in one call changes the short row (pads enter the Gram)
    one_call = forward(LEARNED, padded).logits[1, :4]
    assert rel_err(one_call, forward(LEARNED, rows[1][None]).logits[0]) > 1e-6


def test_real_lengths_rejects_left_or_inner_padding():
    assert list(real_lengths(np.array([[3, 4, 0], [5, 0, 0]]))) == [2, 1]
    with pytest.raises(ValueError, match="row 0 is not right-padded"):
        real_lengths(np.array([[0, 4, 5]]))
    with pytest.raises(ValueError, match="no real token"):
        strip_right_padding(np.array([[0, 0]]))


def test_appended_padding_changes_final_real_row_only_with_global_gram():
    ids = tokens(2, 6, 64)
    pads = np.zeros((2, 3), dtype=np.int64)
    learned = final_real_row_effect(LEARNED, ids, pads)
    other_content = final_real_row_effect(LEARNED, ids, tokens(2, 3, 64, seed=5))
    padded, mask = append_right_padding(ids, pads)
    assert padded.shape == (2, 9) and mask.sum() == 12
    print(f"appended masked padding (learned G, global Gram): final-row relative change {learned.relative:.3e} "
          f"(pad id 0), {other_content.relative:.3e} (random pad content)")
    assert learned.relative > 1e-6 and other_content.max_abs != learned.max_abs  # depends on pad content
    assert final_real_row_effect(CUMULATIVE, ids, pads).relative <= 1e-12
    assert final_real_row_effect(IDENTITY, ids, pads).relative <= 1e-12
