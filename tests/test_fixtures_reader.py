"""A backend in another language needs only a safetensors reader and a JSON parser.

This test reads a committed case with nothing but ``safetensors`` and ``json`` (no pldr_ref
fixture code), rebuilds the model parameters from the stored tensors and recomputes the outputs
through the public API.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
from safetensors.numpy import load_file

import pldr_ref

GOLDEN = Path(__file__).resolve().parents[1] / "golden"


def _read(case: str) -> tuple[dict, dict, dict, dict]:
    d = GOLDEN / case
    meta = json.loads((d / "case.json").read_text(encoding="utf-8"))
    params = load_file(str(d / meta["params"]["file"])) if meta["params"] and meta["params"]["file"] else {}
    return meta, load_file(str(d / "inputs.safetensors")), load_file(str(d / "outputs.safetensors")), params


def _within(meta: dict, name: str, got: np.ndarray, want: np.ndarray) -> bool:
    tol = meta["tolerance"]["outputs"][name]
    return bool(np.all(np.abs(got - want) <= tol["atol"] + tol["rtol"] * np.abs(want)))


def test_model_case_with_safetensors_and_json_only():
    meta, inputs, outputs, stored = _read("model/tiny_exact")
    assert meta["params"]["stored"] == "all"
    config = pldr_ref.PLDRConfig.from_dict(meta["config"])
    params = pldr_ref.Params(config, stored)
    out = pldr_ref.forward(params, inputs["token_ids"], **{k: v for k, v in meta["args"].items()
                                                           if k in ("start_pos", "pad_masking")}).flat()
    assert set(out) == set(outputs) == set(meta["outputs"])
    for name, want in outputs.items():
        assert list(want.shape) == meta["outputs"][name]["shape"]
        assert _within(meta, name, out[name], want), name
    # negative control: a different token sequence does not match
    other = pldr_ref.forward(params, inputs["token_ids"][:, ::-1]).flat()["logits"]
    assert not _within(meta, "logits", other, outputs["logits"])


def test_op_case_with_safetensors_and_json_only():
    meta, inputs, outputs, _ = _read("op/rope_interleaved_f64_pos4095")
    from pldr_ref.rope import apply_rope

    got = apply_rope(inputs["x"], inputs["positions"], layout=meta["args"]["layout"],
                     precision=meta["args"]["precision"], base=meta["args"]["base"])
    assert _within(meta, "out", got, outputs["out"])
    swapped = apply_rope(inputs["x"], inputs["positions"], layout="half", precision=meta["args"]["precision"],
                         base=meta["args"]["base"])
    assert not _within(meta, "out", swapped, outputs["out"])


def test_bool_tensors_are_int64_flagged_in_case_json():
    meta, _, outputs, _ = _read("op/causal_padding_mask")
    assert meta["outputs"]["out"]["dtype"] == "bool"
    assert outputs["out"].dtype == np.int64 and set(np.unique(outputs["out"]).tolist()) <= {0, 1}
