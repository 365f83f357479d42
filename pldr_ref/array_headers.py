"""Shapes and dtypes of the arrays in an ``.npz`` / ``.npy`` file, read from their headers only.

An ``.npz`` is a zip archive of ``.npy`` members; a few KB of deflated zeros can declare gigabytes.
:func:`npz_headers` reads the zip's central directory and, from each member, only the ``.npy`` header (magic,
version, the header dict: shape, dtype, order) -- a few hundred decompressed bytes -- so a loader can check names,
shapes and the memory budget (:func:`check_arrays_budget`) before any array is decompressed.  Object dtypes
(which need pickle) are refused here already.
"""

from __future__ import annotations

import os
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np

from pldr_ref.memory_budget import check_load_budget

#: Copies of an array alive while it is loaded and widened: the stored values and their float64 copy (which is
#: up to 8 / itemsize larger; :func:`load_bytes` counts it exactly).
LOADED_COPIES = 1


@dataclass(frozen=True)
class ArrayHeader:
    """One stored array: shape and dtype from its ``.npy`` header, and the bytes its values take."""

    shape: tuple[int, ...]
    dtype: np.dtype

    @property
    def nbytes(self) -> int:
        """Bytes of the stored values (Python int: no overflow)."""
        n = 1
        for d in self.shape:
            n *= int(d)
        return n * int(self.dtype.itemsize)

    @property
    def float64_bytes(self) -> int:
        """Bytes of the values widened to float64."""
        return self.nbytes // max(int(self.dtype.itemsize), 1) * 8


def read_npy_header(fh: BinaryIO, label: str) -> ArrayHeader:
    """The header of the ``.npy`` stream ``fh`` (positioned at its start); ValueError naming ``label``."""
    from numpy.lib import format as npy_format

    try:
        version = npy_format.read_magic(fh)
        if version == (1, 0):
            shape, _, dtype = npy_format.read_array_header_1_0(fh)
        elif version in ((2, 0), (3, 0)):
            shape, _, dtype = npy_format.read_array_header_2_0(fh)
        else:
            raise ValueError(f"unsupported .npy version {version}")
    except (ValueError, EOFError, OSError, SyntaxError) as exc:
        raise ValueError(f"{label}: not a valid .npy array ({exc})") from None
    if dtype.hasobject:
        raise ValueError(f"{label} holds pickled objects, which are refused (dtype {dtype})")
    return ArrayHeader(tuple(int(d) for d in shape), dtype)


def npz_headers(path: str | os.PathLike[str]) -> dict[str, ArrayHeader]:
    """Array name -> header of every member of the ``.npz`` at ``path``, decompressing only the headers."""
    p = Path(path)
    try:
        with zipfile.ZipFile(p) as z:
            out = {}
            for info in z.infolist():
                name = info.filename[:-4] if info.filename.endswith(".npy") else info.filename
                with z.open(info) as member:
                    out[name] = read_npy_header(member, f"{p} member {info.filename!r}")
            return out
    except (zipfile.BadZipFile, zipfile.LargeZipFile, OSError, EOFError, NotImplementedError) as exc:
        raise ValueError(f"{p} is not a valid .npz archive: {exc}") from None


def npy_header(path: str | os.PathLike[str]) -> ArrayHeader:
    """The header of the ``.npy`` file at ``path``."""
    with open(path, "rb") as fh:
        return read_npy_header(fh, str(path))


def load_bytes(headers: dict[str, ArrayHeader] | list[ArrayHeader]) -> int:
    """Bytes of loading the arrays and widening them to float64 (both alive at once)."""
    items = headers.values() if isinstance(headers, dict) else headers
    return sum(LOADED_COPIES * h.nbytes + h.float64_bytes for h in items)


def check_arrays_budget(what: str, headers: dict[str, ArrayHeader] | list[ArrayHeader], budget: int | None = None,
                        factor: int = 1) -> None:
    """``MemoryBudgetError`` if loading the arrays of ``what`` (``factor`` x :func:`load_bytes`: what the caller
    allocates from them) exceeds the memory budget; called before any array is read."""
    check_load_budget(what, factor * load_bytes(headers), budget)


def check_expected_arrays(what: str, headers: dict[str, ArrayHeader], expected: dict[str, tuple[int, ...]],
                          ignored: Any = ()) -> None:
    """``ValueError`` naming the first missing, mis-shaped or unexpected array, from the headers alone."""
    for name, shape in expected.items():
        if name not in headers:
            raise ValueError(f"{what} is missing key {name!r} (expected shape {shape})")
        if headers[name].shape != tuple(shape):
            raise ValueError(f"{what} key {name!r} has shape {headers[name].shape}, expected {tuple(shape)}")
    extra = sorted(k for k in headers if k not in expected and k not in ignored)
    if extra:
        raise ValueError(f"{what} has unexpected key(s) {extra[:5]} for this config")


__all__ = ["ArrayHeader", "check_arrays_budget", "check_expected_arrays", "load_bytes", "npy_header", "npz_headers",
           "read_npy_header"]
