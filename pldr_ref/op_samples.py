"""Small sample inputs of every registry op (OpInfo style): what the engine x op test runs through each engine.

Each generator takes a seeded ``numpy.random.Generator`` and returns a few :class:`OpSample` in the op's case
format (the input names and scalar arguments of :data:`pldr_ref.registry.OPS`, the runner conventions of
:mod:`pldr_ref.fixtures.runners`): an edge shape first (one sequence position, one head, d_k = 2, optional
inputs absent), then a slightly larger one (batch 2, two heads, d_k = 4, optional inputs present, masks).
The samples are test inputs, not golden values: they are small enough for the exact tiers (mpmath, arb) to
run in a fraction of a second each, and stay in the range where every float32 engine is accurate to a few
float32 ulps (no overflow, no near-cancellation edges: those live in the golden suite).

Next to each op's samples stand its golden cases (:class:`GoldenSample`, collected in :data:`GOLDEN`): the
``golden/op/*`` cases of the committed suite (:func:`pldr_ref.fixtures.suite.build_suite` turns each into a
:class:`~pldr_ref.fixtures.spec.CaseSpec`), larger and with the hard numerical edges, their tensors drawn from the
case's named SplitMix64 streams (:class:`Draws`).  An op's cases are declared here once.
"""

from __future__ import annotations

import dataclasses
import zlib
from collections.abc import Callable, Mapping
from typing import Any, Protocol

import numpy as np

from pldr_ref.attention import causal_padding_mask
from pldr_ref.config import ROPE_LAYOUTS, PLDRConfig
from pldr_ref.constants import EPS_ADJ, EPS_LN, FINFO_MIN_F64, MASK_VALUE, ROPE_BASE
from pldr_ref.params import Params, param_shapes

#: Bound of the uniform draws of weight matrices and activations of the sample models.
WEIGHT_BOUND = 0.5
#: Bound of the uniform draws of LayerNorm gain deviations and of biases.
SMALL_BOUND = 0.1


@dataclasses.dataclass(frozen=True)
class OpSample:
    """One sample case of an op: ``label`` (names the edge it covers), case ``inputs`` and ``args`` (the op's
    registry names), ``params`` (the model of ops that read parameters, else None)."""

    label: str
    inputs: Mapping[str, np.ndarray]
    args: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    params: Params | None = None

    @property
    def config(self) -> PLDRConfig | None:
        """The sample model's config (None without parameters)."""
        return None if self.params is None else self.params.config


#: A sample generator: seeded generator -> samples.
SampleGenerator = Callable[[np.random.Generator], list[OpSample]]

#: The edge model: one layer, one head, d_k = 2 (d_model = 2), one residual unit of one GLU.
EDGE_CONFIG = PLDRConfig(num_layers=1, num_heads=1, d_k=2, dff=3, A_dff=3, num_reslayerA=1, num_denseA=1,
                         vocab_size=7, max_seq_len=16)
#: The small model: two layers, two heads, d_k = 4, two residual units.
SMALL_CONFIG = PLDRConfig(num_layers=2, num_heads=2, d_k=4, dff=5, A_dff=4, num_reslayerA=2, num_denseA=1,
                          vocab_size=11, max_seq_len=16)
#: The small model with the TF-v900 metric learner (lift to 3, drop back to d_k).
V900_CONFIG = SMALL_CONFIG.replace(metric_learner="v900", A_dff_depth=3)


class Draws(Protocol):
    """The named draws of one golden case: the suite binds them to the case's SplitMix64 streams
    ``"<case>:<tensor>"`` (:mod:`pldr_ref.fixtures.suite_base`), so every machine draws the same tensors."""

    def u(self, tensor: str, shape: tuple[int, ...], bound: float = 1.0) -> np.ndarray:
        """Uniform values in [-bound, bound) from the stream of ``tensor``."""

    def u01(self, tensor: str, shape: tuple[int, ...]) -> np.ndarray:
        """Uniform values in [0, 1) from the stream of ``tensor``."""

    def ids(self, shape: tuple[int, ...], vocab: int, low: int = 1) -> np.ndarray:
        """Token ids in [low, vocab) from the stream ``token_ids``."""


@dataclasses.dataclass(frozen=True)
class GoldenSample:
    """One golden case of an op, ``golden/op/<name>``: ``description`` (what it covers), ``inputs`` (the case's
    tensors from its :class:`Draws`, built lazily), ``args`` (the op's registry arguments), ``config`` and
    ``params_seed`` (the suite model and its SplitMix64 parameters, for an op that reads parameters), ``tags``
    and ``tier`` (``exact``: the exact tier computes it too; every op case is small enough)."""

    name: str
    description: str
    inputs: Callable[[Draws], Mapping[str, np.ndarray]]
    args: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    config: PLDRConfig | None = None
    params_seed: int | None = None
    tags: tuple[str, ...] = ()
    tier: str = "exact"


