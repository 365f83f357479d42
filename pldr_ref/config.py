"""Model configuration: every architectural number and every implementation switch.

``PLDRConfig`` is a frozen dataclass.  Each discrepancy between the released
implementations (spec ``equations.md`` §11) is a named switch with a small set of
allowed string values; an invalid value raises ``ValueError`` naming the field.
"""

from __future__ import annotations

import dataclasses
import difflib
import functools
import json
import math
import os
import types
import typing
import warnings
from collections.abc import Mapping
from typing import Any

import numpy as np

from pldr_ref.constants import EPS_ADJ, EPS_LN, MASK_VALUE, ROPE_BASE
from pldr_ref.switches import choices as switch_choices
from pldr_ref.switches import names as switch_names
from pldr_ref.switches import switch

# The allowed values of every string switch, from the switch table (pldr_ref.switches: one record per switch with
# its values, default, meaning and the engines that implement each value).
ROPE_LAYOUTS = switch("rope_layout").choices
ROPE_PRECISIONS = switch("rope_precision").choices
MASK_MODES = switch("mask_mode").choices
EMBED_SCALE_PRECISIONS = switch("embed_scale_precision").choices
METRIC_LEARNERS = switch("metric_learner").choices
G_MODES = switch("g_mode").choices
GRAM_MODES = switch("gram_mode").choices
INIT_SCHEMES = switch("init_scheme").choices
ROPE_TABLES = switch("rope_table").choices
ROPE_ARITHMETICS = switch("rope_arithmetic").choices
SCORE_SCALES = switch("score_scale").choices
MASK_ADD_DTYPES = switch("mask_add_dtype").choices
SOFTMAX_PRECISIONS = switch("softmax_precision").choices
MASKED_ROWS = switch("masked_row").choices
PAD_SOURCES = switch("pad_source").choices

