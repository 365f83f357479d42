"""State-dict export and import: ``.safetensors``, ``.npz`` (pickle-free) or a mapping (spec §6).

Accepted parameter dtypes (:func:`pldr_ref.params.accepted_float_dtypes`): float16, bfloat16, float32 and
float64, widened exactly to float64 (every such value is a float64).  Integer, bool and complex arrays are
refused with an error naming the key; a file that cannot be read (truncated, bad header) is an error naming the file.
"""

from __future__ import annotations

import os
import stat
import struct
import zipfile
from collections.abc import Mapping

import numpy as np

from pldr_ref.config import PLDRConfig
from pldr_ref.memory_budget import check_load_budget
from pldr_ref.params import IGNORED_KEYS, Params, check_param_dtype, param_shapes


def state_dict(params: Params) -> dict[str, np.ndarray]:
    """PyTorch v510 / HF names -> float64 arrays (Linear weights [out, in]); a fresh copy."""
    return {k: np.array(v, copy=True) for k, v in params.items()}


def save_state_dict(params: Params, path: str | os.PathLike[str]) -> None:
    """Write the state dict to ``.safetensors`` or ``.npz`` (chosen by the suffix)."""
    path = os.fspath(path)
    tensors = state_dict(params)
    if path.endswith(".safetensors"):
        from safetensors.numpy import save_file

        save_file({k: np.ascontiguousarray(v) for k, v in tensors.items()}, path)
    elif path.endswith(".npz"):
        np.savez(path, **tensors)
    else:
        raise ValueError(f"unsupported checkpoint suffix for {path!r}: use .safetensors or .npz")


#: safetensors dtype names this reader returns -> NumPy dtypes of the stored bytes (little-endian), per the
#: safetensors format specification.  F16 and BF16 are widened to float64 on reading (:func:`widen_half`);
#: other dtypes of the format (F8_*, ...) are refused with an error naming the tensor.
SAFETENSORS_DTYPES = {
    "F64": np.dtype("<f8"), "F32": np.dtype("<f4"), "F16": np.dtype("<f2"), "BF16": np.dtype("<u2"),
    "I64": np.dtype("<i8"), "I32": np.dtype("<i4"), "I16": np.dtype("<i2"), "I8": np.dtype("i1"),
    "U64": np.dtype("<u8"), "U32": np.dtype("<u4"), "U16": np.dtype("<u2"), "U8": np.dtype("u1"),
    "BOOL": np.dtype("?"), "C64": np.dtype("<c8"),
}

#: Bytes a safetensors load allocates per byte of file at its peak: the bytes read, the package's copies of the
#: tensors, and float64 widening of 16-bit tensors (4x their bytes).
SAFETENSORS_LOAD_COPIES = 6
#: Bytes of the little-endian header-length prefix of a safetensors file.
SAFETENSORS_PREFIX = 8

#: Bits a bfloat16 is shifted left to become the float32 with the same sign, exponent and leading mantissa.
BF16_SHIFT = 16


def widen_half(raw: np.ndarray, dtype_name: str) -> np.ndarray:
    """float64 values of stored 16-bit floats, exactly: ``raw`` holds the little-endian F16 values or the BF16
    bit patterns (uint16).

    BF16 is the upper half of an IEEE binary32: the bit pattern shifted left by 16 is that float32 (NaN, inf
    and subnormals included), widened to float64 -- by bit layout, so no library's bfloat16 type is involved.
    F16 -> float64 is the IEEE conversion, exact (every binary16 value is a binary64 value).
    """
    if dtype_name == "BF16":
        bits = raw.astype("<u4") << np.uint32(BF16_SHIFT)
        with np.errstate(invalid="ignore"):  # a signalling NaN widens to a (quiet) NaN, as every IEEE cast does
            return bits.view("<f4").astype(np.float64)
    if dtype_name == "F16":
        return raw.astype(np.float64)
    raise ValueError(f"widen_half: {dtype_name!r} is not F16 or BF16")


