"""Row-blocked, multi-threaded stages (pldr_ref.row_blocks, attention.masked_attention_weights) and the layer's
finiteness hook and workspace: every blocking and thread count gives the unblocked numbers, bit for bit.

The default block (1 MiB) and thread threshold (4 MiB) are far above the sizes of these tests, so each test that
needs several blocks on several threads shrinks them with ``monkeypatch``.
"""

from __future__ import annotations

import threading
import time
import warnings

import numpy as np
import pytest
from core_support import model_params, small_config, token_ids
from hypothesis import given, settings
from hypothesis import strategies as st

from pldr_ref import forward
from pldr_ref import row_blocks as rb
from pldr_ref.attention import (
    MASK_MODES,
    MASKED_ROWS,
    apply_mask,
    attention_weights,
    causal_padding_mask,
    masked_attention_weights,
)
from pldr_ref.inference.step import cached_forward
from pldr_ref.layer import LAYER_STAGES, decoder_layer
from pldr_ref.model import sequence_mask
from pldr_ref.params import FIXED_G_KEY


@pytest.fixture
def tiny_blocks(monkeypatch):
    """Blocks of one or two rows and threads for any size: every multi-block, multi-thread path runs."""
    monkeypatch.setattr(rb, "BLOCK_BYTES", 1)
    monkeypatch.setattr(rb, "PARALLEL_MIN_BYTES", 0)
    monkeypatch.setenv("PLDR_REF_THREADS", "3")


def bits(a: np.ndarray) -> np.ndarray:
    """The IEEE-754 bit patterns (NaN payloads included), so that equality is bitwise and NaN == NaN."""
    return np.ascontiguousarray(a, dtype=np.float64).view(np.int64)


def unblocked(scores, mask, mode, add_dtype, precision, masked_row):
    return attention_weights(apply_mask(scores, mask, mode, add_dtype=add_dtype), mask, precision=precision,
                             masked_row=masked_row)


def padded_mask(b: int, s: int, past: int, rng: np.random.Generator) -> np.ndarray:
    """Causal mask [B, 1, S, past + S] with random padding keys, including a sample whose first rows see only pads."""
    pad = rng.random((b, past + s)) < 0.3
    pad[0, : past + 2] = True  # rows 0-1 of sample 0: every key they may see is padding (dead rows)
    return causal_padding_mask(np.arange(past, past + s), np.arange(past + s), pad)


