"""OnlineContract.lean: the online generation contract, prefix consistency (Def. 4.8) and the two toy decoders
(paper Rem. 4.7, Def. 4.8, Rem. 4.9(i)).

The Lean definitions are mirrored literally on Python lists (``None`` for an out-of-range row) and checked with
hypothesis over integer lists and arbitrary pure row functions.  The numerical mirror uses the real pldr_ref
decoder: with ``gram_mode="cumulative"`` (paper eq. 4.16) it is a row-map decoder, so its one-pass block rows
equal the online final-row calls (``pldr_ref.inference.scoring.prefix_final_row_logits``); with the released
global Gram it plays the role of ``globalSumDecoder`` and violates prefix consistency.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from hypothesis import strategies as st

from pldr_ref.inference.scoring import prefix_final_row_logits
from pldr_ref.model import forward
from proofs_check.models import tiny_params
from proofs_check.profiles import expect_counterexample, expect_violation, run_property
from proofs_check.registry import EXACT_FLOAT, IDENTITY, LOGICAL, PURE_PYTHON, THEOREM, Check

Decoder = Callable[[Sequence[Any]], list[Any]]

#: Normwise relative tolerance between block rows and prefix / online calls of the row-local model:
#: max|block - online| <= ROW_LOCAL_RTOL * max|block| over all rows.  The two calls evaluate the same float
#: operations in different matrix shapes, and a BLAS may block (reduce) them differently; that rounding is
#: relative to the scale of the logits, not to each entry (a logit of 4.8e-4 next to O(1) logits moved by
#: 1e-15 failed an elementwise rtol = 1e-12 on another checkout path).  Observed gaps: <= 1e-15.
ROW_LOCAL_RTOL = 1e-12


# ---------------------------------------------------------------- literal mirrors of the Lean definitions


def get(rows: Sequence[Any], r: int) -> Any:
    """rows[r]? : the row, or None out of range."""
    return rows[r] if 0 <= r < len(rows) else None


def online_out(f: Decoder, x: Sequence[Any], t: int) -> Any:
    """onlineOut F x t = (F (x.take t)).getLast?"""
    out = f(list(x[:t]))
    return out[-1] if out else None


def prefix_consistent_on(f: Decoder, x: Sequence[Any]) -> bool:
    """For all r < |x|: (F x)[r]? = (F (x.take (r+1)))[r]?"""
    full = f(list(x))
    return all(get(full, r) == get(f(list(x[: r + 1])), r) for r in range(len(x)))


def length_preserving_on(f: Decoder, x: Sequence[Any]) -> bool:
    """|F x| = |x|."""
    return len(f(list(x))) == len(x)


def shaped_on(f: Decoder, x: Sequence[Any]) -> bool:
    """PrefixConsistentShaped F at x: LengthPreserving and PrefixConsistent."""
    return length_preserving_on(f, x) and prefix_consistent_on(f, x)


def row_local_on(f: Decoder, x: Sequence[Any], y: Sequence[Any]) -> bool:
    """For all r: x.take(r+1) = y.take(r+1) => (F x)[r]? = (F y)[r]?"""
    fx, fy = f(list(x)), f(list(y))
    n = max(len(x), len(y)) + 1
    return all(get(fx, r) == get(fy, r) for r in range(n) if list(x[: r + 1]) == list(y[: r + 1]))


def row_map_decoder(fn: Callable[[tuple[Any, ...]], Any]) -> Decoder:
    """rowMapDecoder f x = [f (x.take (r+1)) for r < |x|]."""
    return lambda x: [fn(tuple(x[: r + 1])) for r in range(len(x))]


def global_sum_decoder(x: Sequence[int]) -> list[int]:
    """globalSumDecoder x = [a + sum x for a in x]."""
    total = sum(x)
    return [a + total for a in x]


def const_nil(x: Sequence[Any]) -> list[Any]:
    """F = []."""
    return []


# ---------------------------------------------------------------- the real decoder as a list function


@functools.lru_cache(maxsize=2)
def _model(gram_mode: str):
    return tiny_params(0, gram_mode=gram_mode)


def model_decoder(gram_mode: str) -> Decoder:
    """x (token ids) -> list of logit rows (tuples) of one forward call of the tiny pldr_ref model."""
    params = _model(gram_mode)

    def decode(x: Sequence[int]) -> list[tuple[float, ...]]:
        if not x:
            return []
        return [tuple(row) for row in forward(params, np.asarray(x)[None]).logits[0]]

    return decode


def normwise_gap(a: np.ndarray, b: np.ndarray) -> float:
    """max|a - b| / max|b| (0 when both are 0)."""
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    scale = float(np.abs(b).max()) if b.size else 0.0
    gap = float(np.abs(a - b).max()) if a.size else 0.0
    return 0.0 if gap == 0.0 else gap / scale


def block_vs_online(gram_mode: str, tokens: Sequence[int]) -> tuple[float, bool]:
    """(normwise gap, bitwise) between the block rows of one forward call on ``tokens`` and the online final-row
    calls on each prefix (``prefix_final_row_logits``) of the real model."""
    params = _model(gram_mode)
    ids = np.asarray(tokens)[None]
    block = forward(params, ids).logits
    online = prefix_final_row_logits(params, ids)
    return normwise_gap(online, block), bool(np.array_equal(block, online))


def prefix_rows_gap(f: Decoder, x: Sequence[int]) -> float:
    """Normwise gap between the rows of F x and the rows (F (x.take (r+1)))[r] of the Lean definition."""
    full = np.array(f(list(x)))
    prefix = np.array([f(list(x[: r + 1]))[r] for r in range(len(x))])
    return normwise_gap(prefix, full)


INT_LISTS = st.lists(st.integers(-20, 20), max_size=8)
ROW_FNS = st.functions(like=lambda prefix: 0, returns=st.integers(-5, 5), pure=True)
TOKENS = st.lists(st.integers(1, 63), min_size=1, max_size=8)
TOKENS2 = st.lists(st.integers(1, 63), min_size=2, max_size=8)


def _with_common_prefix(x: list[int], tail: list[int], cut: int) -> list[int]:
    """A y with y.take(cut) = x.take(cut): x's first ``cut`` entries followed by ``tail`` (y = x if cut >= |x|)."""
    return list(x) if cut >= len(x) else list(x[:cut]) + list(tail)


