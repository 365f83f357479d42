"""Inference modes: the four native kv x G modes (spec §8.1), HF prefill semantics (spec §8.2) and a
fixed external G_LM (``g_mode="external"``).

A mode says what is frozen after the prompt (prefill) pass:

| mode | KV cache | G cache | per-step call |
|---|---|---|---|
| ``kv+g`` | on | on | new token only; A, A_LM, A_P, G_LM frozen at the prompt (released configuration) |
| ``kv`` | on | off | new token only; A frozen, A_LM / G_LM recomputed from it (same values) |
| ``g`` | off | on | whole growing sequence; A recomputed, PLGA replaced by the prompt's A_LM, G_LM |
| ``none`` | off | off | whole growing sequence, everything recomputed (sequential generation) |
| ``hf`` | on | on | HF ``use_cache=True``: causal + padding mask on cached steps, any step length |
| ``hf-first-G`` | on | on | as ``hf`` with HF ``cache_first_G=True`` (sample 0's operators for the whole batch) |
| ``hf-generate-5.x`` | on | on | as ``hf``, with HF ``generate``'s per-row positions cumsum(mask) - 1 of transformers |
| | | | 5.x (the current release: pads at 0); ``hf-generate-4.x``: transformers 4.x (pads at 1) |
| ``hf-generate-5.x-first-G`` | on | on | as ``hf-generate-5.x`` with ``cache_first_G=True`` (also ``-4.x-first-G``) |

An ``initial_g_cache`` (PT-v510 ``Gcachelst_init``) is used at every step, in every mode.

Deprecated names (kept for one version, each with a ``DeprecationWarning`` naming what to use; CHANGELOG.md):
mode ``"hf-generate"`` keeps the meaning it had before the transformers versions were named, the 4.x rule
(``"hf-generate-4.x"``); ``"hf-generate-first-G"`` keeps its 5.x rule (``"hf-generate-5.x-first-G"``);
``HF_PAD_POSITION`` (1), ``HF_GENERATE_MODE`` (the 4.x mode), ``hf_position_ids(mask)`` without ``transformers``
(4.x) and ``InferenceMode(hf_positions=True)`` (``"4.x"``) likewise.
"""

from __future__ import annotations

import dataclasses
import os
import warnings
from pathlib import Path
from typing import Any

import numpy as np

from pldr_ref.attention import SoftmaxKernel
from pldr_ref.config import PLDRConfig
from pldr_ref.inference.cache import GCache, KVCache
from pldr_ref.inference.step import CACHED_MASKS, StepOutput, cached_forward
from pldr_ref.ops import FLOAT64_OPS, Ops
from pldr_ref.params import Params, with_fixed_g
from pldr_ref.resources import TRAINED_G_LM_FILE
from pldr_ref.rope import RopeTable

#: Name of the array in an external-G ``.npz`` (the bundled ``pldr_ref/resources/g_lm_pldrv51_110m_1.npz``).
EXTERNAL_G_KEY = "G_LM"

#: File name of the trained PLDRv51-110M-1 G_LM bundled in ``pldr_ref/resources`` (named there, once).
PLDRV51_G_FILE = TRAINED_G_LM_FILE


#: Position id HF ``generate`` gives padding tokens, by transformers version: 4.x
#: ``GenerationMixin.prepare_inputs_for_generation`` (``position_ids.masked_fill_(attention_mask == 0, 1)``);
#: 5.x ``GenerationMixin._prepare_position_ids_for_generation`` (``.masked_fill(attention_mask == 0, 0)``).
HF_PAD_POSITIONS: dict[str, int] = {"4.x": 1, "5.x": 0}

#: The current transformers release (the default of :func:`hf_generate_mode`).
HF_CURRENT_TRANSFORMERS = "5.x"

#: The transformers rule the version-less names meant before the versions were named (pads at 1): the deprecated
#: ``"hf-generate"``, ``HF_PAD_POSITION``, ``HF_GENERATE_MODE``, ``hf_position_ids(mask)`` and ``hf_positions=True``
#: keep it for one version.
HF_LEGACY_TRANSFORMERS = "4.x"


