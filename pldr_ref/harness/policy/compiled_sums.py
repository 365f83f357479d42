"""Compiled loops of the calibration's emulated summations (optional: the ``[fast]`` extra, numba).

The emulated arithmetic of :mod:`pldr_ref.harness.policy.arithmetic` defines each product ``x @ y`` of a calibration
member as running sums in a given order, each addition rounded to the accumulator's format.  NumPy evaluates that
definition one summation index at a time over the whole output, two to eleven passes over memory per
multiply-add; the loops here make one, with the accumulators in cache (3.5-28 times faster on the products of the
``v510-110m`` model: ``python benchmarks/bench_compiled_sums.py``).  They compute the **same bits** as the NumPy
definition -- same products, same order, same roundings, the 16-bit rounding by the same bit operation and the
same range rule as :func:`pldr_ref.fixtures.baselines.storage_round_bits` -- so the calibration statistics do not
depend on whether numba is installed (``tests/test_compiled_sums.py`` checks every path against the NumPy one bit
for bit, with a negative control; the stored calibration is reproduced either way).

Used when numba imports and ``PLDR_REF_COMPILED_SUMS`` is not ``0`` (:func:`enabled`); otherwise
:func:`product_sums` returns None and the caller runs its NumPy loop.  The kernels take ``a`` [Ba, m, K] and ``b``
[Bb, K, n] (Ba, Bb each 1 or the batch size B) as given -- the summation order (forward or reverse) and the zero
padding of the last tile are index arithmetic inside (:func:`_index`), not copies -- and write [B, m, n].
"""

from __future__ import annotations

import contextlib
import functools
import math
import threading
import types
from collections.abc import Iterator
from typing import Any

import numpy as np

#: Environment variable: ``0`` turns the compiled loops off (the NumPy definition runs); ``1`` or unset: on when
#: numba is installed.
ENV = "PLDR_REF_COMPILED_SUMS"
_MAGNITUDE = 0x7FFFFFFFFFFFFFFF
_ALL_BITS = 0xFFFFFFFFFFFFFFFF
_local = threading.local()


def installed() -> bool:
    """True when numba imports (the ``[fast]`` extra; imported here on first use only: ``import pldr_ref`` never
    imports it)."""
    return _kernels() is not None


def enabled() -> bool:
    """True when the compiled loops run: ``PLDR_REF_COMPILED_SUMS`` not ``0``, not turned off in this thread by
    :func:`numpy_only`, and numba installed."""
    if getattr(_local, "off", False):
        return False
    from pldr_ref.env_vars import read_env

    return bool(read_env(ENV, True)) and installed()


@contextlib.contextmanager
def numpy_only() -> Iterator[None]:
    """Inside the block the NumPy definition runs in this thread (tests compare the two)."""
    prev = getattr(_local, "off", False)
    _local.off = True
    try:
        yield
    finally:
        _local.off = prev


#: The functions of this module that run compiled (:func:`_kernels` compiles them in this order: a kernel's callees
#: first, so that it calls them compiled).
KERNELS = ("_rne", "_round16", "_round16_into", "_index", "_float32_accumulator", "_storage_accumulator",
           "_float32_products")
_KERNELS: list[Any] = []
_KERNELS_LOCK = threading.Lock()


def _kernels() -> Any:
    """The compiled functions of :data:`KERNELS` (a namespace), or None when numba does not import.  Compiled with
    IEEE semantics (no fast-math: no reassociation, no contraction into FMAs), releasing the GIL (the calibration
    members run on threads), cached on disk; the module's names are rebound to the compiled functions, so a kernel
    calls its callees compiled."""
    with _KERNELS_LOCK:
        if not _KERNELS:
            try:
                import numba
            except ImportError:  # the [fast] extra is not installed: the NumPy loops run
                _KERNELS.append(None)
                return None
            space = globals()
            for name in KERNELS:
                space[name] = numba.njit(cache=True, nogil=True, fastmath=False, error_model="numpy")(space[name])
            _KERNELS.append(types.SimpleNamespace(**{name: space[name] for name in KERNELS}))
        return _KERNELS[0]


def _rne(bits: Any, drop: Any, half: Any, keep: Any, one: Any) -> Any:  # pragma: no cover - compiled
    """:func:`pldr_ref.fixtures.baselines._round_bits` of one float64's bits: round to nearest even dropping
    ``drop`` low bits (``half`` = 2^(drop-1) - 1, ``keep`` = the mask of the kept bits; all uint64)."""
    return (((bits >> drop) & one) + half + bits) & keep


