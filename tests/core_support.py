"""Shared helpers of the core tests (``tests/test_core_*.py``): small configs, hypothesis strategies,
relative-difference metric and the d_k permutation of a parameter set.

Everything here is independent of the code under test except where it builds configs or
parameters through the public API.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

import numpy as np
from hypothesis import strategies as st

from pldr_ref import Params, PLDRConfig, init_params, perturb_params
from pldr_ref.params import FIXED_G_KEY


def rel_diff(a: np.ndarray, b: np.ndarray) -> float:
    """max |a - b| / max |b| (normwise relative difference; 0 when both are 0)."""
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    scale = float(np.max(np.abs(b))) if b.size else 0.0
    diff = float(np.max(np.abs(a - b))) if b.size else 0.0
    return diff / scale if scale > 0 else diff


def small_config(**fields: object) -> PLDRConfig:
    """The "tiny" preset with ``fields`` overridden."""
    return PLDRConfig.preset("tiny", **fields)


def model_params(config: PLDRConfig, seed: int = 0) -> Params:
    """Random parameters with every LayerNorm and bias moved off its init value."""
    return perturb_params(init_params(config, seed), seed + 1000)


def token_ids(config: PLDRConfig, batch: int, seq: int, seed: int = 0, low: int = 1) -> np.ndarray:
    """Random ids in [low, V) (low = 1 avoids the pad id 0)."""
    return np.random.default_rng(seed).integers(low, config.vocab_size, (batch, seq))


@st.composite
def shapes(draw: st.DrawFn, max_heads: int = 3, max_dk: int = 8, max_seq: int = 6) -> dict[str, int]:
    """Architecture numbers including the edge shapes S = 1, one head and d_k = 2."""
    return {
        "num_heads": draw(st.sampled_from([h for h in (1, 2, 3) if h <= max_heads])),
        "d_k": draw(st.sampled_from([d for d in (2, 4, 6, 8) if d <= max_dk])),
        "seq": draw(st.sampled_from([1, 2, 3, max_seq])),
        "batch": draw(st.sampled_from([1, 2])),
        "num_layers": draw(st.sampled_from([1, 2])),
    }


def config_from_shape(shape: dict[str, int], **fields: object) -> PLDRConfig:
    """A small config with the numbers of :func:`shapes` (dff and A_dff sized from d_k)."""
    d = shape["num_heads"] * shape["d_k"]
    return PLDRConfig(
        num_layers=shape["num_layers"], num_heads=shape["num_heads"], d_k=shape["d_k"], dff=max(4, (8 * d) // 3),
        A_dff=max(2, (8 * shape["d_k"]) // 3), num_reslayerA=2, num_denseA=2, vocab_size=23, max_seq_len=16,
        **fields,
    )


# ---------------------------------------------------------------- d_k permutation of parameters
#: Groups of d_k-indexed parameters (name suffix -> axes carrying the d_k index); used for the
#: layout-equivalence test and its negative controls.
def dk_permutation_groups(config: PLDRConfig) -> dict[str, list[tuple[str, tuple[int, ...]]]]:
    """Group name -> [(parameter name, d_k axes after the head split)] for every d_k-indexed tensor.

    Head-split tensors are viewed as [H, d_k, ...] (wq/wk rows and biases).  v500 metric-learner
    tensors of width d_k are permuted; v900 ones have the lifted width Dd on the inner axes and
    only the lift input / drop output / final norm carry d_k.
    """
    c = config
    groups: dict[str, list[tuple[str, tuple[int, ...]]]] = {}
    for layer in range(c.num_layers):
        p = f"decoder.dec_layers.{layer}.mha1."
        groups.setdefault("wq", []).extend([(p + "wq.weight", (1,)), (p + "wq.bias", (1,))])
        groups.setdefault("wk", []).extend([(p + "wk.weight", (1,)), (p + "wk.bias", (1,))])
        if c.uses_plga_params:
            for name in ("Wlst", "blst", "pwlst", "alst", "balst"):
                groups.setdefault(f"plga.{name}", []).append((p + f"plgatt_layer.{name}", (1, 2)))
        if c.metric_learner == "v500":
            groups.setdefault("a_norm", []).extend([(p + "layernorm1.weight", (0,)), (p + "layernorm1.bias", (0,))])
        if c.metric_learner == "v900":
            groups.setdefault("lift", []).append((p + "A_dff_dense1.weight", (1,)))
            groups.setdefault("drop", []).extend([(p + "A_dff_dense2.weight", (0,)), (p + "A_dff_dense2.bias", (0,))])
            groups.setdefault("drop_norm", []).extend(
                [(p + "layernorm2.weight", (0,)), (p + "layernorm2.bias", (0,))]
            )
        if c.metric_learner == "v500":
            for r in range(c.num_reslayerA):
                u = f"{p}reslayerAs.{r}."
                for j in range(c.num_denseA):
                    g = f"{u}denseAs.{j}."
                    groups.setdefault("glu_in", []).extend([(g + "gluw1.weight", (1,)), (g + "gluw2.weight", (1,))])
                    groups.setdefault("glu_out", []).extend([(g + "gluw3.weight", (0,)), (g + "gluw3.bias", (0,))])
                groups.setdefault("res_norm", []).extend(
                    [(u + "layernormA.weight", (0,)), (u + "layernormA.bias", (0,))]
                )
    if not c.uses_plga_params:
        groups["fixed_g"] = [(FIXED_G_KEY, (4, 5))]
    return groups


def permute_dk(params: Params, config: PLDRConfig, pi: np.ndarray, skip: Iterable[str] = ()) -> Params:
    """Parameters for ``config`` whose d_k-indexed axes are permuted by ``pi`` (all groups but ``skip``)."""
    c = params.config
    tensors = {k: np.array(v) for k, v in params.items()}
    for group, entries in dk_permutation_groups(c).items():
        if group in skip:
            continue
        for name, axes in entries:
            arr = tensors[name]
            head_split = name.endswith(("wq.weight", "wk.weight", "wq.bias", "wk.bias"))
            if head_split:
                arr = arr.reshape(c.num_heads, c.d_k, *arr.shape[1:])
            for ax in axes:
                arr = np.take(arr, pi, axis=ax)
            tensors[name] = arr.reshape(params[name].shape)
    return Params(config, tensors)


def file_tree(root: Path) -> dict[str, bytes]:
    """Relative path -> bytes of every file under ``root`` (byte-identity checks of built suites)."""
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}
