"""RoPE: layout identity (acceptance item 2, first half), orthogonality and relativity (item 3),
and the torchtune float32 table semantics (spec §12)."""

from __future__ import annotations

import numpy as np
import pytest
from core_support import rel_diff
from hypothesis import given
from hypothesis import strategies as st

from pldr_ref.rope import apply_rope, interleave_permutation, rope_angles, rope_frequencies

DKS = st.sampled_from([2, 4, 6, 8, 64])
PRECISIONS = st.sampled_from(["exact", "float32"])


def _x(seed: int, shape: tuple[int, ...], scale: float = 1.0) -> np.ndarray:
    return scale * np.random.default_rng(seed).standard_normal(shape)


# ------------------------------------------------------------------ item 2: interleaved(x)[pi] == half(x[pi])
@given(d_k=DKS, seq=st.integers(1, 5), start=st.integers(0, 4000), precision=PRECISIONS, seed=st.integers(0, 999))
def test_layout_permutation_identity(d_k: int, seq: int, start: int, precision: str, seed: int) -> None:
    """interleaved(x)[pi] == half(x[pi]) bit for bit (same arithmetic on the same pairs)."""
    pi = interleave_permutation(d_k)
    x = _x(seed, (2, 3, seq, d_k))
    pos = np.arange(start, start + seq)
    inter = apply_rope(x, pos, layout="interleaved", precision=precision)
    half = apply_rope(x[..., pi], pos, layout="half", precision=precision)
    np.testing.assert_array_equal(inter[..., pi], half)


def test_layout_permutation_values() -> None:
    np.testing.assert_array_equal(interleave_permutation(8), [0, 2, 4, 6, 1, 3, 5, 7])


@pytest.mark.parametrize("d_k", [4, 8, 64])
def test_negative_control_layouts_differ_without_pi(d_k: int) -> None:
    """Without the permutation the two layouts are different maps (d_k = 2 is the one case where they agree)."""
    x = _x(0, (1, 1, 4, d_k))
    pos = np.arange(1, 5)
    assert rel_diff(apply_rope(x, pos, layout="interleaved"), apply_rope(x, pos, layout="half")) > 1e-3
    np.testing.assert_array_equal(interleave_permutation(2), [0, 1])


# ------------------------------------------------------------------ item 3: orthogonal and relative
def _rotation_matrix(pos: int, d_k: int, layout: str, precision: str = "exact", rope=apply_rope) -> np.ndarray:
    """R_p as a matrix: row j of the result is R_p e_j, so R = result.T."""
    eye = np.eye(d_k)[None, None]  # [1, 1, d_k (rows as positions), d_k]
    rows = rope(eye, np.full(d_k, pos), layout=layout, precision=precision)[0, 0]
    return rows.T


@given(d_k=DKS, pos=st.integers(0, 4095), layout=st.sampled_from(["interleaved", "half"]))
def test_rope_is_orthogonal(d_k: int, pos: int, layout: str) -> None:
    r = _rotation_matrix(pos, d_k, layout)
    assert np.max(np.abs(r @ r.T - np.eye(d_k))) <= 1e-15 * 8


@given(d_k=DKS, m=st.integers(0, 2000), n=st.integers(0, 2000), shift=st.integers(-2000, 2000),
       layout=st.sampled_from(["interleaved", "half"]), seed=st.integers(0, 999))
def test_rope_inner_product_is_relative(d_k: int, m: int, n: int, shift: int, layout: str, seed: int) -> None:
    """<R_m q, R_n k> == <R_{m+s} q, R_{n+s} k> (depends only on n - m), <= 1e-12 relative."""
    if min(m, n) + shift < 0:
        shift = -min(m, n)
    q, k = _x(seed, (1, 1, 1, d_k)), _x(seed + 1, (1, 1, 1, d_k))

    def dot(a: int, b: int) -> float:
        qa = apply_rope(q, np.array([a]), layout=layout)
        kb = apply_rope(k, np.array([b]), layout=layout)
        return float(np.sum(qa * kb))

    ref = dot(m, n)
    norm = float(np.linalg.norm(q) * np.linalg.norm(k))
    assert abs(dot(m + shift, n + shift) - ref) <= 1e-12 * norm


def test_rope_float32_is_relative_to_float32_accuracy() -> None:
    """With the float32 table the relation holds to float32 accuracy only (documented, spec §12)."""
    q, k = _x(1, (1, 1, 1, 64)), _x(2, (1, 1, 1, 64))

    def dot(a: int, b: int) -> float:
        qa = apply_rope(q, np.array([a]), precision="float32")
        return float(np.sum(qa * apply_rope(k, np.array([b]), precision="float32")))

    norm = float(np.linalg.norm(q) * np.linalg.norm(k))
    for m, n, s in [(3, 10, 500), (0, 1000, 3000), (7, 7, 1023)]:
        assert abs(dot(m + s, n + s) - dot(m, n)) <= 1e-5 * norm


