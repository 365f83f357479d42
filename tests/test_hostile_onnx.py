"""Issue 29, hostile ONNX files and engine outputs (causes 3, 9, 11, 12; cause 1 and 2 below them).

3. External data is resolved against the model's folder, never the current one (a decoy of that name there is
   not read), and may not leave the folder.
9. ``validate --onnx`` checks size (``os.stat``) and the ModelProto's field structure before it reads the file.
11. A bfloat16 model can pass (ONNX Runtime has no NumPy bfloat16: inputs and outputs go as bit patterns).
12. An output of string / object / bool / int type for a float entry is an error verdict, never parsed.
Each with a negative control.  Needs the [onnx] extra (skips without it, fails under PLDR_REF_REQUIRE_ENGINES=1).
"""

from __future__ import annotations

import json
import os
import time
import tracemalloc
from pathlib import Path

import numpy as np
import pytest
from engine_support import require

require("onnx")

import ml_dtypes  # noqa: E402
import onnx  # noqa: E402
import onnxruntime  # noqa: E402
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

from pldr_ref.backends.onnx_backend import ort_input_value, ort_output_array  # noqa: E402
from pldr_ref.backends.onnx_loading import ModelFileError, read_model  # noqa: E402
from pldr_ref.cli import main  # noqa: E402
from pldr_ref.fixtures.case import DEFAULT_GOLDEN_DIR, load_case  # noqa: E402
from pldr_ref.harness.localize import judge  # noqa: E402
from pldr_ref.harness.protocol import Capabilities  # noqa: E402
from pldr_ref.harness.tolerance import RULE_NOT_JUDGEABLE, Allowance  # noqa: E402
from pldr_ref.harness.validate import validate_case  # noqa: E402
from pldr_ref.memory_budget import MemoryBudgetError  # noqa: E402

TINY = "model/tiny_exact"
TRUE = np.array([1.0, 2.0, 3.0], dtype=np.float32)
DECOY = np.array([-7.0, -8.0, -9.0], dtype=np.float32)


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("onnx") / "tiny.onnx"
    assert main(["export", "onnx", "--case", TINY, "--out", str(path)]) == 0
    return path


def run_validate(args: list[str], tmp_path: Path) -> tuple[int, dict]:
    report = tmp_path / "report.json"
    code = main(["validate", *args, "--quiet", "--out", str(report)])
    return code, json.loads(report.read_text())


# ----------------------------------------------------------------------------- cause 3: external data
def external_model(folder: Path, location: str = "w.bin", data: np.ndarray = TRUE) -> Path:
    """y = w + 0 with w stored as external data at ``location`` (relative to ``folder``), written by hand."""
    folder.mkdir(parents=True, exist_ok=True)
    w = numpy_helper.from_array(np.zeros(3, np.float32), "w")
    w.ClearField("raw_data")
    del w.float_data[:]
    w.data_location = TensorProto.EXTERNAL
    for k, v in (("location", location), ("offset", "0"), ("length", str(data.nbytes))):
        w.external_data.add(key=k, value=v)
    if not os.path.isabs(location) and ".." not in location:
        (folder / location).write_bytes(data.tobytes())
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [3])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [3])
    graph = helper.make_graph([helper.make_node("Add", ["w", "x"], ["y"])], "g", [x], [y], initializer=[w])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    path = folder / "m.onnx"
    path.write_bytes(model.SerializeToString())
    return path


def run_bytes(data: bytes) -> np.ndarray:
    sess = onnxruntime.InferenceSession(data, providers=["CPUExecutionProvider"])
    return sess.run(None, {"x": np.zeros(3, np.float32)})[0]