def _round16(x: float, bits: Any, k: tuple) -> Any:  # pragma: no cover - compiled
    """The bits of :func:`pldr_ref.fixtures.baselines.storage_round_bits` of one value ``x`` (``bits``: its uint64
    bits) into the 16-bit format of the constants ``k`` (:func:`_format_constants`): the bit rounding, accepted
    strictly between the format's smallest normal and largest finite value; else the range rule of
    ``baselines._storage_round_each`` (outside the format's normal range: float32's precision, or ``x`` itself
    outside float32's; non-finite: ``x``)."""
    drop, half, keep, one, mag, lo_bits, hi_bits, smallest, largest, f32_smallest, f32_largest, drop24, half24, \
        keep24 = k
    low = _rne(bits, drop, half, keep, one)
    m = low & mag
    if m > lo_bits and m < hi_bits:
        return low
    if not np.isfinite(x):
        return bits
    ax = abs(x)
    if ax > largest or (ax > 0.0 and ax < smallest):
        if ax > f32_largest or (ax > 0.0 and ax < f32_smallest):
            return bits
        return _rne(bits, drop24, half24, keep24, one)
    return low


def _round16_into(s: np.ndarray, sb: np.ndarray, outb: np.ndarray, k: tuple) -> None:  # pragma: no cover
    """``outb[c]`` = the bits of :func:`_round16` of ``s[c]`` (``sb``: the bits of ``s``) for every ``c``: the bit
    rounding over the whole row first (a loop the compiler vectorizes), then :func:`_round16` again for the few
    values outside the format's normal range."""
    drop, half, keep, one, mag, lo_bits, hi_bits = k[0], k[1], k[2], k[3], k[4], k[5], k[6]
    outside = 0
    for c in range(s.shape[0]):
        low = (((sb[c] >> drop) & one) + half + sb[c]) & keep
        outb[c] = low
        m = low & mag
        outside += (m <= lo_bits) | (m >= hi_bits)
    if outside:
        for c in range(s.shape[0]):
            m = outb[c] & mag
            if m <= lo_bits or m >= hi_bits:
                outb[c] = _round16(s[c], sb[c], k)


@functools.lru_cache(maxsize=8)
def _format_constants(fmt: Any) -> tuple:
    """The constants :func:`_round16` takes for the format ``fmt`` (a :class:`pldr_ref.format_rounding.FloatFormat`
    of fewer than 24 significand bits; a frozen value, so they are made once per format, not in every product)."""
    from pldr_ref.format_rounding import float_format

    f32 = float_format("float32")
    assert f32 is not None and fmt.precision < 24

    def bits(v: float) -> np.uint64:
        return np.array(v, dtype=np.float64).view(np.uint64)[()]

    def rne(drop: int) -> tuple[np.uint64, np.uint64, np.uint64]:
        return np.uint64(drop), np.uint64((1 << (drop - 1)) - 1), np.uint64(~((1 << drop) - 1) & _ALL_BITS)

    return (*rne(53 - fmt.precision), np.uint64(1), np.uint64(_MAGNITUDE), bits(fmt.smallest_normal),
            bits(fmt.max), float(fmt.smallest_normal), float(fmt.max), float(f32.smallest_normal), float(f32.max),
            *rne(53 - f32.precision))


def _index(kk: int, k: int, reverse: bool) -> int:  # pragma: no cover - compiled
    """The operand index of position ``kk`` of the summation (-1: the zero padding after the last tile's end)."""
    if kk >= k:
        return -1
    return k - 1 - kk if reverse else kk


def _float32_accumulator(a: np.ndarray, b: np.ndarray, tile: int, reverse: bool, out: np.ndarray
                         ) -> None:  # pragma: no cover - compiled
    """Float64 products, float32 accumulator: within each tile ``acc = RN32(p_0)``, then ``acc = RN32(acc + p_j)``
    (the float64 sum of the float32 accumulator and the exact float64 product, rounded); the tiles' sums added in
    order in float32.  (``arithmetic._tiled_sums`` with a float32 accumulator.)"""
    nb, m, n = out.shape
    k = a.shape[2]
    nt = (k + tile - 1) // tile
    acc = np.empty(n, np.float32)
    tot = np.empty(n, np.float32)
    for i in range(nb):
        ia = i if a.shape[0] > 1 else 0
        ib = i if b.shape[0] > 1 else 0
        for r in range(m):
            for t in range(nt):
                for j in range(tile):
                    q = _index(t * tile + j, k, reverse)
                    if q < 0:  # padding: acc + 0 (turns -0 into +0, as the padded NumPy loop does)
                        for c in range(n):
                            acc[c] = acc[c] + np.float32(0.0)
                        continue
                    av = a[ia, r, q]
                    if j == 0:
                        for c in range(n):
                            acc[c] = np.float32(av * b[ib, q, c])
                    else:
                        for c in range(n):
                            acc[c] = np.float32(np.float64(acc[c]) + av * b[ib, q, c])
                if t == 0:
                    for c in range(n):
                        tot[c] = acc[c]
                else:
                    for c in range(n):
                        tot[c] = tot[c] + acc[c]
            for c in range(n):
                out[i, r, c] = np.float64(tot[c])


