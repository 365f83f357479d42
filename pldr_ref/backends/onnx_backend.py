"""Judge an ONNX model of PLDR-LLM on ONNX Runtime's CPU provider.

Two backends:

* :class:`OnnxFileBackend` -- any ONNX file that follows the contract of ``docs/backends.md`` ("ONNX
  models"), whoever wrote it (``pldr-ref validate --onnx model.onnx``).  It runs the ``forward`` cases whose
  config equals the file's (metadata ``pldr_ref.config``); the case's parameters are fed for every
  parameter the file declares as an input (an overridable initializer); a parameter stored in the file but
  not overridable must equal the case's value rounded to the file's dtype, else the case is unsupported
  with the reason.  The compute dtype is the dtype of the ``logits`` output.  Every golden trace name the
  file outputs is compared, so a wrong node is localized to the first stage whose output it spoils.
* :class:`OnnxExportBackend` -- exports each forward case's config with :func:`pldr_ref.export.onnx_graph.export_model`
  (float32 or float16) and runs the model through the same file backend: the exporter and ONNX Runtime
  judged on the whole suite (``pldr_ref.backends.onnx_backend:OnnxExportBackend``).  ``rewrite`` (a function
  of the ModelProto) lets an engine mutant edit the exported graph before it runs.

``onnx`` and ``onnxruntime`` are optional (``pip install "pldr-ref[onnx]"``), imported when a backend is created.
A file is read by :func:`pldr_ref.backends.onnx_loading.read_model` (size and structure checked before it is read,
external data resolved against the model's folder and inlined).  ONNX Runtime has no NumPy type for bfloat16: such
inputs are fed and outputs read as raw 16-bit patterns (:func:`ort_input_value`, :func:`ort_output_array`), so a
bfloat16 model runs like any other; an output is widened to float64 only when it is floating, anything else is
returned as it is and refused by the harness' type check (:mod:`pldr_ref.harness.verdict.output_types`).
"""

from __future__ import annotations

import ctypes
import dataclasses
import json
import os
from collections.abc import Callable
from typing import Any

import numpy as np

from pldr_ref.config import PLDRConfig
from pldr_ref.env_vars import read_env
from pldr_ref.harness.protocol import Capabilities, Unsupported
from pldr_ref.model import resolve_pad_masking
from pldr_ref.params import Params
from pldr_ref.registry import ALL_STAGES, OPS
from pldr_ref.switches import declared_switches

#: ONNX tensor element type name (as ONNX Runtime spells it) -> harness dtype.
ORT_DTYPES = {"tensor(double)": "float64", "tensor(float)": "float32", "tensor(float16)": "float16",
              "tensor(bfloat16)": "bfloat16"}

#: The fixture kinds an ONNX graph runs: the forward map (the backends' capabilities' kinds).
KINDS = ("forward",)

#: Registry ops (fixture kinds) and stages the ONNX backends do not run: name -> why.
UNSUPPORTED_KINDS: dict[str, str] = {
    op.name: "an ONNX file is one forward graph (its trace outputs localize a wrong node to the stage it spoils)"
    for op in OPS if op.name not in KINDS}
UNSUPPORTED_STAGES: dict[str, str] = {
    s.name: "an ONNX graph runs whole; its trace outputs stand in for isolated stages" for s in ALL_STAGES}

#: NumPy dtype fed for each harness dtype (bfloat16 through ml_dtypes).
FEED_DTYPES = {"float64": np.float64, "float32": np.float32, "float16": np.float16}


def import_ort() -> Any:
    """``import onnxruntime`` or a clear error naming the extra."""
    try:
        import onnxruntime
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise ImportError('the ONNX backend needs onnxruntime: `pip install "pldr-ref[onnx]"`') from exc
    return onnxruntime


def ort_session(model_bytes: bytes) -> Any:
    """An ONNX Runtime session on the CPU provider (one intra-op thread: deterministic, fast for small graphs)."""
    ort = import_ort()
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = read_env("PLDR_REF_ORT_THREADS", 1)
    opts.log_severity_level = 3
    return ort.InferenceSession(model_bytes, sess_options=opts, providers=["CPUExecutionProvider"])


#: ONNX element type of bfloat16 (``onnx.TensorProto.BFLOAT16``), which ONNX Runtime's NumPy bridge lacks.
ONNX_BFLOAT16 = 16
#: Bytes of one bfloat16.
BFLOAT16_BYTES = 2


def ort_input_value(array: np.ndarray) -> Any:
    """An ONNX Runtime OrtValue of ``array``; a bfloat16 array (``ml_dtypes``) is passed as its bit patterns with
    the element type BFLOAT16 (ONNX Runtime cannot convert it from NumPy)."""
    ort = import_ort()
    a = np.ascontiguousarray(array)
    if a.dtype.kind == "V" and a.dtype.name == "bfloat16":
        return ort.OrtValue.ortvalue_from_numpy_with_onnx_type(a.view(np.uint16), onnx_element_type=ONNX_BFLOAT16)
    return ort.OrtValue.ortvalue_from_numpy(a)


