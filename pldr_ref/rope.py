"""Rotary position embedding (RoPE) of queries and keys (spec §2.4 step 3, §12; paper §4.1).

Two pairings (``layout``), four table sources (``table``) and three rotation arithmetics (``arithmetic``):

* ``"interleaved"`` (torchtune, PT-v510, HF ``reference_rope=True``): pairs (x_{2i}, x_{2i+1});
* ``"half"`` (keras-nlp rotate_half, TF-v500/v900): pairs (x_i, x_{i + d_k/2});
* tables: ``"exact"`` (angles p * omega_i in float64), ``"float32"`` (omega, p * omega, cos and sin built in
  float32 as torchtune does, each step correctly rounded), ``"keras-0.6.4"`` (keras-nlp 0.6.4's 1 / base^e in
  float64) and ``"explicit"`` (a :class:`RopeTable` given by the user, e.g. torch's own float32 table);
* arithmetic: ``"float64"``, ``"float32"`` (q, k and table rounded to float32, rotation in float32) and
  ``"float64_qk_f32"`` (q, k rounded to float32, rotation in float64: torchtune after ``model.double()``).

The legacy ``precision`` argument (``"exact"`` / ``"float32"``) sets both: ``"float32"`` is the float32 table
with the float32 rotation.

With omega_i = base^(-2i/d_k), i = 0..d_k/2 - 1, each pair is rotated by the angle p * omega_i.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np

from pldr_ref.config import PLDRConfig
from pldr_ref.switches import AUTO, switch

if TYPE_CHECKING:
    from pldr_ref.ops import Ops

# The values this float64 engine implements, from the switch table (pldr_ref.switches).
LAYOUTS = switch("rope_layout").implemented_by("float64")
PRECISIONS = switch("rope_precision").implemented_by("float64")
#: Table sources (``PLDRConfig.rope_table`` once ``auto`` is resolved): real angles, the float32 torchtune /
#: keras-nlp table (every step correctly rounded), keras-nlp 0.6.4's formula in float64, or an explicit user
#: table (:class:`RopeTable`).
TABLE_SOURCES = tuple(v for v in switch("rope_table").implemented_by("float64") if v != AUTO)
#: Rotation arithmetic (``PLDRConfig.rope_arithmetic`` once ``auto`` is resolved): see :func:`rotate_pairs`.
ARITHMETICS = tuple(v for v in switch("rope_arithmetic").implemented_by("float64") if v != AUTO)


def _framework_array(value: object, what: str) -> np.ndarray:
    """``value`` (a NumPy array, or any object with ``__array__``: a CPU torch tensor, a TF eager tensor) as a
    float NumPy array, without importing its framework; ``ValueError`` naming ``what`` otherwise."""
    try:
        arr = np.asarray(value)
    except Exception as exc:  # a framework object that cannot become an array (e.g. a GPU tensor)
        raise ValueError(f"{what}: cannot be read as an array ({type(value).__name__}: {exc}); move it to host "
                         "memory first (torch: .cpu(); TF: .numpy())") from exc
    if not np.issubdtype(arr.dtype, np.floating):
        raise ValueError(f"{what} must hold floats (float16, float32 or float64), got dtype {arr.dtype} "
                         f"({type(value).__name__})")
    return arr


def _drop_unit_axes(arr: np.ndarray, want_ndim: int, what: str, layout: str) -> np.ndarray:
    """``arr`` with leading axes of length 1 removed down to ``want_ndim`` axes (HF's cos/sin carry a batch axis)."""
    while arr.ndim > want_ndim and arr.shape[0] == 1:
        arr = arr[0]
    if arr.ndim != want_ndim:
        raise ValueError(f"{what} must be {layout}, got shape {arr.shape}")
    return arr


class RopeTable:
    """An explicit RoPE table: ``cos``, ``sin`` [P, d_k/2] for absolute positions 0..P-1 (float64 copies).

    Replays any framework's table bit for bit; used with ``rope_table="explicit"`` (with any other table source
    a given table is refused).  The constructors :meth:`from_torchtune_cache` (torchtune's ``cache`` buffer,
    PT-v510 and HF ``reference_rope=True``) and :meth:`from_rotate_half` (HF ``PldrllmRotaryEmbedding``'s cos/sin,
    keras-nlp / TF tables) take a framework's arrays as they are, without importing the framework.
    """

    def __init__(self, cos: np.ndarray, sin: np.ndarray) -> None:
        c = _framework_array(cos, "RopeTable cos")
        s = _framework_array(sin, "RopeTable sin")
        for name, arr in (("cos", c), ("sin", s)):
            if arr.ndim != 2:
                raise ValueError(f"RopeTable {name} must be a float array [P, d_k/2], got {arr.dtype} {arr.shape}")
            if not np.all(np.isfinite(arr)):
                raise ValueError(f"RopeTable {name} contains NaN or inf")
        if c.shape != s.shape:
            raise ValueError(f"RopeTable cos {c.shape} and sin {s.shape} differ in shape")
        if c.shape[0] == 0 or c.shape[1] == 0:
            raise ValueError(f"RopeTable cos/sin must cover at least one position and one frequency, got {c.shape}")
        self.cos = c.astype(np.float64)
        self.sin = s.astype(np.float64)

    @classmethod
    def from_torchtune_cache(cls, cache: object) -> RopeTable:
        """The table of torchtune ``RotaryPositionalEmbeddings.cache`` [P, d_k/2, 2] (``[..., 0]`` cos,
        ``[..., 1]`` sin; the layout of PT-v510 and of HF's ``reference_rope=True`` copy).

        ``cache`` is the buffer as it is (float32, or float64 after ``model.double()``: the values are the same);
        e.g. ``RopeTable.from_torchtune_cache(model.decoder.dec_layers[0].mha1.rotary_embedding.cache)``.
        """
        arr = _framework_array(cache, "torchtune cache")
        if arr.ndim != 3 or arr.shape[-1] != 2:
            raise ValueError(f"torchtune cache must be [P, d_k/2, 2] (cos, sin in the last axis), got shape "
                             f"{arr.shape}")
        return cls(arr[..., 0], arr[..., 1])

    @classmethod
    def from_rotate_half(cls, cos: object, sin: object) -> RopeTable:
        """The table of a rotate-half framework: ``cos``, ``sin`` [P, d_k] (leading axes of length 1 allowed) whose
        two halves repeat the d_k/2 frequencies (``emb = cat(freqs, freqs)``).

        HF ``PldrllmRotaryEmbedding(x, position_ids=arange(P)[None])`` returns such [1, P, d_k] arrays; keras-nlp's
        ``RotaryEmbedding`` (TF-v500/v900) builds them the same way.  The two halves must be identical (else
        ``ValueError``: the arrays are not a rotate-half table).  Row p must be position p: compute the arrays at
        positions 0..P-1 in order (that cannot be checked here).
        """
        c = _drop_unit_axes(_framework_array(cos, "cos"), 2, "cos", "[P, d_k] (or [1, P, d_k])")
        s = _drop_unit_axes(_framework_array(sin, "sin"), 2, "sin", "[P, d_k] (or [1, P, d_k])")
        if c.shape != s.shape:
            raise ValueError(f"cos {c.shape} and sin {s.shape} differ in shape")
        if c.shape[-1] % 2:
            raise ValueError(f"cos/sin last axis d_k={c.shape[-1]} must be even (two halves of d_k/2)")
        half = c.shape[-1] // 2
        for name, arr in (("cos", c), ("sin", s)):
            if not np.array_equal(arr[:, :half], arr[:, half:]):
                raise ValueError(f"{name}'s two halves [:, :{half}] and [:, {half}:] differ: not a rotate-half "
                                 "table (cat(freqs, freqs)); for torchtune's cache use RopeTable.from_torchtune_cache")
        return cls(c[:, :half], s[:, :half])

    @property
    def num_positions(self) -> int:
        """P, the number of positions the table covers."""
        return int(self.cos.shape[0])

    @property
    def half_width(self) -> int:
        """d_k / 2."""
        return int(self.cos.shape[1])

    def lookup(self, positions: np.ndarray, d_k: int) -> tuple[np.ndarray, np.ndarray]:
        """(cos, sin) [..., d_k/2] at integer ``positions`` [...]; raises if a position or d_k does not fit."""
        if self.half_width != d_k // 2:
            raise ValueError(f"RopeTable has {self.half_width} frequencies, d_k={d_k} needs {d_k // 2}")
        pos = np.asarray(positions)
        if pos.size and (pos.min() < 0 or pos.max() >= self.num_positions):
            raise ValueError(f"positions {int(pos.min())}..{int(pos.max())} outside the RopeTable's "
                             f"0..{self.num_positions - 1}")
        return self.cos[pos], self.sin[pos]


def check_table_used(source: str, explicit: RopeTable | None) -> None:
    """Refuse a :class:`RopeTable` given while the table source ``source`` is not ``"explicit"`` (it would be
    silently ignored: the computed table would be used instead)."""
    if explicit is not None and source != "explicit":
        raise ValueError(f"a RopeTable was given but the RoPE table source is {source!r} (PLDRConfig.rope_table): "
                         "the table would be ignored; set rope_table='explicit' to use it, or do not pass it")


def rope_frequencies(d_k: int, base: float, precision: str = "exact") -> np.ndarray:
    """omega_i = base^(-2i/d_k), i = 0..d_k/2-1, shape [d_k/2] (float32 values if ``precision="float32"``;
    ``"keras-0.6.4"``: 1 / base^(2i/d_k) with every step rounded to float64, as keras-nlp 0.6.4 computes it
    in the layer dtype)."""
    if precision == "float32":
        exps = np.arange(0, d_k, 2, dtype=np.float32)[: d_k // 2] / np.float32(d_k)
        # torch's float32 pow is correctly rounded; NumPy's float32 pow is not (1 ulp off for some
        # exponents), so the power is taken in float64 and rounded once to float32.
        powers = np.power(np.float64(base), exps.astype(np.float64)).astype(np.float32)
        return np.float32(1.0) / powers
    if precision == "keras-0.6.4":
        exps = np.arange(0, d_k, 2, dtype=np.float64) / np.float64(d_k)
        # base^e from the C library's scalar pow (correctly rounded here; NumPy's SIMD power is not: 1 ulp off
        # in 3 of 32 exponents at d_k = 64); d_k/2 scalars, built once per table
        powers = np.array([math.pow(float(base), float(e)) for e in exps])
        return 1.0 / powers
    if precision != "exact":
        raise switch("rope_table").error(precision, allowed=tuple(v for v in TABLE_SOURCES if v != "explicit"))
    return np.power(float(base), -np.arange(0, d_k, 2, dtype=np.float64) / d_k)


def rope_angles(
    positions: np.ndarray, d_k: int, base: float, precision: str = "exact", explicit: RopeTable | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """(cos, sin) of phi_{p,i} = p * omega_i, each [..., d_k/2] for ``positions`` of shape [...].

    ``precision`` is the table source (:data:`TABLE_SOURCES`); ``"explicit"`` reads ``explicit``.
    """
    if precision == "explicit":
        if explicit is None:
            raise ValueError("rope_table='explicit' needs a RopeTable (argument rope_table=RopeTable(cos, sin))")
        return explicit.lookup(positions, d_k)
    check_table_used(precision, explicit)
    omega = rope_frequencies(d_k, base, precision)
    pos = np.asarray(positions)
    if precision == "float32":
        phi = pos.astype(np.float32)[..., None] * omega
        # cos/sin of the float32 angle, correctly rounded to float32 (platform independent; float32
        # libm/SIMD kernels, torch's included, may differ by 1 ulp: about 6e-8 relative).
        phi64 = phi.astype(np.float64)
        return np.cos(phi64).astype(np.float32), np.sin(phi64).astype(np.float32)
    phi = pos.astype(np.float64)[..., None] * omega
    return np.cos(phi), np.sin(phi)


def rotate_pairs(
    x1: np.ndarray, x2: np.ndarray, cos: np.ndarray, sin: np.ndarray, arithmetic: str
) -> tuple[np.ndarray, np.ndarray]:
    """y1 = x1 cos - x2 sin, y2 = x2 cos + x1 sin in the given ``arithmetic`` (float64 results).

    ``float64``: as given; ``float32``: x, cos and sin rounded to float32 and each product, sum and
    difference rounded to float32 (torchtune with float32 buffers; no fused multiply-add);
    ``float64_qk_f32``: x rounded to float32 (torchtune's ``x.float()``), table as given, float64 arithmetic
    (torchtune after ``model.double()``: float64 buffers).
    """
    if arithmetic == "float32":
        x1, x2 = x1.astype(np.float32), x2.astype(np.float32)
        cos, sin = np.asarray(cos).astype(np.float32), np.asarray(sin).astype(np.float32)
    elif arithmetic == "float64_qk_f32":
        x1, x2 = x1.astype(np.float32).astype(np.float64), x2.astype(np.float32).astype(np.float64)
        cos, sin = np.asarray(cos, dtype=np.float64), np.asarray(sin, dtype=np.float64)
    elif arithmetic == "float64":
        cos, sin = np.asarray(cos, dtype=np.float64), np.asarray(sin, dtype=np.float64)
    else:
        raise switch("rope_arithmetic").error(arithmetic, allowed=ARITHMETICS)
    return (x1 * cos - x2 * sin).astype(np.float64), (x2 * cos + x1 * sin).astype(np.float64)


def _pairs(x: np.ndarray, layout: str) -> tuple[np.ndarray, np.ndarray]:
    half = x.shape[-1] // 2
    if layout == "interleaved":
        return x[..., 0::2], x[..., 1::2]
    if layout == "half":
        return x[..., :half], x[..., half:]
    raise switch("rope_layout").error(layout, allowed=LAYOUTS)


def _unpairs(y1: np.ndarray, y2: np.ndarray, layout: str) -> np.ndarray:
    if layout == "interleaved":
        return np.stack([y1, y2], axis=-1).reshape(*y1.shape[:-1], 2 * y1.shape[-1])
    return np.concatenate([y1, y2], axis=-1)


def apply_rope(
    x: np.ndarray,
    positions: np.ndarray,
    *,
    layout: str = "interleaved",
    precision: str = "exact",
    base: float = 10000.0,
    table: str | None = None,
    arithmetic: str | None = None,
    explicit: RopeTable | None = None,
    ops: Ops | None = None,
) -> np.ndarray:
    """Rotate ``x`` [..., S, d_k] by RoPE at absolute ``positions`` [S], or per row [B, S] for x [B, H, S, d_k].

    y_a = x_a cos(phi) - x_b sin(phi),  y_b = x_b cos(phi) + x_a sin(phi)
    for each pair (a, b) of ``layout``.  Returns float64 [..., S, d_k].
    ``table`` (default: ``precision``) is the table source, ``arithmetic`` (default: ``float32`` when
    ``precision="float32"``, else ``float64``) the rotation arithmetic (:func:`rotate_pairs`).  ``ops``
    (:class:`pldr_ref.ops.Ops`; None: this module's float64 functions) gives the table and the rotation.
    Paper: Definition 4.3 (rotated queries/keys); Lean ``Rope`` file.
    """
    x = np.asarray(x)
    d_k = x.shape[-1]
    if d_k % 2:
        raise ValueError(f"RoPE needs an even last axis, got {d_k}")
    source = precision if table is None else table
    if arithmetic is None:
        arithmetic = "float32" if precision == "float32" else "float64"
    pos = np.asarray(positions)
    angles, rotate = (rope_angles, rotate_pairs) if ops is None else (ops.rope_angles, ops.rotate_pairs)
    cos, sin = angles(pos, d_k, base, source, explicit)
    if pos.ndim == 2 and x.ndim == 4:  # per-row positions [B, S] against [B, H, S, d_k]: add the head axis
        cos, sin = cos[:, None], sin[:, None]
    x1, x2 = _pairs(x, layout)
    y1, y2 = rotate(x1, x2, cos, sin, arithmetic)
    return _unpairs(y1, y2, layout)


def configured_rope(x: np.ndarray, positions: np.ndarray, config: PLDRConfig,
                    explicit: RopeTable | None = None, ops: Ops | None = None) -> np.ndarray:
    """:func:`apply_rope` with every RoPE option ``config`` sets (``rope_layout``, ``rope_base``, the table source
    and the arithmetic in effect); ``explicit``: the table of ``rope_table="explicit"``; ``ops``: the arithmetic (None:
    float64).  Shapes as :func:`apply_rope`.

    The one place that maps a config to RoPE's options, so a RoPE switch is read here and nowhere else
    (``docs/adding_a_switch.md``)."""
    c = config
    return apply_rope(x, positions, layout=c.rope_layout, base=c.rope_base, table=c.rope_table_source,
                      arithmetic=c.rope_arithmetic_dtype, explicit=explicit, ops=ops)


def interleave_permutation(d_k: int) -> np.ndarray:
    """pi = [0, 2, ..., d_k-2, 1, 3, ..., d_k-1]: interleaved(x)[pi] == half(x[pi]) (spec §2.4 step 3)."""
    return np.concatenate([np.arange(0, d_k, 2), np.arange(1, d_k, 2)])
