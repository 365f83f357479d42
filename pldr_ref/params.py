"""Model parameters: names, shapes, deterministic initialisation (spec §4, §6).

Parameters are held as a flat mapping from the PyTorch v510 / Hugging Face
state_dict names (spec §6) to float64 arrays, with Linear weights stored
``[out, in]``.  That mapping is the interchange format of every tier (float64,
exact, fixtures, backends); :func:`param_shapes` is the single source of truth
for which names exist and what shapes they have.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterator, Mapping
from types import MappingProxyType
from typing import NamedTuple

import numpy as np

from pldr_ref.config import PLDRConfig
from pldr_ref.memory_budget import check_parameter_budget
from pldr_ref.switches import added_params

#: Keys that may appear in a checkpoint and are accepted but not used.
IGNORED_KEYS = ("decoder.past_G_values_status",)

#: Name of the fixed-G buffer (HF ``custom_G_type``): [L, 3, 1, H, d_k, d_k] holding (A, A_LM, G).
FIXED_G_KEY = "decoder.past_G_values"


def layer_prefix(layer: int) -> str:
    """State-dict prefix of decoder layer ``layer``."""
    return f"decoder.dec_layers.{layer}."


def _glu_shapes(prefix: str, n_in: int, hidden: int, n_out: int, bias: bool) -> dict[str, tuple[int, ...]]:
    shapes: dict[str, tuple[int, ...]] = {
        f"{prefix}gluw1.weight": (hidden, n_in),
        f"{prefix}gluw2.weight": (hidden, n_in),
        f"{prefix}gluw3.weight": (n_out, hidden),
    }
    if bias:
        shapes[f"{prefix}gluw1.bias"] = (hidden,)
        shapes[f"{prefix}gluw2.bias"] = (hidden,)
        shapes[f"{prefix}gluw3.bias"] = (n_out,)
    return dict(sorted(shapes.items()))


def param_shapes(config: PLDRConfig) -> dict[str, tuple[int, ...]]:
    """Every parameter name of ``config`` with its shape, in a fixed order (spec §6).

    v900 extras (not in any released PyTorch checkpoint; named here after the TF
    variables): ``mha1.A_dff_dense1`` [Dd, d_k], ``mha1.layernorm1`` [Dd],
    ``mha1.A_dff_dense2`` [d_k, Dd], ``mha1.layernorm2`` [d_k].

    A config whose parameters exceed the memory budget is refused first, in O(1)
    (:func:`pldr_ref.memory_budget.check_parameter_budget`, ``PLDR_REF_MEMORY_BUDGET``).
    """
    check_parameter_budget(config)
    c = config
    d, dk, h = c.d_model, c.d_k, c.num_heads
    shapes: dict[str, tuple[int, ...]] = {
        "decoder.embedding.weight": (c.vocab_size, d),
        "decoder.layernorm1.weight": (d,),
        "decoder.layernorm1.bias": (d,),
    }
    added = added_params(c, per_layer=True)  # the same tensors in every layer
    for layer in range(c.num_layers):
        p = layer_prefix(layer)
        for name in ("wq", "wk", "wv", "dense"):
            shapes[f"{p}mha1.{name}.weight"] = (d, d)
            if c.attn_bias:
                shapes[f"{p}mha1.{name}.bias"] = (d,)
        width = c.metric_width
        if c.metric_learner == "v500":
            shapes[f"{p}mha1.layernorm1.weight"] = (dk,)
            shapes[f"{p}mha1.layernorm1.bias"] = (dk,)
        elif c.metric_learner == "v900":
            shapes[f"{p}mha1.A_dff_dense1.weight"] = (width, dk)
            shapes[f"{p}mha1.A_dff_dense1.bias"] = (width,)
            shapes[f"{p}mha1.layernorm1.weight"] = (width,)
            shapes[f"{p}mha1.layernorm1.bias"] = (width,)
            shapes[f"{p}mha1.A_dff_dense2.weight"] = (dk, width)
            shapes[f"{p}mha1.A_dff_dense2.bias"] = (dk,)
            shapes[f"{p}mha1.layernorm2.weight"] = (dk,)
            shapes[f"{p}mha1.layernorm2.bias"] = (dk,)
        if c.metric_learner != "none":
            for r in range(c.num_reslayerA):
                for j in range(c.num_denseA):
                    unit = f"{p}mha1.reslayerAs.{r}.denseAs.{j}."
                    shapes.update(_glu_shapes(unit, width, c.A_dff, width, c.glu_bias))
                shapes[f"{p}mha1.reslayerAs.{r}.layernormA.weight"] = (width,)
                shapes[f"{p}mha1.reslayerAs.{r}.layernormA.bias"] = (width,)
        if c.uses_plga_params:
            for name in ("Wlst", "blst", "pwlst", "alst", "balst"):
                shapes[f"{p}mha1.plgatt_layer.{name}"] = (h, dk, dk)
        shapes.update(_glu_shapes(f"{p}ffn.", d, c.dff, d, c.glu_bias))
        for name in ("layernorm1", "layernorm2"):
            shapes[f"{p}{name}.weight"] = (d,)
            shapes[f"{p}{name}.bias"] = (d,)
        shapes.update({p + a.name: a.resolve(c) for a in added})
    if not c.uses_plga_params:
        shapes[FIXED_G_KEY] = (c.num_layers, 3, 1, h, dk, dk)
    shapes.update({a.name: a.resolve(c) for a in added_params(c, per_layer=False)})
    shapes["final_layer.weight"] = (c.vocab_size, d)
    if c.final_bias:
        shapes["final_layer.bias"] = (c.vocab_size,)
    return shapes


class GLUParams(NamedTuple):
    """W1, b1, W2, b2, W3, b3 of GLU(z) = W3 (silu(W1 z + b1) * (W2 z + b2)) + b3 (b* may be None)."""

    w1: np.ndarray
    b1: np.ndarray | None
    w2: np.ndarray
    b2: np.ndarray | None
    w3: np.ndarray
    b3: np.ndarray | None


class NormParams(NamedTuple):
    """LayerNorm gain gamma and shift beta."""

    gamma: np.ndarray
    beta: np.ndarray


class ResUnitParams(NamedTuple):
    """One residual unit of the metric learner: D GLUs in sequence, then a LayerNorm."""

    glus: tuple[GLUParams, ...]
    norm: NormParams


class PLGAParams(NamedTuple):
    """Per-head PLGA tensors, each [H, d_k, d_k]: W, b, P, a, b_a (paper eqs. 3.4-3.6)."""

    W: np.ndarray
    b: np.ndarray
    P: np.ndarray
    a: np.ndarray
    b_a: np.ndarray


class LayerParams(NamedTuple):
    """Structured view of one decoder layer's parameters (biases may be None)."""

    wq: np.ndarray
    bq: np.ndarray | None
    wk: np.ndarray
    bk: np.ndarray | None
    wv: np.ndarray
    bv: np.ndarray | None
    wo: np.ndarray
    bo: np.ndarray | None
    a_norm: NormParams | None
    lift: tuple[np.ndarray, np.ndarray] | None
    lift_norm: NormParams | None
    drop: tuple[np.ndarray, np.ndarray] | None
    drop_norm: NormParams | None
    res_units: tuple[ResUnitParams, ...]
    plga: PLGAParams | None
    g_fixed: np.ndarray | None
    ffn: GLUParams
    norm1: NormParams
    norm2: NormParams
    #: The layer's tensors that switch values add (:attr:`pldr_ref.switches.Switch.params`), by name after the
    #: layer prefix: an optional stage's own weights.
    extra: Mapping[str, np.ndarray] = MappingProxyType({})


