"""Issue 10 item 5: no silent misreading of input.

Every case below is an error that names the argument or key and the accepted values; each test also
runs the accepted neighbour of the bad input (the negative control: the check is not a blanket refusal).
"""

from __future__ import annotations

import dataclasses
import json
import struct
import subprocess
import sys
import typing
import warnings
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest
from safetensors.numpy import save_file

from pldr_ref import Params, PLDRConfig, forward, init_params
from pldr_ref.checkpoint import load_state_dict, state_dict
from pldr_ref.config import HF_DEFAULTS, HF_IGNORED_KEYS, HF_KEY_TYPES
from pldr_ref.fixtures.build import verify
from pldr_ref.fixtures.case import FixtureError
from pldr_ref.fixtures.manifest import read_manifest

ROOT = Path(__file__).resolve().parents[1]
TINY = PLDRConfig.preset("tiny")
PARAMS = init_params(TINY, 0)
IDS = np.array([[1, 2, 3]])


# ------------------------------------------------------------------ forward(start_pos=...)
@pytest.mark.parametrize("bad", [1.5, "1", True, None, 1.0])
def test_start_pos_must_be_an_int(bad) -> None:
    with pytest.raises(TypeError, match=r"start_pos must be an int >= 0, got .* of type"):
        forward(PARAMS, IDS, start_pos=bad)


def test_start_pos_int_is_accepted() -> None:
    assert list(forward(PARAMS, IDS, start_pos=1).positions) == [1, 2, 3]
    assert list(forward(PARAMS, IDS, start_pos=np.int64(2)).positions) == [2, 3, 4]


# ------------------------------------------------------------------ PLDRConfig field types
def test_attn_bias_string_is_refused() -> None:
    with pytest.raises(ValueError, match=r"PLDRConfig\.attn_bias='no' must be a bool \(True or False\)"):
        PLDRConfig(attn_bias="no")
    assert PLDRConfig(attn_bias=False).attn_bias is False


def _wrong_values(kind) -> list:
    """Values of the wrong type for a field annotated ``kind`` (bool, int, float or str)."""
    return {bool: ["no", "false", 0, 1, None, 1.0], int: [2.7, 2.0, "two", None, True],
            float: ["1e-6", None, True, float("nan"), float("inf")], str: [1, None, True, b"half"]}[kind]


FIELD_TYPES = typing.get_type_hints(PLDRConfig)


@pytest.mark.parametrize("field", [f.name for f in dataclasses.fields(PLDRConfig)])
def test_every_config_field_is_type_checked(field: str) -> None:
    """Driven by the annotations: a field added later is covered without editing this test."""
    kind = FIELD_TYPES[field]
    assert kind in (bool, int, float, str), f"PLDRConfig.{field}: annotation {kind!r} has no validation rule"
    good = getattr(TINY, field)
    for bad in _wrong_values(kind):
        with pytest.raises(ValueError, match=rf"PLDRConfig\.{field}=.* must be"):
            TINY.replace(**{field: bad})
    assert getattr(TINY.replace(**{field: good}), field) == good  # negative control


def test_every_str_switch_lists_its_allowed_values() -> None:
    from pldr_ref.config import _CHOICES

    str_fields = {name for name, kind in FIELD_TYPES.items() if kind is str}
    assert str_fields == set(_CHOICES)
    for name in str_fields:
        with pytest.raises(ValueError, match=rf"PLDRConfig\.{name}='bogus' is not one of \("):
            TINY.replace(**{name: "bogus"})


def test_numpy_scalars_are_normalised() -> None:
    c = TINY.replace(num_layers=np.int64(3), rope_base=10000, attn_bias=np.bool_(False))
    assert (type(c.num_layers), type(c.rope_base), type(c.attn_bias)) == (int, float, bool)
    assert c == TINY.replace(num_layers=3, rope_base=10000.0, attn_bias=False)


# ------------------------------------------------------------------ HF config.json
HF = {"model_type": "pldrllm", "num_hidden_layers": 2, "num_attention_heads": 2, "head_dim": 8, "hidden_size": 16,
      "intermediate_size": 42, "vocab_size": 64, "max_position_embeddings": 64, "A_dff": 10, "num_reslayerA": 2,
      "architectures": ["PldrllmForCausalLM"], "torch_dtype": "float32"}


