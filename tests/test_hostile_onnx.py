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
from pldr_ref.harness.policy.tolerance import RULE_NOT_JUDGEABLE, Allowance  # noqa: E402
from pldr_ref.harness.protocol import SWITCHES, Capabilities, every_value  # noqa: E402
from pldr_ref.harness.validate import validate_case  # noqa: E402
from pldr_ref.harness.verdict.localize import judge  # noqa: E402
from pldr_ref.memory_budget import MemoryBudgetError  # noqa: E402

TINY = "model/tiny_exact"
PADDED = "model/tiny_padded_exact"
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
    assert len(err) == 1 and err[0].startswith("pldr-ref validate: error: --onnx") and "not an ONNX model" in err[0]


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
    from pldr_ref.backends.onnx_backend import OnnxFileBackend

    f32 = tmp_path / "f32.onnx"
    assert main(["export", "onnx", "--case", BF16_CASE, "--out", str(f32)]) == 0
    bf = tmp_path / "bf16.onnx"
    onnx.save(bfloat16_outputs(onnx.load(str(f32))), str(bf))
    case = load_case(DEFAULT_GOLDEN_DIR / BF16_CASE)
    backend = OnnxFileBackend(str(bf))
    assert backend.capabilities().dtypes == ("bfloat16",)
    r = validate_case(backend, case, "bfloat16")
    assert r.status == "pass", r.reason
    # negative control: the same model with one node's softmax axis edited fails at masked_softmax
    wrong = onnx.load(str(f32))
    next(n for n in wrong.graph.node if n.op_type == "Softmax").attribute[0].i = -2
    onnx.save(bfloat16_outputs(wrong), str(bf))
    r = validate_case(OnnxFileBackend(str(bf)), case, "bfloat16")
    assert r.status == "fail" and r.first_failure["stage"] == "masked_softmax", r.reason


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


# ----------------------------------------------------------------------------- cause 1: a limit for any engine
def endless_when_padded(src: Path, dst: Path) -> None:
    """``src`` with an ONNX ``Loop`` feeding the logits (times 0) that never ends when the attention mask has
    padding (no trip count, a condition that stays true) and runs zero times otherwise."""
    m = onnx.load(str(src))
    one = helper.make_tensor("one", TensorProto.FLOAT, [], [1.0])
    body = helper.make_graph(
        [helper.make_node("Identity", ["cond_in"], ["cond_out"]), helper.make_node("Add", ["v_in", "one"], ["v_out"])],
        "body",
        [helper.make_tensor_value_info("iter", TensorProto.INT64, []),
         helper.make_tensor_value_info("cond_in", TensorProto.BOOL, []),
         helper.make_tensor_value_info("v_in", TensorProto.FLOAT, [])],
        [helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []),
         helper.make_tensor_value_info("v_out", TensorProto.FLOAT, [])], initializer=[one])
    m.graph.initializer.append(helper.make_tensor("loop_zero", TensorProto.FLOAT, [], [0.0]))
    for n in m.graph.node:
        n.output[:] = ["logits__in" if v == "logits" else v for v in n.output]
    m.graph.node.extend([
        helper.make_node("ReduceMin", ["attention_mask"], ["loop_min"], keepdims=0),
        helper.make_node("Cast", ["loop_min"], ["loop_unpadded"], to=TensorProto.BOOL),
        helper.make_node("Not", ["loop_unpadded"], ["loop_go"]),
        helper.make_node("Loop", ["", "loop_go", "loop_zero"], ["loop_v"], body=body),
        helper.make_node("Mul", ["loop_v", "loop_zero"], ["loop_0"]),
        helper.make_node("Add", ["logits__in", "loop_0"], ["logits"]),
    ])
    onnx.save(m, str(dst))


def test_timeout_stops_an_endless_onnx_loop_and_other_cases_still_pass(exported: Path, tmp_path: Path) -> None:
    loop = tmp_path / "loop.onnx"
    endless_when_padded(exported, loop)
    t0 = time.perf_counter()
    code, report = run_validate(["--onnx", str(loop), "--timeout", "2", "-k",
                                 "^model/(tiny_exact|tiny_padded_exact)$"], tmp_path)
    seconds = time.perf_counter() - t0
    status = {r["case"]: (r["status"], r["reason"]) for r in report["results"]}
    assert status["model/tiny_padded_exact"][0] == "error", status
    assert "time limit of 2 s" in status["model/tiny_padded_exact"][1], status
    # negative control: the same model on an unpadded case (the loop runs zero times) passes in the same child
    assert status["model/tiny_exact"] == ("pass", ""), status
    assert code == 1
    assert seconds < 60, seconds  # 2 s limit + one child start; was: past 40 s and past SIGINT