def warn_deprecated(old: str, meaning: str, use: str) -> None:
    """One ``DeprecationWarning``: ``old`` still works for one version with ``meaning``; ``use`` says what to use
    instead (the warning points at the caller's caller)."""
    warnings.warn(f"{old} is deprecated and will be removed in the next version; it keeps {meaning}; use {use}",
                  DeprecationWarning, stacklevel=3)


@dataclasses.dataclass(frozen=True)
class InferenceMode:
    """What a decoding loop caches after the prompt pass and how cached steps are masked.

    ``kv_cache``: keep rotated keys, values and A; later calls take only the new tokens.
    ``g_cache``: freeze A_LM, A_P, G_LM at the prompt pass.  ``cached_mask``: ``"none"``
    (native PT-v510) or ``"causal"`` (HF).  ``cache_first_G``: store sample 0's operators only
    (B_G = 1) and broadcast them over the batch on later steps (HF).  ``pad_from_token``: padding
    keys are the tokens equal to ``pad_id`` (native) or only those the ``attention_mask`` marks (HF).
    ``hf_positions``: None (every row uses the sequence index), or a transformers version in
    :data:`HF_PAD_POSITIONS` (``"4.x"``, ``"5.x"``): with an attention mask, RoPE positions are that version's HF
    ``generate`` per-row ``position_ids = cumsum(mask) - 1`` with its padding position (:func:`hf_position_ids`).
    """

    name: str
    kv_cache: bool
    g_cache: bool
    cached_mask: str = "none"
    cache_first_G: bool = False
    pad_from_token: bool = True
    hf_positions: str | None = None

    def __post_init__(self) -> None:
        if isinstance(self.hf_positions, bool):  # the field was a bool before the transformers versions were named
            warn_deprecated(f"InferenceMode(hf_positions={self.hf_positions})",
                            "its old meaning (True: the 4.x rule, pads at 1)",
                            "hf_positions='4.x' or '5.x' (the current release), or None")
            object.__setattr__(self, "hf_positions", HF_LEGACY_TRANSFORMERS if self.hf_positions else None)
        if self.cached_mask not in CACHED_MASKS:
            raise ValueError(f"InferenceMode.cached_mask must be one of {CACHED_MASKS}, got {self.cached_mask!r}")
        if self.hf_positions is not None and self.hf_positions not in HF_PAD_POSITIONS:
            raise ValueError(f"InferenceMode.hf_positions must be None or a transformers version in "
                             f"{sorted(HF_PAD_POSITIONS)}, got {self.hf_positions!r}")


#: The four native PT-v510 generation modes (spec §8.1), keyed by name.
NATIVE_MODES: dict[str, InferenceMode] = {
    "kv+g": InferenceMode("kv+g", kv_cache=True, g_cache=True),
    "kv": InferenceMode("kv", kv_cache=True, g_cache=False),
    "g": InferenceMode("g", kv_cache=False, g_cache=True),
    "none": InferenceMode("none", kv_cache=False, g_cache=False),
}

#: HF ``use_cache=True`` (spec §8.2); ``use_cache=False`` is native ``"none"``.
HF_MODE = InferenceMode("hf", kv_cache=True, g_cache=True, cached_mask="causal", pad_from_token=False)