#: The suite's tiny model (:data:`pldr_ref.fixtures.suite_base.TINY`): the model of the golden op cases that
#: read parameters.
GOLDEN_TINY = PLDRConfig.preset("tiny")
#: The tiny model with the TF-v900 metric learner (:data:`pldr_ref.fixtures.suite_base.TINY_V900`).
GOLDEN_TINY_V900 = GOLDEN_TINY.replace(metric_learner="v900", A_dff_depth=12)
#: Positions of the golden RoPE cases: around the powers of two of the tables up to 4095.
GOLDEN_ROPE_POSITIONS = np.array([0, 1, 2, 3, 17, 255, 1000, 1023, 1024, 2047, 2048, 3000, 4094, 4095])
#: Edges of the sigmoid family in the golden pointwise cases: 0, +-tiny, the sigmoid tails, the exp overflow region.
POINTWISE_EDGES = np.array([0.0, -0.0, 5e-324, -5e-324, 1e-300, -1e-8, 1e-8, 0.5, -0.5, 1.0, -1.0, 10.0, -10.0,
                            36.7368005696771, -36.7368005696771, 40.0, -40.0, 100.0, -100.0, 709.0, -709.0, 745.2,
                            -745.2, 800.0, -800.0, 1e4, -1e4, 1e150, -1e150])


def draw(generator: SampleGenerator, seed_name: str) -> list[OpSample]:
    """The samples of ``generator`` drawn from a generator seeded by ``seed_name`` (the op's name: the same
    samples on every run and machine)."""
    return generator(np.random.default_rng(zlib.crc32(seed_name.encode())))


def sample_params(config: PLDRConfig, rng: np.random.Generator) -> Params:
    """Parameters of ``config`` drawn from ``rng``: LayerNorm gains 1 + U(+-0.1), biases U(+-0.1), PLGA powers and
    every weight U(+-0.5)."""
    tensors = {}
    for name, shape in param_shapes(config).items():
        leaf = name.rsplit(".", 1)[-1]
        owner = name.rsplit(".", 2)[-2]
        if "norm" in owner and leaf == "weight":
            tensors[name] = 1.0 + rng.uniform(-SMALL_BOUND, SMALL_BOUND, shape)
        elif leaf in ("bias", "blst", "balst"):
            tensors[name] = rng.uniform(-SMALL_BOUND, SMALL_BOUND, shape)
        else:
            tensors[name] = rng.uniform(-WEIGHT_BOUND, WEIGHT_BOUND, shape)
    return Params(config, tensors)


def _u(rng: np.random.Generator, shape: tuple[int, ...], bound: float = 1.0) -> np.ndarray:
    return rng.uniform(-bound, bound, shape)


def _psd(rng: np.random.Generator, b: int, h: int, d: int) -> np.ndarray:
    q = _u(rng, (b, h, 3, d), 1.5)
    return np.matmul(np.swapaxes(q, -1, -2), q)


def _ids(rng: np.random.Generator, shape: tuple[int, ...], config: PLDRConfig) -> np.ndarray:
    return rng.integers(1, config.vocab_size, shape).astype(np.int64)


# ----------------------------------------------------------------------------- op samples
def pointwise(rng: np.random.Generator) -> list[OpSample]:
    """z: one value; then 0, +-small, both sigmoid tails and random values."""
    edges = np.array([0.0, -0.5, 3.0, -20.0, 25.0, 1e-3])
    return [OpSample("one_value", {"z": np.array([0.75])}),
            OpSample("edges_and_random", {"z": np.concatenate([edges, _u(rng, (6,), 6.0)]).reshape(2, 6)})]


def _pointwise_golden(op: str) -> tuple[GoldenSample, ...]:
    """``op/<op>_edges``: :data:`POINTWISE_EDGES` plus 35 random values in [-20, 20), as [4, 16]."""
    return (GoldenSample(f"{op}_edges", f"{op} on 0, subnormals, sigmoid tails, exp overflow and random values",
                         lambda d: {"z": np.concatenate([POINTWISE_EDGES, d.u("z", (35,), 20.0)]).reshape(4, 16)},
                         tags=("edge",)),)


def layer_norm(rng: np.random.Generator) -> list[OpSample]:
    """x [.., d]: d = 2 on one row; then [2, 3, 5]."""
    return [OpSample("d2_one_row", {"x": _u(rng, (1, 2), 2.0), "gamma": 1 + _u(rng, (2,), 0.1),
                                    "beta": _u(rng, (2,), 0.1)}, {"eps": EPS_LN}),
            OpSample("rows", {"x": _u(rng, (2, 3, 5), 2.0), "gamma": 1 + _u(rng, (5,), 0.1),
                              "beta": _u(rng, (5,), 0.1)}, {"eps": EPS_LN})]