def test_external_data_is_read_beside_the_model_not_from_the_current_folder(tmp_path: Path,
                                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    path = external_model(tmp_path / "model")
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    (cwd / "w.bin").write_bytes(DECOY.tobytes())  # a decoy of the same name in the current folder
    monkeypatch.chdir(cwd)
    data, proto = read_model(path)
    np.testing.assert_array_equal(numpy_helper.to_array(proto.graph.initializer[0]), TRUE)
    np.testing.assert_array_equal(run_bytes(data), TRUE)
    # negative control: the old loader (the bytes parsed as they are, the baked parameters read back with
    # numpy_helper.to_array) reads the decoy from the current folder
    old = onnx.load_from_string(path.read_bytes())
    np.testing.assert_array_equal(numpy_helper.to_array(old.graph.initializer[0]), DECOY)


@pytest.mark.parametrize("location, match", [
    ("../secret.bin", "leaves the model's folder"),
    ("/etc/hostname", "relative to the model's folder"),
    ("missing.bin", "not found beside the model"),
])
def test_external_data_outside_the_folder_or_missing_is_refused(tmp_path: Path, location: str, match: str) -> None:
    (tmp_path / "secret.bin").write_bytes(DECOY.tobytes())
    path = external_model(tmp_path / "model", location)
    if location == "missing.bin":
        (path.parent / "missing.bin").unlink()
    with pytest.raises(ModelFileError, match=match):
        read_model(path)


def test_external_data_shorter_than_declared_or_a_fifo_is_refused(tmp_path: Path) -> None:
    path = external_model(tmp_path / "m1")
    (path.parent / "w.bin").write_bytes(TRUE.tobytes()[:5])
    with pytest.raises(ModelFileError, match="holds 5 bytes"):
        read_model(path)
    path = external_model(tmp_path / "m2")
    (path.parent / "w.bin").unlink()
    os.mkfifo(path.parent / "w.bin")  # would block a reader forever
    with pytest.raises(ModelFileError, match="not a regular file"):
        read_model(path)


# ----------------------------------------------------------------------------- cause 9: checks before reading
def test_a_large_file_of_zeros_is_refused_before_it_is_read(tmp_path: Path) -> None:
    zeros = tmp_path / "zeros.onnx"
    with open(zeros, "wb") as fh:
        fh.truncate(1536 * 2**20)  # 1.5 GiB, sparse: no disk used
    tracemalloc.start()
    t0 = time.perf_counter()
    with pytest.raises(ModelFileError, match=r"not an ONNX model \(byte 0: protobuf field 0"):
        read_model(zeros)
    seconds = time.perf_counter() - t0
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert peak < 2**20 and seconds < 1.0, (peak, seconds)  # not read (the file is 1.5 GiB)
    with pytest.raises(MemoryBudgetError, match="above the memory budget"):
        read_model(zeros, budget=2**30)  # the size alone exceeds a 1 GiB budget: refused from os.stat


def test_truncated_text_and_valid_files_through_the_field_scan(exported: Path, tmp_path: Path) -> None:
    good = exported.read_bytes()
    cut = tmp_path / "cut.onnx"
    cut.write_bytes(good[: len(good) // 2])
    with pytest.raises(ModelFileError, match="past the end of the"):
        read_model(cut)
    text = tmp_path / "text.onnx"
    text.write_text("hello, not a model\n")
    with pytest.raises(ModelFileError, match="not an ONNX model"):
        read_model(text)
    with pytest.raises(ModelFileError, match="not a regular file"):
        read_model(tmp_path)
    # negative control: the exported model passes every check and loads whole
    data, proto = read_model(exported)
    assert data == good and proto.graph.output


def test_validate_onnx_on_a_file_of_zeros_is_one_error_line(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    zeros = tmp_path / "zeros.onnx"
    zeros.write_bytes(bytes(4096))
    assert main(["validate", "--quiet", "--onnx", str(zeros)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("pldr-ref validate: --onnx") and "not an ONNX model" in err[0]


# ----------------------------------------------------------------------------- cause 11: bfloat16
def test_bfloat16_inputs_and_outputs_go_through_onnx_runtime_exactly() -> None:
    x = helper.make_tensor_value_info("x", TensorProto.BFLOAT16, [4])
    y = helper.make_tensor_value_info("y", TensorProto.BFLOAT16, [4])
    graph = helper.make_graph([helper.make_node("Identity", ["x"], ["y"])], "g", [x], [y])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    sess = onnxruntime.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    a = np.array([1.5, -2.25, 3.0e38, 1e-40], dtype=ml_dtypes.bfloat16)
    with pytest.raises(RuntimeError):  # control: ONNX Runtime's NumPy bridge cannot take bfloat16
        sess.run(None, {"x": a})
    (out,) = sess.run_with_ort_values(["y"], {"x": ort_input_value(a)})
    got = ort_output_array("y", out)
    assert got.dtype == ml_dtypes.bfloat16
    np.testing.assert_array_equal(got.view(np.uint16), a.view(np.uint16))  # bit for bit, the subnormal included


def bfloat16_outputs(model: onnx.ModelProto) -> onnx.ModelProto:
    """The model with every float output rounded to bfloat16 by a Cast at its end (float32 inside)."""
    out = onnx.ModelProto()
    out.CopyFrom(model)
    for o in out.graph.output:
        if o.type.tensor_type.elem_type == TensorProto.FLOAT:
            inner = o.name + "__f32"
            for n in out.graph.node:
                n.output[:] = [inner if v == o.name else v for v in n.output]
                n.input[:] = [inner if v == o.name else v for v in n.input]
            out.graph.node.append(helper.make_node("Cast", [inner], [o.name], to=TensorProto.BFLOAT16))
            o.type.tensor_type.elem_type = TensorProto.BFLOAT16
    return out


#: A forward case whose logits bfloat16 can judge (tiny_exact's cannot: not covered in bfloat16).
BF16_CASE = "model/tiny_identity_g_short"


def test_a_correct_bfloat16_model_passes_and_a_wrong_one_fails(tmp_path: Path) -> None:
    f32 = tmp_path / "f32.onnx"
    assert main(["export", "onnx", "--case", BF16_CASE, "--out", str(f32)]) == 0
    bf = tmp_path / "bf16.onnx"
    onnx.save(bfloat16_outputs(onnx.load(str(f32))), str(bf))
    pattern = f"^{BF16_CASE}$"
    code, report = run_validate(["--onnx", str(bf), "-k", pattern], tmp_path)
    (r,) = report["results"]
    assert r["dtype"] == "bfloat16" and r["status"] == "pass" and code == 0, r
    # negative control: the same model with one node's softmax axis edited fails at masked_softmax
    wrong = onnx.load(str(f32))
    next(n for n in wrong.graph.node if n.op_type == "Softmax").attribute[0].i = -2
    onnx.save(bfloat16_outputs(wrong), str(bf))
    code, report = run_validate(["--onnx", str(bf), "-k", pattern], tmp_path)
    (r,) = report["results"]
    assert code == 1 and r["status"] == "fail" and r["first_failure"]["stage"] == "masked_softmax", r


# ----------------------------------------------------------------------------- cause 12: output types
class GoldenBackend:
    """Returns the golden outputs of the case, its logits passed through ``transform`` (correct for identity)."""

    name = "golden-echo"

    def __init__(self, transform):
        self.transform = transform

    def capabilities(self) -> Capabilities:
        return Capabilities(dtypes=("float64",), kinds=("forward",))

    def run_case(self, case, dtype):
        return {k: self.transform(np.asarray(v)) if k == "logits" else v for k, v in case.outputs.items()}


@pytest.mark.parametrize("label, transform", [
    ("text", lambda a: a.astype(str)),
    ("object", lambda a: a.astype(object)),
    ("bool", lambda a: a != 0),
    ("int", lambda a: np.round(a).astype(np.int64)),
])
def test_non_float_outputs_for_float_entries_are_an_error_never_parsed(label: str, transform) -> None:
    case = load_case(DEFAULT_GOLDEN_DIR / TINY)
    r = validate_case(GoldenBackend(transform), case, "float64", isolate=False)
    assert r.status == "error" and "OutputTypeError: 1 output(s) of the wrong type: logits: dtype" in r.reason, r.reason


def test_golden_echo_passes_negative_control() -> None:
    case = load_case(DEFAULT_GOLDEN_DIR / TINY)
    assert validate_case(GoldenBackend(lambda a: a), case, "float64", isolate=False).status == "pass"
    bf = validate_case(GoldenBackend(lambda a: a.astype(ml_dtypes.bfloat16)), case, "float64", isolate=False)
    assert bf.status == "fail"  # a bfloat16 array is a float: judged (and too coarse for float64), not refused
    assert "OutputTypeError" not in bf.reason


def test_isolated_stage_outputs_go_through_the_same_type_check() -> None:
    want = np.array([1.5, 2.5])
    allowance = Allowance(None, 0.0, RULE_NOT_JUDGEABLE, {}, judged=False, reason="test")
    bad = judge("x", "embed", want, np.array(["1.5", "2.5"]), "float64", allowance)
    assert bad.status == "fail" and "float entry" in bad.note
    mask = judge("m", "sequence_mask", np.array([True, False]), np.array([1.0, 0.0]), "float64", allowance)
    assert mask.status == "fail" and "boolean entry" in mask.note
    assert judge("x", "embed", want, want.copy(), "float64", allowance).status != "fail"  # control


def test_an_onnx_model_with_a_string_trace_output_is_an_error(exported: Path, tmp_path: Path) -> None:
    model = onnx.load(str(exported))
    o = next(o for o in model.graph.output if o.name == "embed")
    for n in model.graph.node:
        n.output[:] = ["embed__f32" if v == "embed" else v for v in n.output]
        n.input[:] = ["embed__f32" if v == "embed" else v for v in n.input]
    model.graph.node.append(helper.make_node("Cast", ["embed__f32"], ["embed"], to=TensorProto.STRING))
    o.type.tensor_type.elem_type = TensorProto.STRING  # "1.5"-like text that astype(float64) would parse
    path = tmp_path / "text.onnx"
    onnx.save(model, str(path))
    from pldr_ref.backends.onnx_backend import OnnxFileBackend

    case = load_case(DEFAULT_GOLDEN_DIR / TINY)
    r = validate_case(OnnxFileBackend(str(path)), case, "float32", isolate=False)
    assert r.status == "error" and "embed: dtype object for a float entry" in r.reason, r.reason
    ok = validate_case(OnnxFileBackend(str(exported)), case, "float32", isolate=False)  # negative control
    assert ok.status == "pass", ok.reason