def ort_output_array(name: str, value: Any) -> np.ndarray:
    """A NumPy array of the OrtValue ``value`` (CPU): bfloat16 read as its bit patterns into ``ml_dtypes.bfloat16``
    (exact), any other tensor through ONNX Runtime; a sequence or map output is a ValueError naming it."""
    if not value.is_tensor():
        raise ValueError(f"output {name!r} is not a tensor ({value.data_type()})")
    if value.data_type() == "tensor(bfloat16)":
        import ml_dtypes

        shape = tuple(int(d) for d in value.shape())
        count = int(np.prod(shape, dtype=np.int64))
        raw = ctypes.string_at(value.data_ptr(), BFLOAT16_BYTES * count) if count else b""
        return np.frombuffer(raw, dtype=np.uint16).reshape(shape).view(ml_dtypes.bfloat16)
    return np.asarray(value.numpy())


def widen_output(array: np.ndarray) -> np.ndarray:
    """A floating output (NumPy or ``ml_dtypes`` bfloat16) widened exactly to float64; any other type unchanged,
    for the harness' type check to judge (never parsed with ``astype``)."""
    if array.dtype.kind == "f" or (array.dtype.kind == "V" and array.dtype.name == "bfloat16"):
        return array.astype(np.float64)
    return array


class OnnxModel:
    """One loaded ONNX model (self-contained bytes, parsed ``proto`` when already at hand): session, config,
    dtype, overridable and baked parameters."""

    def __init__(self, model_bytes: bytes, label: str, proto: Any = None) -> None:
        import onnx

        from pldr_ref.export.onnx_graph import CONFIG_KEY

        if proto is None:
            from pldr_ref.backends.onnx_loading import inline_external_data

            proto = onnx.load_from_string(model_bytes)
            inline_external_data(proto, None, label)  # bytes have no folder: ORT would read external data from cwd
        props = {p.key: p.value for p in proto.metadata_props}
        if CONFIG_KEY not in props:
            raise ValueError(f"{label}: no metadata {CONFIG_KEY!r} (the config as JSON, see docs/backends.md)")
        try:
            self.config = PLDRConfig.from_dict(json.loads(props[CONFIG_KEY]))
        except (ValueError, TypeError) as exc:
            raise ValueError(f"{label}: metadata {CONFIG_KEY!r} is not a valid config: {exc}") from exc
        self.session = ort_session(model_bytes)
        self.label = label
        self.inputs = {i.name: i for i in self.session.get_inputs()}
        self.inputs.update({i.name: i for i in self.session.get_overridable_initializers()})
        if "token_ids" not in self.inputs:
            raise ValueError(f"{label}: the model has no input 'token_ids' (see docs/backends.md)")
        outputs = {o.name: o for o in self.session.get_outputs()}
        if "logits" not in outputs:
            raise ValueError(f"{label}: the model has no output 'logits' (see docs/backends.md)")
        self.output_names = list(outputs)
        self.dtype = ORT_DTYPES.get(outputs["logits"].type)
        if self.dtype is None:
            raise ValueError(f"{label}: unsupported logits type {outputs['logits'].type}")
        self.baked = {t.name: onnx.numpy_helper.to_array(t) for t in proto.graph.initializer
                      if t.name not in self.inputs}

    def parameter_feed(self, params: Params) -> dict[str, np.ndarray]:
        """The case's parameters for every overridable one; raises Unsupported when a baked one differs."""
        feed = {}
        for name, value in params.items():
            if name in self.inputs:
                feed[name] = self.feed_array(name, value)
            elif name in self.baked:
                mine = np.asarray(value, dtype=np.float64).astype(self.baked[name].dtype)
                if mine.shape != self.baked[name].shape or not np.array_equal(mine, self.baked[name]):
                    raise Unsupported(f"{self.label} stores parameter {name} (not overridable) with other values "
                                      "than this case")
        return feed

    def feed_array(self, name: str, value: Any) -> np.ndarray:
        """``value`` in the element type the input ``name`` declares."""
        t = self.inputs[name].type
        a = np.asarray(value)
        if t == "tensor(int64)":
            return a.astype(np.int64)
        if t == "tensor(bool)":
            return a.astype(bool)
        dt = ORT_DTYPES.get(t)
        if dt == "bfloat16":
            import ml_dtypes

            return np.asarray(a, dtype=np.float64).astype(ml_dtypes.bfloat16)
        if dt is None:
            raise Unsupported(f"{self.label}: input {name} has type {t}, outside the contract")
        return np.asarray(a, dtype=np.float64).astype(FEED_DTYPES[dt])

    def run_forward(self, case: Any) -> dict[str, np.ndarray]:
        """The file's outputs (float64) for a forward case of its config."""
        c = case.params.config
        if c != self.config:
            diff = sorted(f.name for f in dataclasses.fields(c) if getattr(c, f.name) != getattr(self.config, f.name))
            raise Unsupported(f"{self.label} is exported for another config (differs in {', '.join(diff[:4])})")
        ids = np.asarray(case.inputs["token_ids"]).astype(np.int64)
        args = dict(case.args or {})
        extra = sorted(set(case.inputs) - {"token_ids", "attention_mask"} - set(self.inputs))
        if extra:  # e.g. position_ids: never run with the graph's default instead
            raise Unsupported(f"{self.label} has no input for the case's {', '.join(extra)}")
        feed = {"token_ids": ids, **self.parameter_feed(case.params)}
        if "attention_mask" in case.inputs:
            am = np.asarray(case.inputs["attention_mask"]).astype(np.int64)
        else:
            pad_masking = resolve_pad_masking(c, args.get("pad_masking"))
            am = (ids != c.pad_id).astype(np.int64) if pad_masking else np.ones_like(ids)
        start = int(args.get("start_pos", 0))
        if "attention_mask" in self.inputs:
            feed["attention_mask"] = am
        elif not am.all():
            raise Unsupported(f"{self.label} has no attention_mask input and this case masks padding keys")
        if "start_pos" in self.inputs:
            feed["start_pos"] = np.array(start, dtype=np.int64)
        elif start:
            raise Unsupported(f"{self.label} has no start_pos input and this case starts at position {start}")
        values = self.session.run_with_ort_values(self.output_names, {k: ort_input_value(v) for k, v in feed.items()})
        return {n: widen_output(ort_output_array(n, v)) for n, v in zip(self.output_names, values, strict=True)}