def _layer_norm_near_constant(d: Draws) -> dict[str, np.ndarray]:
    n = 32
    rows = np.stack([
        np.full(n, 0.75),                                  # exactly constant: output = beta
        0.75 + 1e-9 * d.u("r1", (n,)),                     # variance 1e-19 << eps
        -3.0 + 1e-4 * d.u("r3", (n,)),                     # variance ~ eps
        d.u("r4", (n,), 1e-12),                            # tiny around 0
        np.where(np.arange(n) == 7, 1.0, 0.0),             # one-hot row
    ])
    return {"x": rows, "gamma": 1 + d.u("gamma", (n,), 0.25), "beta": d.u("beta", (n,), 0.1)}


def _layer_norm_large_offset(d: Draws) -> dict[str, np.ndarray]:
    n = 32
    rows = np.stack([1e6 + 1e-3 * d.u("r0", (n,)), -2.5e5 + 1e-2 * d.u("r1", (n,))])
    return {"x": rows, "gamma": 1 + d.u("gamma", (n,), 0.25), "beta": d.u("beta", (n,), 0.1)}


LAYER_NORM_GOLDEN = (
    GoldenSample("layer_norm_rows", "LayerNorm over the last axis of random rows",
                 lambda d: {"x": d.u("x", (2, 3, 24), 3.0), "gamma": 1 + d.u("gamma", (24,), 0.25),
                            "beta": d.u("beta", (24,), 0.1)}, {"eps": EPS_LN}),
    GoldenSample("layer_norm_near_constant",
                 "LayerNorm of constant and near-constant rows (variance far below eps, and ~eps), tiny rows, one-hot",
                 _layer_norm_near_constant, {"eps": EPS_LN}, tags=("edge",)),
    GoldenSample("layer_norm_large_offset",
                 "LayerNorm of rows with a large offset and a small spread: cancellation in x - mu "
                 "(ill-conditioned: an ulp of the offset moves the output by ~1e-7)",
                 _layer_norm_large_offset, {"eps": EPS_LN}, tags=("edge",)),
)


def linear(rng: np.random.Generator) -> list[OpSample]:
    """x W^T + b: 2 -> 2 without bias on one row; then [2, 3, 5] -> 4 with bias."""
    return [OpSample("no_bias_d2", {"x": _u(rng, (1, 1, 2)), "weight": _u(rng, (2, 2))}),
            OpSample("bias", {"x": _u(rng, (2, 3, 5)), "weight": _u(rng, (4, 5), 0.7), "bias": _u(rng, (4,), 0.1)})]


LINEAR_GOLDEN = (
    GoldenSample("linear", "y = x W^T + b on the last axis (torch [out, in] layout)",
                 lambda d: {"x": d.u("x", (2, 3, 5)), "weight": d.u("weight", (4, 5), 0.7),
                            "bias": d.u("bias", (4,), 0.1)}),
)


def glu(rng: np.random.Generator) -> list[OpSample]:
    """SwiGLU: d = 2, hidden 3, no biases; then d = 4, hidden 6 with biases."""
    def weights(d: int, hid: int, bias: bool) -> dict[str, np.ndarray]:
        w = {"w1": _u(rng, (hid, d), 0.6), "w2": _u(rng, (hid, d), 0.6), "w3": _u(rng, (d, hid), 0.6)}
        if bias:
            w.update({"b1": _u(rng, (hid,), 0.1), "b2": _u(rng, (hid,), 0.1), "b3": _u(rng, (d,), 0.1)})
        return w

    return [OpSample("no_bias_d2", {"x": _u(rng, (1, 1, 2), 2.0), **weights(2, 3, False)}),
            OpSample("bias", {"x": _u(rng, (2, 3, 4), 2.0), **weights(4, 6, True)})]


GLU_GOLDEN = (
    GoldenSample("glu", "SwiGLU W3(silu(W1 x + b1) * (W2 x + b2)) + b3",
                 lambda d: {"x": d.u("x", (2, 3, 6), 2.0), "w1": d.u("w1", (10, 6), 0.6), "b1": d.u("b1", (10,), 0.1),
                            "w2": d.u("w2", (10, 6), 0.6), "b2": d.u("b2", (10,), 0.1),
                            "w3": d.u("w3", (6, 10), 0.6), "b3": d.u("b3", (6,), 0.1)}),
)


def apply_rope(rng: np.random.Generator) -> list[OpSample]:
    """S = 1, one head, d_k = 2 (interleaved, exact table); then half pairs with the float32 table."""
    return [OpSample("S1_H1_dk2", {"x": _u(rng, (1, 1, 1, 2), 2.0), "positions": np.array([3])},
                     {"layout": "interleaved", "precision": "exact", "base": ROPE_BASE}),
            OpSample("half_f32_table", {"x": _u(rng, (2, 2, 3, 4), 2.0), "positions": np.array([0, 5, 100])},
                     {"layout": "half", "precision": "float32", "base": ROPE_BASE})]