def _broken_rope(x: np.ndarray, positions: np.ndarray, layout: str, precision: str) -> np.ndarray:
    """Angle p^2 * omega instead of p * omega: still orthogonal, no longer relative."""
    return apply_rope(x, np.asarray(positions) ** 2, layout=layout, precision=precision)


def _scaled_rope(x: np.ndarray, positions: np.ndarray, layout: str, precision: str) -> np.ndarray:
    """A rotation scaled by (1 + 1e-3 p): relative-looking for s = 0, not orthogonal."""
    return apply_rope(x, positions, layout=layout, precision=precision) * (1 + 1e-3 * positions[..., None])


def test_negative_controls_rope_properties() -> None:
    q, k = _x(1, (1, 1, 1, 8)), _x(2, (1, 1, 1, 8))
    a = float(np.sum(_broken_rope(q, np.array([2]), "interleaved", "exact")
                     * _broken_rope(k, np.array([5]), "interleaved", "exact")))
    b = float(np.sum(_broken_rope(q, np.array([12]), "interleaved", "exact")
                     * _broken_rope(k, np.array([15]), "interleaved", "exact")))
    assert abs(a - b) > 1e-6
    r = _rotation_matrix(3, 8, "interleaved", rope=_scaled_rope)
    assert np.max(np.abs(r @ r.T - np.eye(8))) > 1e-4


# ------------------------------------------------------------------ float32 semantics (torchtune)
def test_float32_table_is_float32() -> None:
    omega = rope_frequencies(64, 10000.0, "float32")
    cos, sin = rope_angles(np.arange(5), 64, 10000.0, "float32")
    assert omega.dtype == cos.dtype == sin.dtype == np.float32
    assert apply_rope(_x(0, (1, 1, 5, 64)), np.arange(5), precision="float32").dtype == np.float64


def test_float32_rope_rounds_inputs_to_float32() -> None:
    """q, k are rounded to float32 first (torchtune ``x.float()``): inputs equal in float32 give equal outputs."""
    x = _x(0, (1, 1, 3, 8))
    x_f32 = x.astype(np.float32).astype(np.float64)
    pos = np.arange(3)
    np.testing.assert_array_equal(apply_rope(x, pos, precision="float32"), apply_rope(x_f32, pos, precision="float32"))
    assert not np.array_equal(apply_rope(x, pos, precision="exact"), apply_rope(x_f32, pos, precision="exact"))


def test_float32_rope_matches_torchtune_construction() -> None:
    """The table is built the torchtune way: theta and p * theta bit-exact, cos/sin within 1 float32 ulp.

    torch's float32 pow is correctly rounded (so is ours); its cos/sin kernels are not always, so the
    reference takes cos/sin correctly rounded and differs from torch by at most 1 ulp (6e-8 relative).
    The rotation itself (float32 products and sums, no FMA) is then bit-exact given the same table.
    """
    torch = pytest.importorskip("torch")
    dim, base, n = 64, 10000, 1024
    theta = 1.0 / (base ** (torch.arange(0, dim, 2)[: dim // 2].float() / dim))
    idx = torch.einsum("i, j -> ij", torch.arange(n, dtype=theta.dtype), theta).float()
    np.testing.assert_array_equal(rope_frequencies(dim, base, "float32"), theta.numpy())
    cos, sin = rope_angles(np.arange(n), dim, float(base), "float32")
    phi = np.arange(n, dtype=np.float32)[:, None] * rope_frequencies(dim, base, "float32")
    np.testing.assert_array_equal(phi, idx.numpy())
    for ours, theirs in ((cos, torch.cos(idx).numpy()), (sin, torch.sin(idx).numpy())):
        ulps = np.abs(ours.view(np.int32).astype(np.int64) - theirs.view(np.int32).astype(np.int64))
        same_sign = np.sign(ours) == np.sign(theirs)
        assert np.all((ulps <= 1) | ~same_sign & (np.abs(ours) < 1e-6))
    # the rotation with torch's own table, done in torch, equals ours given that table
    x = _x(5, (1, 7, 1, dim))  # torchtune layout [B, S, H, d_k]
    tc, ts = torch.cos(idx[:7]), torch.sin(idx[:7])
    xs = torch.from_numpy(x).float().reshape(1, 7, 1, dim // 2, 2)
    c4, s4 = tc.view(1, 7, 1, dim // 2), ts.view(1, 7, 1, dim // 2)
    t_out = torch.stack([xs[..., 0] * c4 - xs[..., 1] * s4, xs[..., 1] * c4 + xs[..., 0] * s4], -1).flatten(3)
    x32 = x.astype(np.float32)
    cn, sn = tc.numpy()[None, :, None, :], ts.numpy()[None, :, None, :]
    y1 = x32[..., 0::2] * cn - x32[..., 1::2] * sn
    y2 = x32[..., 1::2] * cn + x32[..., 0::2] * sn
    np.testing.assert_array_equal(np.stack([y1, y2], -1).reshape(x.shape), t_out.numpy())