# ---------------------------------------------------------------- checks


def online_causal_run(profile: str) -> str:
    """x.take t = y.take t => onlineOut F x t = onlineOut F y t for row maps, globalSum, [] and the real
    (global-Gram) pldr_ref model (bitwise: the step-t call receives identical inputs)."""
    real = model_decoder("global")

    def prop(fn, x: list[int], tail: list[int], t: int, tokens: list[int], tok_tail: list[int]) -> None:
        y = _with_common_prefix(x, tail, t)
        for f in (row_map_decoder(fn), global_sum_decoder, const_nil):
            assert online_out(f, x, t) == online_out(f, y, t)
        t_real = 1 + t % len(tokens)  # a nonempty prefix, so that the step-t call runs the model
        ty = _with_common_prefix(tokens, tok_tail, t_real)
        assert online_out(real, tokens, t_real) == online_out(real, ty, t_real)

    return run_property(profile, prop, ROW_FNS, INT_LISTS, INT_LISTS, st.integers(0, 9), TOKENS,
                        st.lists(st.integers(1, 63), max_size=3))


def online_causal_control(profile: str) -> str:
    """Dropping x.take t = y.take t (y differs from x inside the first t tokens): the real model's step-t outputs
    differ."""
    real = model_decoder("global")

    def prop(tokens: list[int], t: int, new: int) -> None:
        t = 1 + t % len(tokens)
        y = list(tokens)
        y[t - 1] = 1 + (y[t - 1] + new) % 63  # a different token inside the prefix
        assert online_out(real, tokens, t) == online_out(real, y, t), "step-t outputs differ"

    return expect_counterexample(profile, prop, TOKENS, st.integers(0, 9), st.integers(1, 61))


def shaped_get_run(profile: str) -> str:
    """PrefixConsistentShaped F, r < |x| => (F x)[r] = (F (x.take (r+1)))[r] (total rows), for row maps and the
    real cumulative-Gram model."""
    real = model_decoder("cumulative")

    def prop(fn, x: list[int], tokens: list[int]) -> None:
        f = row_map_decoder(fn)
        assert shaped_on(f, x)
        assert all(f(x)[r] == f(x[: r + 1])[r] for r in range(len(x)))
        assert prefix_rows_gap(real, tokens) <= ROW_LOCAL_RTOL

    return run_property(profile, prop, ROW_FNS, INT_LISTS, TOKENS)


