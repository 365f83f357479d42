"""Deterministic safetensors and JSON encoding."""

from __future__ import annotations

import numpy as np
import pytest
from safetensors.numpy import load, save

from pldr_ref.fixtures.format import canonical_json, ceil_pow10, encode_safetensors, round_sig, storage_array


def test_safetensors_round_trip_with_the_library():
    tensors = {"b": np.arange(6, dtype=np.int64).reshape(2, 3), "a": np.linspace(-1, 1, 5), "z": np.array([np.inf])}
    blob = encode_safetensors(tensors, {"k": "v"})
    back = load(blob)
    assert set(back) == set(tensors)
    for k, v in tensors.items():
        assert back[k].dtype == v.dtype and np.array_equal(back[k], v)
    assert len(blob) % 8 == 0 or (int.from_bytes(blob[:8], "little") % 8 == 0)


def test_encoding_is_order_independent_and_deterministic():
    a = {"x": np.ones(3), "y": np.zeros((2, 2))}
    b = {"y": np.zeros((2, 2)), "x": np.ones(3)}
    assert encode_safetensors(a) == encode_safetensors(b)
    # same content as the library writes, whatever its header layout
    ours = {k: v.tolist() for k, v in load(encode_safetensors(a)).items()}
    assert {k: v.tolist() for k, v in load(save(a)).items()} == ours


def test_rejects_unsupported_tensors():
    with pytest.raises(TypeError, match="float64 or int64"):
        encode_safetensors({"x": np.ones(2, dtype=np.float32)})
    with pytest.raises(ValueError, match="0-d"):
        encode_safetensors({"x": np.array(1.0)})
    with pytest.raises(TypeError, match="float, int and bool"):
        storage_array(np.array(["a"]))


def test_storage_array_flags_bool():
    arr, dtype = storage_array(np.array([True, False]))
    assert dtype == "bool" and arr.dtype == np.int64 and arr.tolist() == [1, 0]


def test_canonical_json_sorted_and_nan_free():
    assert canonical_json({"b": 1, "a": [0.1, 2]}) == b'{\n "a": [\n  0.1,\n  2\n ],\n "b": 1\n}\n'
    with pytest.raises(ValueError):
        canonical_json({"x": float("nan")})


def test_rounding_helpers():
    assert round_sig(0.000123456) == 0.000123
    assert ceil_pow10(3e-12) == 1e-11 and ceil_pow10(1e-12) == 1e-12
    with pytest.raises(ValueError):
        ceil_pow10(0.0)