def hf_position_ids(attention_mask: np.ndarray, transformers: str | None = None) -> np.ndarray:
    """HF ``generate``'s per-row positions [B, T]: cumsum(mask, axis=1) - 1, and where mask = 0 the padding
    position of ``transformers`` (:data:`HF_PAD_POSITIONS`: 1 for ``"4.x"``, 0 for ``"5.x"``, the current release).

    With left padding, every row's first real token sits at position 0; without padding this is arange(T).
    ``[[0, 0, 1, 1, 1]]`` gives ``[[0, 0, 0, 1, 2]]`` (5.x) or ``[[1, 1, 0, 1, 2]]`` (4.x).  Without
    ``transformers`` (deprecated): the 4.x rule it had before the versions were named, with a warning.
    """
    if transformers is None:
        warn_deprecated("hf_position_ids(attention_mask) without transformers=",
                        "its old meaning, the transformers 4.x rule (pads at 1)",
                        f"hf_position_ids(mask, '4.x') or hf_position_ids(mask, {HF_CURRENT_TRANSFORMERS!r})")
        transformers = HF_LEGACY_TRANSFORMERS
    if transformers not in HF_PAD_POSITIONS:
        raise ValueError(f"transformers={transformers!r} is not one of {sorted(HF_PAD_POSITIONS)} (the HF generate "
                         "position rules reproduced)")
    m = np.asarray(attention_mask)
    if m.ndim != 2:
        raise ValueError(f"attention_mask must be [B, T], got shape {m.shape}")
    keep = m.astype(bool)
    return np.where(keep, np.cumsum(keep, axis=1, dtype=np.int64) - 1, HF_PAD_POSITIONS[transformers])


def hf_mode(cache_first_G: bool = False) -> InferenceMode:
    """HF ``use_cache=True`` with the given ``cache_first_G`` flag (``"hf"`` or ``"hf-first-G"``)."""
    return dataclasses.replace(HF_MODE, name="hf-first-G" if cache_first_G else "hf", cache_first_G=cache_first_G)


def hf_generate_mode(transformers: str = HF_CURRENT_TRANSFORMERS, cache_first_G: bool = False) -> InferenceMode:
    """HF ``generate(..., use_cache=True)`` of transformers ``transformers`` (:data:`HF_PAD_POSITIONS`): as
    :data:`HF_MODE` (RoPE at ``cache_position``) plus ``generate``'s per-row ``position_ids`` from the attention
    mask (:func:`hf_position_ids`), with HF's ``cache_first_G`` flag.  Named ``hf-generate-<version>[-first-G]``."""
    if transformers not in HF_PAD_POSITIONS:
        raise ValueError(f"transformers={transformers!r} is not one of {sorted(HF_PAD_POSITIONS)}")
    name = f"hf-generate-{transformers}" + ("-first-G" if cache_first_G else "")
    return dataclasses.replace(HF_MODE, name=name, hf_positions=transformers, cache_first_G=cache_first_G)


#: Every HF mode by name: ``hf``, ``hf-first-G``, ``hf-generate-<version>`` and ``hf-generate-<version>-first-G``
#: for every version in :data:`HF_PAD_POSITIONS`.
HF_MODES: dict[str, InferenceMode] = {
    "hf": HF_MODE,
    "hf-first-G": hf_mode(cache_first_G=True),
    **{m.name: m for v in HF_PAD_POSITIONS for m in (hf_generate_mode(v), hf_generate_mode(v, cache_first_G=True))},
}

#: Deprecated mode names (one more version) -> (the named mode whose rule they keep, what the warning says it is).
DEPRECATED_MODES: dict[str, tuple[str, str]] = {
    "hf-generate": (f"hf-generate-{HF_LEGACY_TRANSFORMERS}", "its meaning from before the transformers versions were "
                    "named, the 4.x rule (pads at 1)"),
    "hf-generate-first-G": (f"hf-generate-{HF_CURRENT_TRANSFORMERS}-first-G", "its meaning, the 5.x rule (pads at 0)"),
}


def deprecated_mode(name: str) -> InferenceMode:
    """The mode a deprecated name keeps (:data:`DEPRECATED_MODES`), under that name, with a ``DeprecationWarning``
    that names the versioned modes to use."""
    target, meaning = DEPRECATED_MODES[name]
    warn_deprecated(f"inference mode {name!r}", f"{meaning}, as {target!r}",
                    f"{target!r} for this rule, or 'hf-generate-{HF_CURRENT_TRANSFORMERS}' / "
                    f"'hf-generate-{HF_LEGACY_TRANSFORMERS}' (with '-first-G' for cache_first_G) to name the "
                    "transformers version")
    return dataclasses.replace(HF_MODES[target], name=name)


