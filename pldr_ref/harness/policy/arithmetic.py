"""Emulated low-precision arithmetic: the reference's primitives evaluated the way a real kernel evaluates them.

An :class:`Arithmetic` describes one legitimate way of computing PLDR-LLM in a storage dtype (bfloat16, float16,
float32): operands of every product rounded to the storage dtype (or to TF32), products exact in float64, sums
accumulated in float32 or in the storage dtype in an explicit order (one sequential pass, forward or reverse, or
blocks of ``tile`` terms whose partial sums are then added), elementwise work in float32 (or the storage dtype),
softmax in two passes or online (FlashAttention's running maximum, rescaled tile by tile), exp directly or as
exp2 of a float32-rounded argument, division or multiplication by a rounded reciprocal, bias and activation fused
into the float32 accumulator or applied to the stored result.

:class:`EmulatedOps` is that arithmetic as an ``ops`` argument (:mod:`pldr_ref.ops`): the reference's primitives
evaluated emulated, handed to the reference code (:func:`pldr_ref.harness.policy.storage_run.storage_outputs`, the
isolated stages), so every case kind -- model, layer, cache, scoring, op -- and every isolated stage runs through the
same code with that arithmetic; nothing is swapped into a module.  Every rounding goes through
:func:`round_to_dtype` (pldr_ref's own round-to-nearest-even; float32 registers by NumPy's IEEE cast, tested
identical); every sum runs in an explicit order (a loop of elementwise float64 additions each followed by a
rounding, or float32 additions in place when the products are exact in float32), so the result does not depend on the
BLAS, the thread count or the machine.  Where numba is installed (the ``[fast]`` extra) the same loops run compiled
(:mod:`pldr_ref.harness.policy.compiled_sums`: the same products, order and roundings, so the same bits; the NumPy
loops below stay the definition the tests compare them with).
The only library calls whose last float64 bit may differ between machines are exp, log, power, sin and cos
(rounded to float32 or below right after, so a difference survives only on an exact rounding tie); the allowances
built from these runs are published with two significant digits (:mod:`pldr_ref.harness.policy.calibration`).

Transcendentals as kernels compute them (``libm_ulps``): a float32 kernel does not evaluate exp, exp2, log2, pow,
sin, cos or 1/sqrt correctly rounded.  Each member's float32 result of those functions is the correctly rounded
float32 value moved by a deterministic number of float32 ulps in [-``libm_ulps``, ``libm_ulps``]
(:func:`libm_float32`), chosen by a SplitMix64 hash of the argument's bits, the function and the member's name --
so the error is a property of the input, as a real libm's, and the same on every machine.  This covers the RoPE
tables too (:meth:`EmulatedOps.rope_angles`: torchtune's float32 ``pow`` / ``cos`` / ``sin``, a float32 table of
real angles), whose rotation runs in the compute format (:meth:`EmulatedOps.rotate_pairs`).
"""

from __future__ import annotations

import dataclasses
import inspect
import math
import threading
from collections.abc import Callable
from typing import Any

import numpy as np

from pldr_ref.fixtures.splitmix import fnv1a64, mix64
from pldr_ref.format_rounding import FloatFormat, float_format, round_to_format
from pldr_ref.harness.policy import compiled_sums
from pldr_ref.ops import FLOAT64_OPS, Ops

#: Largest number of float64 elements one step of a blocked reduction materialises (bounds the memory of
#: products taken for several tiles at once).
STEP_ELEMENTS = 1 << 22
#: log2(e) (for exp via exp2).
LOG2E = 1.0 / math.log(2.0)
#: Significand bits of TF32 (float32's exponent, 10 stored fraction bits + the implicit one).
TF32_BITS = 11
#: Default distance, in float32 ulps, of a member's float32 exp, exp2, log2, pow, sin, cos and 1/sqrt from the
#: correctly rounded value (:func:`libm_float32`).  The kernels it models: CUDA's ``expf``, ``exp2f``, ``sinf``,
#: ``cosf`` and ``rsqrtf`` (at most 2 ulp each in the accuracy tables of the CUDA C++ Programming Guide),
#: ``logf`` / ``log2f`` (1 ulp there); glibc's float32 ``expf``, ``exp2f``, ``logf``, ``log2f``, ``sinf``, ``cosf``
#: (at most 1 ulp, "Errors in Math Functions" of the glibc manual) and SLEEF's 1-ulp vector functions behind
#: torch's CPU float32 exp / sin / cos; torchtune's float32 RoPE table (torch's float32 ``pow``, ``cos``, ``sin``:
#: up to 2 ulp from the correctly rounded table the golden values use).  2 is the largest of these bounds; ``pow``
#: takes the same bound (A_LM^P amplifies its argument's error by |P| far more than its own last bits).  The
#: fast-math intrinsics (``__expf``, ``__sinf``: errors growing with the argument) are not modelled: a backend using
#: them declares its own arithmetic.
LIBM_ULPS = 2
#: Salt of each emulated float32 function in the hash that picks its ulp offset (:func:`libm_float32`).
LIBM_FUNCTIONS = ("exp", "exp2", "log2", "pow", "sin", "cos", "rsqrt")
#: Largest ordinal (sign-magnitude bits) of a finite float32: moves stop short of infinity.
_F32_MAX_ORDINAL = 0x7F7FFFFF