def read_safetensors(path: str | os.PathLike[str]) -> dict[str, np.ndarray]:
    """Tensors of a ``.safetensors`` file: validated by the ``safetensors`` package, F16/BF16 widened to float64.

    Tensors are returned sorted by name.  Before anything is read the file must be a regular file whose 8-byte
    header length fits in its size (a symlink to ``/dev/zero`` or a FIFO is refused at once); then
    ``safetensors.deserialize`` checks the header (JSON types, offsets that tile the data exactly, shapes that
    match the bytes, the metadata map).  Every problem is a ``ValueError`` naming the file; a dtype this
    reader does not return names the tensor too.
    """
    import safetensors

    path = os.fspath(path)
    where = f"safetensors file {path!r}"
    try:
        info = os.stat(path)
    except OSError as exc:
        raise ValueError(f"{where} cannot be read: {exc.strerror or exc}") from None
    if not stat.S_ISREG(info.st_mode):
        raise ValueError(f"{where} is not a regular file (a device, FIFO or folder is refused)")
    check_load_budget(where, SAFETENSORS_LOAD_COPIES * info.st_size)  # before a byte is read
    try:
        with open(path, "rb") as fh:
            prefix = fh.read(SAFETENSORS_PREFIX)
            if len(prefix) < SAFETENSORS_PREFIX:
                raise ValueError(f"{where} is truncated: {info.st_size} bytes, shorter than the 8-byte header "
                                 "length")
            (n,) = struct.unpack("<Q", prefix)
            if n > info.st_size - SAFETENSORS_PREFIX:
                raise ValueError(f"{where} is truncated or corrupt: its header length is {n} bytes but the file "
                                 f"has {info.st_size} bytes")
            data = prefix + fh.read(info.st_size - SAFETENSORS_PREFIX)
    except OSError as exc:
        raise ValueError(f"{where} cannot be read: {exc.strerror or exc}") from None
    try:
        entries = safetensors.deserialize(data)
    except Exception as exc:  # SafetensorError (header, offsets, sizes); the Rust side raises nothing else
        raise ValueError(f"{where} is truncated or has an invalid header ({exc})") from None
    del data
    out = {}
    for name, entry in sorted(entries, key=lambda e: e[0]):  # the package's order varies between calls
        kind = entry["dtype"]
        if kind not in SAFETENSORS_DTYPES:
            raise ValueError(f"{where}: tensor {name!r} has dtype {kind}, which is not supported (supported: "
                             f"{', '.join(sorted(SAFETENSORS_DTYPES))})")
        try:
            arr = np.frombuffer(entry["data"], dtype=SAFETENSORS_DTYPES[kind]).reshape(entry["shape"])
        except ValueError as exc:  # an empty tensor whose other dimensions multiply beyond NumPy's index range
            raise ValueError(f"{where}: tensor {name!r} of shape {entry['shape']} cannot be held by NumPy ({exc})"
                             ) from None
        out[name] = widen_half(arr, kind) if kind in ("F16", "BF16") else arr
    return out


#: What :func:`sniff_format` calls each kind of file, for error messages.
FORMAT_NAMES = {
    "npz": "a zip (.npz) archive", "npy": "a single .npy array", "safetensors": "a safetensors file",
    "pickle": "a Python pickle (refused: loading it could run code)", "unknown": "of no format this reader knows",
}
#: Leading bytes of each format (a .npz is a zip archive; protocol 2+ pickles start with PROTO 0x80).
ZIP_MAGIC = b"PK\x03\x04"
NPY_MAGIC = b"\x93NUMPY"
PICKLE_PROTO = 0x80


def sniff_format(path: str | os.PathLike[str]) -> str:
    """What the file's first bytes say it is: "npz", "npy", "safetensors", "pickle" or "unknown".

    A safetensors file starts with its header length (little-endian u64, at most the file size) followed by
    ``{``.  Reads at most the first 9 bytes, of a regular file only (a FIFO or device is "unknown", unopened).
    """
    if not stat.S_ISREG(os.stat(path).st_mode):
        return "unknown"
    with open(path, "rb") as fh:
        head = fh.read(SAFETENSORS_PREFIX + 1)
        size = os.fstat(fh.fileno()).st_size
    if head.startswith(ZIP_MAGIC):
        return "npz"
    if head.startswith(NPY_MAGIC):
        return "npy"
    if len(head) > SAFETENSORS_PREFIX and head[SAFETENSORS_PREFIX:] == b"{" and \
            struct.unpack("<Q", head[:SAFETENSORS_PREFIX])[0] <= size - SAFETENSORS_PREFIX:
        return "safetensors"
    if head[:1] == bytes([PICKLE_PROTO]):
        return "pickle"
    return "unknown"