def _storage_accumulator(a: np.ndarray, b: np.ndarray, tile: int, reverse: bool, out: np.ndarray, fk: tuple
                         ) -> None:  # pragma: no cover - compiled
    """Float64 products, 16-bit accumulator: ``acc = R16(p_0)``, then ``acc = R16(acc + p_j)`` within each tile
    (R16: :func:`_round16` with the constants ``fk``), then the tiles' sums added in order, each addition rounded
    by R16.  (``arithmetic._tiled_sums`` with a 16-bit accumulator.)"""
    nb, m, n = out.shape
    k = a.shape[2]
    nt = (k + tile - 1) // tile
    acc = np.empty(n, np.float64)
    tot = np.empty(n, np.float64)
    s = np.empty(n, np.float64)
    sb = s.view(np.uint64)
    accb = acc.view(np.uint64)
    totb = tot.view(np.uint64)
    for i in range(nb):
        ia = i if a.shape[0] > 1 else 0
        ib = i if b.shape[0] > 1 else 0
        for r in range(m):
            for t in range(nt):
                for j in range(tile):
                    q = _index(t * tile + j, k, reverse)
                    if q < 0:
                        for c in range(n):
                            s[c] = acc[c] + 0.0
                    elif j == 0:
                        av = a[ia, r, q]
                        for c in range(n):
                            s[c] = av * b[ib, q, c]
                    else:
                        av = a[ia, r, q]
                        for c in range(n):
                            s[c] = acc[c] + av * b[ib, q, c]
                    _round16_into(s, sb, accb, fk)
                if t == 0:
                    for c in range(n):
                        tot[c] = acc[c]
                else:
                    for c in range(n):
                        s[c] = tot[c] + acc[c]
                    _round16_into(s, sb, totb, fk)
            for c in range(n):
                out[i, r, c] = tot[c]


def _float32_products(a: np.ndarray, b: np.ndarray, tile: int, reverse: bool, out: np.ndarray, check: bool,
                      tiny: float) -> bool:  # pragma: no cover - compiled
    """Float32 products of operands holding float32 values (float64 arrays), float32 running sums (first within
    each tile, then over the tiles, in order); False as soon as ``check`` is set and a nonzero product is below
    ``tiny`` in magnitude (the caller then runs the float64-product path).  (``arithmetic._float32_running_sums``.)"""
    nb, m, n = out.shape
    k = a.shape[2]
    nt = (k + tile - 1) // tile
    tiny32 = np.float32(tiny)
    acc = np.empty(n, np.float32)
    tot = np.empty(n, np.float32)
    p = np.empty(n, np.float32)
    for i in range(nb):
        ia = i if a.shape[0] > 1 else 0
        ib = i if b.shape[0] > 1 else 0
        for r in range(m):
            for t in range(nt):
                for j in range(tile):
                    q = _index(t * tile + j, k, reverse)
                    if q < 0:
                        for c in range(n):
                            p[c] = np.float32(0.0)
                    else:
                        av = np.float32(a[ia, r, q])
                        for c in range(n):
                            p[c] = av * np.float32(b[ib, q, c])
                    if check:
                        for c in range(n):
                            if p[c] != 0 and abs(p[c]) < tiny32:
                                return False
                    if j == 0:
                        for c in range(n):
                            acc[c] = p[c]
                    else:
                        for c in range(n):
                            acc[c] = acc[c] + p[c]
                if t == 0:
                    for c in range(n):
                        tot[c] = acc[c]
                else:
                    for c in range(n):
                        tot[c] = tot[c] + acc[c]
            for c in range(n):
                out[i, r, c] = np.float64(tot[c])
    return True


def _flat(x: np.ndarray, batch: tuple[int, ...]) -> np.ndarray:
    """``x`` (batch axes, then two) as an array [Bx, rows, cols] with Bx 1 or prod(batch) (a batch it broadcasts
    along some axes only is materialized), its last axis contiguous (copied if not)."""
    xb = x.shape[:-2]
    if math.prod(xb) != 1 and (1,) * (len(batch) - len(xb)) + xb != batch:
        x = np.broadcast_to(x, (*batch, *x.shape[-2:]))
    x = x.reshape(-1, *x.shape[-2:])
    if x.shape[-1] > 1 and x.strides[-1] != x.itemsize:
        x = np.ascontiguousarray(x)
    return x