@dataclasses.dataclass(frozen=True, eq=False)
class Params(Mapping[str, np.ndarray]):
    """Immutable float64 parameters of one model; carries its :class:`PLDRConfig`.

    Behaves as a read-only mapping name -> array (spec §6 names).  Arrays are
    read-only views; use :meth:`replace` to derive modified parameters.
    """

    config: PLDRConfig
    tensors: Mapping[str, np.ndarray]

    def __post_init__(self) -> None:
        frozen: dict[str, np.ndarray] = {}
        for name, arr in self.tensors.items():
            check_param_dtype(name, np.asarray(arr))
            a = np.array(arr, dtype=np.float64, copy=True)
            a.setflags(write=False)
            frozen[name] = a
        validate_tensors(self.config, frozen)
        object.__setattr__(self, "tensors", MappingProxyType(frozen))

    def __getitem__(self, key: str) -> np.ndarray:
        return self.tensors[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self.tensors)

    def __len__(self) -> int:
        return len(self.tensors)

    def replace(self, **named: np.ndarray) -> Params:
        """Copy with some tensors replaced, e.g. ``params.replace(**{"final_layer.bias": x})``."""
        tensors = dict(self.tensors)
        for k, v in named.items():
            if k not in tensors:
                raise KeyError(f"unknown parameter {k!r}")
            tensors[k] = v
        return Params(self.config, tensors)

    def num_parameters(self) -> int:
        """Total number of scalars (the fixed-G buffer excluded)."""
        return int(sum(v.size for k, v in self.tensors.items() if k != FIXED_G_KEY))

    def layer(self, layer: int) -> LayerParams:
        """Structured view of decoder layer ``layer``."""
        c = self.config
        if not 0 <= layer < c.num_layers:
            raise IndexError(f"layer {layer} out of range [0, {c.num_layers})")
        t = self.tensors
        p = layer_prefix(layer)

        def opt(name: str) -> np.ndarray | None:
            return t.get(name)

        def norm(name: str) -> NormParams:
            return NormParams(t[f"{name}.weight"], t[f"{name}.bias"])

        def glu(prefix: str) -> GLUParams:
            return GLUParams(
                t[f"{prefix}gluw1.weight"], opt(f"{prefix}gluw1.bias"),
                t[f"{prefix}gluw2.weight"], opt(f"{prefix}gluw2.bias"),
                t[f"{prefix}gluw3.weight"], opt(f"{prefix}gluw3.bias"),
            )

        a_norm = lift = lift_norm = drop = drop_norm = None
        res_units: tuple[ResUnitParams, ...] = ()
        if c.metric_learner != "none":
            a_norm = norm(f"{p}mha1.layernorm1")
            if c.metric_learner == "v900":
                lift_norm, a_norm = a_norm, None
                lift = (t[f"{p}mha1.A_dff_dense1.weight"], t[f"{p}mha1.A_dff_dense1.bias"])
                drop = (t[f"{p}mha1.A_dff_dense2.weight"], t[f"{p}mha1.A_dff_dense2.bias"])
                drop_norm = norm(f"{p}mha1.layernorm2")
            res_units = tuple(
                ResUnitParams(
                    tuple(glu(f"{p}mha1.reslayerAs.{r}.denseAs.{j}.") for j in range(c.num_denseA)),
                    norm(f"{p}mha1.reslayerAs.{r}.layernormA"),
                )
                for r in range(c.num_reslayerA)
            )
        plga = None
        g_fixed = None
        if c.uses_plga_params:
            q = f"{p}mha1.plgatt_layer."
            plga = PLGAParams(t[q + "Wlst"], t[q + "blst"], t[q + "pwlst"], t[q + "alst"], t[q + "balst"])
        else:
            g_fixed = t[FIXED_G_KEY][layer, 2, 0]
        return LayerParams(
            t[f"{p}mha1.wq.weight"], opt(f"{p}mha1.wq.bias"),
            t[f"{p}mha1.wk.weight"], opt(f"{p}mha1.wk.bias"),
            t[f"{p}mha1.wv.weight"], opt(f"{p}mha1.wv.bias"),
            t[f"{p}mha1.dense.weight"], opt(f"{p}mha1.dense.bias"),
            a_norm, lift, lift_norm, drop, drop_norm, res_units, plga, g_fixed,
            glu(f"{p}ffn."), norm(f"{p}layernorm1"), norm(f"{p}layernorm2"),
            MappingProxyType({a.name: t[p + a.name] for a in added_params(c, per_layer=True)}),
        )