@dataclasses.dataclass(frozen=True)
class Arithmetic:
    """One legitimate low-precision evaluation (see module docstring).

    accumulate: ``float32`` or ``storage`` (sums rounded to the storage dtype after every addition);
    compute: ``float32`` or ``storage`` (elementwise results rounded to that format);
    tile: length of a reduction block (None: one sequential pass); order: ``forward`` or ``reverse``;
    softmax: ``two_pass`` or ``online`` with ``softmax_tile`` keys per block; exp2: exp(x) = exp2(RN(x log2 e));
    reciprocal: x / y evaluated as x * RN(1 / y) (LayerNorm: x * rsqrt(var + eps)); fused: bias and activation
    applied to the float32 accumulator (else to the result rounded to the storage dtype); tf32: product operands
    rounded to TF32 (float32 runs only); libm_ulps: float32 transcendentals (exp, exp2, log2, pow, sin, cos,
    rsqrt; the RoPE tables) up to that many ulps from correctly rounded (:data:`LIBM_ULPS`; 0: correctly rounded;
    with ``exp2`` the power A_LM^P is exp2(P log2 A_LM), as Triton computes it); internal: False evaluates each
    stage in float64 and rounds only its output (the naive run).
    """

    name: str
    accumulate: str = "float32"
    compute: str = "float32"
    tile: int | None = None
    order: str = "forward"
    softmax: str = "two_pass"
    softmax_tile: int = 64
    exp2: bool = False
    reciprocal: bool = False
    fused: bool = True
    tf32: bool = False
    libm_ulps: int = LIBM_ULPS
    internal: bool = True

    def __post_init__(self) -> None:
        if not isinstance(self.libm_ulps, int) or isinstance(self.libm_ulps, bool) or self.libm_ulps < 0:
            raise ValueError(f"Arithmetic {self.name!r}: libm_ulps must be an int >= 0, got {self.libm_ulps!r}")

    def describe(self) -> str:
        """One line for reports."""
        if not self.internal:
            return "naive: float64 inside each stage, stage outputs rounded"
        red = f"tiles of {self.tile}" if self.tile else "one pass"
        return (f"products of {'TF32' if self.tf32 else 'storage'} operands, {self.accumulate} accumulation "
                f"({red}, {self.order}), {self.compute} elementwise, {self.softmax.replace('_', '-')} softmax"
                + (f" (tiles of {self.softmax_tile})" if self.softmax == "online" else "")
                + (", exp2" if self.exp2 else "") + (", reciprocals" if self.reciprocal else "")
                + (", fused bias/activation" if self.fused else ", unfused bias/activation")
                + (f", float32 transcendentals within {self.libm_ulps} ulp" if self.libm_ulps
                   else ", correctly rounded transcendentals"))


#: TF32: float32's exponent range, 11 significand bits.
TF32 = FloatFormat("tf32", precision=TF32_BITS, emin=-126, emax=127)


def round_to_dtype(x: np.ndarray, dtype: str) -> np.ndarray:
    """``x`` rounded to nearest even in ``dtype`` (float64 values back) by pldr_ref's own rounding
    (:mod:`pldr_ref.format_rounding`): storage dtypes range-aware as
    :func:`pldr_ref.fixtures.baselines.storage_round`, ``tf32`` (product operands) plain."""
    from pldr_ref.fixtures.baselines import PRECISIONS, storage_round

    if dtype == "float64":
        return np.asarray(x, dtype=np.float64)
    if dtype == "tf32":
        return round_to_format(x, TF32)
    return storage_round(x, PRECISIONS[dtype])


def _f32(x: np.ndarray) -> np.ndarray:
    """A float32 register: NumPy's IEEE cast (round to nearest even, overflow to inf, gradual underflow), as the
    float32 accumulator or ALU of a kernel behaves (no range-aware widening, unlike storage).  The cast is
    bit-identical to :func:`pldr_ref.format_rounding.round_to_format` into float32 (tested) and six times faster
    in the accumulation loops."""
    with np.errstate(over="ignore", invalid="ignore"):
        return np.asarray(x, dtype=np.float64).astype(np.float32).astype(np.float64)


def _ordinal32(r: np.ndarray) -> np.ndarray:
    """Ordered integer of each float32 value (sign-magnitude bits as a signed distance from +0; -0 maps to 0)."""
    bits = r.view(np.uint32).astype(np.int64)
    mag = bits & 0x7FFFFFFF
    return np.where(bits >> 31 == 1, -mag, mag)


def _from_ordinal32(o: np.ndarray) -> np.ndarray:
    """Inverse of :func:`_ordinal32` (float32)."""
    bits = np.where(o < 0, (-o) | 0x80000000, o).astype(np.uint32)
    return bits.view(np.float32)


def _argument_bits(args: tuple[np.ndarray, ...], shape: tuple[int, ...]) -> np.ndarray:
    """A uint64 digest of the float64 bits of the arguments, element by element (broadcast to ``shape``)."""
    h = np.zeros(shape, dtype=np.uint64)
    for a in args:
        bits = np.array(np.broadcast_to(np.asarray(a, dtype=np.float64), shape)).view(np.uint64)
        h = mix64(h ^ bits)
    return h