#: Field -> allowed values of every str field (validated in ``__post_init__``; a str field missing here is refused).
_CHOICES = switch_choices()


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
    rope_layout: str = switch("rope_layout").default
    rope_precision: str = switch("rope_precision").default
    mask_mode: str = switch("mask_mode").default
    embed_scale_precision: str = switch("embed_scale_precision").default
    metric_learner: str = switch("metric_learner").default
    g_mode: str = switch("g_mode").default
    gram_mode: str = switch("gram_mode").default
    init_scheme: str = switch("init_scheme").default
    pad_id: int = 0
    rope_table: str = switch("rope_table").default
    rope_arithmetic: str = switch("rope_arithmetic").default
    score_scale: str = switch("score_scale").default
    mask_add_dtype: str = switch("mask_add_dtype").default
    softmax_precision: str = switch("softmax_precision").default
    masked_row: str = switch("masked_row").default
    pad_source: str = switch("pad_source").default

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

        Only implementation switches change: sizes, parameters and what the model config determines stay (an HF
        profile keeps ``rope_layout``, HF's ``reference_rope``, and takes the RoPE arithmetic HF uses for that
        layout: :func:`profile_switches`).  ``overrides`` are applied last.  A retired profile name
        (:data:`RETIRED_EMULATIONS`) raises ``ValueError`` saying which profiles replace it.
        """
        return self.replace(**{**profile_switches(name, self.rope_layout), **overrides})

    # -------------------------------------------------------------- validation
    def __post_init__(self) -> None:
        _validate_field_types(self)
        for name in _CHOICES:
            switch(name).check(getattr(self, name), owner="PLDRConfig")
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
        if self.rope_table in ROPE_PRECISIONS and self.rope_table != self.rope_precision:
            # one switch per behaviour: the legacy rope_precision names a table too, and would silently lose
            raise ValueError(
                f"PLDRConfig.rope_table={self.rope_table!r} contradicts rope_precision={self.rope_precision!r} "
                f"(the legacy switch names the {self.rope_precision!r} table): set rope_precision="
                f"{self.rope_table!r} too, or leave rope_table='auto' (it then follows rope_precision)")
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
        """Plain JSON-serialisable dict: every structural field (sizes, constants, biases, ``pad_id``) and each
        switch of the switch table only where it differs from its default (:meth:`non_default_switches`).

        Every stored or hashed form of a config is this one -- a golden ``case.json``, the calibration digest
        (:func:`pldr_ref.harness.policy.ensemble.case_digest`), a profile suite's cache key, an ONNX file's metadata --
        so a switch added at its default leaves them byte-identical (``docs/adding_a_switch.md``);
        :meth:`from_dict` fills the defaults back."""
        changed = self.non_default_switches()
        return {k: v for k, v in dataclasses.asdict(self).items() if k not in _CHOICES or k in changed}

    def non_default_switches(self) -> dict[str, str]:
        """Switch -> value, for every switch of the switch table this config sets to a value other than its
        default (table order)."""
        return {name: getattr(self, name) for name in _CHOICES if getattr(self, name) != switch(name).default}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> PLDRConfig:
        """Inverse of :meth:`to_dict` (a switch absent takes its default); unknown keys are an error."""
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
    def from_hf_config(cls, source: str | os.PathLike[str] | Mapping[str, Any], *, unknown_keys: str = "error",
                       attn_implementation: str = "sdpa",
                       **overrides: Any) -> PLDRConfig:
        """Build a config from a Hugging Face ``PldrllmConfig`` ``config.json`` (spec §5, §8.2).

        ``source`` is a path to the JSON file (or its folder) or an already-parsed dict.
        HF computes RoPE in the torchtune way when ``reference_rope`` is true (the
        default): interleaved pairs, float32 table, q/k rounded to float32.

        Every value is type-checked (an int key takes only an int, a bool key only true/false; see
        :data:`HF_KEY_TYPES`).  A key that is neither a ``PldrllmConfig`` key nor in
        :data:`HF_IGNORED_KEYS` (bookkeeping keys that do not change the forward map) is an error naming
        it (a misspelt ``num_hidden_layer`` would otherwise silently take the default); with
        ``unknown_keys="warn"`` such keys are ignored with one ``UserWarning`` listing them.
        ``attn_implementation`` (``"sdpa"``, the transformers 5.x default, or ``"eager"``) selects the
        ``hf-sdpa`` / ``hf-eager`` emulation profile (:func:`hf_attention_switches`).
        """
        if unknown_keys not in HF_UNKNOWN_KEY_POLICIES:
            raise ValueError(f"unknown_keys={unknown_keys!r} is not one of {HF_UNKNOWN_KEY_POLICIES}")
        where = "HF config"
        if isinstance(source, Mapping):
            hf: Any = dict(source)
        else:
            path = os.fspath(source)
            if os.path.isdir(path):
                path = os.path.join(path, "config.json")
            where = f"HF config {path}"
            try:
                with open(path, encoding="utf-8") as fh:
                    hf = json.load(fh)
            except (json.JSONDecodeError, UnicodeDecodeError) as exc:
                raise ValueError(f"{where}: not valid JSON ({exc})") from exc
        if not isinstance(hf, Mapping):
            raise ValueError(f"{where} must be a JSON object, got {type(hf).__name__}")
        fields = _fields_from_hf(hf, where, unknown_keys)
        fields.update(hf_attention_switches(attn_implementation, bool(fields["rope_layout"] == "interleaved")))
        unknown = set(overrides) - {f.name for f in dataclasses.fields(cls)}
        if unknown:
            raise ValueError(f"PLDRConfig has no field(s) {sorted(unknown)}")
        fields.update(overrides)  # e.g. mask_mode="additive" to run HF weights with native semantics
        return cls(**fields)


_TABLE_WITHOUT_FIELD = sorted(set(_CHOICES) - {f.name for f in dataclasses.fields(PLDRConfig)})
if _TABLE_WITHOUT_FIELD:  # a switch added to the table needs its PLDRConfig field (docs/adding_a_switch.md)
    raise TypeError(f"the switch table (pldr_ref.switches) names {_TABLE_WITHOUT_FIELD}, which PLDRConfig lacks: add "
                    "each as a field `name: str = switch(name).default`")


# ------------------------------------------------------------------ generic field-type validation
def _check_type(owner: str, name: str, value: Any, kind: Any) -> Any:
    """``value`` normalised to the Python type ``kind`` (bool, int, float, str or ``X | None``), else ``ValueError``.

    bool accepts only ``True``/``False`` (and ``numpy.bool_``); int only integers (``numpy.integer`` too),
    never bool, float, str or None; float an int or float (not bool) that is finite (``-inf``, ``inf`` and
    NaN are refused); str only str.  ``owner.name`` names the field in the message.
    """
    if typing.get_origin(kind) in (typing.Union, types.UnionType):
        members = typing.get_args(kind)
        if value is None and type(None) in members:
            return None
        inner = [m for m in members if m is not type(None)]
        if len(inner) != 1:
            raise TypeError(f"{owner}.{name}: unsupported field annotation {kind!r}")
        kind = inner[0]
    where = f"{owner}.{name}={value!r}"
    if kind is bool:
        if isinstance(value, (bool, np.bool_)):
            return bool(value)
        raise ValueError(f"{where} must be a bool (True or False), got {type(value).__name__}")
    if kind is int:
        if isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_)):
            return int(value)
        raise ValueError(f"{where} must be an int (not bool, float, str or None), got {type(value).__name__}")
    if kind is float:
        if isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, (bool, np.bool_)):
            if not math.isfinite(value):
                raise ValueError(f"{where} must be finite")
            return float(value)
        raise ValueError(f"{where} must be a finite float (or int), got {type(value).__name__}")
    if kind is str:
        if isinstance(value, str):
            return value
        raise ValueError(f"{where} must be a str, got {type(value).__name__}")
    raise TypeError(f"{owner}.{name}: unsupported field annotation {kind!r} (supported: bool, int, float, str, "
                    "X | None)")


@functools.cache
def _field_types(cls: type) -> tuple[tuple[str, Any], ...]:
    """(name, resolved annotation) of every dataclass field of ``cls``."""
    hints = typing.get_type_hints(cls)
    return tuple((f.name, hints[f.name]) for f in dataclasses.fields(cls))


def _validate_field_types(config: Any) -> None:
    """Check (and normalise in place) every field of a frozen dataclass against its annotation.

    Driven by the annotations alone, so a field added later is validated without further code; a
    ``str`` field must also have its allowed values in ``_CHOICES`` (``TypeError`` otherwise).
    """
    owner = type(config).__name__
    for name, kind in _field_types(type(config)):
        value = _check_type(owner, name, getattr(config, name), kind)
        if kind is str and name not in _CHOICES:
            raise TypeError(f"{owner}.{name} is a str switch without allowed values: add it to _CHOICES")
        object.__setattr__(config, name, value)


#: Defaults of HF ``PldrllmConfig.__init__`` (transformers ``a28acc8b``), used for keys a config.json omits.
HF_DEFAULTS: dict[str, Any] = {
    "vocab_size": 32000, "hidden_size": 896, "intermediate_size": 2389, "num_hidden_layers": 5,
    "num_attention_heads": 14, "hidden_act": "silu", "max_position_embeddings": 1024, "layer_norm_eps": EPS_LN,
    "pad_token_id": 0, "tie_word_embeddings": False, "rope_theta": ROPE_BASE, "rope_scaling": None,
    "attention_bias": True, "glu_bias": True, "final_bias": True, "reference_rope": True, "head_dim": 64,
    "num_reslayerA": 8, "num_denseA": 2, "A_dff": 170, "custom_G_type": None,
}


#: Python type of every ``PldrllmConfig`` key read here (``| None``: JSON null has an HF meaning).
HF_KEY_TYPES: dict[str, Any] = {
    "model_type": str, "vocab_size": int, "hidden_size": int | None, "intermediate_size": int | None,
    "num_hidden_layers": int, "num_attention_heads": int, "hidden_act": str, "max_position_embeddings": int,
    "layer_norm_eps": float, "pad_token_id": int | None, "tie_word_embeddings": bool, "rope_theta": float | None,
    "rope_scaling": dict | None, "rope_parameters": dict | None, "attention_bias": bool, "glu_bias": bool,
    "final_bias": bool, "reference_rope": bool, "head_dim": int, "num_reslayerA": int, "num_denseA": int,
    "A_dff": int, "custom_G_type": str | None,
}

#: Keys of an HF config.json that do not change the float64 forward map and are ignored: the generic
#: ``PretrainedConfig`` bookkeeping, generation and training keys, and PldrllmConfig's dropout, cache and
#: output switches (dropout is off at inference; caches and outputs do not change the logits).
HF_IGNORED_KEYS = frozenset({
    "architectures", "auto_map", "torch_dtype", "dtype", "transformers_version", "_name_or_path",
    "bos_token_id", "eos_token_id", "sep_token_id", "decoder_start_token_id", "use_cache", "initializer_range",
    "attention_dropout", "output_pldr_attentions", "cache_first_G", "output_attentions", "output_hidden_states",
    "return_dict", "torchscript", "tokenizer_class", "id2label", "label2id", "problem_type", "is_decoder",
    "is_encoder_decoder", "add_cross_attention", "tie_encoder_decoder", "pruned_heads", "chunk_size_feed_forward",
    "finetuning_task", "prefix", "task_specific_params", "max_length", "min_length", "do_sample", "early_stopping",
    "num_beams", "num_beam_groups", "diversity_penalty", "temperature", "top_k", "top_p", "typical_p",
    "repetition_penalty", "length_penalty", "no_repeat_ngram_size", "encoder_no_repeat_ngram_size",
    "bad_words_ids", "num_return_sequences", "output_scores", "return_dict_in_generate", "forced_bos_token_id",
    "forced_eos_token_id", "remove_invalid_values", "exponential_decay_length_penalty", "suppress_tokens",
    "begin_suppress_tokens", "cross_attention_hidden_size", "tf_legacy_loss", "use_bfloat16",
})

#: Accepted values of ``PLDRConfig.from_hf_config(unknown_keys=...)``.
HF_UNKNOWN_KEY_POLICIES = ("error", "warn")


def _hf_value(hf: Mapping[str, Any], key: str, where: str) -> Any:
    """``hf[key]`` (or the HF default) checked against :data:`HF_KEY_TYPES`; ``ValueError`` naming the key."""
    value = hf[key] if key in hf else HF_DEFAULTS.get(key)
    kind = HF_KEY_TYPES[key]
    if dict in typing.get_args(kind):  # rope_scaling, rope_parameters: a JSON object or null
        if value is None or isinstance(value, Mapping):
            return value
        raise ValueError(f"{where}: key {key!r}={value!r} must be a JSON object or null")
    try:
        return _check_type(where, key, value, kind)
    except ValueError as exc:  # "HF config.key=value must be ..." reads as "HF config: key 'key'=..."
        raise ValueError(str(exc).replace(f"{where}.{key}=", f"{where}: key {key!r}=", 1)) from None


def _check_hf_keys(hf: Mapping[str, Any], where: str, policy: str) -> None:
    """Refuse (or warn about, ``policy="warn"``) keys that are neither read nor knowingly ignored."""
    unknown = sorted(str(k) for k in hf if k not in HF_KEY_TYPES and k not in HF_IGNORED_KEYS)
    if not unknown:
        return
    hints = []
    for k in unknown:
        close = difflib.get_close_matches(k, list(HF_KEY_TYPES), n=1)
        hints.append(f"{k!r}" + (f" (did you mean {close[0]!r}?)" if close else ""))
    msg = (f"{where}: unknown key(s) {', '.join(hints)}; accepted keys: {sorted(HF_KEY_TYPES)} and the ignored "
           f"bookkeeping keys pldr_ref.config.HF_IGNORED_KEYS")
    if policy == "warn":
        warnings.warn(f"{msg}; ignoring them", UserWarning, stacklevel=3)
    else:
        raise ValueError(f"{msg} (pass unknown_keys='warn' to ignore them)")


def _fields_from_hf(hf: Mapping[str, Any], where: str = "HF config", unknown_keys: str = "error") -> dict[str, Any]:
    """PLDRConfig fields from HF ``PldrllmConfig`` keys (missing keys take the HF defaults).

    HF semantics reproduced: ``hidden_size`` None -> heads * head_dim; ``intermediate_size`` None ->
    floor(d * 4 * 2/3); ``reference_rope`` True -> torchtune RoPE (interleaved, float32 table, q/k rounded
    to float32), False -> half-split; ``custom_G_type`` None -> learned G with the v500 metric learner,
    else a fixed G buffer and no metric learner.  The attention switches (mask, softmax, score scale, RoPE
    arithmetic, padding source) come from :func:`hf_attention_switches`; the embedding scale
    is in the model dtype, the initialiser is xavier_uniform ("hf").  Values are type-checked and unknown
    keys refused (see :meth:`PLDRConfig.from_hf_config`).
    """
    _check_hf_keys(hf, where, unknown_keys)

    def get(key: str) -> Any:
        return _hf_value(hf, key, where)

    model_type = hf.get("model_type", "pldrllm")
    if model_type != "pldrllm":
        raise ValueError(f"{where}: model_type={model_type!r} is not 'pldrllm'")
    if get("hidden_act") != "silu":
        raise ValueError(f"{where}: hidden_act={get('hidden_act')!r} is not supported (only 'silu')")
    if get("tie_word_embeddings"):
        raise ValueError(f"{where}: tie_word_embeddings=True is not supported (PLDR-LLM never ties)")
    if get("rope_scaling") is not None:
        raise ValueError(f"{where}: rope_scaling={get('rope_scaling')!r} is not supported (only None)")
    heads = get("num_attention_heads")
    d_k = get("head_dim")
    d_model = get("hidden_size")
    d_model = heads * d_k if d_model is None else d_model
    if d_k * heads != d_model:
        raise ValueError(f"{where}: head_dim={d_k} * num_attention_heads={heads} != hidden_size={d_model}")
    dff = get("intermediate_size")
    dff = int(np.floor(d_model * 4 * 2 / 3)) if dff is None else dff
    custom_g = get("custom_G_type")
    if custom_g not in (None, "identity", "random", "external"):
        raise ValueError(f"{where}: custom_G_type={custom_g!r} is not one of None, 'identity', 'random', 'external'")
    g_mode = "learned" if custom_g is None else custom_g
    rope_theta = get("rope_theta") if "rope_theta" in hf else None
    if rope_theta is None:
        rope_parameters = get("rope_parameters") if "rope_parameters" in hf else None
        rope_theta = _hf_value({"rope_theta": (rope_parameters or {}).get("rope_theta", ROPE_BASE)}, "rope_theta",
                               f"{where} rope_parameters")
    pad = get("pad_token_id")
    return {
        "num_layers": get("num_hidden_layers"),
        "num_heads": heads,
        "d_k": d_k,
        "dff": dff,
        "A_dff": get("A_dff"),
        "num_reslayerA": get("num_reslayerA"),
        "num_denseA": get("num_denseA"),
        "vocab_size": get("vocab_size"),
        "max_seq_len": get("max_position_embeddings"),
        "rope_base": rope_theta,
        "eps_ln": get("layer_norm_eps"),
        "attn_bias": get("attention_bias"),
        "glu_bias": get("glu_bias"),
        "final_bias": get("final_bias"),
        "rope_layout": "interleaved" if get("reference_rope") else "half",
        "rope_precision": "float32",
        "mask_mode": "finfo_min",
        "embed_scale_precision": "exact",
        "metric_learner": "v500" if g_mode == "learned" else "none",
        "g_mode": g_mode,
        "init_scheme": "hf",
        "pad_id": 0 if pad is None else pad,
    }


_HF_SDPA: dict[str, Any] = dict(
    rope_precision="float32", rope_table="float32", rope_arithmetic="float32",
    score_scale="reciprocal", mask_mode="ideal", mask_add_dtype="float64", softmax_precision="float64",
    masked_row="zeros", embed_scale_precision="exact", pad_source="attention_mask",
)
_TF_V500: dict[str, Any] = dict(
    rope_layout="half", rope_precision="float32", rope_table="float32", rope_arithmetic="float32",
    score_scale="float32", mask_mode="additive", mask_add_dtype="float32", softmax_precision="float32",
    masked_row="arithmetic", embed_scale_precision="float32", pad_source="token", pad_id=0, metric_learner="v500",
)
_PT_V510_FLOAT32: dict[str, Any] = dict(
    rope_layout="interleaved", rope_precision="float32", rope_table="float32", rope_arithmetic="float32",
    score_scale="float32", mask_mode="additive", mask_add_dtype="float32", softmax_precision="float64",
    masked_row="arithmetic", embed_scale_precision="float32", pad_source="token", pad_id=0,
)

#: Emulation profiles (:meth:`PLDRConfig.emulate`): the switch values with which each released code base
#: computes (``docs/equations.md`` cites the code line behind every value).  A profile holds implementation
#: switches only: the PT and TF code hard-code their RoPE pairing, metric learner and pad id 0, so those profiles
#: set them; HF reads ``reference_rope`` from its config, so the HF profiles keep the config's ``rope_layout``.
#:
#: * ``pt-v510-float32``: the released PT-v510 model in float32 (torchtune RoPE, float32 table and rotation,
#:   ``Ep / sqrt(f32 dk)``, ``Ep + mask * -1e9`` added in float32, float32 sqrt(d)); pads are token id 0.
#: * ``pt-v510-double``: that model after ``model.double()``: torchtune's float32 cos/sin table (torch's own values,
#:   ``rope_table="explicit"``: pass it as a :class:`pldr_ref.rope.RopeTable`, e.g.
#:   :meth:`pldr_ref.rope.RopeTable.from_torchtune_cache`), q and k rounded to float32 (``x.float()``), the rotation,
#:   mask addition and softmax in float64, float32 sqrt(d_k) and sqrt(d).
#: * ``hf-sdpa``: HF ``pldrllm`` with the transformers 5.x default attention (bool mask, safe softmax: a fully
#:   masked row is zeros), ``scaling = 1/sqrt(dk)`` in the model dtype, float32 table buffers kept by
#:   ``from_pretrained(dtype=float64)``; padding only from the attention mask.
#: * ``hf-eager``: as ``hf-sdpa`` with ``attn_implementation="eager"``: finfo(float64).min mask, softmax in
#:   float32 (the mask becomes -inf: a fully masked row is NaN).  torch's float32 softmax is not correctly
#:   rounded: ``softmax_precision="explicit"`` with torch's kernel (:class:`pldr_ref.attention.SoftmaxKernel`)
#:   reproduces it.
#: * ``hf-double-cast``: as ``hf-sdpa`` for a model cast with ``.double()`` after construction: the table
#:   buffers become float64, q and k are still rounded to float32, the rotation runs in float64.
#: * ``tf-v500`` / ``tf-v900``: the TF code in float32: half-split keras-nlp RoPE, ``Ep / sqrt(f32 dk)``,
#:   ``Ep + mask * -1e9`` added in float32, float32 softmax, float32 sqrt(d), token id 0 masked; v900 also sets the
#:   v900 metric learner (give ``A_dff_depth``).  The table is the correctly rounded float32 one; TF's CPU ``pow``
#:   and ``cos`` are not correctly rounded (pass TF's own table, :meth:`pldr_ref.rope.RopeTable.from_rotate_half`,
#:   with ``rope_table="explicit"`` to replay it).
#: The issue-12 emulation switches (one per released-code numerical behaviour).
EMULATION_SWITCHES = switch_names("emulation")


def switch_defaults(names: tuple[str, ...] = EMULATION_SWITCHES) -> dict[str, Any]:
    """The default value of each switch in ``names`` (from the switch table, as ``PLDRConfig``'s field defaults)."""
    return {n: switch(n).default for n in names}


EMULATIONS: dict[str, dict[str, Any]] = {
    "pt-v510-float32": _PT_V510_FLOAT32,
    "pt-v510-double": dict(_PT_V510_FLOAT32, rope_table="explicit", rope_arithmetic="float64_qk_f32",
                           mask_add_dtype="float64"),
    "hf-sdpa": _HF_SDPA,
    "hf-eager": dict(_HF_SDPA, mask_mode="finfo_min", softmax_precision="float32", masked_row="nan"),
    "hf-double-cast": dict(_HF_SDPA, rope_arithmetic="float64_qk_f32"),
    "tf-v500": _TF_V500,
    "tf-v900": dict(_TF_V500, metric_learner="v900"),
}

#: Profiles whose name is no longer accepted, with the reason and the profiles that replace them.
RETIRED_EMULATIONS: dict[str, str] = {
    "pt-v510": ("it described PT-v510 built under torch.set_default_dtype(torch.float64), a run the released code "
                "cannot make (its attention layer's float32 parameters make the first forward raise); use "
                "'pt-v510-float32' (the released float32 model) or 'pt-v510-double' (after model.double(), with "
                "torchtune's own table as a RopeTable)"),
}

#: The HF profiles: their RoPE arithmetic follows the config's ``rope_layout`` (HF ``reference_rope``).
HF_PROFILES = ("hf-sdpa", "hf-eager", "hf-double-cast")

#: HF ``attn_implementation`` -> emulation profile used by :meth:`PLDRConfig.from_hf_config`.
HF_ATTN_PROFILES = {"sdpa": "hf-sdpa", "eager": "hf-eager"}


def profile_switches(name: str, rope_layout: str = "interleaved") -> dict[str, Any]:
    """The switch values profile ``name`` sets on a config whose RoPE pairing is ``rope_layout``.

    The PT and TF profiles are fixed.  An HF profile keeps ``rope_layout`` (HF ``reference_rope``): with
    ``"interleaved"`` (``reference_rope=True``) it is :data:`EMULATIONS` ``[name]`` (HF's copy of torchtune's RoPE);
    with ``"half"`` (``reference_rope=False``, HF ``PldrllmRotaryEmbedding``: float32 cos/sin cast to the model
    dtype, q and k not rounded, also after ``.double()``) the rotation is ``rope_arithmetic="float64"``.
    """
    if name in RETIRED_EMULATIONS:
        raise ValueError(f"emulation profile {name!r} is retired: {RETIRED_EMULATIONS[name]}")
    if name not in EMULATIONS:
        raise ValueError(f"unknown emulation profile {name!r}; available: {sorted(EMULATIONS)}")
    switches = dict(EMULATIONS[name])
    if name in HF_PROFILES and rope_layout == "half":
        switches["rope_arithmetic"] = "float64"
    return switches


def hf_attention_switches(attn_implementation: str, reference_rope: bool = True) -> dict[str, Any]:
    """Switch values of HF ``pldrllm`` for ``attn_implementation`` (``"sdpa"`` or ``"eager"``).

    ``reference_rope=False`` (HF ``PldrllmRotaryEmbedding``): half-split pairs, float32 cos/sin cast to the
    model dtype, q and k not rounded (``rope_arithmetic="float64"``).
    """
    if attn_implementation not in HF_ATTN_PROFILES:
        raise ValueError(f"attn_implementation={attn_implementation!r} is not one of {sorted(HF_ATTN_PROFILES)}")
    layout = "interleaved" if reference_rope else "half"
    return {"rope_layout": layout, **profile_switches(HF_ATTN_PROFILES[attn_implementation], layout)}


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
