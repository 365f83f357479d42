"""Small sample inputs of every registry op (OpInfo style): what the engine x op test runs through each engine.

Each generator takes a seeded ``numpy.random.Generator`` and returns a few :class:`OpSample` in the op's case
format (the input names and scalar arguments of :data:`pldr_ref.registry.OPS`, the runner conventions of
:mod:`pldr_ref.fixtures.runners`): an edge shape first (one sequence position, one head, d_k = 2, optional
inputs absent), then a slightly larger one (batch 2, two heads, d_k = 4, optional inputs present, masks).
The samples are test inputs, not golden values: they are small enough for the exact tiers (mpmath, arb) to
run in a fraction of a second each, and stay in the range where every float32 engine is accurate to a few
float32 ulps (no overflow, no near-cancellation edges: those live in the golden suite).
"""

from __future__ import annotations

import dataclasses
import zlib
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from pldr_ref.attention import causal_padding_mask
from pldr_ref.config import PLDRConfig
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


def layer_norm(rng: np.random.Generator) -> list[OpSample]:
    """x [.., d]: d = 2 on one row; then [2, 3, 5]."""
    return [OpSample("d2_one_row", {"x": _u(rng, (1, 2), 2.0), "gamma": 1 + _u(rng, (2,), 0.1),
                                    "beta": _u(rng, (2,), 0.1)}, {"eps": EPS_LN}),
            OpSample("rows", {"x": _u(rng, (2, 3, 5), 2.0), "gamma": 1 + _u(rng, (5,), 0.1),
                              "beta": _u(rng, (5,), 0.1)}, {"eps": EPS_LN})]


def linear(rng: np.random.Generator) -> list[OpSample]:
    """x W^T + b: 2 -> 2 without bias on one row; then [2, 3, 5] -> 4 with bias."""
    return [OpSample("no_bias_d2", {"x": _u(rng, (1, 1, 2)), "weight": _u(rng, (2, 2))}),
            OpSample("bias", {"x": _u(rng, (2, 3, 5)), "weight": _u(rng, (4, 5), 0.7), "bias": _u(rng, (4,), 0.1)})]


def glu(rng: np.random.Generator) -> list[OpSample]:
    """SwiGLU: d = 2, hidden 3, no biases; then d = 4, hidden 6 with biases."""
    def weights(d: int, hid: int, bias: bool) -> dict[str, np.ndarray]:
        w = {"w1": _u(rng, (hid, d), 0.6), "w2": _u(rng, (hid, d), 0.6), "w3": _u(rng, (d, hid), 0.6)}
        if bias:
            w.update({"b1": _u(rng, (hid,), 0.1), "b2": _u(rng, (hid,), 0.1), "b3": _u(rng, (d,), 0.1)})
        return w

    return [OpSample("no_bias_d2", {"x": _u(rng, (1, 1, 2), 2.0), **weights(2, 3, False)}),
            OpSample("bias", {"x": _u(rng, (2, 3, 4), 2.0), **weights(4, 6, True)})]


def apply_rope(rng: np.random.Generator) -> list[OpSample]:
    """S = 1, one head, d_k = 2 (interleaved, exact table); then half pairs with the float32 table."""
    return [OpSample("S1_H1_dk2", {"x": _u(rng, (1, 1, 1, 2), 2.0), "positions": np.array([3])},
                     {"layout": "interleaved", "precision": "exact", "base": ROPE_BASE}),
            OpSample("half_f32_table", {"x": _u(rng, (2, 2, 3, 4), 2.0), "positions": np.array([0, 5, 100])},
                     {"layout": "half", "precision": "float32", "base": ROPE_BASE})]


def density(rng: np.random.Generator) -> list[OpSample]:
    """q_rot [B, H, S, d_k]: S = 1, one head, d_k = 2; then [2, 2, 3, 4]."""
    return [OpSample("S1_H1_dk2", {"q_rot": _u(rng, (1, 1, 1, 2), 2.0)}),
            OpSample("B2_H2_S3_dk4", {"q_rot": _u(rng, (2, 2, 3, 4), 2.0)})]


def residual_unit(rng: np.random.Generator) -> list[OpSample]:
    """One residual unit of the edge model (d_k = 2), then unit 1 of layer 1 of the small model."""
    return [OpSample("H1_dk2", {"a": _psd(rng, 1, 1, 2)}, {"layer": 0, "unit": 0}, sample_params(EDGE_CONFIG, rng)),
            OpSample("H2_dk4", {"a": _psd(rng, 2, 2, 4)}, {"layer": 1, "unit": 1},
                     sample_params(SMALL_CONFIG, rng))]


def _metric_learner(config_small: PLDRConfig) -> SampleGenerator:
    def samples(rng: np.random.Generator) -> list[OpSample]:
        edge = EDGE_CONFIG.replace(metric_learner=config_small.metric_learner,
                                   A_dff_depth=config_small.A_dff_depth)
        return [OpSample("H1_dk2", {"a0": _psd(rng, 1, 1, 2)}, {"layer": 0}, sample_params(edge, rng)),
                OpSample("H2_dk4", {"a0": _psd(rng, 2, 2, 4)}, {"layer": 1}, sample_params(config_small, rng))]
    samples.__doc__ = f"a0 PSD, {config_small.metric_learner} metric learner: d_k = 2, then two heads, d_k = 4."
    return samples