def global_sum_violation(profile: str) -> str:
    """globalSumDecoder at x = [0, 1], r = 0: full row 0 = 1, prefix row 0 = 0 (not prefix consistent)."""
    x = [0, 1]
    return expect_violation(global_sum_decoder(x)[0] != global_sum_decoder(x[:1])[0], "row 0: 1 vs 0")


def const_nil_pc_run(profile: str) -> str:
    """F = [] satisfies PrefixConsistent vacuously (both sides None)."""

    def prop(x: list[int]) -> None:
        assert prefix_consistent_on(const_nil, x)

    return run_property(profile, prop, INT_LISTS)


def const_nil_pc_control(profile: str) -> str:
    """A non-empty output reading the whole input (F x = [|x|]) is not prefix consistent."""
    f = lambda x: [len(x)]  # noqa: E731
    return expect_violation(not prefix_consistent_on(f, [1, 2]), "[|x|] at x = [1, 2]")


def const_nil_not_shaped_run(profile: str) -> str:
    """F = [] is not PrefixConsistentShaped: LengthPreserving fails at every nonempty x."""

    def prop(x: list[int]) -> None:
        assert not shaped_on(const_nil, [*x, 0])

    return run_property(profile, prop, INT_LISTS)


def row_map_is_shaped(profile: str) -> str:
    """Dropping F = [] (a row-map decoder instead): the decoder is shaped, so 'not shaped' fails."""
    f = row_map_decoder(lambda p: sum(p) % 3)
    return expect_violation(shaped_on(f, [1, 2, 3]), "rowMapDecoder is PrefixConsistentShaped")


def pc_of_row_local_run(profile: str) -> str:
    """RowLocal F => PrefixConsistent F: row maps (row locality checked on pairs with a common prefix) and the
    real cumulative-Gram model."""
    real = model_decoder("cumulative")

    def prop(fn, x: list[int], tail: list[int], cut: int, tokens: list[int], tok_tail: list[int]) -> None:
        f = row_map_decoder(fn)
        y = _with_common_prefix(x, tail, cut)
        assert row_local_on(f, x, y) and prefix_consistent_on(f, x)
        # the real model: RowLocal on (tokens, a y sharing a prefix) and PrefixConsistent, normwise
        ty = _with_common_prefix(tokens, tok_tail, 1 + cut % len(tokens))
        common = next((i for i, (a, b) in enumerate(zip(tokens, ty, strict=False)) if a != b), min(len(tokens),
                                                                                                  len(ty)))
        if common:
            assert normwise_gap(np.array(real(ty)[:common]), np.array(real(tokens)[:common])) <= ROW_LOCAL_RTOL
        assert prefix_rows_gap(real, tokens) <= ROW_LOCAL_RTOL

    return run_property(profile, prop, ROW_FNS, INT_LISTS, INT_LISTS, st.integers(0, 9), TOKENS,
                        st.lists(st.integers(1, 63), max_size=3))


def global_model_violation(profile: str) -> str:
    """Dropping RowLocal: the released global-Gram model (not row-local) violates prefix consistency: its block
    rows differ from the prefix calls (Rem. 4.9(i))."""
    real = model_decoder("global")

    def prop(tokens: list[int]) -> None:
        gap = prefix_rows_gap(real, tokens)
        assert gap <= ROW_LOCAL_RTOL, f"block vs prefix rows normwise gap {gap:.3f}"

    return expect_counterexample(profile, prop, TOKENS2)


def shaped_of_row_local_run(profile: str) -> str:
    """LengthPreserving F and RowLocal F => PrefixConsistentShaped F (row maps; real cumulative model rows)."""

    bitwise = [0, 0]

    def prop(fn, x: list[int], tail: list[int], cut: int, tokens: list[int]) -> None:
        f = row_map_decoder(fn)
        y = _with_common_prefix(x, tail, cut)
        assert row_local_on(f, x, y) and length_preserving_on(f, x) and shaped_on(f, x)
        gap, same = block_vs_online("cumulative", tokens)
        assert gap <= ROW_LOCAL_RTOL and len(model_decoder("cumulative")(tokens)) == len(tokens)
        bitwise[0] += same
        bitwise[1] += 1

    detail = run_property(profile, prop, ROW_FNS, INT_LISTS, INT_LISTS, st.integers(0, 9), TOKENS)
    return detail + f"; real cumulative model block == online bitwise in {bitwise[0]}/{bitwise[1]} examples"


