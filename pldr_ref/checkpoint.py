"""State-dict export and import: ``.safetensors``, ``.npz`` (pickle-free) or a mapping (spec §6)."""

from __future__ import annotations

import os
import zipfile
from collections.abc import Mapping

import numpy as np

from pldr_ref.config import PLDRConfig
from pldr_ref.params import IGNORED_KEYS, Params, param_shapes


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


def _read(source: str | os.PathLike[str] | Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    if isinstance(source, Mapping):
        return {str(k): np.asarray(v) for k, v in source.items()}
    path = os.fspath(source)
    if not os.path.exists(path):
        raise FileNotFoundError(f"checkpoint {path!r} does not exist")
    if path.endswith(".safetensors"):
        from safetensors.numpy import load_file

        return dict(load_file(path))
    if path.endswith(".npz"):
        try:
            with np.load(path, allow_pickle=False) as data:
                return {k: data[k] for k in data.files}
        except ValueError as exc:  # object arrays need pickle: refuse them
            raise ValueError(f"checkpoint {path!r} holds pickled objects, which are refused: {exc}") from exc
        except zipfile.BadZipFile as exc:
            raise ValueError(f"checkpoint {path!r} is not a valid .npz archive: {exc}") from exc
    raise ValueError(f"unsupported checkpoint suffix for {path!r}: use .safetensors or .npz")


def load_state_dict(source: str | os.PathLike[str] | Mapping[str, np.ndarray], config: PLDRConfig) -> Params:
    """Parameters for ``config`` from a ``.safetensors`` / ``.npz`` file or a name -> array mapping.

    Every expected key must be present with its exact shape; a missing, extra or
    mis-shaped key raises ``ValueError`` naming the key (and both shapes).  Float
    arrays of any precision are widened to float64 exactly; non-float arrays are refused.
    """
    raw = _read(source)
    expected = param_shapes(config)
    for name, shape in expected.items():
        if name not in raw:
            raise ValueError(f"checkpoint is missing key {name!r} (expected shape {shape})")
        arr = raw[name]
        if tuple(arr.shape) != shape:
            raise ValueError(f"checkpoint key {name!r} has shape {tuple(arr.shape)}, expected {shape}")
        if not np.issubdtype(arr.dtype, np.floating):
            raise ValueError(f"checkpoint key {name!r} has non-float dtype {arr.dtype}")
    extra = sorted(k for k in raw if k not in expected and k not in IGNORED_KEYS)
    if extra:
        raise ValueError(f"checkpoint has unexpected key(s) {extra[:5]} for this config")
    return Params(config, {k: raw[k] for k in expected})