metric_learner_v500 = _metric_learner(SMALL_CONFIG)
metric_learner_v900 = _metric_learner(V900_CONFIG)
metric_learner = _metric_learner(SMALL_CONFIG)


def metric_tensor(rng: np.random.Generator) -> list[OpSample]:
    """A_LM = iSwiGLU(W A + b) + eps_adj: one head, d_k = 2; then [2, 2, 4, 4]."""
    def one(b: int, h: int, d: int) -> dict[str, np.ndarray]:
        return {"a": _u(rng, (b, h, d, d), 2.0), "W": _u(rng, (h, d, d)), "b": _u(rng, (h, d, d), 0.3)}

    return [OpSample("H1_dk2", one(1, 1, 2), {"eps_adj": EPS_ADJ}),
            OpSample("B2_H2_dk4", one(2, 2, 4), {"eps_adj": EPS_ADJ})]


def potential_tensor(rng: np.random.Generator) -> list[OpSample]:
    """A_P = A_LM^P, A_LM > 0, P of both signs: one head, d_k = 2; then [2, 2, 4, 4]."""
    def one(b: int, h: int, d: int) -> dict[str, np.ndarray]:
        return {"a_lm": 0.05 + rng.uniform(0.0, 2.0, (b, h, d, d)), "P": _u(rng, (h, d, d))}

    return [OpSample("H1_dk2", one(1, 1, 2)), OpSample("B2_H2_dk4", one(2, 2, 4))]


def energy_curvature(rng: np.random.Generator) -> list[OpSample]:
    """G_LM = a A_P + b_a: one head, d_k = 2; then [2, 2, 4, 4]."""
    def one(b: int, h: int, d: int) -> dict[str, np.ndarray]:
        return {"a_p": rng.uniform(0.0, 3.0, (b, h, d, d)), "a": _u(rng, (h, d, d)), "b_a": _u(rng, (h, d, d), 0.1)}

    return [OpSample("H1_dk2", one(1, 1, 2)), OpSample("B2_H2_dk4", one(2, 2, 4))]


def attention_scores(rng: np.random.Generator) -> list[OpSample]:
    """Sc = Q~ G K~^T / sqrt(d_k): S = T = 1, one head, d_k = 2; T > S (cached keys); one G per query row."""
    return [OpSample("S1_H1_dk2", {"q_rot": _u(rng, (1, 1, 1, 2), 2.0), "g_lm": _u(rng, (1, 1, 2, 2)),
                                   "k_rot": _u(rng, (1, 1, 1, 2), 2.0)}),
            OpSample("T_gt_S", {"q_rot": _u(rng, (2, 2, 2, 4), 2.0), "g_lm": _u(rng, (2, 2, 4, 4)),
                                "k_rot": _u(rng, (2, 2, 3, 4), 2.0)}),
            OpSample("G_per_row", {"q_rot": _u(rng, (1, 2, 3, 4), 2.0), "g_lm": _u(rng, (1, 2, 3, 4, 4)),
                                   "k_rot": _u(rng, (1, 2, 3, 4), 2.0)})]


def causal_padding_mask_samples(rng: np.random.Generator) -> list[OpSample]:
    """One query over one key without padding; then 2 new queries at 3, 4 over 5 keys with key padding."""
    return [OpSample("S1_no_padding", {"query_positions": np.array([0]), "key_positions": np.array([0])}),
            OpSample("cached_padding", {"query_positions": np.arange(3, 5), "key_positions": np.arange(5),
                                        "key_padding": np.array([[False] * 5, [True, False, False, True, False]])})]


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


def masked_softmax(rng: np.random.Generator) -> list[OpSample]:
    """One logit (a one-hot row); then random rows with -inf (masked) keys, one row fully masked (zeros)."""
    rows = _u(rng, (2, 3, 4), 4.0)
    rows[0, 1, 2:] = -np.inf
    rows[1, 2, :] = -np.inf
    return [OpSample("one_key", {"logits": _u(rng, (1, 1, 1, 1), 3.0)}), OpSample("masked_rows", {"logits": rows})]


def mix_values(rng: np.random.Generator) -> list[OpSample]:
    """Z = E V: S = T = 1, one head, d_k = 2; then E rows on the simplex, T > S."""
    e = rng.uniform(0.0, 1.0, (2, 2, 2, 3))
    return [OpSample("S1_H1_dk2", {"e": np.ones((1, 1, 1, 1)), "v": _u(rng, (1, 1, 1, 2), 2.0)}),
            OpSample("T_gt_S", {"e": e / e.sum(axis=-1, keepdims=True), "v": _u(rng, (2, 2, 3, 4), 2.0)})]


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


def lm_head(rng: np.random.Generator) -> list[OpSample]:
    """X W_out^T + b_out: one row of the edge model; then [2, 3, d] of the small model."""
    return [OpSample("one_row", {"hidden": _u(rng, (1, 1, 2), 2.0)}, params=sample_params(EDGE_CONFIG, rng)),
            OpSample("B2_S3", {"hidden": _u(rng, (2, 3, SMALL_CONFIG.d_model), 2.0)},
                     params=sample_params(SMALL_CONFIG, rng))]


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