#: Deprecated module attributes -> (value factory, what it keeps, what to use).
_DEPRECATED_ATTRIBUTES: dict[str, tuple[Any, str, str]] = {
    "HF_PAD_POSITION": (lambda: HF_PAD_POSITIONS[HF_LEGACY_TRANSFORMERS], "its value 1 (the transformers 4.x rule)",
                        f"HF_PAD_POSITIONS['4.x'] or HF_PAD_POSITIONS[{HF_CURRENT_TRANSFORMERS!r}]"),
    "HF_GENERATE_MODE": (lambda: dataclasses.replace(HF_MODES["hf-generate-4.x"], name="hf-generate"),
                         "its meaning, HF generate with the transformers 4.x rule (pads at 1)",
                         "HF_MODES['hf-generate-4.x'] or hf_generate_mode('5.x')"),
}


def __getattr__(name: str) -> Any:
    """Deprecated module attributes (:data:`_DEPRECATED_ATTRIBUTES`), each with a ``DeprecationWarning``."""
    if name in _DEPRECATED_ATTRIBUTES:
        make, meaning, use = _DEPRECATED_ATTRIBUTES[name]
        warn_deprecated(f"pldr_ref.inference.modes.{name}", meaning, use)
        return make()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def resolve_mode(mode: str | InferenceMode) -> InferenceMode:
    """An :class:`InferenceMode` from itself or a name in :data:`NATIVE_MODES` or :data:`HF_MODES` (or a
    deprecated name in :data:`DEPRECATED_MODES`, with a warning)."""
    if isinstance(mode, InferenceMode):
        return mode
    if mode in HF_MODES:
        return HF_MODES[mode]
    if mode in DEPRECATED_MODES:
        return deprecated_mode(mode)
    if mode not in NATIVE_MODES:
        raise ValueError(f"unknown inference mode {mode!r}; available: {[*NATIVE_MODES, *HF_MODES]}")
    return NATIVE_MODES[mode]


@dataclasses.dataclass(frozen=True)
class DecodeState:
    """Everything a decoding loop carries between calls.

    ids [B, T]: every token so far; attention_mask [B, T] (HF, 1 = keep) or None;
    kv_cache / g_cache: the caches the mode keeps (None when off); rope_table: the explicit RoPE table (or
    None); position_ids [B, T]: the RoPE positions of every token so far when they were given explicitly
    (None: the sequence index, or HF generate's positions in mode ``hf-generate-<version>``); softmax_kernel: the
    explicit float32 softmax (or None); check_finite_values: whether every call raises on NaN/inf; ops: the
    arithmetic of every call (:class:`pldr_ref.ops.Ops`).
    """

    ids: np.ndarray
    attention_mask: np.ndarray | None
    kv_cache: KVCache | None
    g_cache: GCache | None
    rope_table: RopeTable | None = None
    position_ids: np.ndarray | None = None
    softmax_kernel: SoftmaxKernel | None = None
    check_finite_values: bool = True
    ops: Ops = FLOAT64_OPS


