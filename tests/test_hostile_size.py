"""Size guard (issue 21 item 8): a config or forward far above the memory budget is refused at once with a
message naming the estimate and the override; the estimates are honest upper bounds of what is allocated."""

from __future__ import annotations

import time
import tracemalloc

import numpy as np
import pytest

from pldr_ref import PLDRConfig, init_params
from pldr_ref.checkpoint import load_state_dict
from pldr_ref.memory_budget import (
    BUDGET_ENV,
    DEFAULT_BUDGET_BYTES,
    MemoryBudgetError,
    build_bytes,
    check_forward_budget,
    forward_bytes,
    memory_budget,
    parameter_count,
)
from pldr_ref.model import forward
from pldr_ref.params import param_shapes

HUGE = {"num_layers": 10**8}


@pytest.mark.parametrize("entry", ["init_params", "param_shapes", "load_state_dict"])
def test_num_layers_1e8_is_refused_in_well_under_a_second(entry: str) -> None:
    config = PLDRConfig.preset("tiny", **HUGE)
    call = {"init_params": lambda: init_params(config), "param_shapes": lambda: param_shapes(config),
            "load_state_dict": lambda: load_state_dict({}, config)}[entry]
    t0 = time.perf_counter()
    with pytest.raises(MemoryBudgetError, match=rf"estimated 7\.49e\+03 GiB .*{BUDGET_ENV}=") as info:
        call()
    assert time.perf_counter() - t0 < 0.5
    assert "num_layers=100000000" in str(info.value) and "32 GiB" in str(info.value)


def test_a_forward_above_the_budget_is_refused_before_allocating() -> None:
    shape = (1, 10**5)  # the scores alone: 2 layers x 2 heads x 10^10 x 8 bytes
    params = init_params(PLDRConfig.preset("tiny", max_seq_len=10**6))
    ids = np.ones(shape, dtype=np.int64)
    t0 = time.perf_counter()
    with pytest.raises(MemoryBudgetError, match=rf"B={shape[0]} x S={shape[1]} .* {BUDGET_ENV}="):
        forward(params, ids)
    assert time.perf_counter() - t0 < 0.5


def test_the_budget_is_overridable(monkeypatch: pytest.MonkeyPatch) -> None:
    params = init_params(PLDRConfig.preset("tiny"))
    ids = np.ones((2, 8), dtype=np.int64)
    forward(params, ids)  # the default budget lets a small forward through (negative control)
    monkeypatch.setenv(BUDGET_ENV, "64K")
    assert memory_budget() == 64 * 1024
    with pytest.raises(MemoryBudgetError, match=r"above the memory budget of 6\.1e-05 GiB"):
        forward(params, ids)
    with pytest.raises(MemoryBudgetError):
        init_params(PLDRConfig.preset("small"))
    check_forward_budget(params.config, 2, 8, budget=10**9)  # the argument wins over the variable
    monkeypatch.setenv(BUDGET_ENV, "none")
    assert memory_budget() is None
    big = PLDRConfig.preset("tiny", num_layers=1000)
    monkeypatch.setenv(BUDGET_ENV, "1M")
    with pytest.raises(MemoryBudgetError):
        param_shapes(big)
    monkeypatch.setenv(BUDGET_ENV, "none")
    assert len(param_shapes(big)) > 1000  # guard off: listed
    for bad in ("abc", "-5G", "0", "nan", "inf", "12Q"):
        monkeypatch.setenv(BUDGET_ENV, bad)
        with pytest.raises(ValueError, match=BUDGET_ENV):
            memory_budget()
    monkeypatch.delenv(BUDGET_ENV)
    assert memory_budget() == DEFAULT_BUDGET_BYTES


CONFIGS = [("tiny", {}), ("small", {}), ("small", {"gram_mode": "cumulative"}),
           ("tiny", {"metric_learner": "v900", "A_dff_depth": 12}), ("small", {"g_mode": "identity",
                                                                              "metric_learner": "none"}),
           ("small", {"attn_bias": False, "glu_bias": False, "final_bias": False}), ("medium", {}),
           ("v510-110m", {}), ("v900", {}), ("v500", {"g_mode": "random"})]


@pytest.mark.parametrize(("name", "overrides"), CONFIGS)
def test_parameter_count_is_the_sum_of_param_shapes(name: str, overrides: dict) -> None:
    config = PLDRConfig.preset(name, **overrides)
    assert parameter_count(config) == sum(int(np.prod(s)) for s in param_shapes(config).values())


def _peak(fn) -> int:
    tracemalloc.start()
    try:
        fn()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


@pytest.mark.parametrize(("name", "overrides"), CONFIGS[:7])
@pytest.mark.parametrize("keep_trace", [True, False])
def test_estimates_bound_the_measured_allocations(name: str, overrides: dict, keep_trace: bool) -> None:
    """tracemalloc (NumPy reports its buffers to it) peak <= estimate <= 3 x peak, for building and forward."""
    config = PLDRConfig.preset(name, **overrides)
    holder = {}
    built = _peak(lambda: holder.update(p=init_params(config)))
    assert built <= build_bytes(config) <= 3 * built, (built, build_bytes(config))
    ids = np.random.default_rng(0).integers(1, config.vocab_size, (2, min(config.max_seq_len, 48)))
    ran = _peak(lambda: forward(holder["p"], ids, keep_trace=keep_trace))
    want = forward_bytes(config, *ids.shape, keep_trace=keep_trace)
    assert ran <= want <= 3 * ran, (ran, want)