APPLY_ROPE_GOLDEN = tuple(
    GoldenSample(f"rope_{layout}_{tag}_pos4095",
                 f"RoPE ({layout} pairs, {precision} angles) at positions 0..4095, d_k = 64",
                 lambda d: {"x": d.u("x", (1, 2, GOLDEN_ROPE_POSITIONS.size, 64), 2.0),
                            "positions": GOLDEN_ROPE_POSITIONS},
                 {"layout": layout, "precision": precision, "base": ROPE_BASE}, tags=("edge",))
    for layout in ROPE_LAYOUTS for precision, tag in (("exact", "f64"), ("float32", "f32")))


def density(rng: np.random.Generator) -> list[OpSample]:
    """q_rot [B, H, S, d_k]: S = 1, one head, d_k = 2; then [2, 2, 3, 4]."""
    return [OpSample("S1_H1_dk2", {"q_rot": _u(rng, (1, 1, 1, 2), 2.0)}),
            OpSample("B2_H2_S3_dk4", {"q_rot": _u(rng, (2, 2, 3, 4), 2.0)})]


DENSITY_OPERATOR_GOLDEN = (
    GoldenSample("density_operator", "A0 = Q~^T Q~ over all rows (global Gram)",
                 lambda d: {"q_rot": d.u("q_rot", (2, 2, 5, 8), 2.0)}),
)
CUMULATIVE_DENSITY_OPERATOR_GOLDEN = (
    GoldenSample("cumulative_density_operator", "masked cumulative Gram (paper eq. 4.16)",
                 lambda d: {"q_rot": d.u("q_rot", (1, 2, 5, 8), 2.0)}),
)


def residual_unit(rng: np.random.Generator) -> list[OpSample]:
    """One residual unit of the edge model (d_k = 2), then unit 1 of layer 1 of the small model."""
    return [OpSample("H1_dk2", {"a": _psd(rng, 1, 1, 2)}, {"layer": 0, "unit": 0}, sample_params(EDGE_CONFIG, rng)),
            OpSample("H2_dk4", {"a": _psd(rng, 2, 2, 4)}, {"layer": 1, "unit": 1},
                     sample_params(SMALL_CONFIG, rng))]


RESIDUAL_UNIT_GOLDEN = (
    GoldenSample("residual_unit", "one metric-learner residual unit (tiny, layer 0, unit 1)",
                 lambda d: {"a": d.u("a", (1, 2, 8, 8), 2.0)}, {"layer": 0, "unit": 1}, GOLDEN_TINY, 11),
)


def _metric_learner(config_small: PLDRConfig) -> SampleGenerator:
    def samples(rng: np.random.Generator) -> list[OpSample]:
        edge = EDGE_CONFIG.replace(metric_learner=config_small.metric_learner,
                                   A_dff_depth=config_small.A_dff_depth)
        return [OpSample("H1_dk2", {"a0": _psd(rng, 1, 1, 2)}, {"layer": 0}, sample_params(edge, rng)),
                OpSample("H2_dk4", {"a0": _psd(rng, 2, 2, 4)}, {"layer": 1}, sample_params(config_small, rng))]
    samples.__doc__ = f"a0 PSD, {config_small.metric_learner} metric learner: d_k = 2, then two heads, d_k = 4."
    return samples


def _golden_psd(d: Draws, width: int = 8) -> np.ndarray:
    """A PSD [1, 2, width, width] Gram of 6 random rows."""
    q = d.u("q", (1, 2, 6, width), 2.0)
    return np.matmul(np.swapaxes(q, -1, -2), q)


METRIC_LEARNER_V500_GOLDEN = (
    GoldenSample("metric_learner_v500", "v500 metric learner on a PSD A0 (tiny, layer 1)",
                 lambda d: {"a0": _golden_psd(d)}, {"layer": 1}, GOLDEN_TINY, 11),
)
METRIC_LEARNER_V900_GOLDEN = (
    GoldenSample("metric_learner_v900", "TF-v900 metric learner (lift to 12, residual units, drop to d_k) on a PSD A0",
                 lambda d: {"a0": _golden_psd(d)}, {"layer": 0}, GOLDEN_TINY_V900, 12),
)
METRIC_LEARNER_GOLDEN = (
    GoldenSample("metric_learner",
                 "the metric-learner stage dispatch (config metric_learner='v500', tiny, layer 0) on a PSD A0",
                 lambda d: {"a0": _golden_psd(d)}, {"layer": 0}, GOLDEN_TINY, 13),
)


metric_learner_v500 = _metric_learner(SMALL_CONFIG)
metric_learner_v900 = _metric_learner(V900_CONFIG)
metric_learner = _metric_learner(SMALL_CONFIG)


def metric_tensor(rng: np.random.Generator) -> list[OpSample]:
    """A_LM = iSwiGLU(W A + b) + eps_adj: one head, d_k = 2; then [2, 2, 4, 4]."""
    def one(b: int, h: int, d: int) -> dict[str, np.ndarray]:
        return {"a": _u(rng, (b, h, d, d), 2.0), "W": _u(rng, (h, d, d)), "b": _u(rng, (h, d, d), 0.3)}

    return [OpSample("H1_dk2", one(1, 1, 2), {"eps_adj": EPS_ADJ}),
            OpSample("B2_H2_dk4", one(2, 2, 4), {"eps_adj": EPS_ADJ})]