#: Fewest rows of ``a`` for which a transposed, writeable ``b`` is summed as ``(b.T @ a.T).T`` rather than copied:
#: the compiled loops vectorize over the output's last axis, which must then be long enough.
SWAP_ROWS = 32
#: Most bytes of contiguous copies of read-only operands kept (:func:`_contiguous_copy`; oldest dropped first):
#: the weights of one rounded parameter set of ``v510-110m`` (110 M float64 values; the TF32 member's weights are
#: kept transposed already, ``arithmetic.EmulatedOps._weight_operand``).
COPY_BYTES = 1 << 30
_COPIES: dict[tuple, tuple[np.ndarray, np.ndarray]] = {}
_COPIES_LOCK = threading.Lock()


def read_only_root(b: np.ndarray) -> np.ndarray | None:
    """The array whose memory ``b`` looks into (``b`` itself when it owns it), when both are read-only float64
    arrays -- a parameter, or a read-only view of one: its content cannot change, so facts and copies of it can be
    kept by its id (the root held, so that the id is not reused); None for any other ``b``."""
    root = b
    while isinstance(root.base, np.ndarray):
        root = root.base
    if b.flags.writeable or root.flags.writeable or root.dtype != np.float64 or b.dtype != np.float64:
        return None
    return root


def _contiguous_copy(b: np.ndarray) -> np.ndarray | None:
    """A C-contiguous copy of ``b`` when ``b`` is a read-only view of a read-only float64 array (a rounded weight,
    passed transposed; :func:`read_only_root`), made once and kept (:data:`COPY_BYTES`); None for any other
    ``b``."""
    root = read_only_root(b)
    if root is None or b.nbytes > COPY_BYTES:
        return None
    offset = b.__array_interface__["data"][0] - root.__array_interface__["data"][0]
    key = (id(root), b.shape, b.strides, offset)
    with _COPIES_LOCK:
        hit = _COPIES.pop(key, None)
        if hit is not None and hit[0] is root:
            _COPIES[key] = hit  # most recently used last
            return hit[1]
    copy = np.ascontiguousarray(b)
    copy.flags.writeable = False
    with _COPIES_LOCK:
        _COPIES[key] = (root, copy)
        while sum(c.nbytes for _, c in _COPIES.values()) > COPY_BYTES:
            _COPIES.pop(next(iter(_COPIES)))
    return copy


def product_sums(a: np.ndarray, b: np.ndarray, batch: tuple[int, ...], tile: int, reverse: bool, f32_acc: bool,
                 fmt: Any, float32_check: bool | None) -> np.ndarray | None:
    """``a @ b`` (float64 arrays [..., m, K] and [..., K, n], batch axes broadcasting to ``batch``; no padding, no
    reversal: ``tile`` and ``reverse`` say how the summation runs) in the emulated arithmetic, compiled: float32
    products and sums when ``float32_check`` is not None (``arithmetic._float32_running_sums``: the operands hold
    float32 values; True: a nonzero product may fall below float32's normal range, and then the float64-product
    path runs), else float64 products with a float32 accumulator (``f32_acc``) or one in the 16-bit format ``fmt``
    (``arithmetic._tiled_sums``).  Returns [*batch, m, n] float64, or None when the compiled loops are off
    (:func:`enabled`).

    A read-only weight passed transposed (``x @ W.T``) is copied once into the layout the loops read
    (:func:`_contiguous_copy`); another ``b`` contiguous along K is summed as ``(b.T @ a.T).T`` when ``a`` has
    :data:`SWAP_ROWS` rows or more -- every output element the same sum of the same products in the same order."""
    if not enabled():
        return None
    m, n = a.shape[-2], b.shape[-1]
    swap = False
    if n > 1 and b.strides[-1] != b.itemsize:
        held = _contiguous_copy(b)
        if held is not None:  # a read-only weight passed transposed: its contiguous copy, made once
            b = held
        elif b.strides[-2] == b.itemsize and m >= SWAP_ROWS:
            swap = True
            a, b = np.swapaxes(b, -1, -2), np.swapaxes(a, -1, -2)
    a3, b3 = _flat(a, batch), _flat(b, batch)
    size = math.prod(batch)
    out = np.empty((size, a3.shape[1], b3.shape[2]))
    k = _kernels()
    done = False
    if float32_check is not None:
        done = k._float32_products(a3, b3, tile, reverse, out, bool(float32_check),
                                   float(np.finfo(np.float32).smallest_normal))
    if not done:
        if f32_acc:
            k._float32_accumulator(a3, b3, tile, reverse, out)
        else:
            k._storage_accumulator(a3, b3, tile, reverse, out, _format_constants(fmt))
    if swap:
        out = np.ascontiguousarray(np.swapaxes(out, -1, -2))
    return out.reshape(*batch, m, n)


__all__ = ["ENV", "enabled", "installed", "numpy_only", "product_sums"]
