"""Order parameter m(theta) of paper Definition 5.1 (issue 3 item 7)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp
from inference_models import model, tokens

from pldr_ref import forward
from pldr_ref.order_parameter import order_parameter, relative_rms_fluctuation

finite = st.one_of(st.just(0.0), st.floats(1e-100, 1e6), st.floats(-1e6, -1e-100))
pairs = st.integers(1, 4).flatmap(
    lambda n: st.tuples(*(hnp.arrays(np.float64, (n, 3), elements=finite) for _ in range(2)))
)


def test_zero_for_identical_inputs():
    p = model("tiny")
    ids = tokens(2, 6, 64)
    m = order_parameter(forward(p, ids), forward(p, ids.copy()))
    assert set(m) == {"A", "A_LM", "A_P", "G_LM"}
    assert all(np.all(v == 0.0) for v in m.values())


def test_zero_for_identity_g_across_inputs_positive_for_learned_g():
    a, b = tokens(2, 6, 64, seed=1), tokens(2, 6, 64, seed=2)
    pi = model("tiny", g_mode="identity")
    mi = order_parameter(forward(pi, a), forward(pi, b))
    assert set(mi) == {"A", "G_LM"}  # no A_LM / A_P with a fixed G
    assert np.all(mi["G_LM"] == 0.0)
    assert np.all(mi["A"] > 0)  # the metric learner still sees the input
    # negative control: learned G with random weights fluctuates at every layer and tensor type
    pl = model("small")
    ml = order_parameter(forward(pl, tokens(1, 7, 256, seed=1)), forward(pl, tokens(1, 7, 256, seed=2)))
    print("learned G, random weights, m per layer:", {k: np.round(v, 4).tolist() for k, v in ml.items()})
    assert all(np.all(v > 0) for v in ml.values())


def test_hand_made_tensors():
    t1 = np.ones((2, 2))
    t2 = 1.1 * np.ones((2, 2))
    assert relative_rms_fluctuation(t1, t2) == pytest.approx(0.1 / 1.05, rel=1e-14)
    assert relative_rms_fluctuation(t1, t2, "first") == pytest.approx(0.1, rel=1e-14)
    z = np.zeros((3, 3))
    assert relative_rms_fluctuation(z, z) == 0.0  # 0/0 = 0
    assert relative_rms_fluctuation(z, np.ones((3, 3)), "first") == np.inf
    assert relative_rms_fluctuation(z, np.ones((3, 3))) == pytest.approx(2.0)
    tiny = np.array([5e-324, 0.0])  # subnormal difference: squares would underflow without scaling
    assert relative_rms_fluctuation(np.zeros(2), tiny) == pytest.approx(2.0)
    assert relative_rms_fluctuation(np.full(2, 1e300), np.full(2, 1.1e300)) == pytest.approx(0.1 / 1.05, rel=1e-14)
    with pytest.raises(ValueError, match="shapes"):
        relative_rms_fluctuation(z, np.zeros((2, 3)))
    with pytest.raises(ValueError, match="normalization"):
        relative_rms_fluctuation(z, z, "max")


@given(pairs)
def test_matches_direct_formula(pair):
    a, b = pair
    n = a.size
    num = np.linalg.norm((a - b).ravel()) / np.sqrt(n)
    den = 0.5 * (np.linalg.norm(a.ravel()) + np.linalg.norm(b.ravel())) / np.sqrt(n)
    got = relative_rms_fluctuation(a, b)
    if np.array_equal(a, b):
        assert got == 0.0
    else:
        assert got == pytest.approx(num / den, rel=1e-12)
        assert 0 < got <= 2.0 + 1e-12  # triangle inequality bound of the symmetric convention