def _metric_near_eps(d: Draws) -> dict[str, np.ndarray]:
    # W A + b spans [-800, 3]: iSwiGLU underflows below ~-745, so A_LM sits at or just above 1e-9.
    b = -d.u01("b", (1, 8, 8)) * 800.0 + 3.0
    return {"a": d.u("a", (1, 1, 8, 8), 1.0), "W": d.u("W", (1, 8, 8), 0.01), "b": b}


METRIC_TENSOR_GOLDEN = (
    GoldenSample("metric_tensor", "A_LM = iSwiGLU(W A + b) + 1e-9 on random A",
                 lambda d: {"a": d.u("a", (2, 2, 8, 8), 2.0), "W": d.u("W", (2, 8, 8), 0.5),
                            "b": d.u("b", (2, 8, 8), 0.3)}, {"eps_adj": EPS_ADJ}),
    GoldenSample("metric_tensor_near_eps",
                 "A_LM where W A + b is very negative: iSwiGLU underflows and A_LM = 1e-9 + tiny",
                 _metric_near_eps, {"eps_adj": EPS_ADJ}, tags=("edge",)),
)


def potential_tensor(rng: np.random.Generator) -> list[OpSample]:
    """A_P = A_LM^P, A_LM > 0, P of both signs: one head, d_k = 2; then [2, 2, 4, 4]."""
    def one(b: int, h: int, d: int) -> dict[str, np.ndarray]:
        return {"a_lm": 0.05 + rng.uniform(0.0, 2.0, (b, h, d, d)), "P": _u(rng, (h, d, d))}

    return [OpSample("H1_dk2", one(1, 1, 2)), OpSample("B2_H2_dk4", one(2, 2, 4))]


def _potential_near_eps(d: Draws) -> dict[str, np.ndarray]:
    a_lm = EPS_ADJ * (1.0 + d.u01("rel", (1, 2, 8, 8)) * np.where(d.u01("sel", (1, 2, 8, 8)) < 0.5, 1e-6, 1.0))
    p = -d.u01("P", (2, 8, 8)) * 16.0          # P in (-16, 0]: A_P up to 1e144
    return {"a_lm": a_lm, "P": p}


POTENTIAL_TENSOR_GOLDEN = (
    GoldenSample("potential_tensor", "A_P = A_LM^P elementwise, P of both signs",
                 lambda d: {"a_lm": EPS_ADJ + d.u01("a_lm", (2, 2, 8, 8)) * 2.0, "P": d.u("P", (2, 8, 8), 1.0)}),
    GoldenSample("potential_tensor_near_eps_negative_power",
                 "A_LM within a few ulps to 2x of 1e-9 raised to negative powers down to -16 (A_P up to 1e144)",
                 _potential_near_eps, tags=("edge",)),
)


def energy_curvature(rng: np.random.Generator) -> list[OpSample]:
    """G_LM = a A_P + b_a: one head, d_k = 2; then [2, 2, 4, 4]."""
    def one(b: int, h: int, d: int) -> dict[str, np.ndarray]:
        return {"a_p": rng.uniform(0.0, 3.0, (b, h, d, d)), "a": _u(rng, (h, d, d)), "b_a": _u(rng, (h, d, d), 0.1)}

    return [OpSample("H1_dk2", one(1, 1, 2)), OpSample("B2_H2_dk4", one(2, 2, 4))]


ENERGY_CURVATURE_GOLDEN = (
    GoldenSample("energy_curvature", "G_LM = a A_P + b_a (matrix product per head)",
                 lambda d: {"a_p": d.u01("a_p", (2, 2, 8, 8)) * 3.0, "a": d.u("a", (2, 8, 8), 0.5),
                            "b_a": d.u("b_a", (2, 8, 8), 0.1)}),
)


def attention_scores(rng: np.random.Generator) -> list[OpSample]:
    """Sc = Q~ G K~^T / sqrt(d_k): S = T = 1, one head, d_k = 2; T > S (cached keys); one G per query row."""
    return [OpSample("S1_H1_dk2", {"q_rot": _u(rng, (1, 1, 1, 2), 2.0), "g_lm": _u(rng, (1, 1, 2, 2)),
                                   "k_rot": _u(rng, (1, 1, 1, 2), 2.0)}),
            OpSample("T_gt_S", {"q_rot": _u(rng, (2, 2, 2, 4), 2.0), "g_lm": _u(rng, (2, 2, 4, 4)),
                                "k_rot": _u(rng, (2, 2, 3, 4), 2.0)}),
            OpSample("G_per_row", {"q_rot": _u(rng, (1, 2, 3, 4), 2.0), "g_lm": _u(rng, (1, 2, 3, 4, 4)),
                                   "k_rot": _u(rng, (1, 2, 3, 4), 2.0)})]