#: File suffix -> the format its bytes must have.
SUFFIX_FORMATS = {".npz": "npz", ".npy": "npy", ".safetensors": "safetensors"}


def check_suffix_format(path: str | os.PathLike[str], what: str = "file") -> None:
    """``ValueError`` naming ``path`` and what its bytes are when they do not match its suffix (a safetensors
    file renamed ``.npz`` is called a safetensors file, not "pickled objects").  Unknown suffixes pass, and so
    do unrecognised bytes named ``.safetensors`` (:func:`read_safetensors` says what is wrong with them)."""
    suffix = os.path.splitext(os.fspath(path))[1].lower()
    want = SUFFIX_FORMATS.get(suffix)
    if want is None:
        return
    kind = sniff_format(path)
    if kind != want and not (kind == "unknown" and want == "safetensors"):  # the reader names a broken header
        rename = next((s for s, k in SUFFIX_FORMATS.items() if k == kind), None)
        raise ValueError(f"{what} {os.fspath(path)!r} is named {suffix} but its bytes are {FORMAT_NAMES[kind]}"
                         + (f" (rename it to {rename})" if rename else ""))


def _read(source: str | os.PathLike[str] | Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    if isinstance(source, Mapping):
        return {str(k): np.asarray(v) for k, v in source.items()}
    path = os.fspath(source)
    if not os.path.exists(path):
        raise FileNotFoundError(f"checkpoint {path!r} does not exist")
    if path.endswith(".safetensors"):
        check_suffix_format(path, "checkpoint")
        return read_safetensors(path)
    if path.endswith(".npz"):
        check_suffix_format(path, "checkpoint")
        try:
            with np.load(path, allow_pickle=False) as data:
                return {k: data[k] for k in data.files}
        except ValueError as exc:  # object arrays need pickle: refuse them
            raise ValueError(f"checkpoint {path!r} holds pickled objects, which are refused: {exc}") from exc
        except (zipfile.BadZipFile, OSError, EOFError) as exc:
            raise ValueError(f"checkpoint {path!r} is not a valid .npz archive: {exc}") from exc
    raise ValueError(f"unsupported checkpoint suffix for {path!r}: use .safetensors or .npz")


def check_npz_before_reading(path: str, expected: Mapping[str, tuple[int, ...]]) -> None:
    """From the ``.npz`` member headers alone (nothing decompressed): every expected key with its shape, no
    unexpected key, and the load within the memory budget (:mod:`pldr_ref.array_headers`)."""
    from pldr_ref.array_headers import check_arrays_budget, check_expected_arrays, npz_headers

    check_suffix_format(path, "checkpoint")
    headers = npz_headers(path)
    check_expected_arrays(f"checkpoint {path!r}", headers, dict(expected), IGNORED_KEYS)
    check_arrays_budget(f"checkpoint {path!r}", headers)


def load_state_dict(source: str | os.PathLike[str] | Mapping[str, np.ndarray], config: PLDRConfig) -> Params:
    """Parameters for ``config`` from a ``.safetensors`` / ``.npz`` file or a name -> array mapping.

    Every expected key must be present with its exact shape; a missing, extra or
    mis-shaped key raises ``ValueError`` naming the key (and both shapes).  float16, bfloat16,
    float32 and float64 arrays are widened to float64 exactly; other dtypes are refused.
    """
    expected = param_shapes(config)
    if not isinstance(source, Mapping) and os.fspath(source).endswith(".npz") and os.path.isfile(source):
        check_npz_before_reading(os.fspath(source), expected)
    raw = _read(source)
    where = f"checkpoint {os.fspath(source)!r}: " if not isinstance(source, Mapping) else ""
    for name, shape in expected.items():
        if name not in raw:
            raise ValueError(f"checkpoint is missing key {name!r} (expected shape {shape})")
        arr = raw[name]
        if tuple(arr.shape) != shape:
            raise ValueError(f"checkpoint key {name!r} has shape {tuple(arr.shape)}, expected {shape}")
        try:
            check_param_dtype(name, arr)
        except ValueError as exc:
            raise ValueError(f"{where}{exc}") from None
    extra = sorted(k for k in raw if k not in expected and k not in IGNORED_KEYS)
    if extra:
        raise ValueError(f"checkpoint has unexpected key(s) {extra[:5]} for this config")
    return Params(config, {k: np.asarray(raw[k]).astype(np.float64) for k in expected})