#: The arithmetic of an ONNX graph run node by node: every node's output (each MatMul's, each elementwise op's) is a
#: tensor of the graph's dtype, as in eager frameworks -- judged against every calibration member
#: (``docs/tolerances.md``, "The policy"; in float32 the declarations coincide).
ONNX_ARITHMETIC = ("dtype-elementwise",)


def _capabilities(dtype: str, full_trace: bool) -> Capabilities:
    return Capabilities(dtypes=(dtype,), kinds=KINDS, switches=declared_switches("onnx"),
                        full_trace=full_trace, arithmetic=ONNX_ARITHMETIC)


class OnnxFileBackend:
    """One ONNX file judged on ONNX Runtime's CPU provider (see module docstring)."""

    name = "onnx"

    def __init__(self, path: str) -> None:
        from pldr_ref.backends.onnx_loading import read_model

        data, proto = read_model(path)  # size, structure and external data checked in that order
        self.model = OnnxModel(data, str(path), proto)
        self.name = f"onnx:{os.path.basename(str(path))}"

    def capabilities(self) -> Capabilities:
        """The file's dtype; forward cases; the full trace when the file outputs every layer entry of layer 0."""
        full = all(f"layers.0.{e}" in self.model.output_names for e in ("q", "scores", "E", "out2"))
        return _capabilities(self.model.dtype, full)

    def run_case(self, case: Any, dtype: str) -> dict[str, np.ndarray]:
        if dtype != self.model.dtype:
            raise Unsupported(f"the file computes in {self.model.dtype}, not {dtype}")
        if case.kind != "forward":
            raise Unsupported(f"case kind {case.kind!r}: an ONNX file runs forward cases only")
        return self.model.run_forward(case)


class OnnxExportBackend:
    """``pldr-ref export onnx`` + ONNX Runtime on every forward case (see module docstring)."""

    name = "onnx-export"

    def __init__(self, rewrite: Callable[[Any], Any] | None = None) -> None:
        import_ort()
        self.rewrite = rewrite
        self._cache: dict[tuple[int, str], tuple[Params, OnnxModel]] = {}

    def capabilities(self) -> Capabilities:
        """float32 and float16 exports; forward cases; the full trace."""
        return Capabilities(dtypes=("float32", "float16"), kinds=KINDS, switches=declared_switches("onnx"),
                            arithmetic=ONNX_ARITHMETIC)

    def model_for(self, params: Params, dtype: str) -> OnnxModel:
        """The exported (and, for a mutant, rewritten) model of ``params``' config, cached per Params object."""
        from pldr_ref.export.onnx_graph import NotExpressibleError, export_model

        key = (id(params), dtype)
        hit = self._cache.get(key)
        if hit is None or hit[0] is not params:
            try:
                proto = export_model(params.config, params, dtype)
            except NotExpressibleError as exc:  # a switch value the graph does not compute: never run at another one
                raise Unsupported(str(exc)) from exc
            if self.rewrite is not None:
                proto = self.rewrite(proto)
            hit = (params, OnnxModel(proto.SerializeToString(), f"export of {dtype}"))
            self._cache = {key: hit}
        return hit[1]

    def run_case(self, case: Any, dtype: str) -> dict[str, np.ndarray]:
        if dtype not in ("float32", "float16"):
            raise Unsupported(f"ONNX export is float32 or float16, not {dtype}")
        if case.kind != "forward":
            raise Unsupported(f"case kind {case.kind!r}: the ONNX export covers forward cases only")
        return self.model_for(case.params, dtype).run_forward(case)


__all__ = ["OnnxExportBackend", "OnnxFileBackend", "OnnxModel", "ort_session"]