def const_nil_row_local_control(profile: str) -> str:
    """Dropping LengthPreserving: F = [] is RowLocal but not shaped."""
    ok = row_local_on(const_nil, [1, 2], [1, 3]) and not shaped_on(const_nil, [1, 2])
    return expect_violation(ok, "[] is RowLocal but not PrefixConsistentShaped")


def row_map_row_local_run(profile: str) -> str:
    """RowLocal (rowMapDecoder f) for arbitrary pure f."""

    def prop(fn, x: list[int], tail: list[int], cut: int) -> None:
        assert row_local_on(row_map_decoder(fn), x, _with_common_prefix(x, tail, cut))

    return run_property(profile, prop, ROW_FNS, INT_LISTS, INT_LISTS, st.integers(0, 9))


def global_sum_not_row_local(profile: str) -> str:
    """globalSumDecoder is not row local: x = [0, 1], y = [0, 2] agree on row 0 but row 0 differs."""
    return expect_violation(not row_local_on(global_sum_decoder, [0, 1], [0, 2]), "row 0: 1 vs 2")


def row_map_length_run(profile: str) -> str:
    """|rowMapDecoder f x| = |x|; the real model returns one row per token."""
    real = model_decoder("cumulative")

    def prop(fn, x: list[int], tokens: list[int]) -> None:
        assert length_preserving_on(row_map_decoder(fn), x) and length_preserving_on(real, tokens)

    return run_property(profile, prop, ROW_FNS, INT_LISTS, TOKENS)


def const_nil_length_control(profile: str) -> str:
    """F = [] (no row per token) is not length preserving."""
    return expect_violation(not length_preserving_on(const_nil, [1]), "|[]| = 0 != 1")


def row_map_pc_run(profile: str) -> str:
    """PrefixConsistent (rowMapDecoder f); numerically: the cumulative-Gram model."""
    real = model_decoder("cumulative")

    def prop(fn, x: list[int], tokens: list[int]) -> None:
        assert prefix_consistent_on(row_map_decoder(fn), x)
        assert prefix_rows_gap(real, tokens) <= ROW_LOCAL_RTOL

    return run_property(profile, prop, ROW_FNS, INT_LISTS, TOKENS)


def row_map_shaped_run(profile: str) -> str:
    """PrefixConsistentShaped (rowMapDecoder f): causal masked attention satisfies the full Def. 4.8."""

    def prop(fn, x: list[int]) -> None:
        assert shaped_on(row_map_decoder(fn), x)

    return run_property(profile, prop, ROW_FNS, INT_LISTS)


def block_eq_online_run(profile: str) -> str:
    """r < |x| => (rowMapDecoder f x)[r]? = onlineOut (rowMapDecoder f) x (r+1); numerically the real
    cumulative-Gram model's one-pass block logits equal its sequential final-row calls."""

    def prop(fn, x: list[int], tokens: list[int]) -> None:
        f = row_map_decoder(fn)
        assert all(get(f(x), r) == online_out(f, x, r + 1) for r in range(len(x)))
        gap, _ = block_vs_online("cumulative", tokens)
        assert gap <= ROW_LOCAL_RTOL

    return run_property(profile, prop, ROW_FNS, INT_LISTS, TOKENS)


def block_eq_online_control(profile: str) -> str:
    """Dropping r < |x| (r = |x|): the block row (F x)[r]? is None while onlineOut F x (r+1) is the last row."""
    real = model_decoder("cumulative")

    def prop(tokens: list[int]) -> None:
        r = len(tokens)
        assert get(real(tokens), r) == online_out(real, tokens, r + 1), "None vs a row"

    return expect_counterexample(profile, prop, TOKENS)


def global_length_run(profile: str) -> str:
    """LengthPreserving globalSumDecoder."""

    def prop(x: list[int]) -> None:
        assert length_preserving_on(global_sum_decoder, x)

    return run_property(profile, prop, INT_LISTS)


