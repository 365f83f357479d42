"""Issue 12: the switch values reproduce torch's own arithmetic bit for bit, given torch's table.

The torch expressions below restate the released formulas (torchtune ``RotaryPositionalEmbeddings``, HF
``apply_rotary_pos_emb`` / ``eager_attention_forward``, PT-v510 ``cg_align_one``) with torch primitives; each
comparison is against pldr_ref's switch with the table passed as ``RopeTable`` (``rope_table="explicit"``).
"""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="compares against torch's arithmetic")

from pldr_ref.attention import apply_mask, attention_scores, softmax_float32  # noqa: E402
from pldr_ref.constants import FINFO_MIN_F64  # noqa: E402
from pldr_ref.rope import RopeTable, apply_rope, rope_angles  # noqa: E402

pytestmark = pytest.mark.torch
D_K, P = 8, 16


def _torch_table() -> tuple[torch.Tensor, torch.Tensor]:
    """torchtune's float32 cache: theta = 1 / base^(arange(0, d, 2).float() / d), cos/sin of p * theta."""
    theta = 1.0 / (10000 ** (torch.arange(0, D_K, 2)[: D_K // 2].float() / D_K))
    idx = torch.einsum("i,j->ij", torch.arange(P, dtype=theta.dtype), theta).float()
    return torch.cos(idx), torch.sin(idx)


def _x(seed: int) -> np.ndarray:
    return np.random.Generator(np.random.PCG64(seed)).standard_normal((2, 3, P, D_K)) * 2


def _interleaved(x: torch.Tensor, c: torch.Tensor, s: torch.Tensor) -> torch.Tensor:
    xs = x.reshape(*x.shape[:-1], -1, 2)
    return torch.stack([xs[..., 0] * c - xs[..., 1] * s, xs[..., 1] * c + xs[..., 0] * s], -1).flatten(-2)


def test_torch_table_angles_match_and_values_differ_by_at_most_one_ulp() -> None:
    tc, ts = _torch_table()
    rc, rs = rope_angles(np.arange(P), D_K, 10000.0, "float32")
    for t, r in ((tc.numpy(), rc), (ts.numpy(), rs)):
        ulps = np.abs(t.view(np.int32).astype(np.int64) - r.view(np.int32).astype(np.int64))
        assert ulps.max() <= 1


def test_float32_buffers_rotation_is_torchtune_bit_for_bit() -> None:
    tc, ts = _torch_table()
    x = _x(1)
    want = _interleaved(torch.from_numpy(x).float(), tc, ts).double().numpy()  # x.float(), type_as(x)
    got = apply_rope(x, np.arange(P), table="explicit", arithmetic="float32",
                     explicit=RopeTable(tc.numpy(), ts.numpy()))
    np.testing.assert_array_equal(got, want)


def test_double_cast_rotation_is_torchtune_bit_for_bit() -> None:
    tc, ts = _torch_table()
    x = _x(2)
    want = _interleaved(torch.from_numpy(x).float(), tc.double(), ts.double()).numpy()  # float64 buffers
    got = apply_rope(x, np.arange(P), table="explicit", arithmetic="float64_qk_f32",
                     explicit=RopeTable(tc.numpy(), ts.numpy()))
    np.testing.assert_array_equal(got, want)


def test_hf_reference_rope_false_is_bit_for_bit() -> None:
    tc, ts = _torch_table()
    x = _x(3)
    q = torch.from_numpy(x)
    cos, sin = torch.cat((tc, tc), -1).double(), torch.cat((ts, ts), -1).double()  # cos.to(dtype=x.dtype)
    half = D_K // 2
    want = (q * cos + torch.cat((-q[..., half:], q[..., :half]), -1) * sin).numpy()
    got = apply_rope(x, np.arange(P), layout="half", table="explicit", arithmetic="float64",
                     explicit=RopeTable(tc.numpy(), ts.numpy()))
    np.testing.assert_array_equal(got, want)


def test_scales_are_torch_bit_for_bit() -> None:
    rng = np.random.Generator(np.random.PCG64(4))
    q, g, k = rng.standard_normal((1, 2, 5, 8)), rng.standard_normal((1, 2, 8, 8)), rng.standard_normal((1, 2, 6, 8))
    ep = torch.matmul(torch.matmul(torch.from_numpy(q), torch.from_numpy(g)), torch.from_numpy(k).transpose(-1, -2))
    pt = (ep / torch.sqrt(torch.tensor(8).to(torch.float32))).numpy()  # PT-v510 cg_align_one
    hf = (ep * (1 / torch.sqrt(torch.tensor(8).to(torch.float64)))).numpy()  # HF scaling
    assert np.max(np.abs(attention_scores(q, g, k, "float32") - pt)) <= 4 * 2.0**-52 * np.max(np.abs(pt))
    assert np.max(np.abs(attention_scores(q, g, k, "reciprocal") - hf)) <= 4 * 2.0**-52 * np.max(np.abs(hf))
    # the scale itself is what torch uses, exactly
    assert float(torch.sqrt(torch.tensor(8).to(torch.float32))) == float(np.sqrt(np.float32(8)))
    # torch's float64 division is within 1 ulp, not always correctly rounded: its AVX-512 kernel gives
    # 0.3535533905932738 for 1 / sqrt(8), one ulp above the correctly rounded 0.35355339059327373 (AVX2: equal)
    hf_scale = float(1 / torch.sqrt(torch.tensor(8).to(torch.float64)))
    assert abs(hf_scale - 1.0 / np.sqrt(8.0)) <= np.spacing(1.0 / np.sqrt(8.0))


def test_float32_mask_addition_is_torch_float32_bit_for_bit() -> None:
    rng = np.random.Generator(np.random.PCG64(5))
    scores = rng.standard_normal((2, 1, 4, 4)) * 80
    mask = rng.random((2, 1, 4, 4)) < 0.5
    want = (torch.from_numpy(scores).float() + torch.from_numpy(mask).float() * -1e9).double().numpy()
    got = apply_mask(scores, mask, "additive", -1e9, "float32")
    np.testing.assert_array_equal(got[mask], want[mask])


def test_eager_float32_softmax_is_close_to_torch_and_nan_alike() -> None:
    """The correctly rounded float32 softmax is near torch's, not equal: torch's kernel is off by up to 18 float32
    ulps on 1000 x 9 logits (docs/equations.md); tests/test_switches_softmax_kernel.py replays it exactly."""
    rng = np.random.Generator(np.random.PCG64(6))
    logits = rng.standard_normal((3, 9)) * 5
    logits[0, :] = FINFO_MIN_F64  # a fully masked row (finfo(float64).min)
    logits[1, :4] = FINFO_MIN_F64
    want = torch.nn.functional.softmax(torch.from_numpy(logits), dim=-1, dtype=torch.float32).double().numpy()
    got = softmax_float32(logits)
    assert np.isnan(want[0]).all() and np.isnan(got[0]).all()
    assert np.max(np.abs(got[1:] - want[1:])) <= 64 * 2.0**-24 * np.max(np.abs(want[1:]))
