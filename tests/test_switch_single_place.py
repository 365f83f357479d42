"""Each primitive that takes switch options reads them from the config in one place (issue 22 item 6): the model
calls ``norms.configured_layer_norm``, ``rope.configured_rope`` and ``attention.configured_attention_weights``,
never the raw primitives with options of its own, so a new switch of a primitive touches the primitive's module
only (``docs/adding_a_switch.md``).  The emulated LayerNorm refuses an option it does not implement by name."""

from __future__ import annotations

import ast
from pathlib import Path

import numpy as np
import pytest

from pldr_ref import attention, norms, rope
from pldr_ref.config import PLDRConfig
from pldr_ref.harness.policy.arithmetic import Arithmetic, EmulatedOps, refuse_options
from pldr_ref.params import NormParams

ROOT = Path(__file__).resolve().parents[1]
#: The float64 engine's modules that run the model (forward, cached forward, baselines, diagnostics, stages).
FORWARD_MODULES = ("pldr_ref/layer.py", "pldr_ref/model.py", "pldr_ref/metric_learner.py",
                   "pldr_ref/fixtures/baselines.py", "pldr_ref/diagnostics/run.py",
                   "pldr_ref/harness/policy/stage_reference.py", *sorted(
                       str(p.relative_to(ROOT)) for p in (ROOT / "pldr_ref" / "inference").glob("*.py")))
#: module -> the primitive whose options a configured wrapper maps from the config.
RAW = {"norms": "layer_norm", "rope": "apply_rope", "attention": "masked_attention_weights"}


def raw_uses(source: str) -> list[str]:
    """``module.name`` of every raw primitive of :data:`RAW` that ``source`` imports or references."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("pldr_ref."):
            mod = node.module.rsplit(".", 1)[-1]
            found += [f"{mod}.{a.name}" for a in node.names if RAW.get(mod) == a.name]
        elif (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
              and RAW.get(node.value.id) == node.attr):
            found.append(f"{node.value.id}.{node.attr}")
    return found


@pytest.mark.parametrize("path", FORWARD_MODULES)
def test_forward_modules_reach_optioned_primitives_only_through_their_configured_wrapper(path: str) -> None:
    assert raw_uses((ROOT / path).read_text(encoding="utf-8")) == [], path


def test_raw_use_scan_catches_a_direct_call() -> None:
    """Negative control: an import of the raw LayerNorm and an attribute call of the raw RoPE are both found."""
    src = ("from pldr_ref.norms import layer_norm, configured_layer_norm\n"
           "from pldr_ref import rope\nrope.apply_rope(x, p)\n")
    assert raw_uses(src) == ["norms.layer_norm", "rope.apply_rope"]


def test_configured_wrappers_are_the_primitives_with_the_configs_options_bitwise() -> None:
    rng = np.random.Generator(np.random.PCG64(22))
    c = PLDRConfig.preset("tiny", eps_ln=1e-5, rope_layout="half", rope_precision="float32", mask_mode="additive",
                          softmax_precision="float32", masked_row="zeros")
    x, g, b = rng.standard_normal((3, 5, 16)), rng.standard_normal(16), rng.standard_normal(16)
    assert np.array_equal(norms.configured_layer_norm(x, NormParams(g, b), c), norms.layer_norm(x, g, b, 1e-5))
    assert not np.array_equal(norms.configured_layer_norm(x, NormParams(g, b), PLDRConfig.preset("tiny")),
                              norms.layer_norm(x, g, b, 1e-5))  # negative control: another eps
    q, pos = rng.standard_normal((1, 2, 5, 8)), np.arange(5)
    want = rope.apply_rope(q, pos, layout="half", base=c.rope_base, table="float32", arithmetic="float32")
    assert np.array_equal(rope.configured_rope(q, pos, c), want)
    sc, mask = rng.standard_normal((1, 2, 5, 5)), np.triu(np.ones((5, 5), dtype=bool), 1)[None, None]
    want = attention.masked_attention_weights(sc, mask, mask_mode="additive", mask_value=c.mask_value,
                                              precision="float32", masked_row="zeros")
    assert np.array_equal(attention.configured_attention_weights(sc, mask, c), want)


def test_emulated_layer_norm_refuses_an_option_it_does_not_implement_by_name() -> None:
    x = np.random.Generator(np.random.PCG64(3)).standard_normal((4, 8))
    one, zero = np.ones(8), np.zeros(8)
    ops = EmulatedOps(Arithmetic("f32-seq"), "float32")
    plain = ops.layer_norm(x, one, zero, 1e-6)
    # the configured wrapper calls ops.layer_norm: it gives the emulated LayerNorm
    cfg = PLDRConfig.preset("tiny")
    assert np.array_equal(norms.configured_layer_norm(x, NormParams(one, zero), cfg, ops), plain)
    with pytest.raises(NotImplementedError, match=r"layer_norm option\(s\) \{'precision': 'float32'\}"):
        ops.layer_norm(x, one, zero, 1e-6, precision="float32")
    assert 0 < np.abs(plain - norms.layer_norm(x, one, zero, 1e-6)).max() < 1e-5  # the emulation ran


def test_refuse_options_accepts_defaults_and_names_the_rest() -> None:
    def primitive(x: float, *, mode: str = "a") -> float:
        return x

    refuse_options(primitive, {"mode": "a"})  # the default is what the emulation computes
    with pytest.raises(NotImplementedError, match="'mode': 'b'"):
        refuse_options(primitive, {"mode": "b"})
    with pytest.raises(NotImplementedError, match="'extra': 1"):
        refuse_options(primitive, {"extra": 1})
