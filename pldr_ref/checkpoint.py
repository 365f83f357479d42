"""State-dict export and import: ``.safetensors``, ``.npz`` (pickle-free) or a mapping (spec §6).

Accepted parameter dtypes (:data:`pldr_ref.params.ACCEPTED_FLOAT_DTYPES`): float16, bfloat16, float32 and
float64, widened exactly to float64 (every such value is a float64).  Integer, bool and complex arrays are
refused with an error naming the key; a file that cannot be read (truncated, bad header) is an error naming the file.
"""

from __future__ import annotations

import json
import os
import struct
import zipfile
from collections.abc import Mapping

import ml_dtypes
import numpy as np

from pldr_ref.config import PLDRConfig
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


#: safetensors dtype names -> NumPy dtypes (little-endian), per the safetensors format specification.
SAFETENSORS_DTYPES = {
    "F64": np.dtype("<f8"), "F32": np.dtype("<f4"), "F16": np.dtype("<f2"), "BF16": np.dtype(ml_dtypes.bfloat16),
    "I64": np.dtype("<i8"), "I32": np.dtype("<i4"), "I16": np.dtype("<i2"), "I8": np.dtype("i1"),
    "U64": np.dtype("<u8"), "U32": np.dtype("<u4"), "U16": np.dtype("<u2"), "U8": np.dtype("u1"),
    "BOOL": np.dtype("?"), "C64": np.dtype("<c8"), "C128": np.dtype("<c16"),
}

#: Bytes of the little-endian header-length prefix of a safetensors file.
SAFETENSORS_PREFIX = 8


def read_safetensors(path: str | os.PathLike[str]) -> dict[str, np.ndarray]:
    """Tensors of a ``.safetensors`` file, read by this module (so that BF16 and errors are uniform).

    Layout: u64 little-endian header length N, N bytes of JSON ``{name: {dtype, shape, data_offsets}}``
    (optionally ``__metadata__``), then the data.  Every problem (truncated file, bad JSON, offsets outside
    the data, a size that does not match the shape, an unknown dtype) is a ``ValueError`` naming the file.
    """
    path = os.fspath(path)
    data = open(path, "rb").read()  # noqa: SIM115 - one read, closed by the GC; keeps the error path simple
    where = f"safetensors file {path!r}"
    if len(data) < SAFETENSORS_PREFIX:
        raise ValueError(f"{where} is truncated: {len(data)} bytes, shorter than the 8-byte header length")
    (n,) = struct.unpack("<Q", data[:SAFETENSORS_PREFIX])
    start = SAFETENSORS_PREFIX + n
    if start > len(data):
        raise ValueError(f"{where} is truncated: header of {n} bytes but the file has {len(data)} bytes")
    try:
        header = json.loads(data[SAFETENSORS_PREFIX:start].decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(f"{where} has an invalid header ({exc})") from exc
    if not isinstance(header, dict):
        raise ValueError(f"{where} has an invalid header (not a JSON object)")
    body = memoryview(data)[start:]
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        try:
            dtype = SAFETENSORS_DTYPES[info["dtype"]]
            shape = tuple(int(d) for d in info["shape"])
            lo, hi = (int(x) for x in info["data_offsets"])
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"{where}: tensor {name!r} has an invalid or unsupported entry {info!r} ({exc!r}); "
                             f"supported dtypes: {sorted(SAFETENSORS_DTYPES)}") from None
        if not 0 <= lo <= hi <= len(body):
            raise ValueError(f"{where} is truncated or corrupt: tensor {name!r} spans bytes [{lo}, {hi}) of a "
                             f"{len(body)}-byte data section")
        if hi - lo != int(np.prod(shape)) * dtype.itemsize:
            raise ValueError(f"{where}: tensor {name!r} has {hi - lo} bytes, but shape {shape} of {info['dtype']} "
                             f"needs {int(np.prod(shape)) * dtype.itemsize}")
        out[name] = np.frombuffer(body[lo:hi], dtype=dtype).reshape(shape)
    return out


def _read(source: str | os.PathLike[str] | Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    if isinstance(source, Mapping):
        return {str(k): np.asarray(v) for k, v in source.items()}
    path = os.fspath(source)
    if not os.path.exists(path):
        raise FileNotFoundError(f"checkpoint {path!r} does not exist")
    if path.endswith(".safetensors"):
        return read_safetensors(path)
    if path.endswith(".npz"):
        try:
            with np.load(path, allow_pickle=False) as data:
                return {k: data[k] for k in data.files}
        except ValueError as exc:  # object arrays need pickle: refuse them
            raise ValueError(f"checkpoint {path!r} holds pickled objects, which are refused: {exc}") from exc
        except (zipfile.BadZipFile, OSError, EOFError) as exc:
            raise ValueError(f"checkpoint {path!r} is not a valid .npz archive: {exc}") from exc
    raise ValueError(f"unsupported checkpoint suffix for {path!r}: use .safetensors or .npz")


def load_state_dict(source: str | os.PathLike[str] | Mapping[str, np.ndarray], config: PLDRConfig) -> Params:
    """Parameters for ``config`` from a ``.safetensors`` / ``.npz`` file or a name -> array mapping.

    Every expected key must be present with its exact shape; a missing, extra or
    mis-shaped key raises ``ValueError`` naming the key (and both shapes).  float16, bfloat16,
    float32 and float64 arrays are widened to float64 exactly; other dtypes are refused.
    """
    raw = _read(source)
    where = f"checkpoint {os.fspath(source)!r}: " if not isinstance(source, Mapping) else ""
    expected = param_shapes(config)
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