def global_not_pc_run(profile: str) -> str:
    """not PrefixConsistent globalSumDecoder: the witness x = [0, 1], r = 0, and every x whose tail after row 0
    has a nonzero sum; numerically the released global-Gram model (block != online)."""
    assert global_sum_decoder([0, 1])[0] == 1 and global_sum_decoder([0])[0] == 0
    assert not prefix_consistent_on(global_sum_decoder, [0, 1])

    real = model_decoder("global")
    gaps: list[float] = []

    def prop(x: list[int], tokens: list[int]) -> None:
        if len(x) >= 2 and sum(x[1:]) != 0:
            assert not prefix_consistent_on(global_sum_decoder, x)
        gaps.append(prefix_rows_gap(real, tokens))

    detail = run_property(profile, prop, INT_LISTS, TOKENS2)
    # the statement is existential: the real global-Gram model must supply witnesses among the drawn inputs
    witnesses = sum(g > 1e-6 for g in gaps)
    assert witnesses >= 1, "the global-Gram model was prefix consistent on every drawn input"
    return detail + f"; real global-Gram model: {witnesses}/{len(gaps)} drawn inputs are witnesses " \
        f"(largest block vs prefix gap {max(gaps):.3f})"


def global_not_shaped_run(profile: str) -> str:
    """not PrefixConsistentShaped globalSumDecoder (length holds, prefix consistency fails)."""
    x = [0, 1]
    assert length_preserving_on(global_sum_decoder, x) and not shaped_on(global_sum_decoder, x)
    return "witness [0, 1]"


def row_map_consistent_control(profile: str) -> str:
    """Dropping 'global' (a row-map decoder instead of the global sum): prefix consistency holds, so the negated
    conclusion fails."""
    f = row_map_decoder(lambda p: p[-1] + sum(p))
    return expect_violation(shaped_on(f, [0, 1]), "row-map analogue of the global sum is consistent")