def libm_float32(value: np.ndarray, fn: str, args: tuple[np.ndarray, ...], ulps: int, seed: int) -> np.ndarray:
    """A float32 libm's result for the float64 value ``value`` of ``fn(*args)``: the correctly rounded float32
    value moved by s float32 ulps, s in [-ulps, ulps] (float64 array of float32 values).

    s is a SplitMix64 hash (:func:`pldr_ref.fixtures.splitmix.mix64`) of the float64 bits of the arguments, the
    function (:data:`LIBM_FUNCTIONS`) and ``seed``, reduced mod 2 ulps + 1: uniform over the range, deterministic
    and the same on every machine.  Left as rounded: results that are exact in float32 (exp(0) = 1, cos(0) = 1, x^0
    = 1: a faithful libm returns them exactly), zeros, infinities, NaN; a move never crosses zero or leaves the
    finite range.  ``ulps`` = 0: correctly rounded.
    """
    with np.errstate(over="ignore", invalid="ignore"):
        v = np.asarray(value, dtype=np.float64)
        r = v.astype(np.float32)
    if ulps == 0 or r.size == 0:
        return r.astype(np.float64)
    salt = np.uint64((fnv1a64(fn) ^ seed) & 0xFFFFFFFFFFFFFFFF)
    h = mix64(_argument_bits(args, r.shape) ^ salt)
    s = (h >> np.uint64(33)).astype(np.int64) % (2 * ulps + 1) - ulps
    o = _ordinal32(r)
    moved = o + s
    keep = (~np.isfinite(r)) | (r == 0) | (r.astype(np.float64) == v) | (moved * o <= 0) | \
        (np.abs(moved) > _F32_MAX_ORDINAL)
    return np.where(keep, r, _from_ordinal32(np.where(keep, o, moved))).astype(np.float64)


#: Read-only arrays (parameters) rounded to an operand format: (id, format) -> (the array, held so that its id is not
#: reused; the array itself when it was already rounded, else a read-only rounded copy).  The calibration members
#: round the same rounded parameter set (110 M values at ``v510-110m``) in every linear map; a read-only array is
#: rounded once per format.
_ROUNDED_OPERANDS: dict[tuple[int, str], tuple[np.ndarray, np.ndarray]] = {}
#: Most entries of :data:`_ROUNDED_OPERANDS` (oldest dropped first).
ROUNDED_OPERAND_ENTRIES = 4096
#: Most bytes of the rounded copies :data:`_ROUNDED_OPERANDS` keeps (a weight whose rounding differs from it: the
#: TF32 member's operands, 0.9 GB at ``v510-110m``; oldest dropped first).
ROUNDED_COPY_BYTES = 1 << 30
#: Guards :data:`_ROUNDED_OPERANDS` (members run on threads: dropping the oldest entry iterates the dict).
_ROUNDED_LOCK = threading.Lock()


def _rounded_copy_bytes() -> int:
    """Bytes of the rounded copies :data:`_ROUNDED_OPERANDS` holds (entries whose array was already rounded cost
    nothing)."""
    return sum(r.nbytes for w, r in _ROUNDED_OPERANDS.values() if r is not w)