#: NumPy's parameter dtypes a checkpoint may hold (with ml_dtypes' bfloat16: :func:`accepted_float_dtypes`).
_NUMPY_FLOAT_DTYPES = (np.dtype(np.float16), np.dtype(np.float32), np.dtype(np.float64))


def accepted_float_dtypes() -> tuple[np.dtype, ...]:
    """Parameter dtypes a checkpoint may hold, each converting exactly to float64: float16, bfloat16, float32,
    float64.  A function, not a constant: ml_dtypes (bfloat16) takes about 2 s to import, which every command that
    never sees a bfloat16 array would pay."""
    import ml_dtypes

    return (_NUMPY_FLOAT_DTYPES[0], np.dtype(ml_dtypes.bfloat16), *_NUMPY_FLOAT_DTYPES[1:])


def __getattr__(name: str) -> object:
    if name == "ACCEPTED_FLOAT_DTYPES":  # the former constant, computed on first use
        return accepted_float_dtypes()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def check_param_dtype(name: str, arr: np.ndarray) -> None:
    """``ValueError`` naming ``name`` unless ``arr`` has one of :func:`accepted_float_dtypes` (any byte order)."""
    dt = arr.dtype.newbyteorder("=")
    if dt not in _NUMPY_FLOAT_DTYPES and dt not in accepted_float_dtypes():
        accepted = ", ".join(str(d) for d in accepted_float_dtypes())
        raise ValueError(f"parameter {name!r} has dtype {arr.dtype}; accepted: {accepted} "
                         "(integer, bool and complex arrays are refused)")