@pytest.mark.parametrize(("change", "message"), [
    ({"num_hidden_layers": 2.7}, r"key 'num_hidden_layers'=2\.7 must be an int"),
    ({"num_hidden_layers": 2.0}, r"key 'num_hidden_layers'=2\.0 must be an int"),
    ({"num_hidden_layers": None}, r"key 'num_hidden_layers'=None must be an int"),
    ({"num_attention_heads": "two"}, r"key 'num_attention_heads'='two' must be an int"),
    ({"attention_bias": "false"}, r"key 'attention_bias'='false' must be a bool \(True or False\)"),
    ({"reference_rope": "false"}, r"key 'reference_rope'='false' must be a bool \(True or False\)"),
    ({"glu_bias": 0}, r"key 'glu_bias'=0 must be a bool"),
    ({"layer_norm_eps": "1e-6"}, r"key 'layer_norm_eps'='1e-6' must be a finite float"),
    ({"rope_theta": True}, r"key 'rope_theta'=True must be a finite float"),
    ({"rope_scaling": "none"}, r"key 'rope_scaling'='none' must be a JSON object or null"),
    ({"num_hidden_layer": 3}, r"unknown key\(s\) 'num_hidden_layer' \(did you mean 'num_hidden_layers'\?\)"),
])
def test_hf_config_bad_value_is_refused(change: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        PLDRConfig.from_hf_config({**HF, **change})


def test_hf_config_accepted_values() -> None:
    """Negative control: the well-typed config reads, and its values land where they belong."""
    c = PLDRConfig.from_hf_config({**HF, "attention_bias": False, "reference_rope": False, "hidden_size": None})
    assert (c.num_layers, c.num_heads, c.d_k, c.attn_bias, c.rope_layout) == (2, 2, 8, False, "half")
    for key in HF_KEY_TYPES:  # every key this reader knows has a default
        assert key in HF_DEFAULTS or key in ("model_type", "rope_parameters"), key


def test_hf_unknown_key_warns_when_asked() -> None:
    with pytest.warns(UserWarning, match=r"unknown key\(s\) 'num_hidden_layer'.*ignoring them"):
        c = PLDRConfig.from_hf_config({**HF, "num_hidden_layer": 3}, unknown_keys="warn")
    assert c.num_layers == 2  # the misspelt key is ignored, as the warning says
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        PLDRConfig.from_hf_config({**HF, **dict.fromkeys(sorted(HF_IGNORED_KEYS)[:5], 1)})
    with pytest.raises(ValueError, match=r"unknown_keys='ignore' is not one of \('error', 'warn'\)"):
        PLDRConfig.from_hf_config(HF, unknown_keys="ignore")


def test_hf_invalid_json_names_the_file(tmp_path: Path) -> None:
    path = tmp_path / "config.json"
    path.write_text('{"num_hidden_layers": 2,', encoding="utf-8")
    with pytest.raises(ValueError, match=r"HF config .*config\.json: not valid JSON"):
        PLDRConfig.from_hf_config(path)
    path.write_text(json.dumps(HF), encoding="utf-8")
    assert PLDRConfig.from_hf_config(tmp_path).num_layers == 2
    path.write_text(json.dumps({**HF, "attention_bias": "false"}), encoding="utf-8")
    with pytest.raises(ValueError, match=r"HF config .*config\.json: key 'attention_bias'='false'"):
        PLDRConfig.from_hf_config(path)


# ------------------------------------------------------------------ parameter arrays
@pytest.mark.parametrize("dtype", [np.complex128, np.complex64, np.int64, np.int32, np.bool_])
def test_non_float_parameter_arrays_are_refused(dtype) -> None:
    sd = state_dict(PARAMS)
    sd["final_layer.bias"] = np.zeros(TINY.vocab_size, dtype=dtype)
    accepted = r"accepted: float16, bfloat16, float32, float64"
    with pytest.raises(ValueError, match=rf"parameter 'final_layer\.bias' has dtype .*; {accepted}"):
        load_state_dict(sd, TINY)
    with pytest.raises(ValueError, match=rf"parameter 'final_layer\.bias' has dtype .*; {accepted}"):
        Params(TINY, sd)


@pytest.mark.parametrize("dtype", [np.complex64, np.int64])
def test_non_float_safetensors_tensor_is_refused(tmp_path: Path, dtype) -> None:
    sd = {k: np.ascontiguousarray(v) for k, v in state_dict(PARAMS).items()}
    sd["final_layer.bias"] = sd["final_layer.bias"].astype(dtype)
    path = tmp_path / "model.safetensors"
    save_file(sd, str(path))
    with pytest.raises(ValueError, match=r"checkpoint .*model\.safetensors.*'final_layer\.bias' has dtype"):
        load_state_dict(path, TINY)


def _bf16_to_float64(a: np.ndarray) -> np.ndarray:
    """bfloat16 -> float64 by the bit layout (bf16 = the high 16 bits of a float32), independent of ml_dtypes."""
    bits = a.view(np.uint16).astype(np.uint32) << np.uint32(16)
    return bits.view(np.float32).astype(np.float64)


@pytest.mark.parametrize("low", ["bfloat16", "float16"])
def test_half_precision_safetensors_load_exactly(tmp_path: Path, low: str) -> None:
    dtype = np.dtype(ml_dtypes.bfloat16) if low == "bfloat16" else np.dtype(np.float16)
    sd = {k: np.ascontiguousarray(v.astype(dtype)) for k, v in state_dict(PARAMS).items()}
    path = tmp_path / f"model_{low}.safetensors"
    save_file(sd, str(path))
    loaded = load_state_dict(path, TINY)
    for k, v in sd.items():
        want = _bf16_to_float64(v) if low == "bfloat16" else v.astype(np.float32).astype(np.float64)
        assert loaded[k].dtype == np.float64
        assert np.array_equal(loaded[k], want), k
    # negative control: the low-precision copy differs from the float64 original
    assert not all(np.array_equal(loaded[k], PARAMS[k]) for k in sd)


# ------------------------------------------------------------------ library errors name the file
def test_truncated_safetensors_names_the_file(tmp_path: Path) -> None:
    good = tmp_path / "good.safetensors"
    save_file({k: np.ascontiguousarray(v) for k, v in state_dict(PARAMS).items()}, str(good))
    assert load_state_dict(good, TINY)["final_layer.bias"].shape == (64,)
    data = good.read_bytes()
    for name, blob in {"short.safetensors": data[:5], "cut_header.safetensors": data[:40],
                       "cut_data.safetensors": data[:-100],
                       "bad_header.safetensors": struct.pack("<Q", 4) + b"{x:1"}.items():
        bad = tmp_path / name
        bad.write_bytes(blob)
        with pytest.raises(ValueError, match=rf"safetensors file .*{name}.* (truncated|invalid header)"):
            load_state_dict(bad, TINY)


def test_truncated_golden_tensor_file_names_the_file(tmp_path: Path) -> None:
    from pldr_ref.fixtures.format import encode_safetensors, load_tensors

    path = tmp_path / "outputs.safetensors"
    path.write_bytes(encode_safetensors({"x": np.arange(4.0)}))
    assert np.array_equal(load_tensors(path)["x"], np.arange(4.0))
    path.write_bytes(path.read_bytes()[:-3])
    with pytest.raises(ValueError, match=r"outputs\.safetensors: not a readable safetensors file"):
        load_tensors(path)


def test_invalid_manifest_names_the_file(tmp_path: Path) -> None:
    (tmp_path / "MANIFEST.json").write_text("{not json", encoding="utf-8")
    with pytest.raises(FixtureError, match=r"MANIFEST\.json: not valid JSON"):
        read_manifest(tmp_path)
    problems = verify(tmp_path, progress=None)
    assert len(problems) == 1 and str(tmp_path / "MANIFEST.json") in problems[0]
    (tmp_path / "MANIFEST.json").write_text('{"schema": "pldr-ref-golden/1", "cases": {}}', encoding="utf-8")
    assert verify(tmp_path, progress=None) == []  # negative control: a valid empty manifest verifies


# ------------------------------------------------------------------ `pldr-ref golden list | head`
def test_golden_list_into_a_closed_pipe_exits_quietly() -> None:
    """stdout is a pipe whose reader is already gone (``| head`` after its first line): no traceback."""
    import os

    command = [sys.executable, "-m", "pldr_ref.cli", "golden", "list"]
    # the negative control (a reading pipe gets the list) runs at the same time as the closed-pipe run
    ok = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        read_end, write_end = os.pipe()
        os.close(read_end)  # every write now fails with EPIPE, deterministically
        try:
            proc = subprocess.run(command, cwd=ROOT, stdout=write_end, stderr=subprocess.PIPE, timeout=120)
        finally:
            os.close(write_end)
        ok_out, _ = ok.communicate(timeout=120)
    finally:
        ok.kill()
    assert proc.stderr == b"", proc.stderr.decode(errors="replace")
    assert proc.returncode == 141  # 128 + SIGPIPE, what a shell reports for a writer cut off by `| head`
    assert ok.returncode == 0 and b"model/tiny" in ok_out  # negative control: a reading pipe gets the list