def _row_chunks(m: int, per_row: int) -> list[tuple[int, int]]:
    """Row ranges of an output of ``m`` rows whose per-tile partial sums (``per_row`` elements a row) stay within
    :data:`STEP_ELEMENTS` (memory bound; the values do not depend on it: every output element is summed alone)."""
    rows = max(1, STEP_ELEMENTS // max(1, per_row))
    return [(r0, min(m, r0 + rows)) for r0 in range(0, m, rows)]


def _storage_format(dtype: str) -> FloatFormat:
    """The :class:`FloatFormat` of a 16-bit storage dtype (``bfloat16``, ``float16``)."""
    from pldr_ref.fixtures.baselines import PRECISIONS

    fmt = float_format(PRECISIONS[dtype])
    assert fmt is not None and fmt.precision < 24, dtype  # float32 rounds by the IEEE cast, not here
    return fmt


class _StorageRounding:
    """:func:`round_to_dtype` into a 16-bit storage dtype (``bfloat16``, ``float16``) of C-contiguous float64 arrays of
    one shape, written into a caller's buffer (:func:`pldr_ref.fixtures.baselines.storage_round_bits`), with the
    scratch buffers allocated once for the hundreds of roundings of one accumulation loop."""

    def __init__(self, dtype: str, shape: tuple[int, ...]) -> None:
        self.fmt = _storage_format(dtype)
        size = math.prod(shape)
        self.mag = np.empty(size, dtype=np.uint64)
        self.redo = np.empty(size, dtype=bool)

    def __call__(self, x: np.ndarray, out: np.ndarray) -> np.ndarray:
        """``round_to_dtype(x)`` written into ``out`` (float64, ``x``'s shape, not ``x``); returns ``out``."""
        from pldr_ref.fixtures.baselines import storage_round_bits

        assert x.flags.c_contiguous and out.flags.c_contiguous  # flat views, so the writes land in ``out``
        storage_round_bits(x.reshape(-1), self.fmt, out.reshape(-1), self.mag, self.redo)
        return out


def _tiled_sums(a: np.ndarray, b: np.ndarray, shape: tuple[int, ...], f32_acc: bool, dt: str) -> np.ndarray:
    """Sum over the tile axis of the products ``a[..., m, t, j] b[..., t, j, n]``: within each tile a running sum
    over j (the first product rounded to the accumulator, then each addition of an exact float64 product rounded:
    ``acc = RN(acc + p)``), then the tiles' partial sums added in order, each addition rounded.  The float32
    accumulator is a float32 array (the tile sums are float32 additions); a 16-bit one rounds by
    :func:`round_to_dtype`.  a: [..., m, nt, tile]; b: [..., 1, nt, tile, n] (batch axes broadcast); ``shape``:
    the products' [..., m, nt, n]; returns [..., m, n] (float64)."""
    tile = a.shape[-1]
    p = np.empty(shape)
    acc: np.ndarray | None = None
    rounding = None if f32_acc else _StorageRounding(dt, shape)
    spare = None if f32_acc else np.empty(shape)
    for j in range(tile):  # one term of every tile per step
        np.multiply(a[..., :, :, j, None], b[..., :, :, j, :], out=p)  # products exact in float64
        if f32_acc:
            if acc is None:
                acc = p.astype(np.float32)
            else:
                np.add(p, acc, out=p)
                acc[...] = p  # NumPy's IEEE cast: round to nearest even
        else:
            assert rounding is not None and spare is not None
            if acc is not None:
                np.add(acc, p, out=p)
            new = rounding(p, spare)  # round_to_dtype(acc + p, dt), into the spare buffer
            spare, acc = (p if acc is None else acc), new
            if spare is p:
                p = np.empty(shape)
    assert acc is not None
    total = acc[..., 0, :].copy()
    for t in range(1, acc.shape[-2]):  # partial sums of the tiles, added in order
        if f32_acc:
            total += acc[..., t, :]  # a float32 addition
        else:
            total = round_to_dtype(total + acc[..., t, :], dt)
    return total.astype(np.float64)


def _float32_running_sums(a: np.ndarray, b: np.ndarray, tile: int, nt: int, batch: tuple[int, ...],
                          b_facts: tuple[bool, float | None] | None = None) -> np.ndarray | None:
    """The float32-accumulator path of :func:`matmul` when every product is exact in float32: products formed in
    float32 and added in a float32 array -- a running sum, each addition rounded once (an FMA-exact accumulation),
    first within each tile, then over the tiles, in order.  None when an operand is not a float32 value or a
    nonzero float32 product falls below float32's normal range (then the float64-product path runs).
    ``b_facts``: :func:`_operand_facts` of an array ``b`` is a rearrangement of a part of, zero-padded (a weight:
    known once, not measured again on every product)."""
    check = _float32_products_check(a, b, b_facts)
    if check is None:
        return None
    a32, b32 = a.astype(np.float32), b.astype(np.float32)
    m, n = a.shape[-2], b.shape[-1]
    tiny = np.float32(np.finfo(np.float32).smallest_normal)
    a32 = a32.reshape(*a32.shape[:-1], nt, tile)
    b32 = b32.reshape(*b32.shape[:-2], 1, nt, tile, n)
    out = np.empty((*batch, m, n), dtype=np.float32)
    for r0, r1 in _row_chunks(m, int(np.prod(batch, dtype=np.int64)) * nt * n):
        ar = a32[..., r0:r1, :, :]
        p = np.empty((*batch, r1 - r0, nt, n), dtype=np.float32)
        acc = None
        for j in range(tile):
            np.multiply(ar[..., :, :, j, None], b32[..., :, :, j, :], out=p)
            if check and np.any((p != 0) & (np.abs(p) < tiny)):
                return None
            if acc is None:
                acc, p = p, np.empty_like(p)
            else:
                acc += p
        assert acc is not None
        total = acc[..., 0, :].copy()
        for t in range(1, nt):
            total += acc[..., t, :]
        out[..., r0:r1, :] = total
    return out.astype(np.float64)


def _float32_products_check(a: np.ndarray, b: np.ndarray, b_facts: tuple[bool, float | None] | None
                            ) -> bool | None:
    """Whether :func:`_float32_running_sums` may form the products of ``a`` and ``b`` in float32: None when an
    operand holds a value that is not a float32 value (``b_facts``: :func:`_operand_facts` of ``b``, else measured);
    else whether a nonzero product may fall below float32's normal range (True: each product is checked).  The
    answer does not depend on the order of the summation or on zero padding."""
    a32 = a.astype(np.float32)
    if not np.array_equal(a32, a):
        return None
    if b_facts is None:
        b_facts = _facts(b)
    if not b_facts[0]:
        return None
    tiny = float(np.finfo(np.float32).smallest_normal)
    return not _products_normal(_smallest_magnitude(a32), b_facts[1], tiny)


def _smallest_magnitude(x: np.ndarray) -> float | None:
    """The smallest magnitude of a nonzero entry of ``x`` (None: none; NaN when ``x`` holds a NaN)."""
    with np.errstate(invalid="ignore"):
        mags = np.abs(x[x != 0])
    return float(mags.min()) if mags.size else None


def _products_normal(ma: float | None, mb: float | None, tiny: float) -> bool:
    """True when every nonzero product of an entry of one operand and one of the other is at least ``tiny`` in
    magnitude, given their smallest nonzero magnitudes ``ma`` and ``mb`` (:func:`_smallest_magnitude`; their
    product, in float64, is exact for float32 operands): the products need no check."""
    if ma is None or mb is None:
        return True
    return ma * mb >= tiny


def _facts(b: np.ndarray) -> tuple[bool, float | None]:
    """(every entry of ``b`` is a float32 value, :func:`_smallest_magnitude` of ``b``)."""
    b32 = b.astype(np.float32)
    exact = bool(np.array_equal(b32, b))
    return exact, (_smallest_magnitude(b32) if exact else None)


#: :func:`_facts` of read-only arrays (the rounded weights), by the id of the array (held, so that its id is not
#: reused).  A weight's float32 copy, equality check and smallest magnitude took as long as the products of the
#: 32000-column LM head in every member's run.
_OPERAND_FACTS: dict[int, tuple[np.ndarray, tuple[bool, float | None]]] = {}
#: Most entries of :data:`_OPERAND_FACTS` (oldest dropped first).
OPERAND_FACT_ENTRIES = 4096
_FACTS_LOCK = threading.Lock()


def _operand_facts(b: np.ndarray) -> tuple[bool, float | None] | None:
    """:func:`_facts` of the array a read-only view ``b`` looks into (None when ``b`` is writeable or its root
    is not a read-only float64 array), computed once per array.  Sound for ``b`` and any rearrangement of part
    of it, zero-padded: float32 values stay float32 values, and the smallest nonzero magnitude of a part is at
    least the whole array's (a larger one only turns the subnormal check on, never off)."""
    root = compiled_sums.read_only_root(b)
    if root is None:
        return None
    hit = _OPERAND_FACTS.get(id(root))
    if hit is not None and hit[0] is root:
        return hit[1]
    facts = _facts(root)
    with _FACTS_LOCK:
        if len(_OPERAND_FACTS) >= OPERAND_FACT_ENTRIES:
            _OPERAND_FACTS.pop(next(iter(_OPERAND_FACTS)))
        _OPERAND_FACTS[id(root)] = (root, facts)
    return facts


def refuse_options(primitive: Callable[..., Any], options: dict[str, Any]) -> None:
    """``NotImplementedError`` naming every keyword option given to the emulation of the reference ``primitive``
    that this module does not implement, unless it has ``primitive``'s default value: an option (a switch read by
    :func:`pldr_ref.norms.configured_layer_norm`, say) is implemented here or refused, never silently dropped."""
    defaults = {n: p.default for n, p in inspect.signature(primitive).parameters.items()}
    off = {n: v for n, v in options.items() if n not in defaults or v != defaults[n]}
    if off:
        raise NotImplementedError(f"the emulated arithmetic does not implement {primitive.__module__}."
                                  f"{primitive.__name__} option(s) {off}")


def _per_head(t: np.ndarray, like: np.ndarray) -> np.ndarray:
    return t.reshape(t.shape[0], *([1] * (like.ndim - 4)), *t.shape[-2:])


class EmulatedOps(Ops):
    """The primitives of :class:`~pldr_ref.ops.Ops` evaluated in the arithmetic ``arith`` with storage dtype
    ``dtype`` (module docstring): an ``ops`` argument of the forward map, the stage bodies and the case runners.
    Every primitive is overridden (``tests/test_no_module_patching.py`` checks it); the object holds only its
    arithmetic and dtype, so it can be handed to the worker threads of :mod:`pldr_ref.row_blocks`."""

    def __init__(self, arith: Arithmetic, dtype: str) -> None:
        if not arith.internal:
            raise ValueError(f"Arithmetic {arith.name!r} evaluates each stage in float64 (internal=False): its ops "
                             "are the reference's, pldr_ref.ops.FLOAT64_OPS (arithmetic_ops gives them)")
        self.arith = arith
        self.dtype = dtype

    def __repr__(self) -> str:
        return f"EmulatedOps({self.arith.name!r}, {self.dtype!r})"

    def _rs(self, x: np.ndarray) -> np.ndarray:
        """Round to the storage dtype."""
        return round_to_dtype(x, self.dtype)

    def _libm(self, value: np.ndarray, fn: str, *args: np.ndarray) -> np.ndarray:
        """:func:`libm_float32` with this arithmetic's ``libm_ulps`` and a seed from its name (members differ,
        as libraries do)."""
        a = self.arith
        return libm_float32(value, fn, args, a.libm_ulps, fnv1a64(a.name))

    def _rc(self, x: np.ndarray) -> np.ndarray:
        """Round to the elementwise compute format."""
        a, dt = self.arith, self.dtype
        return _f32(x) if a.compute == "float32" or dt == "float32" else round_to_dtype(x, dt)

    def _racc(self, x: np.ndarray) -> np.ndarray:
        """Round to the accumulator format."""
        a, dt = self.arith, self.dtype
        return _f32(x) if a.accumulate == "float32" or dt == "float32" else round_to_dtype(x, dt)

    def _operand(self, x: np.ndarray) -> np.ndarray:
        a, dt = self.arith, self.dtype
        return round_to_dtype(x, "tf32" if a.tf32 and dt == "float32" else dt)

    def _exp(self, x: np.ndarray) -> np.ndarray:
        """exp(x) by the float32 libm (or exp2 of the float32-rounded x log2 e), in the compute format."""
        a = self.arith
        x = np.asarray(x, dtype=np.float64)
        with np.errstate(over="ignore", invalid="ignore"):
            if a.exp2:
                t = self._rc(x * LOG2E)
                return self._rc(self._libm(np.exp2(t), "exp2", t))
            return self._rc(self._libm(np.exp(x), "exp", x))

    def _div(self, x: np.ndarray, y: np.ndarray | float) -> np.ndarray:
        a = self.arith
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            if a.reciprocal:
                return self._rc(x * self._rc(1.0 / np.asarray(y, dtype=np.float64)))
            return self._rc(x / y)

    def _weight_operand(self, w: np.ndarray) -> np.ndarray:
        """:func:`_operand` of a weight: the array itself when it is read-only and already rounded (remembered)."""
        a, dt = self.arith, self.dtype
        key = (id(w), "tf32" if a.tf32 and dt == "float32" else dt)
        hit = _ROUNDED_OPERANDS.get(key)
        if hit is not None and hit[0] is w:
            return hit[1]
        r = self._operand(np.asarray(w, dtype=np.float64))
        if isinstance(w, np.ndarray) and w.dtype == np.float64 and not w.flags.writeable:
            if np.array_equal(r, w):
                r = w
            elif r.nbytes <= ROUNDED_COPY_BYTES:  # a float32 weight rounded to TF32: kept, read-only, laid out
                # transposed (``linear`` reads W^T: contiguous for the compiled loops without another copy)
                if r.ndim >= 2:
                    root = np.ascontiguousarray(np.swapaxes(r, -1, -2))
                    root.flags.writeable = False
                    r = np.swapaxes(root, -1, -2)
                r.flags.writeable = False
            else:
                return r
            with _ROUNDED_LOCK:
                _ROUNDED_OPERANDS[key] = (w, r)
                while len(_ROUNDED_OPERANDS) > ROUNDED_OPERAND_ENTRIES or _rounded_copy_bytes() > ROUNDED_COPY_BYTES:
                    _ROUNDED_OPERANDS.pop(next(iter(_ROUNDED_OPERANDS)))
        return r

    def matmul(self, x: np.ndarray, y: np.ndarray, *, round_operands: bool = True, y_rounded: bool = False
               ) -> np.ndarray:
        """x @ y (broadcast batch axes) with this arithmetic's operands (rounded unless ``round_operands`` is
        False; ``y_rounded``: y is already an operand of this arithmetic), order, tiles and accumulator."""
        arith = self.arith
        a = np.asarray(x, dtype=np.float64)
        b = np.asarray(y, dtype=np.float64)
        if round_operands:
            a = self._operand(a)
            b = b if y_rounded else self._operand(b)
        b_facts = _operand_facts(b) if y_rounded else None  # a rounded weight: its facts are known
        k = a.shape[-1]
        if b.shape[-2] != k:
            raise ValueError(f"matmul: inner dimensions {a.shape} x {b.shape}")
        tile = min(arith.tile or k, k) if k else 1
        nt = -(-k // tile) if k else 0
        dt = self.dtype
        f32_acc = arith.accumulate == "float32" or dt == "float32"
        short = (dt in ("bfloat16", "float16") or (arith.tf32 and dt == "float32")) if round_operands else \
            bool(np.all(b == 1.0))  # operands of <= 12 significand bits (or a sum): products exact in float32
        if nt and compiled_sums.enabled():  # the loops below, compiled (same bits)
            batch = np.broadcast_shapes(a.shape[:-2], b.shape[:-2])
            check = _float32_products_check(a, b, b_facts) if f32_acc and short else None
            with np.errstate(over="ignore", invalid="ignore"):
                out = compiled_sums.product_sums(a, b, batch, tile, arith.order == "reverse", f32_acc,
                                                 None if f32_acc else _storage_format(dt), check)
            if out is not None:
                return out
        if arith.order == "reverse":
            a, b = a[..., ::-1], b[..., ::-1, :]
        pad = nt * tile - k
        if pad:
            a = np.concatenate([a, np.zeros((*a.shape[:-1], pad))], axis=-1)
            b = np.concatenate([b, np.zeros((*b.shape[:-2], pad, b.shape[-1]))], axis=-2)
        batch = np.broadcast_shapes(a.shape[:-2], b.shape[:-2])
        m, n = a.shape[-2], b.shape[-1]
        if nt == 0:
            return np.zeros((*batch, m, n))
        if f32_acc and short:
            fast = _float32_running_sums(a, b, tile, nt, batch, b_facts)
            if fast is not None:
                return fast
        a = a.reshape(*a.shape[:-1], nt, tile)
        b = b.reshape(*b.shape[:-2], 1, nt, tile, n)
        out = np.empty((*batch, m, n))
        with np.errstate(over="ignore", invalid="ignore"):
            for r0, r1 in _row_chunks(m, int(np.prod(batch, dtype=np.int64)) * nt * n):
                out[..., r0:r1, :] = _tiled_sums(a[..., r0:r1, :, :], b, (*batch, r1 - r0, nt, n), f32_acc, dt)
        return out

    def row_sum(self, x: np.ndarray) -> np.ndarray:
        """Sum over the last axis (keepdims) in this arithmetic (a product with ones is exact)."""
        x = np.asarray(x, dtype=np.float64)
        return self.matmul(x, np.ones((x.shape[-1], 1)), round_operands=False)

    def linear(self, x: np.ndarray, weight: np.ndarray, bias: np.ndarray | None = None) -> np.ndarray:
        """y = x W^T + b: bias added to the float32 accumulator (fused) or to the stored product."""
        arith = self.arith
        acc = self.matmul(x, np.swapaxes(self._weight_operand(weight), -1, -2), y_rounded=True)
        if bias is None:
            return self._rc(acc)
        return self._rc(acc + bias) if arith.fused else self._rc(self._rs(acc) + self._rs(bias))

    def sigmoid(self, z: np.ndarray) -> np.ndarray:
        """1 / (1 + exp(-z)) in the compute format."""
        z = np.asarray(z, dtype=np.float64)
        with np.errstate(over="ignore"):
            return self._div(1.0, self._rc(1.0 + self._exp(-z)))

    def silu(self, z: np.ndarray) -> np.ndarray:
        """z sigma(z) in the compute format."""
        z = np.asarray(z, dtype=np.float64)
        return self._rc(z * self.sigmoid(z))

    def iswiglu(self, z: np.ndarray) -> np.ndarray:
        """z (z sigma(z)) in the compute format."""
        z = np.asarray(z, dtype=np.float64)
        return self._rc(z * self.silu(z))

    def glu(self, x: np.ndarray, p: Any) -> np.ndarray:
        """W3 (silu(W1 x + b1) * (W2 x + b2)) + b3; unfused: each linear's output stored before the activation."""
        arith = self.arith
        h1, h2 = self.linear(x, p.w1, p.b1), self.linear(x, p.w2, p.b2)
        if not arith.fused:
            h1, h2 = self._rs(h1), self._rs(h2)
        gate = self._rc(self.silu(h1) * h2)
        return self.linear(gate, p.w3, p.b3)

    def layer_norm(self, x: np.ndarray, gamma: np.ndarray, beta: np.ndarray, eps: float = 1e-6, **options: Any
                   ) -> np.ndarray:
        """(x - mu) / sqrt(var + eps) * gamma + beta with the sums of this arithmetic; any other option of
        :func:`pldr_ref.norms.layer_norm` is refused by name (:func:`refuse_options`) unless at its default."""
        if options:
            from pldr_ref import norms

            refuse_options(norms.layer_norm, options)
        x = self._rc(np.asarray(x, dtype=np.float64))
        n = x.shape[-1]
        mu = self._div(self.row_sum(x), float(n))
        xc = self._rc(x - mu)
        var = self._div(self.row_sum(self._rc(xc * xc)), float(n))
        v = self._rc(var + eps)
        arith = self.arith
        with np.errstate(invalid="ignore", divide="ignore"):  # reciprocal: x * rsqrt(var + eps), a kernel's rsqrt
            if arith.reciprocal:
                y = self._rc(xc * self._rc(self._libm(1.0 / np.sqrt(v), "rsqrt", v)))
            else:
                y = self._div(xc, self._rc(np.sqrt(v)))
        return self._rc(self._rc(y * gamma) + beta)

    def density_operator(self, q_rot: np.ndarray) -> np.ndarray:
        """A0 = Q~^T Q~ (sum over the rows)."""
        return self.matmul(np.swapaxes(q_rot, -1, -2), q_rot)

    def cumulative_density_operator(self, q_rot: np.ndarray) -> np.ndarray:
        """A0_i = sum_{s <= i} q~_s q~_s^T: a running sum in the accumulator format, row by row."""
        q = self._operand(np.asarray(q_rot, dtype=np.float64))
        b, h, s, dk = q.shape
        out = np.empty((b, h, s, dk, dk))
        acc = np.zeros((b, h, dk, dk))
        for i in range(s):  # a prefix sum: each row's Gram is the previous one plus an outer product
            p = q[:, :, i, :, None] * q[:, :, i, None, :]
            acc = self._racc(acc + p)
            out[:, :, i] = acc
        return out

    def metric_tensor(self, a: np.ndarray, W: np.ndarray, b: np.ndarray, eps_adj: float = 1e-9) -> np.ndarray:
        """A_LM = iSwiGLU(W A + b) + eps_adj."""
        arith = self.arith
        acc = self.matmul(_per_head(W, a), a)
        z = self._rc(acc + _per_head(b, a)) if arith.fused else self._rc(self._rs(acc) + _per_head(b, a))
        return self._rc(self.iswiglu(z) + eps_adj)

    def potential_tensor(self, a_lm: np.ndarray, P: np.ndarray) -> np.ndarray:
        """A_P = A_LM^P elementwise by the float32 libm's pow, in the compute format; with ``exp2`` as Triton computes
        it, exp2(P log2 A_LM) (log2, the product and exp2 each in float32; A_LM <= 0 by pow)."""
        arith = self.arith
        a = np.asarray(a_lm, dtype=np.float64)
        p = np.broadcast_to(_per_head(P, a), a.shape)
        with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
            direct = self._rc(self._libm(np.power(a, p), "pow", a, p))
            if not arith.exp2:
                return direct
            pos = a > 0
            safe = np.where(pos, a, 1.0)
            t = self._rc(p * self._rc(self._libm(np.log2(safe), "log2", safe)))
            return np.where(pos, self._rc(self._libm(np.exp2(t), "exp2", t)), direct)

    def energy_curvature(self, a_p: np.ndarray, a: np.ndarray, b_a: np.ndarray) -> np.ndarray:
        """G_LM = a A_P + b_a."""
        arith = self.arith
        acc = self.matmul(_per_head(a, a_p), a_p)
        return self._rc(acc + _per_head(b_a, a_p)) if arith.fused else self._rc(self._rs(acc) + _per_head(b_a, a_p))

    def attention_scores(self, q_rot: np.ndarray, g_lm: np.ndarray, k_rot: np.ndarray, scale: str = "exact", *,
                         out: np.ndarray | None = None) -> np.ndarray:
        """(Q~ G) K~^T / sqrt(d_k): Q~ G stored as the next product's operand, the scale in the compute format."""
        from pldr_ref.attention import score_scale_divisor

        d_k = q_rot.shape[-1]
        if np.ndim(g_lm) == 5:
            qg = self.matmul(np.asarray(q_rot)[..., None, :], g_lm)[..., 0, :]
        else:
            qg = self.matmul(q_rot, g_lm)
        sc = self.matmul(self._rc(qg), np.swapaxes(k_rot, -1, -2))
        op, root = score_scale_divisor(d_k, scale)
        sc = self._rc(sc * self._rc(np.float64(root))) if op == "multiply" else self._div(sc, root)
        if out is not None:
            out[...] = sc
            return out
        return sc

    def _softmax(self, logits: np.ndarray) -> np.ndarray:
        arith = self.arith
        lg = np.asarray(logits, dtype=np.float64)
        with np.errstate(invalid="ignore", over="ignore"):
            if arith.softmax == "online":
                t = lg.shape[-1]
                st = max(1, arith.softmax_tile)
                m = np.full((*lg.shape[:-1], 1), -np.inf)
                z = np.zeros((*lg.shape[:-1], 1))
                for j0 in range(0, t, st):  # FlashAttention: running max, the running sum rescaled at every tile
                    blk = lg[..., j0:j0 + st]
                    m_new = np.maximum(m, np.max(blk, axis=-1, keepdims=True))
                    safe = np.where(np.isfinite(m_new), m_new, 0.0)
                    corr = self._exp(self._rc(np.where(np.isfinite(m), m - safe, -np.inf)))
                    z = self._racc(self._racc(z * corr) + self.row_sum(self._exp(self._rc(blk - safe))))
                    m = m_new
                safe = np.where(np.isfinite(m), m, 0.0)
                e = self._exp(self._rc(lg - safe))
            else:
                m = np.max(lg, axis=-1, keepdims=True)
                safe = np.where(np.isfinite(m), m, 0.0)
                e = self._exp(self._rc(lg - safe))
                z = self.row_sum(e)
            return self._div(e, np.where(z == 0, 1.0, z))

    def attention_weights(self, logits: np.ndarray, mask: np.ndarray | None, *, precision: str = "float64",
                          masked_row: str = "arithmetic", overwrite_input: bool = False,
                          kernel: Callable[[np.ndarray], np.ndarray] | None = None) -> np.ndarray:
        """E = softmax(logits) in this arithmetic (``precision="explicit"``: the user's own float32
        ``kernel``, as the reference runs it); fully masked rows as ``masked_row`` says (the reference's rule,
        :func:`pldr_ref.attention.attention_weights`)."""
        e = kernel(logits) if precision == "explicit" and kernel is not None else self._softmax(logits)
        if masked_row == "arithmetic" or mask is None:
            return e
        dead = np.all(mask, axis=-1, keepdims=True)
        if not dead.any():
            return e
        fill = {"zeros": 0.0, "uniform": 1.0 / e.shape[-1], "nan": np.nan}[masked_row]
        return np.where(dead, fill, e)

    def mix_values(self, e: np.ndarray, v: np.ndarray) -> np.ndarray:
        """Z = E V (E stored as the product's operand, as FlashAttention casts P)."""
        return self.matmul(e, v)

    def rope_angles(self, positions: np.ndarray, d_k: int, base: float, precision: str = "exact",
                    explicit: Any = None) -> tuple[np.ndarray, np.ndarray]:
        """(cos, sin) [..., d_k/2] of the RoPE table as a float32 kernel holds it (the reference's
        :func:`pldr_ref.rope.rope_angles` otherwise):

        * ``"float32"`` (torchtune): omega_i = RN(1 / pow(base, RN(2i) / RN(d_k))), phi = RN(p omega_i), cos and sin,
          each transcendental by the float32 libm (:func:`libm_float32`), every step in float32;
        * ``"exact"``: cos and sin of the float64 angles held in float32 within ``libm_ulps`` ulps;
        * ``"keras-0.6.4"`` and ``"explicit"``: the reference's table (a recipe in float64, or the user's values).
        """
        from pldr_ref import rope

        ref = rope.rope_angles
        if precision != "float32" and precision != "exact":  # tables without float32 transcendentals
            return ref(positions, d_k, base, precision, explicit)
        rope.check_table_used(precision, explicit)
        pos = np.asarray(positions)
        if precision == "float32":
            exps = (np.arange(0, d_k, 2, dtype=np.float32)[: d_k // 2] / np.float32(d_k)).astype(np.float64)
            bases = np.full(exps.shape, float(base))
            powers = self._libm(np.power(bases, exps), "pow", bases, exps)
            omega = _f32(1.0 / powers)
            phi = _f32(pos.astype(np.float64)[..., None] * omega)
            return (self._libm(np.cos(phi), "cos", phi).astype(np.float32),
                    self._libm(np.sin(phi), "sin", phi).astype(np.float32))
        cos, sin = ref(positions, d_k, base, precision, explicit)
        return self._libm(cos, "cos", cos), self._libm(sin, "sin", sin)

    def rotate_pairs(self, x1: np.ndarray, x2: np.ndarray, cos: np.ndarray, sin: np.ndarray, arithmetic: str
                     ) -> tuple[np.ndarray, np.ndarray]:
        """y1 = x1 cos - x2 sin, y2 = x2 cos + x1 sin: the ``"float64"`` rotation (real-angle tables) in the compute
        format, each product and sum rounded (no fused multiply-add), the table rounded to it first; the float32
        and ``float64_qk_f32`` rotations are the reference's (:func:`pldr_ref.rope.rotate_pairs`: declared
        arithmetics)."""
        from pldr_ref import rope

        if arithmetic != "float64":
            return rope.rotate_pairs(x1, x2, cos, sin, arithmetic)
        c, s = self._rc(np.asarray(cos, dtype=np.float64)), self._rc(np.asarray(sin, dtype=np.float64))
        a, b = np.asarray(x1, dtype=np.float64), np.asarray(x2, dtype=np.float64)
        return self._rc(self._rc(a * c) - self._rc(b * s)), self._rc(self._rc(b * c) + self._rc(a * s))


def arithmetic_ops(arith: Arithmetic, dtype: str) -> Ops:
    """The ``ops`` of a run in ``arith`` with storage dtype ``dtype``: :class:`EmulatedOps`, or the float64
    reference's (:data:`pldr_ref.ops.FLOAT64_OPS`) for a member evaluating each stage in float64
    (``internal=False``: only its stage outputs are rounded)."""
    return EmulatedOps(arith, dtype) if arith.internal else FLOAT64_OPS