@pytest.mark.slow
def test_ctrl_c_stops_an_endless_onnx_loop(exported: Path, tmp_path: Path) -> None:
    import signal
    import subprocess
    import sys

    loop = tmp_path / "loop.onnx"
    endless_when_padded(exported, loop)
    entry = "import sys; from pldr_ref.cli import main; sys.exit(main(sys.argv[1:]))"
    cmd = [sys.executable, "-c", entry, "validate", "--onnx", str(loop), "--timeout", "600", "-k",
           "^model/tiny_padded_exact$", "--quiet"]
    proc = subprocess.Popen(cmd, stderr=subprocess.PIPE, text=True, start_new_session=False,  # SIGINT not ignored,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))  # even in a background job
    time.sleep(20)  # the child is inside ONNX Runtime's endless Loop by now
    assert proc.poll() is None
    children = child_pids(proc.pid)
    assert children  # the engine process (and multiprocessing's resource tracker)
    proc.send_signal(signal.SIGINT)
    t0 = time.perf_counter()
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 130 and time.perf_counter() - t0 < 10, (proc.returncode, err)
    time.sleep(1)
    alive = [pid for pid in children if Path(f"/proc/{pid}").exists()
             and Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"]
    assert not alive, alive  # no engine process left spinning


def child_pids(pid: int) -> list[int]:
    """Processes whose parent is ``pid`` (from /proc)."""
    out = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            out.append(int(stat.parent.name))
    return out


@pytest.mark.slow
def test_negative_control_the_signal_alone_cannot_stop_onnx_runtime(exported: Path, tmp_path: Path) -> None:
    """The old in-process limit (SIGALRM) on the same model: still running 15 s after a 2 s limit."""
    import subprocess
    import sys

    loop = tmp_path / "loop.onnx"
    endless_when_padded(exported, loop)
    code = ("import sys; from pldr_ref.backends.onnx_backend import OnnxFileBackend; "
            "from pldr_ref.fixtures.case import DEFAULT_GOLDEN_DIR, load_case; "
            "from pldr_ref.harness.validate import validate_case; "
            f"print(validate_case(OnnxFileBackend({str(loop)!r}), load_case(DEFAULT_GOLDEN_DIR / {PADDED!r}), "
            "'float32', timeout=2).status)")
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        with pytest.raises(subprocess.TimeoutExpired):
            proc.communicate(timeout=15)
    finally:
        proc.kill()
        proc.communicate()


# ----------------------------------------------------------------------------- cause 2: what the exporter refuses
class ExportedModel:
    """An exported model judged with every switch value declared: the exporter alone decides what is refused."""

    name = "exported"

    def __init__(self, model) -> None:
        self.model = model

    def capabilities(self) -> Capabilities:
        return Capabilities(dtypes=("float32",), kinds=("forward",), position_ids=True,
                            switches=every_value(*SWITCHES))

    def run_case(self, case, dtype):
        return self.model.run_forward(case)


def export_verdict(case) -> str:
    """"refused" (the exporter names a switch value it cannot express) or the float32 verdict of the exported
    model on the case (the harness' float32 allowance, on the rows float32 can represent)."""
    from pldr_ref.backends.onnx_backend import OnnxModel
    from pldr_ref.export.onnx_graph import NotExpressibleError, export_model

    try:
        proto = export_model(case.params.config, case.params, "float32")
    except NotExpressibleError:
        return "refused"
    r = validate_case(ExportedModel(OnnxModel(proto.SerializeToString(), case.name)), case, "float32",
                      isolate=False)
    return r.status if r.status != "fail" else f"fail: {r.reason}"


def forward_case_names() -> list[str]:
    """Every committed forward case with parameters, read from its case.json (no tensor loaded)."""
    return sorted(f"{p.parent.parent.name}/{p.parent.name}" for p in DEFAULT_GOLDEN_DIR.glob("*/*/case.json")
                  if json.loads(p.read_text(encoding="utf-8")).get("kind") == "forward"
                  and (p.parent / "params.safetensors").is_file())


FORWARD_CASES = forward_case_names()
#: A few in the default run: a switch value the graph lacks, a plain case, left padding (rows float32 cannot
#: represent excluded), per-row positions (no graph input for them).
DEFAULT_RUN_CASES = ("model/switch_masked_row_zeros", TINY, "model/tiny_left_pad_additive", "model/switch_position_ids")


@pytest.mark.parametrize("name", [pytest.param(n, marks=() if n in DEFAULT_RUN_CASES else pytest.mark.slow)
                                  for n in FORWARD_CASES])
def test_the_exporter_refuses_or_matches_the_golden(name: str) -> None:
    verdict = export_verdict(load_case(DEFAULT_GOLDEN_DIR / name))
    assert verdict in ("refused", "pass", "not_judgeable", "unsupported"), verdict


def test_export_cli_names_the_switch_value_it_cannot_express(tmp_path: Path, capsys: pytest.CaptureFixture,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    out = tmp_path / "m.onnx"
    assert main(["export", "onnx", "--case", "model/switch_masked_row_zeros", "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["pldr-ref export onnx: error: cannot export this config to ONNX: masked_row='zeros' (the graph "
                   "computes arithmetic)"] and not out.exists()
    # negative control: without the check the model is written and its logits are wrong (fail, not refused)
    import pldr_ref.switches

    monkeypatch.setattr(pldr_ref.switches, "unsupported", lambda engine, config: {})
    assert export_verdict(load_case(DEFAULT_GOLDEN_DIR / "model/switch_masked_row_zeros")).startswith("fail")


def test_the_child_process_proxy_carries_the_onnx_files_config(exported: Path) -> None:
    """``validate --onnx F --own-config`` runs the file in a child process: the proxy carries its pldr_ref.config
    (it once carried none, so --own-config refused every ONNX file: "needs a backend with a config")."""
    from pldr_ref.harness.engine_process import ProcessBackend
    from pldr_ref.harness.profile_suites import backend_config

    child = ProcessBackend(("onnx", str(exported)))
    try:
        assert backend_config(child) == load_case(DEFAULT_GOLDEN_DIR / TINY).config
    finally:
        child.close()
    # negative control: a backend without a config has none through the proxy either
    plain = ProcessBackend(("spec", "pldr_ref.backends.reference:ReferenceBackend"))
    try:
        assert backend_config(plain) is None
    finally:
        plain.close()


def test_a_parameter_set_crosses_to_the_child_process_once() -> None:
    """The parent sends a case's parameters only when the child does not hold that set (110 M values at v510-110m
    took 10-14 s and about 1 GB a case through the pipe); a request without them uses the held set, and the child
    refuses one when it holds none (negative control)."""
    from pldr_ref.harness.engine_process import ProcessBackend, pack_case, unpack, unpack_case
    from pldr_ref.harness.validate import guarded_case

    case = load_case(DEFAULT_GOLDEN_DIR / TINY)
    full, bare = pack_case(case, "float64"), pack_case(case, "float64", with_params=False)
    assert len(bare) < len(full) // 2
    header, arrays = unpack(bare)
    with pytest.raises(RuntimeError, match="holds no parameters"):
        unpack_case(header, arrays)
    held = unpack_case(*unpack(full)).params
    assert unpack_case(header, arrays, held).params is held
    child = ProcessBackend(("spec", "pldr_ref.backends.reference:ReferenceBackend"))
    try:
        guarded = guarded_case(case)
        assert guarded_case(case).params is guarded.params  # one guarded copy per parameter set
        assert child._sends(guarded.params)
        first = child.run_case(guarded, "float64")
        assert not child._sends(guarded.params)  # held by the child now
        again = child.run_case(guarded_case(case), "float64")
        assert all(np.array_equal(first[k], again[k]) for k in first) and first
    finally:
        child.close()
    assert child._sends(guarded.params)  # a closed (or restarted) child holds nothing


@pytest.mark.slow
def test_a_backend_in_the_child_process_gives_the_in_process_report() -> None:
    """The proxy is transparent: every field of every verdict (isolated stages included) as in process."""
    from pldr_ref.harness.engine_process import ProcessBackend
    from pldr_ref.harness.protocol import load_backend
    from pldr_ref.harness.validate import validate

    spec = "pldr_ref.backends.reference:ReferenceBackend"
    cases = [load_case(DEFAULT_GOLDEN_DIR / n) for n in (TINY, "op/linear", "cache/narrow_kv_g_learned_g")]
    child = ProcessBackend(("spec", spec))
    try:
        got = [r.to_dict() for r in validate(child, cases, ["float64"], timeout=120)]
    finally:
        child.close()
    want = [r.to_dict() for r in validate(load_backend(spec), cases, ["float64"], timeout=120)]
    assert got == want and sum(len(r["stages"]) for r in got) > 0