ATTENTION_SCORES_GOLDEN = (
    GoldenSample("attention_scores", "Sc = Q~ G K~^T / sqrt(d_k) with T > S (cached keys)",
                 lambda d: {"q_rot": d.u("q", (2, 2, 4, 8), 2.0), "g_lm": d.u("g", (2, 2, 8, 8)),
                            "k_rot": d.u("k", (2, 2, 6, 8), 2.0)}),
    GoldenSample("attention_scores_cumulative",
                 "scores with one G per query row (cumulative Gram), g_lm [B,H,S,dk,dk]",
                 lambda d: {"q_rot": d.u("q", (1, 2, 4, 8), 2.0), "g_lm": d.u("g", (1, 2, 4, 8, 8)),
                            "k_rot": d.u("k", (1, 2, 4, 8), 2.0)}),
)


def causal_padding_mask_samples(rng: np.random.Generator) -> list[OpSample]:
    """One query over one key without padding; then 2 new queries at 3, 4 over 5 keys with key padding."""
    return [OpSample("S1_no_padding", {"query_positions": np.array([0]), "key_positions": np.array([0])}),
            OpSample("cached_padding", {"query_positions": np.arange(3, 5), "key_positions": np.arange(5),
                                        "key_padding": np.array([[False] * 5, [True, False, False, True, False]])})]


CAUSAL_PADDING_MASK_GOLDEN = (
    # the boolean mask is exact in float64 already: no exact tier
    GoldenSample("causal_padding_mask",
                 "mask of 3 new queries at positions 4..6 over 7 keys, with key padding in batch row 1",
                 lambda d: {"query_positions": np.arange(4, 7), "key_positions": np.arange(7),
                            "key_padding": np.array([[False] * 7, [True, False, False, True, False, False, False]])},
                 tier="float64"),
)


def apply_mask(rng: np.random.Generator) -> list[OpSample]:
    """Each mask mode on [B, 1, S, S] scores with a causal mask and a fully padded batch row; S = 1 first."""
    pad = np.array([[False, False, False], [True, True, True]])
    mask = causal_padding_mask(np.arange(3), np.arange(3), pad)
    out = [OpSample("S1_ideal", {"scores": _u(rng, (1, 1, 1, 1), 3.0), "mask": np.zeros((1, 1, 1, 1), bool)},
                    {"mode": "ideal", "mask_value": MASK_VALUE})]
    for mode, value in (("ideal", MASK_VALUE), ("additive", MASK_VALUE), ("finfo_min", FINFO_MIN_F64)):
        out.append(OpSample(mode, {"scores": _u(rng, (2, 1, 3, 3), 3.0), "mask": mask},
                            {"mode": mode, "mask_value": value}))
    return out


def _golden_mask_inputs(d: Draws) -> dict[str, np.ndarray]:
    scores = d.u("scores", (2, 1, 4, 4), 30.0)
    pad = np.array([[False, False, False, False], [True, True, True, True]])  # batch 1: every key padded
    return {"scores": scores, "mask": causal_padding_mask(np.arange(4), np.arange(4), pad)}


APPLY_MASK_GOLDEN = tuple(
    GoldenSample(f"apply_mask_{mode}", f"mask mode {mode!r}: causal mask plus a batch row whose keys are all padding",
                 _golden_mask_inputs, {"mode": mode, "mask_value": value}, tags=("edge",))
    for mode, value in (("ideal", MASK_VALUE), ("additive", MASK_VALUE), ("finfo_min", FINFO_MIN_F64)))


def masked_softmax(rng: np.random.Generator) -> list[OpSample]:
    """One logit (a one-hot row); then random rows with -inf (masked) keys, one row fully masked (zeros)."""
    rows = _u(rng, (2, 3, 4), 4.0)
    rows[0, 1, 2:] = -np.inf
    rows[1, 2, :] = -np.inf
    return [OpSample("one_key", {"logits": _u(rng, (1, 1, 1, 1), 3.0)}), OpSample("masked_rows", {"logits": rows})]


def _softmax_edge_rows(d: Draws) -> dict[str, np.ndarray]:
    n = 8
    inf = np.inf
    rows = [
        np.full(n, -inf),                                           # fully masked: zeros by convention
        np.array([0.0, -inf, -inf, -inf, -inf, -inf, -inf, -inf]),  # single allowed key: exactly one-hot
        np.array([800.0, 0.0, -1.0, -5.0, -inf, 0.5, -800.0, 1.0]), # nearly one-hot: e^-800 underflows
        np.array([40.0, 0.0, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0]),       # nearly one-hot, others ~e^-34
        np.full(n, 3.25),                                           # uniform
        np.array([1e4, 1e4, -1e4, 0.0, 1e4, -inf, 5.0, 1e4 - 1.0]), # huge scores, ties
        np.array([-inf] * 7 + [-1e300]),                            # one finite key far below all
        np.array([FINFO_MIN_F64] * 6 + [0.0, 1.0]),                 # finfo_min mask
    ]
    return {"logits": np.concatenate([np.stack(rows), d.u("random", (4, n), 10.0)]).reshape(3, 4, n)}