# ------------------------------------------------------------------ row_blocks itself
def test_row_slices_cover_every_row_once() -> None:
    for n, row, block in [(0, 8, 1), (1, 8, 1), (7, 8, 16), (10, 8, 24), (5, 100, 1 << 20)]:
        sl = rb.row_slices(n, row, block)
        covered = np.concatenate([np.arange(n)[s] for s in sl]) if sl else np.array([], dtype=int)
        np.testing.assert_array_equal(covered, np.arange(n))
        assert all(s.stop > s.start for s in sl)
        assert all(s.stop - s.start == max(1, block // row) for s in sl[:-1])
    with pytest.raises(ValueError, match="bad row blocking"):
        rb.row_slices(4, 8, 0)


@pytest.mark.parametrize("raw", ["0", "-2", "two", ""])
def test_bad_thread_count_is_a_clear_error(monkeypatch, raw: str) -> None:
    monkeypatch.setenv("PLDR_REF_THREADS", raw)
    with pytest.raises(ValueError, match="PLDR_REF_THREADS must be a positive integer"):
        rb.worker_count()


def test_blocks_run_on_several_threads_and_errors_propagate(tiny_blocks) -> None:
    seen: set[int] = set()
    barrier = threading.Barrier(3, timeout=10)  # only passes if three blocks run at the same time

    def fn(i: int) -> None:
        seen.add(threading.get_ident())
        if i < 3:
            barrier.wait()

    rb.for_each_block(fn, range(9), total_bytes=1)
    assert len(seen) == 3

    done = []

    def failing(i: int) -> None:
        if i == 4:
            raise ZeroDivisionError("block 4")
        done.append(i)

    with pytest.raises(ZeroDivisionError, match="block 4"):
        rb.for_each_block(failing, range(9), total_bytes=1)
    assert 4 not in done


def test_a_failing_block_stops_the_other_workers(tiny_blocks) -> None:
    ran: list[int] = []

    def fn(i: int) -> None:
        if i == 1:
            raise KeyError("block 1")
        time.sleep(0.01)
        ran.append(i)

    with pytest.raises(KeyError, match="block 1"):
        rb.for_each_block(fn, range(60), total_bytes=1)
    assert len(ran) < 30  # the others stopped before their next block (60 blocks would take 0.2 s each)


def test_workers_run_under_the_callers_error_state(tiny_blocks) -> None:
    def fn(i: int) -> None:
        np.float64(1.0) / np.zeros(1)  # division by zero in every block, on every thread

    with np.errstate(divide="raise"), pytest.raises(FloatingPointError):
        rb.for_each_block(fn, range(6), total_bytes=1)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with np.errstate(divide="ignore"):
            rb.for_each_block(fn, range(6), total_bytes=1)  # no warning from any thread


def test_workers_call_the_callers_error_callback(tiny_blocks) -> None:
    """errstate(divide="call") with the caller's np.seterrcall callback: every block, on every thread, calls it
    (a worker without the callback raises NameError: 'Callback function is not set')."""
    calls: list[str] = []
    lock = threading.Lock()

    def on_error(kind: str, flag: int) -> None:
        with lock:
            calls.append(kind)

    def fn(i: int) -> None:
        np.float64(1.0) / np.zeros(1)

    with np.errstate(divide="call", call=on_error):
        rb.for_each_block(fn, range(6), total_bytes=1)
        assert np.geterrcall() is on_error
    assert calls == ["divide by zero"] * 6


def test_nested_calls_and_a_refusing_pool_run_inline(tiny_blocks, monkeypatch) -> None:
    out = np.zeros((4, 4))

    def inner(i: int) -> None:
        def cell(j: int) -> None:
            out[i, j] = 10 * i + j

        rb.for_each_block(cell, range(4), total_bytes=1)  # from a worker thread: must not wait on the pool

    done = threading.Event()
    worker = threading.Thread(target=lambda: (rb.for_each_block(inner, range(4), total_bytes=1), done.set()),
                              daemon=True)
    worker.start()
    worker.join(timeout=60)
    assert done.is_set(), "nested for_each_block deadlocked"
    np.testing.assert_array_equal(out, 10 * np.arange(4)[:, None] + np.arange(4))

    class Refusing:
        def submit(self, *args, **kwargs):
            raise RuntimeError("cannot schedule new futures after interpreter shutdown")

    monkeypatch.setattr(rb, "_executor", lambda threads: Refusing())
    seen: list[int] = []
    rb.for_each_block(seen.append, range(7), total_bytes=1)
    assert sorted(seen) == list(range(7))


def test_negative_control_a_stage_that_is_not_row_wise_depends_on_the_blocking(monkeypatch) -> None:
    """The bitwise checks below can fail: a stage normalising by its block's total (not its row's) changes."""
    x = np.random.default_rng(0).random((1, 2, 8, 5))
    out = np.empty_like(x)

    def run(block_bytes: int) -> np.ndarray:
        monkeypatch.setattr(rb, "BLOCK_BYTES", block_bytes)

        def blockwise_total(sl: slice) -> None:
            out[:, :, sl] = x[:, :, sl] / x[:, :, sl].sum()

        rb.for_each_block(blockwise_total, rb.row_slices(8, 80), total_bytes=x.nbytes)
        return out.copy()

    assert not np.array_equal(bits(run(1 << 20)), bits(run(80)))


# ------------------------------------------------------------------ the blocked softmax
@pytest.mark.parametrize("mode", MASK_MODES)
@pytest.mark.parametrize("masked_row", MASKED_ROWS)
def test_masked_attention_weights_is_the_unblocked_composition_bitwise(tiny_blocks, mode: str,
                                                                       masked_row: str) -> None:
    rng = np.random.default_rng(7)
    b, h, s, past = 2, 3, 9, 4
    mask = padded_mask(b, s, past, rng)
    add_dtypes = ("float64", "float32") if mode == "additive" else ("float64",)
    for scale in (1.0, 40.0, 1e9):  # 1e9: scores as large as the mask constant
        scores = rng.standard_normal((b, h, s, past + s)) * scale
        scores[1, 2, 5, 3] = np.nan
        scores[1, 0, 7, 1] = np.inf
        for add_dtype in add_dtypes:
            for precision in ("float64", "float32"):
                with np.errstate(all="ignore"):
                    want = unblocked(scores, mask, mode, add_dtype, precision, masked_row)
                    for in_place in (False, True):
                        x = scores.copy()
                        got = masked_attention_weights(x, mask, mask_mode=mode, mask_add_dtype=add_dtype,
                                                       precision=precision, masked_row=masked_row,
                                                       in_place=in_place)
                        np.testing.assert_array_equal(bits(got), bits(want))
                        assert (got is x) == in_place
                        if not in_place:
                            np.testing.assert_array_equal(bits(x), bits(scores))  # the scores are untouched


@settings(deadline=None)
@given(b=st.integers(1, 2), h=st.integers(1, 3), s=st.integers(1, 7), past=st.integers(0, 3),
       block=st.integers(1, 400), threads=st.integers(1, 4), seed=st.integers(0, 2**32 - 1),
       no_mask=st.booleans())
def test_any_blocking_and_thread_count_gives_the_same_bits(b, h, s, past, block, threads, seed, no_mask) -> None:
    rng = np.random.default_rng(seed)
    mask = None if no_mask else padded_mask(b, s, past, rng)
    scores = rng.standard_normal((b, h, s, past + s)) * 10
    want = unblocked(scores, mask, "additive", "float64", "float64", "arithmetic")
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(rb, "BLOCK_BYTES", block)
        mp.setattr(rb, "PARALLEL_MIN_BYTES", 0)
        mp.setenv("PLDR_REF_THREADS", str(threads))
        got = masked_attention_weights(scores, mask, mask_mode="additive")
    np.testing.assert_array_equal(bits(got), bits(want))


def test_rounding_hook_rounds_the_logits_and_e_per_block(tiny_blocks) -> None:
    rng = np.random.default_rng(3)
    mask = padded_mask(1, 6, 0, rng)
    scores = rng.standard_normal((1, 2, 6, 6)) * 5

    def r(a):
        return a.astype(np.float16).astype(np.float64)

    with np.errstate(over="ignore"):  # -1e9 is -inf in float16
        want = r(attention_weights(r(apply_mask(scores, mask, "additive")), mask))
        got = masked_attention_weights(scores, mask, mask_mode="additive", on_stage=lambda name, a: r(a))
    np.testing.assert_array_equal(bits(got), bits(want))


def test_negative_control_block_max_instead_of_row_max_differs(tiny_blocks) -> None:
    """A softmax that shifts by the max of the whole block (not each row) is caught by a bitwise comparison."""
    rng = np.random.default_rng(1)
    scores = rng.standard_normal((1, 2, 6, 6)) * 30
    mask = padded_mask(1, 6, 0, rng)
    logits = apply_mask(scores, mask, "additive")
    e = np.exp(logits - logits.max())
    with np.errstate(invalid="ignore"):  # rows that underflow to 0 / 0
        broken = e / e.sum(axis=-1, keepdims=True)
    assert not np.array_equal(bits(broken), bits(masked_attention_weights(scores, mask, mask_mode="additive")))


def test_apply_mask_out_is_the_same_as_a_new_array() -> None:
    rng = np.random.default_rng(2)
    scores = rng.standard_normal((2, 2, 5, 5)) * 50
    mask = padded_mask(2, 5, 0, rng)
    for mode in MASK_MODES:
        for add_dtype in ("float64", "float32") if mode == "additive" else ("float64",):
            want = apply_mask(scores, mask, mode, add_dtype=add_dtype)
            out = np.full_like(scores, 7.0)
            assert apply_mask(scores, mask, mode, add_dtype=add_dtype, out=out) is out
            np.testing.assert_array_equal(bits(out), bits(want))
            inplace = scores.copy()
            apply_mask(inplace, mask, mode, add_dtype=add_dtype, out=inplace)
            np.testing.assert_array_equal(bits(inplace), bits(want))
    for mode in MASK_MODES:  # a 0/1 integer mask means what the boolean one does
        np.testing.assert_array_equal(bits(apply_mask(scores, mask.astype(np.uint8), mode)),
                                      bits(apply_mask(scores, mask, mode)))
    assert apply_mask(scores, None, "additive") is scores
    with pytest.raises(ValueError, match="mask_mode must be one of"):
        apply_mask(scores, mask, "subtractive")


def test_in_place_needs_a_writable_contiguous_float64_buffer() -> None:
    scores = np.zeros((1, 1, 4, 4))
    with pytest.raises(ValueError, match="in_place=True needs"):
        masked_attention_weights(scores[..., ::2, :], None, mask_mode="additive", in_place=True)
    with pytest.raises(ValueError, match=r"scores must be \[B, H, S, T\]"):
        masked_attention_weights(scores[0], None, mask_mode="additive")


# ------------------------------------------------------------------ finiteness checks inside the blocks
def test_check_sees_scores_then_e_only_when_a_block_is_not_finite(tiny_blocks) -> None:
    rng = np.random.default_rng(4)
    scores = rng.standard_normal((1, 2, 6, 6))
    mask = padded_mask(1, 6, 0, rng)
    calls: list[tuple[str, tuple]] = []

    class Check:  # an inspector: a no-op on finite arrays, so the softmax may screen them blockwise
        finite_only = True

        def __init__(self, record) -> None:
            self.record = record

        def __call__(self, name, arr):
            self.record(name, arr)
            return arr

    check = Check(lambda name, arr: calls.append((name, arr.shape)))
    masked_attention_weights(scores, mask, mask_mode="additive", on_stage=check)
    assert calls == []
    scores[0, 1, 4, 2] = np.nan  # an allowed key (2 <= 4) of a live row: E's row is NaN too
    masked_attention_weights(scores, mask, mask_mode="additive", on_stage=check)
    assert calls == [("scores", scores.shape), ("E", scores.shape)]
    calls.clear()
    seen: list[np.ndarray] = []
    masked_attention_weights(scores.copy(), mask, mask_mode="additive", in_place=True,
                             on_stage=Check(lambda name, arr: seen.append(arr.copy()) if name == "scores" else None))
    # in place: a copy of the failing blocks of scores, taken before E overwrote them (the NaN is still there)
    assert len(seen) == 1 and seen[0].shape[2] < 6 and np.isnan(seen[0]).sum() == np.isnan(scores).sum() == 1


def test_two_and_three_dimensional_masks_broadcast_as_before(tiny_blocks) -> None:
    rng = np.random.default_rng(5)
    scores = rng.standard_normal((2, 3, 6, 6))
    mask4 = padded_mask(1, 6, 0, rng)
    want = unblocked(scores, mask4, "additive", "float64", "float64", "arithmetic")
    for mask in (mask4[0, 0], mask4[0]):
        np.testing.assert_array_equal(bits(masked_attention_weights(scores, mask, mask_mode="additive")), bits(want))
    with pytest.raises(ValueError, match="mask must broadcast"):
        masked_attention_weights(scores, mask4[None], mask_mode="additive")


def _layer_inputs(rows: int):
    """(config, params, x, positions, mask) of layer 0 of the small model on 2 x ``rows`` tokens."""
    cfg = small_config()
    positions, mask = sequence_mask(cfg, token_ids(cfg, 2, rows, 0))
    x = np.random.default_rng(0).standard_normal((2, rows, cfg.d_model))
    return cfg, model_params(cfg, 0), x, positions, mask


def test_layer_check_hook_sees_every_stage_in_trace_order() -> None:
    cfg, params, x, positions, mask = _layer_inputs(5)
    seen: list[str] = []

    class Check:
        finite_only = True

        def __call__(self, name, arr):
            seen.append(name)
            return arr

    t = decoder_layer(params.layer(0), x, cfg, positions=positions, mask=mask, on_stage=Check())
    # scores and E are judged inside the softmax, and only when a block's sum is not finite
    assert seen == [name for name, _ in t.items() if name not in ("scores", "E")]
    assert [n for n in LAYER_STAGES if n in seen or n in ("scores", "E")] == [n for n, _ in t.items()]


def test_layer_transforming_hook_sees_every_stage_and_the_masked_logits_per_block(tiny_blocks) -> None:
    """A hook that may change values (not ``finite_only``) sees every trace entry, the scores included, and the
    masked logits and E of each block of query rows; returning its input keeps the float64 values."""
    cfg, params, x, positions, mask = _layer_inputs(6)
    seen: list[str] = []

    def record(name, arr):
        seen.append(name)
        return arr

    t = decoder_layer(params.layer(0), x, cfg, positions=positions, mask=mask, on_stage=record)
    plain = decoder_layer(params.layer(0), x, cfg, positions=positions, mask=mask)
    blocks = seen.count("masked_logits")
    assert blocks > 1 and seen.count("E") == blocks  # tiny_blocks: several blocks of rows
    assert list(dict.fromkeys(n for n in seen if n != "masked_logits")) == [n for n, _ in t.items()]
    for (name, a), (_, b) in zip(t.items(), plain.items(), strict=True):
        np.testing.assert_array_equal(bits(a), bits(b), err_msg=name)


def test_forward_names_a_non_finite_score_and_stops_there(tiny_blocks) -> None:
    cfg = small_config()
    params = model_params(cfg, 0)
    ids = token_ids(cfg, 1, 6, 0)
    key = "decoder.dec_layers.1.mha1.wk.weight"
    bad = params.replace(**{key: np.full(params[key].shape, 1e308)})  # K overflows in layer 1 only
    for keep_trace in (True, False):
        with pytest.raises(FloatingPointError, match=r"stage 'layers\.1\.k' produced"):
            forward(bad, ids, keep_trace=keep_trace)
    ext = small_config(g_mode="external", metric_learner="none")
    p_ext = model_params(ext, 0)
    g = np.array(p_ext[FIXED_G_KEY])
    g[0, 2, 0] = 1e308 * np.eye(ext.d_k)  # a finite G_LM whose product with Q overflows: the scores are inf
    messages = []
    for keep_trace in (True, False):
        with warnings.catch_warnings():
            # the worker threads run under the forward's errstate: no RuntimeWarning
            warnings.simplefilter("error")
            with pytest.raises(FloatingPointError, match=r"stage 'layers\.0\.scores' produced") as err:
                forward(p_ext.replace(**{FIXED_G_KEY: g}), ids, keep_trace=keep_trace)
        messages.append(str(err.value))
    assert messages[0] == messages[1]  # in place (keep_trace=False) the counts are still those of all the scores


# ------------------------------------------------------------------ whole model: blocked == unblocked
def test_forward_and_cached_steps_are_bitwise_independent_of_blocking(monkeypatch) -> None:
    cfg = small_config()
    params = model_params(cfg, 0)
    ids = token_ids(cfg, 2, 7, 0)
    ids[0, :2] = cfg.pad_id

    def run():
        full = forward(params, ids).flat()
        light = forward(params, ids, keep_trace=False).logits
        step = cached_forward(params, ids[:, :4])
        nxt = cached_forward(params, ids[:, 4:], kv_cache=step.kv_cache, g_cache=step.g_cache)
        return {**full, "light": light, "step": nxt.output.logits}

    want = run()
    monkeypatch.setattr(rb, "BLOCK_BYTES", 1)
    monkeypatch.setattr(rb, "PARALLEL_MIN_BYTES", 0)
    monkeypatch.setenv("PLDR_REF_THREADS", "2")
    got = run()
    assert got.keys() == want.keys()
    for k in want:
        np.testing.assert_array_equal(bits(got[k]), bits(want[k]), err_msg=k)
    np.testing.assert_array_equal(bits(want["light"]), bits(want["logits"]))  # the workspace path: same bits