_ONLINE = ("pldr_ref.model.forward", "pldr_ref.inference.scoring.prefix_final_row_logits")
CHECKS = (
    Check(
        name="online_causal",
        statement=IDENTITY,
        lean=("online_causal",),
        paper="Rem. 4.7",
        label=THEOREM,
        method=(PURE_PYTHON, EXACT_FLOAT),
        exercises=("pldr_ref.model.forward",),
        run=online_causal_run,
        negative_control=online_causal_control,
        slack=f"exact on lists; real model rows normwise rtol {ROW_LOCAL_RTOL}",
        dropped="x.take t = y.take t",
    ),
    Check(
        name="prefixConsistentShaped_getElem",
        statement=IDENTITY,
        lean=("prefixConsistentShaped_getElem",),
        paper="Def. 4.8",
        label=THEOREM,
        method=(PURE_PYTHON,),
        exercises=("pldr_ref.model.forward",),
        run=shaped_get_run,
        negative_control=global_sum_violation,
        slack=f"exact on lists; real model rows normwise rtol {ROW_LOCAL_RTOL}",
        dropped="PrefixConsistentShaped F",
    ),
    Check(
        name="constNil_prefixConsistent",
        statement=LOGICAL,
        lean=("constNil_prefixConsistent",),
        paper="Def. 4.8",
        label=THEOREM,
        method=(PURE_PYTHON,),
        exercises=(),
        run=const_nil_pc_run,
        negative_control=const_nil_pc_control,
        slack="exact on lists",
        dropped="F = []",
    ),
    Check(
        name="constNil_not_prefixConsistentShaped",
        statement=LOGICAL,
        lean=("constNil_not_prefixConsistentShaped",),
        paper="Def. 4.8",
        label=THEOREM,
        method=(PURE_PYTHON,),
        exercises=(),
        run=const_nil_not_shaped_run,
        negative_control=row_map_is_shaped,
        slack="exact on lists",
        dropped="F = []",
    ),
    Check(
        name="prefixConsistent_of_rowLocal",
        statement=LOGICAL,
        lean=("prefixConsistent_of_rowLocal",),
        paper="Def. 4.8 / Rem. 4.9(i)",
        label=THEOREM,
        method=(PURE_PYTHON,),
        exercises=("pldr_ref.model.forward",),
        run=pc_of_row_local_run,
        negative_control=global_model_violation,
        slack=f"exact on lists; real model rows normwise rtol {ROW_LOCAL_RTOL}",
        dropped="RowLocal F",
    ),
    Check(
        name="prefixConsistentShaped_of_rowLocal",
        statement=LOGICAL,
        lean=("prefixConsistentShaped_of_rowLocal",),
        paper="Def. 4.8",
        label=THEOREM,
        method=(PURE_PYTHON,),
        exercises=_ONLINE,
        run=shaped_of_row_local_run,
        negative_control=const_nil_row_local_control,
        slack=f"exact on lists; real model rows normwise rtol {ROW_LOCAL_RTOL}",
        dropped="LengthPreserving F",
    ),
    Check(
        name="rowMapDecoder_rowLocal",
        statement=LOGICAL,
        lean=("rowMapDecoder_rowLocal",),
        paper="Def. 4.8",
        label=THEOREM,
        method=(PURE_PYTHON,),
        exercises=(),
        run=row_map_row_local_run,
        negative_control=global_sum_not_row_local,
        slack="exact on lists",
        dropped="row r reads only x.take(r+1)",
    ),
    Check(
        name="rowMapDecoder_lengthPreserving",
        statement=IDENTITY,
        lean=("rowMapDecoder_lengthPreserving",),
        paper="Def. 4.8",
        label=THEOREM,
        method=(PURE_PYTHON,),
        exercises=("pldr_ref.model.forward",),
        run=row_map_length_run,
        negative_control=const_nil_length_control,
        slack=f"exact on lists; real model rows normwise rtol {ROW_LOCAL_RTOL}",
        dropped="one row per token",
    ),
    Check(
        name="rowMapDecoder_prefixConsistent",
        statement=LOGICAL,
        lean=("rowMapDecoder_prefixConsistent",),
        paper="Def. 4.8",
        label=THEOREM,
        method=(PURE_PYTHON,),
        exercises=("pldr_ref.model.forward",),
        run=row_map_pc_run,
        negative_control=global_model_violation,
        slack=f"exact on lists; real model rows normwise rtol {ROW_LOCAL_RTOL}",
        dropped="row-map (causal) structure",
    ),
    Check(
        name="rowMapDecoder_prefixConsistentShaped",
        statement=LOGICAL,
        lean=("rowMapDecoder_prefixConsistentShaped",),
        paper="Def. 4.8 / Prop. 3.12",
        label=THEOREM,
        method=(PURE_PYTHON,),
        exercises=(),
        run=row_map_shaped_run,
        negative_control=global_sum_violation,
        slack="exact on lists",
        dropped="row-map (causal) structure",
    ),
    Check(
        name="rowMapDecoder_block_eq_online",
        statement=IDENTITY,
        lean=("rowMapDecoder_block_eq_online",),
        paper="Rem. 4.9(i)",
        label=THEOREM,
        method=(PURE_PYTHON, EXACT_FLOAT),
        exercises=_ONLINE,
        run=block_eq_online_run,
        negative_control=block_eq_online_control,
        slack=f"exact on lists; real model rows normwise rtol {ROW_LOCAL_RTOL}",
        dropped="r < |x|",
    ),
    Check(
        name="globalSumDecoder_lengthPreserving",
        statement=IDENTITY,
        lean=("globalSumDecoder_lengthPreserving",),
        paper="Rem. 4.9(i)",
        label=THEOREM,
        method=(PURE_PYTHON,),
        exercises=(),
        run=global_length_run,
        negative_control=const_nil_length_control,
        slack="exact on lists",
        dropped="one row per token",
    ),
    Check(
        name="globalSumDecoder_not_prefixConsistent",
        statement=LOGICAL,
        lean=("globalSumDecoder_not_prefixConsistent",),
        paper="Rem. 4.9(i)",
        label=THEOREM,
        method=(PURE_PYTHON, EXACT_FLOAT),
        exercises=("pldr_ref.model.forward",),
        run=global_not_pc_run,
        negative_control=row_map_consistent_control,
        slack=f"exact on lists; real model rows normwise rtol {ROW_LOCAL_RTOL}",
        dropped="the global sum",
    ),
    Check(
        name="globalSumDecoder_not_prefixConsistentShaped",
        statement=LOGICAL,
        lean=("globalSumDecoder_not_prefixConsistentShaped",),
        paper="Rem. 4.9(i)",
        label=THEOREM,
        method=(PURE_PYTHON,),
        exercises=(),
        run=global_not_shaped_run,
        negative_control=row_map_consistent_control,
        slack="exact on lists",
        dropped="the global sum",
    ),
)