def validate_tensors(config: PLDRConfig, tensors: Mapping[str, np.ndarray]) -> None:
    """Raise ``ValueError`` naming the key for a missing, extra, mis-shaped or non-finite tensor."""
    expected = param_shapes(config)
    missing = [k for k in expected if k not in tensors]
    if missing:
        raise ValueError(f"missing parameter(s) for this config: {missing[:5]}{' ...' if len(missing) > 5 else ''}")
    extra = [k for k in tensors if k not in expected and k not in IGNORED_KEYS]
    if extra:
        raise ValueError(f"unexpected parameter(s) for this config: {extra[:5]}{' ...' if len(extra) > 5 else ''}")
    for name, shape in expected.items():
        arr = np.asarray(tensors[name])
        if tuple(arr.shape) != shape:
            raise ValueError(f"parameter {name!r} has shape {tuple(arr.shape)}, expected {shape}")
        if not np.all(np.isfinite(arr)):
            bad = tuple(int(i) for i in np.argwhere(~np.isfinite(arr))[0])
            raise ValueError(f"parameter {name!r} has a non-finite value {arr[bad]} at index {bad}")


# ------------------------------------------------------------------ initialisation
def _linear_fans(shape: tuple[int, ...]) -> tuple[int, int]:
    """(fan_in, fan_out) of a torch-layout tensor ([out, in] or [H, dk, dk] with receptive field)."""
    receptive = int(np.prod(shape[2:])) if len(shape) > 2 else 1
    return shape[1] * receptive, shape[0] * receptive


def _init_tensor(name: str, shape: tuple[int, ...], config: PLDRConfig, rng: np.random.Generator) -> np.ndarray:
    scheme = config.init_scheme
    leaf = name.rsplit(".", 1)[-1]
    if name == FIXED_G_KEY:
        g = np.zeros(shape)
        eye = np.eye(config.d_k)
        if config.g_mode == "random":
            g[:, 2, 0] = rng.standard_normal((config.num_layers, config.num_heads, config.d_k, config.d_k))
        else:  # identity, and the placeholder of external (overwritten by the user)
            g[:, 2, 0] = eye
        return g
    if name == "decoder.embedding.weight":
        return rng.uniform(-0.05, 0.05, shape) if scheme == "keras" else rng.standard_normal(shape)
    if "norm" in name.rsplit(".", 2)[-2] or "layernorm" in name:
        return np.ones(shape) if leaf == "weight" else np.zeros(shape)
    if "plgatt_layer" in name:
        if leaf in ("blst", "balst"):
            return np.zeros(shape)
        h, dk = config.num_heads, config.d_k
        if scheme == "keras":
            # glorot_normal: truncated normal, Keras fans for rank 3 are H*dk each.
            std = math.sqrt(2.0 / (2 * h * dk)) / 0.87962566103423978
            out = rng.standard_normal(shape)
            bad = np.abs(out) > 2.0
            while bad.any():  # resample outside +-2 sigma
                out[bad] = rng.standard_normal(int(bad.sum()))
                bad = np.abs(out) > 2.0
            return out * std
        fan_in, fan_out = dk * dk, h * dk
        if scheme == "hf":
            bound = math.sqrt(6.0 / (fan_in + fan_out))
            return rng.uniform(-bound, bound, shape)
        return rng.standard_normal(shape) * math.sqrt(2.0 / (fan_in + fan_out))
    if leaf == "bias":
        if scheme == "torch" and ".mha1.wv." in name:
            fan_in = config.d_model
            return rng.uniform(-1 / math.sqrt(fan_in), 1 / math.sqrt(fan_in), shape)
        return np.zeros(shape)
    fan_in, fan_out = _linear_fans(shape)
    if scheme == "torch" and ".mha1.wv." in name:
        # PT-v510 never xavier-initialises wv (spec §13.1): kaiming_uniform(a=sqrt 5), bound 1/sqrt(fan_in).
        bound = 1.0 / math.sqrt(fan_in)
    else:
        bound = math.sqrt(6.0 / (fan_in + fan_out))
    return rng.uniform(-bound, bound, shape)