def prefill(
    params: Params,
    prompt_ids: np.ndarray,
    mode: str | InferenceMode,
    *,
    attention_mask: np.ndarray | None = None,
    initial_g_cache: GCache | None = None,
    rope_table: RopeTable | None = None,
    position_ids: np.ndarray | None = None,
    softmax_kernel: SoftmaxKernel | None = None,
    check_finite_values: bool = True,
    ops: Ops = FLOAT64_OPS,
) -> tuple[StepOutput, DecodeState]:
    """The prompt pass: full causal forward of the prompt; caches are filled as ``mode`` says.

    With ``initial_g_cache`` the prompt pass already uses it (PT-v510 ``Gcachelst_init``).
    HF ``cache_first_G``: the prompt pass uses per-sample operators, sample 0's are stored.
    ``position_ids`` [B, T]: explicit per-row RoPE positions of the prompt; later tokens of a row continue
    from its last position (+1 per token).  ``rope_table`` / ``softmax_kernel``: the inputs of the
    ``"explicit"`` switch values.  ``check_finite_values=False`` returns NaN/inf logits instead of raising
    ``FloatingPointError`` (HF eager's NaN rows on left padding), here and in every :func:`advance` of the state;
    ``ops`` (the arithmetic, default float64) likewise.
    """
    m = resolve_mode(mode)
    if (m.g_cache or initial_g_cache is not None) and params.config.gram_mode == "cumulative":
        raise ValueError(f"mode {m.name!r} freezes one G per head; gram_mode='cumulative' has one per row")
    ids = np.asarray(prompt_ids)
    step = cached_forward(
        params, ids, g_cache=initial_g_cache, attention_mask=attention_mask, pad_masking=m.pad_from_token,
        position_ids=_mode_positions(m, attention_mask, ids.shape[1]) if position_ids is None else position_ids,
        rope_table=rope_table, softmax_kernel=softmax_kernel, check_finite_values=check_finite_values, ops=ops,
    )
    g = initial_g_cache
    if g is None and m.g_cache:
        g = step.g_cache.first_sample() if m.cache_first_G else step.g_cache
    kv = step.kv_cache if m.kv_cache else None
    mask = None if attention_mask is None else np.asarray(attention_mask)
    pos = None if position_ids is None else np.asarray(step.output.positions)
    return step, DecodeState(ids.astype(np.int64), mask, kv, g, rope_table, pos, softmax_kernel,
                             check_finite_values, ops)


def _continued_positions(state: DecodeState, num_new: int) -> np.ndarray | None:
    """Explicit positions of ``num_new`` appended tokens: each row continues from its last position."""
    if state.position_ids is None:
        return None
    return state.position_ids[:, -1:] + 1 + np.arange(num_new)[None, :]


def _mode_positions(m: InferenceMode, attention_mask: np.ndarray | None, last: int) -> np.ndarray | None:
    """RoPE position ids of the last ``last`` tokens for mode ``m`` (None: the sequence index)."""
    if m.hf_positions is None or attention_mask is None:
        return None
    return hf_position_ids(attention_mask, m.hf_positions)[:, -last:]


def advance(
    params: Params,
    state: DecodeState,
    new_ids: np.ndarray,
    mode: str | InferenceMode,
    *,
    new_attention_mask: np.ndarray | None = None,
    check_finite_values: bool | None = None,
) -> tuple[np.ndarray, StepOutput, DecodeState]:
    """Feed ``new_ids`` [B, S] after ``state``; returns (logits of the new rows [B, S, V], step, state).

    KV on: one call on the new tokens at positions T..T+S-1.  KV off: one call on the whole
    sequence (its last S rows are returned).  The G cache, when present, is used unchanged.
    ``check_finite_values`` (default: the state's, from :func:`prefill`): False returns NaN/inf logits instead
    of raising ``FloatingPointError``.
    """
    m = resolve_mode(mode)
    new = np.asarray(new_ids)
    if new.ndim != 2 or new.shape[0] != state.ids.shape[0]:
        raise ValueError(f"new_ids must have shape [{state.ids.shape[0]}, S], got {new.shape}")
    ids = np.concatenate([state.ids, new.astype(np.int64)], axis=1)
    mask = None
    if state.attention_mask is not None or new_attention_mask is not None:
        old = np.ones(state.ids.shape, dtype=np.int64) if state.attention_mask is None else state.attention_mask
        add = np.ones(new.shape, dtype=np.int64) if new_attention_mask is None else np.asarray(new_attention_mask)
        mask = np.concatenate([old.astype(np.int64), add.astype(np.int64)], axis=1)
    finite = state.check_finite_values if check_finite_values is None else bool(check_finite_values)
    explicit = dict(rope_table=state.rope_table, softmax_kernel=state.softmax_kernel, check_finite_values=finite,
                    ops=state.ops)
    more = _continued_positions(state, new.shape[1])
    positions = None if more is None else np.concatenate([state.position_ids, more], axis=1)
    if m.kv_cache:
        if state.kv_cache is None:
            raise ValueError(f"mode {m.name!r} needs a KV cache: call prefill first")
        step = cached_forward(
            params, new, kv_cache=state.kv_cache, g_cache=state.g_cache, cached_mask=m.cached_mask,
            attention_mask=None if mask is None else mask[:, -new.shape[1]:], pad_masking=m.pad_from_token,
            position_ids=_mode_positions(m, mask, new.shape[1]) if positions is None else positions[:, -new.shape[1]:],
            **explicit,
        )
        logits = step.logits
        kv = step.kv_cache
    else:
        step = cached_forward(params, ids, g_cache=state.g_cache, attention_mask=mask, pad_masking=m.pad_from_token,
                              position_ids=_mode_positions(m, mask, ids.shape[1]) if positions is None else positions,
                              **explicit)
        logits = step.logits[:, -new.shape[1]:]
        kv = None
    return logits, step, DecodeState(ids, mask, kv, state.g_cache, state.rope_table, positions, state.softmax_kernel,
                                     finite, state.ops)


