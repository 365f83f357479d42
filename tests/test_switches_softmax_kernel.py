"""Issue 20, item 4: an explicit float32 softmax kernel supplied by the user (``softmax_precision="explicit"``,
:class:`pldr_ref.attention.SoftmaxKernel`), as ``RopeTable`` is for RoPE.

torch's float32 softmax (HF eager ``F.softmax(..., dtype=float32)``) is not correctly rounded, so
``softmax_precision="float32"`` cannot reproduce it; the kernel replays it bit for bit.
"""

from __future__ import annotations

import numpy as np
import pytest
from core_support import model_params, rel_diff, token_ids

from pldr_ref import PLDRConfig, attention, forward
from pldr_ref.attention import attention_weights, softmax_float32
from pldr_ref.constants import FINFO_MIN_F64
from pldr_ref.inference.generation import generate
from pldr_ref.params import Params

TINY = PLDRConfig.preset("tiny")
EAGER = TINY.emulate("hf-eager")


def _kernel(fn: object, name: str = "user") -> object:
    """The SoftmaxKernel under test (read at call time, so each test fails on its own where it is missing)."""
    return attention.SoftmaxKernel(fn, name)


def _correctly_rounded(l32: np.ndarray) -> np.ndarray:
    return softmax_float32(l32).astype(np.float32)


def _one_ulp_up(l32: np.ndarray) -> np.ndarray:
    """A float32 softmax that is one ulp off the correctly rounded one in every entry (a stand-in for a
    framework kernel that rounds differently)."""
    return np.nextafter(_correctly_rounded(l32), np.float32(np.inf))


def _explicit(cfg: PLDRConfig) -> PLDRConfig:
    return cfg.replace(softmax_precision="explicit")


def _inputs(seed: int) -> tuple[Params, np.ndarray, np.ndarray]:
    params = model_params(EAGER, seed)
    ids = token_ids(EAGER, 2, 6, seed)
    mask = np.ones((2, 6), dtype=np.int64)
    mask[1, 4:] = 0  # right padding: finite rows
    return params, ids, mask


def test_kernel_replaces_the_float32_softmax_and_is_used() -> None:
    params, ids, mask = _inputs(1)
    ref = forward(params, ids, attention_mask=mask)
    exp_params = Params(_explicit(EAGER), dict(params.items()))
    same = forward(exp_params, ids, attention_mask=mask, softmax_kernel=_kernel(_correctly_rounded))
    np.testing.assert_array_equal(same.logits, ref.logits)  # the kernel is softmax_precision="float32" itself
    moved = forward(exp_params, ids, attention_mask=mask, softmax_kernel=_kernel(_one_ulp_up, "up"))
    e_ref, e_up = ref.layers[0].E, moved.layers[0].E
    allowed = e_ref > 0
    np.testing.assert_array_equal(e_up[allowed], np.nextafter(e_ref[allowed].astype(np.float32),
                                                              np.float32(np.inf)).astype(np.float64))
    assert 0 < rel_diff(moved.logits, ref.logits) < 1e-5


def test_kernel_flows_through_generation() -> None:
    params, ids, mask = _inputs(2)
    exp_params = Params(_explicit(EAGER), dict(params.items()))
    calls = []

    def counting(l32: np.ndarray) -> np.ndarray:
        calls.append(l32.shape)
        return _correctly_rounded(l32)

    got = generate(exp_params, ids, 3, mode="hf", attention_mask=mask, softmax_kernel=_kernel(counting))
    want = generate(params, ids, 3, mode="hf", attention_mask=mask)
    np.testing.assert_array_equal(got.step_logits, want.step_logits)
    assert len(calls) >= 3 * EAGER.num_layers  # prompt pass and two cached steps, every layer


def test_kernel_and_switch_must_agree() -> None:
    params, ids, mask = _inputs(3)
    kernel = _kernel(_correctly_rounded)
    with pytest.raises(ValueError, match="SoftmaxKernel was given but softmax_precision='float32'"):
        forward(params, ids, attention_mask=mask, softmax_kernel=kernel)
    exp_params = Params(_explicit(EAGER), dict(params.items()))
    with pytest.raises(ValueError, match="softmax_precision='explicit' needs a SoftmaxKernel"):
        forward(exp_params, ids, attention_mask=mask)
    with pytest.raises(TypeError, match="callable"):
        _kernel("softmax")  # type: ignore[arg-type]


def test_kernel_output_is_checked() -> None:
    logits = np.zeros((1, 1, 2, 3))
    bad64 = _kernel(lambda l32: np.full(l32.shape, 1 / 3), "float64-out")
    with pytest.raises(ValueError, match="must return float32 weights of shape"):
        attention_weights(logits, None, precision="explicit", kernel=bad64)
    bad_shape = _kernel(lambda l32: np.zeros((3,), dtype=np.float32), "shape")
    with pytest.raises(ValueError, match=r"shape \(1, 1, 2, 3\)"):
        attention_weights(logits, None, precision="explicit", kernel=bad_shape)


def test_kernel_sees_rn32_logits_with_minus_inf_for_finfo_min() -> None:
    seen = []

    def spy(l32: np.ndarray) -> np.ndarray:
        seen.append(l32.copy())
        return _correctly_rounded(l32)

    logits = np.array([[[[0.1, FINFO_MIN_F64, 2.0]]]])
    attention_weights(logits, None, precision="explicit", kernel=_kernel(spy))
    assert seen[0].dtype == np.float32
    np.testing.assert_array_equal(seen[0], np.array([[[[np.float32(0.1), -np.inf, 2.0]]]], dtype=np.float32))


def test_exact_tier_refuses_an_explicit_kernel() -> None:
    from pldr_ref.exact.model import forward as exact_forward

    params = model_params(_explicit(TINY), 4)
    with pytest.raises(NotImplementedError, match="no exact statement"):
        exact_forward(params, token_ids(TINY, 1, 3, 4), dps=30, guard=False)


@pytest.mark.torch
def test_torch_softmax_replayed_bit_for_bit_and_its_distance_to_the_correctly_rounded_one() -> None:
    torch = pytest.importorskip("torch", reason="replays torch's float32 softmax")
    kernel = _kernel(lambda l32: torch.softmax(torch.from_numpy(l32), dim=-1).numpy(), "torch")
    logits = np.random.default_rng(0).standard_normal((1000, 9)) * 6  # the measurement (docs/equations.md)
    logits[0] = FINFO_MIN_F64  # a fully masked HF eager row: NaN in torch and in the replay
    want = torch.nn.functional.softmax(torch.from_numpy(logits), dim=-1, dtype=torch.float32).double().numpy()
    got = attention_weights(logits, None, precision="explicit", kernel=kernel)
    np.testing.assert_array_equal(got, want)  # NaN rows compare equal too
    # the correctly rounded float32 softmax is not torch's: many entries differ, by more than "a few" ulps
    cr = softmax_float32(logits[1:]).astype(np.float32)
    ulps = np.abs(want[1:].astype(np.float32).view(np.int32).astype(np.int64) - cr.view(np.int32).astype(np.int64))
    assert np.mean(ulps > 0) > 0.2
    assert 1 <= ulps.max() <= 64