def init_params(config: PLDRConfig, seed: int = 0) -> Params:
    """Deterministic random parameters for ``config`` (spec §4, scheme ``config.init_scheme``).

    Tensors are drawn in :func:`param_shapes` order from ``numpy.random.Generator(PCG64(seed))``.
    Schemes: ``"torch"`` (PT-v510: xavier_uniform linears, torch-default ``wv``,
    xavier_normal PLGA with torch fans, N(0,1) embedding), ``"keras"`` (glorot
    uniform, truncated glorot_normal PLGA with Keras fans, U(+-0.05) embedding),
    ``"hf"`` (xavier_uniform everywhere, N(0,1) embedding).  LayerNorms start at
    gamma = 1, beta = 0; PLGA b and b_a at 0.
    """
    if not isinstance(seed, (int, np.integer)) or isinstance(seed, bool) or seed < 0:
        raise ValueError(f"seed must be a non-negative int, got {seed!r}")
    rng = np.random.Generator(np.random.PCG64(int(seed)))
    tensors = {name: _init_tensor(name, shape, config, rng) for name, shape in param_shapes(config).items()}
    return Params(config, tensors)


def perturb_params(params: Params, seed: int, scale: float = 0.1) -> Params:
    """Add N(0, scale^2) noise to every norm gain/shift and PLGA bias so that no tensor is at its init value.

    Random initialisation leaves LayerNorms at (1, 0) and PLGA biases at 0, which hides
    bugs that swap or drop them; tests and fixtures use this to make every tensor matter.
    """
    rng = np.random.Generator(np.random.PCG64(seed))
    out = {}
    for name, arr in params.items():
        if name == FIXED_G_KEY:
            out[name] = arr
        elif "norm" in name or "plgatt_layer" in name or name.endswith("bias"):
            out[name] = arr + scale * rng.standard_normal(arr.shape)
        else:
            out[name] = arr
    return Params(params.config, out)


def with_fixed_g(params: Params, g_lm: np.ndarray) -> Params:
    """Parameters whose fixed G_LM buffer is ``g_lm`` ([L, H, d_k, d_k] or [L, 1, H, d_k, d_k]).

    Needs a config with ``g_mode`` in {identity, random, external}; the value is
    validated (shape, finiteness) and stored in float64 (float32 input is widened exactly).
    """
    c = params.config
    if c.uses_plga_params:
        raise ValueError(f"with_fixed_g needs g_mode in (identity, random, external), config has g_mode={c.g_mode!r}")
    g = np.asarray(g_lm)
    if g.ndim == 5 and g.shape[1] == 1:
        g = g[:, 0]
    want = (c.num_layers, c.num_heads, c.d_k, c.d_k)
    if g.shape != want:
        raise ValueError(f"external G_LM has shape {g.shape}, expected {want} ([L, H, d_k, d_k])")
    if not np.issubdtype(g.dtype, np.floating):
        raise ValueError(f"external G_LM must be a float array, got dtype {g.dtype}")
    if not np.all(np.isfinite(g)):
        raise ValueError("external G_LM contains NaN or inf")
    buf = np.zeros(param_shapes(c)[FIXED_G_KEY])
    buf[:, 2, 0] = g.astype(np.float64)
    return params.replace(**{FIXED_G_KEY: buf})