# ----------------------------------------------------------------------------- external G
def default_external_g_path() -> Path:
    """The bundled trained PLDRv51-110M-1 G_LM (:func:`pldr_ref.resources.trained_g_lm_path`)."""
    from pldr_ref.resources import trained_g_lm_path

    return trained_g_lm_path()


def load_external_g(path: str | os.PathLike[str], config: PLDRConfig) -> np.ndarray:
    """Read G_LM [L, H, d_k, d_k] from an ``.npz`` (key ``G_LM``) and check it fits ``config``.

    Raises ``FileNotFoundError`` for a missing file and ``ValueError`` naming the mismatch
    (layers, heads or d_k) when the array does not fit the configuration.  Values are widened to
    float64 exactly.  The shipped file is PLDRv51-110M-1's trained G_LM: L=5, H=14, d_k=64.
    """
    from pldr_ref.array_headers import check_arrays_budget, npz_headers

    p = Path(path)
    if not p.is_file():
        raise FileNotFoundError(f"external G file {p} does not exist")
    headers = npz_headers(p)  # names, shapes and the budget checked before anything is decompressed
    if EXTERNAL_G_KEY not in headers:
        raise ValueError(f"{p} has no array {EXTERNAL_G_KEY!r} (found {sorted(headers)})")
    check_external_g_shape(headers[EXTERNAL_G_KEY].shape, config, p)
    check_arrays_budget(f"external G file {p}", [headers[EXTERNAL_G_KEY]])
    with np.load(p, allow_pickle=False) as z:
        g = np.asarray(z[EXTERNAL_G_KEY])
    check_external_g_shape(g.shape, config, p)
    if g.ndim == 5:
        g = g[:, 0]
    if not np.issubdtype(g.dtype, np.floating) or not np.all(np.isfinite(g)):
        raise ValueError(f"{p}: {EXTERNAL_G_KEY} must be finite floats, got dtype {g.dtype}")
    return g.astype(np.float64)


def check_external_g_shape(shape: tuple[int, ...], config: PLDRConfig, p: Path) -> None:
    """``ValueError`` unless ``shape`` is [L, H, d_k, d_k] (or [L, 1, H, d_k, d_k]) of ``config``, naming the axis."""
    if len(shape) == 5 and shape[1] == 1:
        shape = shape[:1] + shape[2:]
    if len(shape) != 4:
        raise ValueError(f"{p}: {EXTERNAL_G_KEY} has shape {shape}, expected [L, H, d_k, d_k]")
    for axis, (name, want) in enumerate(
        (("num_layers", config.num_layers), ("num_heads", config.num_heads), ("d_k", config.d_k), ("d_k", config.d_k))
    ):
        if shape[axis] != want:
            raise ValueError(f"{p}: {EXTERNAL_G_KEY} has shape {shape}; axis {axis} is {shape[axis]}, "
                             f"config {name}={want}")


