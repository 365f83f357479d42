"""Model configuration: every architectural number and every implementation switch.

``PLDRConfig`` is a frozen dataclass.  Each discrepancy between the released
implementations (spec ``equations.md`` §11) is a named switch with a small set of
allowed string values; an invalid value raises ``ValueError`` naming the field.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
from collections.abc import Mapping
from typing import Any

import numpy as np

from pldr_ref.constants import EPS_ADJ, EPS_LN, MASK_VALUE, ROPE_BASE

ROPE_LAYOUTS = ("interleaved", "half")
ROPE_PRECISIONS = ("exact", "float32")
MASK_MODES = ("ideal", "additive", "finfo_min")
EMBED_SCALE_PRECISIONS = ("exact", "float32")
METRIC_LEARNERS = ("v500", "v900", "none")
G_MODES = ("learned", "identity", "random", "external")
GRAM_MODES = ("global", "cumulative")
INIT_SCHEMES = ("torch", "keras", "hf")
#: RoPE table source (issue 12): ``auto`` follows ``rope_precision``; ``exact`` real angles; ``float32`` the
#: torchtune / keras-nlp float32 table with every step correctly rounded; ``keras-0.6.4`` keras-nlp 0.6.4's angle
#: formula omega = 1 / base^e evaluated in float64 (the layer dtype of a float64 run); ``explicit`` a user table.
ROPE_TABLES = ("auto", "exact", "float32", "keras-0.6.4", "explicit")
#: RoPE arithmetic: ``auto`` follows ``rope_precision``; ``float64`` (q, k and table used as they are);
#: ``float32`` (q, k and table rounded to float32, rotation in float32: torchtune with float32 buffers);
#: ``float64_qk_f32`` (q, k rounded to float32, rotation in float64: torchtune after ``model.double()``).
ROPE_ARITHMETICS = ("auto", "float64", "float32", "float64_qk_f32")
#: 1/sqrt(d_k): ``exact`` (divide by sqrt in float64), ``float32`` (divide by sqrt(f32 d_k): PT-v510, TF),
#: ``reciprocal`` (multiply by 1/sqrt(d_k) rounded in the model dtype: HF ``scaling``).
SCORE_SCALES = ("exact", "float32", "reciprocal")
#: dtype in which the additive -1e9 mask is added: ``float64`` or ``float32`` (TF / PT float32 training).
MASK_ADD_DTYPES = ("float64", "float32")
#: softmax precision: ``float64`` or ``float32`` (HF eager ``F.softmax(..., dtype=float32)``; TF float32).
SOFTMAX_PRECISIONS = ("float64", "float32")
#: rows whose every key is masked: ``arithmetic`` (what the mask arithmetic and softmax give), or forced to
#: ``zeros``, ``uniform`` or ``nan``.
MASKED_ROWS = ("arithmetic", "zeros", "uniform", "nan")
#: where padding keys come from by default: ``token`` (ids equal to pad_id; native) or ``attention_mask``
#: (only an explicit HF attention mask; HF never masks without one).
PAD_SOURCES = ("token", "attention_mask")

_CHOICES = {
    "rope_layout": ROPE_LAYOUTS,
    "rope_precision": ROPE_PRECISIONS,
    "mask_mode": MASK_MODES,
    "embed_scale_precision": EMBED_SCALE_PRECISIONS,
    "metric_learner": METRIC_LEARNERS,
    "g_mode": G_MODES,
    "gram_mode": GRAM_MODES,
    "init_scheme": INIT_SCHEMES,
    "rope_table": ROPE_TABLES,
    "rope_arithmetic": ROPE_ARITHMETICS,
    "score_scale": SCORE_SCALES,
    "mask_add_dtype": MASK_ADD_DTYPES,
    "softmax_precision": SOFTMAX_PRECISIONS,
    "masked_row": MASKED_ROWS,
    "pad_source": PAD_SOURCES,
}


@dataclasses.dataclass(frozen=True)
class PLDRConfig:
    """Architecture and switches of a PLDR-LLM (spec §1, §3, §5, §11).

    Shapes follow spec §1: ``d_model = num_heads * d_k``; ``dff`` is the FFN GLU
    hidden width, ``A_dff`` the metric-learner GLU hidden width, ``num_reslayerA``
    residual units of ``num_denseA`` GLUs each.  ``A_dff_depth`` is the v900
    lifted width (ignored for v500).
    """

    num_layers: int = 2
    num_heads: int = 2
    d_k: int = 8
    dff: int = 42
    A_dff: int = 21
    num_reslayerA: int = 2
    num_denseA: int = 2
    vocab_size: int = 64
    max_seq_len: int = 64
    A_dff_depth: int = 0
    rope_base: float = ROPE_BASE
    eps_ln: float = EPS_LN
    eps_adj: float = EPS_ADJ
    mask_value: float = MASK_VALUE
    attn_bias: bool = True
    glu_bias: bool = True
    final_bias: bool = True
    rope_layout: str = "interleaved"
    rope_precision: str = "exact"
    mask_mode: str = "ideal"
    embed_scale_precision: str = "exact"
    metric_learner: str = "v500"
    g_mode: str = "learned"
    gram_mode: str = "global"
    init_scheme: str = "torch"
    pad_id: int = 0
    rope_table: str = "auto"
    rope_arithmetic: str = "auto"
    score_scale: str = "exact"
    mask_add_dtype: str = "float64"
    softmax_precision: str = "float64"
    masked_row: str = "arithmetic"
    pad_source: str = "token"

    # ------------------------------------------------------------------ derived
    @property
    def d_model(self) -> int:
        """Model width d = H * d_k."""
        return self.num_heads * self.d_k

    @property
    def uses_plga_params(self) -> bool:
        """True when the PLGA tensors W, b, P, a, b_a exist (``g_mode == "learned"``)."""
        return self.g_mode == "learned"

    @property
    def metric_width(self) -> int:
        """Width of the residual units' last axis: d_k (v500) or A_dff_depth (v900)."""
        return self.A_dff_depth if self.metric_learner == "v900" else self.d_k

    @property
    def rope_table_source(self) -> str:
        """The RoPE table source in effect: ``rope_table``, or ``rope_precision`` when it is ``"auto"``."""
        return self.rope_precision if self.rope_table == "auto" else self.rope_table

    @property
    def rope_arithmetic_dtype(self) -> str:
        """The RoPE arithmetic in effect: ``rope_arithmetic``, or from ``rope_precision`` when ``"auto"``
        (``exact`` -> ``float64``, ``float32`` -> ``float32``)."""
        if self.rope_arithmetic != "auto":
            return self.rope_arithmetic
        return "float32" if self.rope_precision == "float32" else "float64"

    def emulate(self, name: str, **overrides: Any) -> PLDRConfig:
        """This config with the switch values of the released code base ``name`` (see :data:`EMULATIONS`).

        Only implementation switches change (sizes and parameters stay); ``overrides`` are applied last.
        """
        if name not in EMULATIONS:
            raise ValueError(f"unknown emulation profile {name!r}; available: {sorted(EMULATIONS)}")
        return self.replace(**{**EMULATIONS[name], **overrides})

    # -------------------------------------------------------------- validation
    def __post_init__(self) -> None:
        for name, choices in _CHOICES.items():
            value = getattr(self, name)
            if value not in choices:
                raise ValueError(f"PLDRConfig.{name}={value!r} is not one of {choices}")
        positive = ("num_layers", "num_heads", "d_k", "dff", "vocab_size", "max_seq_len")
        for name in positive:
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
                raise ValueError(f"PLDRConfig.{name}={value!r} must be a positive int")
        for name in ("A_dff", "num_reslayerA", "num_denseA", "A_dff_depth", "pad_id"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise ValueError(f"PLDRConfig.{name}={value!r} must be a non-negative int")
        if self.d_k % 2:
            raise ValueError(f"PLDRConfig.d_k={self.d_k} must be even (RoPE rotates pairs)")
        if self.metric_learner != "none" and self.num_reslayerA > 0 and (self.num_denseA <= 0 or self.A_dff <= 0):
            raise ValueError(
                "PLDRConfig.num_denseA and PLDRConfig.A_dff must be positive when "
                f"num_reslayerA={self.num_reslayerA} > 0"
            )
        if self.metric_learner == "v900" and self.A_dff_depth <= 0:
            raise ValueError("PLDRConfig.A_dff_depth must be positive for metric_learner='v900'")
        if self.g_mode == "learned" and self.metric_learner == "none":
            raise ValueError(
                "PLDRConfig.metric_learner='none' needs a non-learned g_mode "
                "(identity, random or external): learned G_LM is built from the metric learner"
            )
        for name in ("eps_ln", "eps_adj", "rope_base"):
            value = getattr(self, name)
            if not (isinstance(value, (int, float)) and math.isfinite(value) and value >= 0):
                raise ValueError(f"PLDRConfig.{name}={value!r} must be a finite float >= 0")
        if self.rope_base <= 1:
            raise ValueError(f"PLDRConfig.rope_base={self.rope_base!r} must be > 1")
        if not (isinstance(self.mask_value, (int, float)) and math.isfinite(self.mask_value)):
            raise ValueError(f"PLDRConfig.mask_value={self.mask_value!r} must be finite")
        if self.mask_value >= 0:
            raise ValueError(f"PLDRConfig.mask_value={self.mask_value!r} must be negative")
        if self.mask_add_dtype == "float32" and self.mask_mode != "additive":
            raise ValueError(f"PLDRConfig.mask_add_dtype='float32' needs mask_mode='additive', got {self.mask_mode!r}")
        if self.pad_id >= self.vocab_size:
            raise ValueError(f"PLDRConfig.pad_id={self.pad_id} must be < vocab_size={self.vocab_size}")

    # ----------------------------------------------------------------- helpers
    def replace(self, **changes: Any) -> PLDRConfig:
        """Return a copy with ``changes`` applied (and validated)."""
        unknown = set(changes) - {f.name for f in dataclasses.fields(self)}
        if unknown:
            raise ValueError(f"PLDRConfig has no field(s) {sorted(unknown)}")
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-serialisable dict of every field."""
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> PLDRConfig:
        """Inverse of :meth:`to_dict`; unknown keys are an error."""
        unknown = set(data) - {f.name for f in dataclasses.fields(cls)}
        if unknown:
            raise ValueError(f"PLDRConfig has no field(s) {sorted(unknown)}")
        return cls(**dict(data))

    @classmethod
    def preset(cls, name: str, **overrides: Any) -> PLDRConfig:
        """A named configuration (spec §5).

        ``"v510-110m"``: PLDRv51-110M (PT-v510 / HF default); ``"v500"``: TF-v500
        (half-split RoPE, float32 quirks); ``"v900"``: TF-v900 run default;
        ``"tiny"``, ``"small"``, ``"medium"``: small configs for tests and fixtures.
        """
        if name not in PRESETS:
            raise ValueError(f"unknown preset {name!r}; available: {sorted(PRESETS)}")
        fields = dict(PRESETS[name])
        fields.update(overrides)
        return cls(**fields)

    @classmethod
    def from_hf_config(cls, source: str | os.PathLike[str] | Mapping[str, Any], *, attn_implementation: str = "sdpa",
                       **overrides: Any) -> PLDRConfig:
        """Build a config from a Hugging Face ``PldrllmConfig`` ``config.json`` (spec §5, §8.2).

        ``source`` is a path to the JSON file (or its folder) or an already-parsed dict.
        HF computes RoPE in the torchtune way when ``reference_rope`` is true (the
        default): interleaved pairs, float32 table, q/k rounded to float32.
        ``attn_implementation`` (``"sdpa"``, the transformers 5.x default, or ``"eager"``) selects the
        ``hf-sdpa`` / ``hf-eager`` emulation profile (:func:`hf_attention_switches`).
        """
        if isinstance(source, Mapping):
            hf = dict(source)
        else:
            path = os.fspath(source)
            if os.path.isdir(path):
                path = os.path.join(path, "config.json")
            with open(path, encoding="utf-8") as fh:
                hf = json.load(fh)
        if not isinstance(hf, Mapping):
            raise ValueError(f"HF config must be a JSON object, got {type(hf).__name__}")
        fields = _fields_from_hf(hf)
        fields.update(hf_attention_switches(attn_implementation, bool(fields["rope_layout"] == "interleaved")))
        unknown = set(overrides) - {f.name for f in dataclasses.fields(cls)}
        if unknown:
            raise ValueError(f"PLDRConfig has no field(s) {sorted(unknown)}")
        fields.update(overrides)  # e.g. mask_mode="additive" to run HF weights with native semantics
        return cls(**fields)


#: Defaults of HF ``PldrllmConfig.__init__`` (transformers ``a28acc8b``), used for keys a config.json omits.
HF_DEFAULTS: dict[str, Any] = {
    "vocab_size": 32000, "hidden_size": 896, "intermediate_size": 2389, "num_hidden_layers": 5,
    "num_attention_heads": 14, "hidden_act": "silu", "max_position_embeddings": 1024, "layer_norm_eps": EPS_LN,
    "pad_token_id": 0, "tie_word_embeddings": False, "rope_theta": ROPE_BASE, "rope_scaling": None,
    "attention_bias": True, "glu_bias": True, "final_bias": True, "reference_rope": True, "head_dim": 64,
    "num_reslayerA": 8, "num_denseA": 2, "A_dff": 170, "custom_G_type": None,
}


def _fields_from_hf(hf: Mapping[str, Any]) -> dict[str, Any]:
    """PLDRConfig fields from HF ``PldrllmConfig`` keys (missing keys take the HF defaults).

    HF semantics reproduced: ``hidden_size`` None -> heads * head_dim; ``intermediate_size`` None ->
    floor(d * 4 * 2/3); ``reference_rope`` True -> torchtune RoPE (interleaved, float32 table, q/k rounded
    to float32), False -> half-split; ``custom_G_type`` None -> learned G with the v500 metric learner,
    else a fixed G buffer and no metric learner.  The attention switches (mask, softmax, score scale, RoPE
    arithmetic, padding source) come from :func:`hf_attention_switches`; the embedding scale
    is in the model dtype, the initialiser is xavier_uniform ("hf").
    """
    model_type = hf.get("model_type", "pldrllm")
    if model_type != "pldrllm":
        raise ValueError(f"HF config model_type={model_type!r} is not 'pldrllm'")

    def get(key: str) -> Any:
        return hf[key] if key in hf else HF_DEFAULTS[key]

    if get("hidden_act") != "silu":
        raise ValueError(f"HF config hidden_act={get('hidden_act')!r} is not supported (only 'silu')")
    if get("tie_word_embeddings"):
        raise ValueError("HF config tie_word_embeddings=True is not supported (PLDR-LLM never ties)")
    if get("rope_scaling") is not None:
        raise ValueError(f"HF config rope_scaling={get('rope_scaling')!r} is not supported (only None)")
    heads = int(get("num_attention_heads"))
    d_k = int(get("head_dim"))
    d_model = get("hidden_size")
    d_model = heads * d_k if d_model is None else int(d_model)
    if d_k * heads != d_model:
        raise ValueError(f"HF config head_dim={d_k} * num_attention_heads={heads} != hidden_size={d_model}")
    dff = get("intermediate_size")
    dff = int(np.floor(d_model * 4 * 2 / 3)) if dff is None else int(dff)
    custom_g = get("custom_G_type")
    if custom_g not in (None, "identity", "random", "external"):
        raise ValueError(f"HF config custom_G_type={custom_g!r} is not one of None, 'identity', 'random', 'external'")
    g_mode = "learned" if custom_g is None else str(custom_g)
    rope_theta = hf.get("rope_theta")
    if rope_theta is None:
        rope_theta = (hf.get("rope_parameters") or {}).get("rope_theta", ROPE_BASE)
    pad = get("pad_token_id")
    return {
        "num_layers": int(get("num_hidden_layers")),
        "num_heads": heads,
        "d_k": d_k,
        "dff": dff,
        "A_dff": int(get("A_dff")),
        "num_reslayerA": int(get("num_reslayerA")),
        "num_denseA": int(get("num_denseA")),
        "vocab_size": int(get("vocab_size")),
        "max_seq_len": int(get("max_position_embeddings")),
        "rope_base": float(rope_theta),
        "eps_ln": float(get("layer_norm_eps")),
        "attn_bias": bool(get("attention_bias")),
        "glu_bias": bool(get("glu_bias")),
        "final_bias": bool(get("final_bias")),
        "rope_layout": "interleaved" if get("reference_rope") else "half",
        "rope_precision": "float32",
        "mask_mode": "finfo_min",
        "embed_scale_precision": "exact",
        "metric_learner": "v500" if g_mode == "learned" else "none",
        "g_mode": g_mode,
        "init_scheme": "hf",
        "pad_id": 0 if pad is None else int(pad),
    }


_HF_SDPA: dict[str, Any] = dict(
    rope_layout="interleaved", rope_precision="float32", rope_table="float32", rope_arithmetic="float32",
    score_scale="reciprocal", mask_mode="ideal", mask_add_dtype="float64", softmax_precision="float64",
    masked_row="zeros", embed_scale_precision="exact", pad_source="attention_mask",
)
_TF_V500: dict[str, Any] = dict(
    rope_layout="half", rope_precision="float32", rope_table="float32", rope_arithmetic="float32",
    score_scale="float32", mask_mode="additive", mask_add_dtype="float32", softmax_precision="float32",
    masked_row="arithmetic", embed_scale_precision="float32", pad_source="token", metric_learner="v500",
)

#: Emulation profiles (:meth:`PLDRConfig.emulate`): the switch values with which each released code base
#: computes (``docs/equations.md`` cites the code line behind every value).
#:
#: * ``pt-v510``: PT-v510 built under default dtype float64 (torchtune RoPE with float32 buffers,
#:   ``Ep / sqrt(f32 dk)``, ``Ep + mask * -1e9`` in
#:   the model dtype, softmax in the model dtype, float32 sqrt(d)); pads from token id 0.
#: * ``hf-sdpa``: HF ``pldrllm`` with the transformers 5.x default attention (bool mask, safe softmax: a fully
#:   masked row is zeros), ``scaling = 1/sqrt(dk)`` in the model dtype, float32 table buffers kept by
#:   ``from_pretrained(dtype=float64)``; padding only from the attention mask.
#: * ``hf-eager``: as ``hf-sdpa`` with ``attn_implementation="eager"``: finfo(float64).min mask, softmax in
#:   float32 (the mask becomes -inf: a fully masked row is NaN).
#: * ``hf-double-cast``: as ``hf-sdpa`` for a model cast with ``.double()`` after construction: the table
#:   buffers become float64, q and k are still rounded to float32, the rotation runs in float64.
#: * ``tf-v500`` / ``tf-v900``: the TF code in float32: half-split keras-nlp RoPE, ``Ep / sqrt(f32 dk)``,
#:   ``Ep + mask * -1e9`` added in float32, float32 softmax, float32 sqrt(d); v900 also sets the v900
#:   metric learner (give ``A_dff_depth``).
EMULATIONS: dict[str, dict[str, Any]] = {
    "pt-v510": dict(
        rope_layout="interleaved", rope_precision="float32", rope_table="float32", rope_arithmetic="float32",
        score_scale="float32", mask_mode="additive", mask_add_dtype="float64", softmax_precision="float64",
        masked_row="arithmetic", embed_scale_precision="float32", pad_source="token",
    ),
    "hf-sdpa": _HF_SDPA,
    "hf-eager": dict(_HF_SDPA, mask_mode="finfo_min", softmax_precision="float32", masked_row="nan"),
    "hf-double-cast": dict(_HF_SDPA, rope_arithmetic="float64_qk_f32"),
    "tf-v500": _TF_V500,
    "tf-v900": dict(_TF_V500, metric_learner="v900"),
}

#: HF ``attn_implementation`` -> emulation profile used by :meth:`PLDRConfig.from_hf_config`.
HF_ATTN_PROFILES = {"sdpa": "hf-sdpa", "eager": "hf-eager"}


def hf_attention_switches(attn_implementation: str, reference_rope: bool = True) -> dict[str, Any]:
    """Switch values of HF ``pldrllm`` for ``attn_implementation`` (``"sdpa"`` or ``"eager"``).

    ``reference_rope=False`` (HF ``PldrllmRotaryEmbedding``): half-split pairs, float32 cos/sin cast to the
    model dtype, q and k not rounded (``rope_arithmetic="float64"``).
    """
    if attn_implementation not in HF_ATTN_PROFILES:
        raise ValueError(f"attn_implementation={attn_implementation!r} is not one of {sorted(HF_ATTN_PROFILES)}")
    switches = dict(EMULATIONS[HF_ATTN_PROFILES[attn_implementation]])
    if not reference_rope:
        switches.update(rope_layout="half", rope_arithmetic="float64")
    return switches


_V510 = dict(
    num_layers=5, num_heads=14, d_k=64, dff=2389, A_dff=170, num_reslayerA=8, num_denseA=2,
    vocab_size=32000, max_seq_len=1024, rope_layout="interleaved", rope_precision="float32",
    mask_mode="additive", embed_scale_precision="float32", metric_learner="v500", init_scheme="torch",
)

PRESETS: dict[str, dict[str, Any]] = {
    "v510-110m": _V510,
    "v500": dict(_V510, rope_layout="half", init_scheme="keras"),
    "v900": dict(
        _V510, num_layers=4, num_heads=15, dff=2560, A_dff=300, A_dff_depth=112,
        rope_layout="half", metric_learner="v900", init_scheme="keras",
    ),
    "tiny": dict(
        num_layers=2, num_heads=2, d_k=8, dff=42, A_dff=10, num_reslayerA=2, num_denseA=2,
        vocab_size=64, max_seq_len=64,
    ),
    "small": dict(
        num_layers=2, num_heads=4, d_k=16, dff=170, A_dff=42, num_reslayerA=2, num_denseA=2,
        vocab_size=256, max_seq_len=128,
    ),
    "medium": dict(
        num_layers=3, num_heads=6, d_k=32, dff=512, A_dff=85, num_reslayerA=4, num_denseA=2,
        vocab_size=1024, max_seq_len=256,
    ),
}
