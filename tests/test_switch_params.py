"""Parameters a switch value adds (:class:`pldr_ref.switches.SwitchParam`): an optional stage declares its own
weights in its switch record, and :func:`pldr_ref.params.param_shapes`, ``init_params``, ``Params.layer`` and the
memory budget's closed-form count follow, with every config at the default unchanged.

The table has no such switch today, so each test puts the parameters on an existing non-default value
(``gram_mode="cumulative"``) through a patched :data:`pldr_ref.switches.SWITCHES` (pytest's ``monkeypatch``,
undone after the test).
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from pldr_ref import switches
from pldr_ref.config import PLDRConfig
from pldr_ref.memory_budget import parameter_count
from pldr_ref.params import init_params, layer_prefix, param_shapes
from pldr_ref.switches import SwitchParam, added_params, switch

TINY = PLDRConfig.preset("tiny")
ON = dataclasses.replace(TINY, gram_mode="cumulative")
LAYER_GAIN = SwitchParam("trial_norm.weight", ("d_k",))
LAYER_MATRIX = SwitchParam("trial.proj", ("num_heads", "d_k", 3))
MODEL_GAIN = SwitchParam("decoder.trial_norm.weight", ("d_model",), per_layer=False)


@pytest.fixture
def table_with_params(monkeypatch: pytest.MonkeyPatch) -> None:
    patched = tuple(dataclasses.replace(s, params={"cumulative": (LAYER_GAIN, LAYER_MATRIX, MODEL_GAIN)})
                    if s.name == "gram_mode" else s for s in switches.SWITCHES)
    monkeypatch.setattr(switches, "SWITCHES", patched)


def test_a_value_adds_its_tensors_after_its_layer_and_before_the_lm_head(table_with_params: None) -> None:
    names = list(param_shapes(ON))
    for i in range(ON.num_layers):
        p = layer_prefix(i)
        own = [n for n in names if n.startswith(p)]
        assert own[-2:] == [p + "trial_norm.weight", p + "trial.proj"]  # after the layer's own tensors
        assert param_shapes(ON)[p + "trial.proj"] == (ON.num_heads, ON.d_k, 3)
    assert names.index("decoder.trial_norm.weight") == names.index("final_layer.weight") - 1
    assert param_shapes(ON)["decoder.trial_norm.weight"] == (ON.d_model,)
    # every other tensor, and its place in the order, is the config's without the value
    assert [n for n in names if "trial" not in n] == list(param_shapes(dataclasses.replace(ON, gram_mode="global")))


def test_the_default_adds_nothing(table_with_params: None) -> None:
    assert added_params(TINY, per_layer=True) == () and added_params(TINY, per_layer=False) == ()
    assert not any("trial" in n for n in param_shapes(TINY))


def test_init_layer_view_and_budget_follow(table_with_params: None) -> None:
    params = init_params(ON, seed=3)
    lp = params.layer(1)
    assert set(lp.extra) == {"trial_norm.weight", "trial.proj"}
    assert lp.extra["trial.proj"] is params[layer_prefix(1) + "trial.proj"]
    np.testing.assert_array_equal(lp.extra["trial_norm.weight"], np.ones(ON.d_k))  # a norm gain starts at 1
    assert parameter_count(ON) == sum(int(np.prod(s)) for s in param_shapes(ON).values())
    # negative control: the count without the added tensors is what the config without the value has
    assert parameter_count(ON) - parameter_count(TINY) == ON.num_layers * (ON.d_k + ON.num_heads * ON.d_k * 3) \
        + ON.d_model
    assert init_params(TINY, seed=3).layer(1).extra == {}


def test_a_record_giving_the_default_parameters_is_refused() -> None:
    sw = switch("gram_mode")
    with pytest.raises(ValueError, match="params must be keyed by non-default values"):
        dataclasses.replace(sw, params={"global": (LAYER_GAIN,)})
    with pytest.raises(ValueError, match="params must be keyed by non-default values"):
        dataclasses.replace(sw, params={"bogus": (LAYER_GAIN,)})
    assert dataclasses.replace(sw, params={"cumulative": (LAYER_GAIN,)}).params["cumulative"] == (LAYER_GAIN,)