def params_with_external_g(params: Params, path: str | os.PathLike[str] | None = None) -> Params:
    """``params`` with the fixed G buffer loaded from ``path`` (default: the shipped PLDRv51-110M-1 G).

    Needs ``g_mode`` in {identity, random, external}; see :func:`pldr_ref.params.with_fixed_g`.
    """
    if params.config.uses_plga_params:
        raise ValueError(f"an external G needs g_mode in (identity, random, external), config has "
                         f"g_mode={params.config.g_mode!r}")
    g = load_external_g(default_external_g_path() if path is None else path, params.config)
    return with_fixed_g(params, g)


def external_g_config(**overrides: object) -> PLDRConfig:
    """A small config whose G_LM shape matches the shipped trained G (L=5, H=14, d_k=64), fixed external G,
    no metric learner; the other sizes are small so that tests and demos run fast."""
    fields: dict[str, object] = dict(
        num_layers=5, num_heads=14, d_k=64, dff=48, A_dff=0, num_reslayerA=0, num_denseA=0,
        vocab_size=64, max_seq_len=64, metric_learner="none", g_mode="external",
    )
    fields.update(overrides)
    return PLDRConfig(**fields)  # type: ignore[arg-type]


# ----------------------------------------------------------------------------- teacher forcing
def teacher_forced_logits(
    params: Params,
    prompt_ids: np.ndarray,
    continuation: np.ndarray,
    mode: str | InferenceMode,
    *,
    attention_mask: np.ndarray | None = None,
    position_ids: np.ndarray | None = None,
    rope_table: RopeTable | None = None,
    softmax_kernel: SoftmaxKernel | None = None,
    check_finite_values: bool = True,
    ops: Ops = FLOAT64_OPS,
) -> np.ndarray:
    """Final-row logits [B, n, V] of the decoding loop of ``mode`` forced through ``continuation`` [B, n]:
    row j is the conditional after prompt + continuation[:, :j] (one token per call, as native decoding).
    ``attention_mask`` / ``position_ids`` are the prompt's (:func:`prefill`; the continuation's tokens are kept
    and continue each row's positions); ``rope_table``, ``softmax_kernel``, ``check_finite_values``, ``ops`` as
    forward's."""
    cont = np.asarray(continuation)
    if cont.ndim != 2 or cont.shape[0] != np.shape(prompt_ids)[0] or cont.shape[1] == 0:
        raise ValueError(f"continuation must be [B, n>=1] with the prompt's B, got shape {cont.shape}")
    step, state = prefill(params, prompt_ids, mode, attention_mask=attention_mask, position_ids=position_ids,
                          rope_table=rope_table, softmax_kernel=softmax_kernel,
                          check_finite_values=check_finite_values, ops=ops)
    rows = [step.logits[:, -1]]
    for j in range(cont.shape[1] - 1):  # sequential: each call appends one token
        logits, _, state = advance(params, state, cont[:, j : j + 1], mode)
        rows.append(logits[:, -1])
    return np.stack(rows, axis=1)


def cache_gap(
    params: Params,
    prompt_ids: np.ndarray,
    continuation: np.ndarray,
    mode: str | InferenceMode = "kv+g",
    *,
    attention_mask: np.ndarray | None = None,
    position_ids: np.ndarray | None = None,
    rope_table: RopeTable | None = None,
    softmax_kernel: SoftmaxKernel | None = None,
    check_finite_values: bool = True,
    ops: Ops = FLOAT64_OPS,
) -> float:
    """Relative logit gap max|cached - recomputed| / max|recomputed| between ``mode`` and full prefix
    recomputation (native ``"none"``) on the same forced continuation (Proposition 5.2(i) measured); the explicit
    inputs as :func:`teacher_forced_logits` takes them, for both runs."""
    explicit = dict(attention_mask=attention_mask, position_ids=position_ids, rope_table=rope_table,
                    softmax_kernel=softmax_kernel, check_finite_values=check_finite_values, ops=ops)
    cached = teacher_forced_logits(params, prompt_ids, continuation, mode, **explicit)
    full = teacher_forced_logits(params, prompt_ids, continuation, "none", **explicit)
    gap = float(np.max(np.abs(cached - full)))
    return 0.0 if gap == 0.0 else gap / float(np.max(np.abs(full)))