MASKED_SOFTMAX_GOLDEN = (
    GoldenSample("masked_softmax_edges",
                 "softmax rows: fully masked, one allowed key, nearly one-hot, huge scores, -1e9 and finfo.min masks",
                 _softmax_edge_rows, tags=("edge",)),
    GoldenSample("masked_softmax_additive_masked_row",
                 "rows whose every key is masked additively (-1e9 + score; all -1e9): the softmax of the scores "
                 "survives, uniform for the all -1e9 row "
                 "(ill-conditioned: an ulp of 1e9 is 1.2e-7)",
                 lambda d: {"logits": np.concatenate([MASK_VALUE + d.u("s", (2, 8), 3.0),
                                                      np.full((1, 8), MASK_VALUE)])},
                 tags=("edge",)),
)


def mix_values(rng: np.random.Generator) -> list[OpSample]:
    """Z = E V: S = T = 1, one head, d_k = 2; then E rows on the simplex, T > S."""
    e = rng.uniform(0.0, 1.0, (2, 2, 2, 3))
    return [OpSample("S1_H1_dk2", {"e": np.ones((1, 1, 1, 1)), "v": _u(rng, (1, 1, 1, 2), 2.0)}),
            OpSample("T_gt_S", {"e": e / e.sum(axis=-1, keepdims=True), "v": _u(rng, (2, 2, 3, 4), 2.0)})]


def _golden_mix_inputs(d: Draws) -> dict[str, np.ndarray]:
    e = d.u01("e", (2, 2, 3, 5))
    return {"e": e / e.sum(axis=-1, keepdims=True), "v": d.u("v", (2, 2, 5, 8), 2.0)}


MIX_VALUES_GOLDEN = (GoldenSample("mix_values", "Z = E V per head", _golden_mix_inputs),)


def _right_padded_ids(rng: np.random.Generator) -> np.ndarray:
    """[2, 3] token ids of the small model whose second row ends in the pad id."""
    ids = _ids(rng, (2, 3), SMALL_CONFIG)
    ids[1, -1] = SMALL_CONFIG.pad_id
    return ids


def embedding(rng: np.random.Generator) -> list[OpSample]:
    """E[x] sqrt(d): one token of the edge model; then [2, 3] tokens of the small model with a pad id."""
    ids = _right_padded_ids(rng)
    return [OpSample("one_token", {"token_ids": np.array([[2]])}, params=sample_params(EDGE_CONFIG, rng)),
            OpSample("B2_S3", {"token_ids": ids}, params=sample_params(SMALL_CONFIG, rng))]


EMBEDDING_GOLDEN = (
    GoldenSample("embedding", "X0 = E[x] sqrt(d) (tiny)",
                 lambda d: {"token_ids": d.ids((2, 5), GOLDEN_TINY.vocab_size, 0)}, config=GOLDEN_TINY,
                 params_seed=11),
)


def lm_head(rng: np.random.Generator) -> list[OpSample]:
    """X W_out^T + b_out: one row of the edge model; then [2, 3, d] of the small model."""
    return [OpSample("one_row", {"hidden": _u(rng, (1, 1, 2), 2.0)}, params=sample_params(EDGE_CONFIG, rng)),
            OpSample("B2_S3", {"hidden": _u(rng, (2, 3, SMALL_CONFIG.d_model), 2.0)},
                     params=sample_params(SMALL_CONFIG, rng))]


LM_HEAD_GOLDEN = (
    GoldenSample("lm_head", "logits = X W_out^T + b_out (tiny)",
                 lambda d: {"hidden": d.u("hidden", (2, 3, GOLDEN_TINY.d_model), 2.0)}, config=GOLDEN_TINY,
                 params_seed=11),
)


# ----------------------------------------------------------------------------- layer, model, cache, scoring
def decoder_layer(rng: np.random.Generator) -> list[OpSample]:
    """One row of the edge model without a mask; then layer 1 of the small model with a causal + padding mask."""
    pad = np.array([[False, False, False], [False, False, True]])
    return [OpSample("S1_H1_dk2_no_mask", {"x": _u(rng, (1, 1, 2), 1.5), "positions": np.array([0])}, {"layer": 0},
                     sample_params(EDGE_CONFIG, rng)),
            OpSample("B2_S3_padding", {"x": _u(rng, (2, 3, SMALL_CONFIG.d_model), 1.5), "positions": np.arange(3),
                                       "mask": causal_padding_mask(np.arange(3), np.arange(3), pad)},
                     {"layer": 1}, sample_params(SMALL_CONFIG, rng))]


def forward(rng: np.random.Generator) -> list[OpSample]:
    """One token of the edge model; then the small model on [2, 3] tokens with a right-padded row."""
    ids = _right_padded_ids(rng)
    return [OpSample("one_token", {"token_ids": np.array([[3]])}, params=sample_params(EDGE_CONFIG, rng)),
            OpSample("B2_S3_padding", {"token_ids": ids}, params=sample_params(SMALL_CONFIG, rng))]


def cached_generation(rng: np.random.Generator) -> list[OpSample]:
    """A one-token prompt then one cached step (edge model, KV + G cache); then a 3-token prompt, two steps."""
    return [OpSample("prompt1_step1", {"prompt_ids": np.array([[2]]), "new_ids": np.array([[4]])},
                     {"mode": "kv+g", "step_sizes": [1]}, sample_params(EDGE_CONFIG, rng)),
            OpSample("kv_two_steps", {"prompt_ids": _ids(rng, (1, 3), SMALL_CONFIG),
                                      "new_ids": _ids(rng, (1, 2), SMALL_CONFIG)},
                     {"mode": "kv", "step_sizes": [1, 1]}, sample_params(SMALL_CONFIG, rng))]


def _scored_ids(rng: np.random.Generator) -> np.ndarray:
    ids = _ids(rng, (2, 4), SMALL_CONFIG)
    ids[1, -1] = SMALL_CONFIG.pad_id  # a pad target is not counted
    return ids


def scoring_blockwise(rng: np.random.Generator) -> list[OpSample]:
    """Two tokens (one target) of the edge model; then [2, 4] tokens with a pad target."""
    return [OpSample("one_target", {"token_ids": np.array([[1, 2]])}, {"pad_id": 0}, sample_params(EDGE_CONFIG, rng)),
            OpSample("pad_target", {"token_ids": _scored_ids(rng)}, {"pad_id": SMALL_CONFIG.pad_id},
                     sample_params(SMALL_CONFIG, rng))]


scoring_sequential = scoring_blockwise


def scoring_blockwise_hf(rng: np.random.Generator) -> list[OpSample]:
    """HF loss on [2, 4] tokens, the last key of row 1 padded (label -100)."""
    ids = _ids(rng, (2, 4), SMALL_CONFIG)
    mask = np.ones((2, 4), dtype=np.int64)
    mask[1, -1] = 0
    return [OpSample("padding", {"input_ids": ids, "labels": np.where(mask == 1, ids, -100), "attention_mask": mask},
                     params=sample_params(SMALL_CONFIG, rng))]


def scoring_one_pass(rng: np.random.Generator) -> list[OpSample]:
    """Two ragged candidates (lengths 1, 2) after a 2-token context."""
    cands = np.array([[3, -1], [2, 5]])
    return [OpSample("ragged", {"context": np.array([1, 4]), "candidates": cands,
                                "candidate_lengths": np.array([1, 2])}, params=sample_params(SMALL_CONFIG, rng))]


def scoring_prompt_frozen(rng: np.random.Generator) -> list[OpSample]:
    """Teacher-forced log-probs of a 2-token continuation after a 2-token prompt, caches frozen (kv+g)."""
    return [OpSample("kv_g", {"prompt_ids": _ids(rng, (1, 2), SMALL_CONFIG),
                              "continuation": _ids(rng, (1, 2), SMALL_CONFIG)}, {"mode": "kv+g"},
                     sample_params(SMALL_CONFIG, rng))]


# ----------------------------------------------------------------------------- golden op cases
#: The golden cases of every op, by registry op name, in suite order (``golden/op/*``).
GOLDEN: dict[str, tuple[GoldenSample, ...]] = {
    "sigmoid": _pointwise_golden("sigmoid"),
    "silu": _pointwise_golden("silu"),
    "iswiglu": _pointwise_golden("iswiglu"),
    "layer_norm": LAYER_NORM_GOLDEN,
    "linear": LINEAR_GOLDEN,
    "glu": GLU_GOLDEN,
    "apply_rope": APPLY_ROPE_GOLDEN,
    "density_operator": DENSITY_OPERATOR_GOLDEN,
    "cumulative_density_operator": CUMULATIVE_DENSITY_OPERATOR_GOLDEN,
    "residual_unit": RESIDUAL_UNIT_GOLDEN,
    "metric_learner_v500": METRIC_LEARNER_V500_GOLDEN,
    "metric_learner_v900": METRIC_LEARNER_V900_GOLDEN,
    "metric_learner": METRIC_LEARNER_GOLDEN,
    "metric_tensor": METRIC_TENSOR_GOLDEN,
    "potential_tensor": POTENTIAL_TENSOR_GOLDEN,
    "energy_curvature": ENERGY_CURVATURE_GOLDEN,
    "attention_scores": ATTENTION_SCORES_GOLDEN,
    "causal_padding_mask": CAUSAL_PADDING_MASK_GOLDEN,
    "apply_mask": APPLY_MASK_GOLDEN,
    "masked_softmax": MASKED_SOFTMAX_GOLDEN,
    "mix_values": MIX_VALUES_GOLDEN,
    "embedding": EMBEDDING_GOLDEN,
    "lm_head": LM_HEAD_GOLDEN,
}
