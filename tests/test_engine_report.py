"""The engine report (``python -m pldr_ref.harness.tools.engine_report``) names every failing or erroring case and its
per-case time limit (issue 19: the report kept no per-case messages, so a timeout could only be guessed at)."""

from __future__ import annotations

from pldr_ref.fixtures.case import DEFAULT_GOLDEN_DIR, load_case
from pldr_ref.harness.controls.verdict_power import ZeroLogits
from pldr_ref.harness.tools import engine_report


def _run(**extra):
    return {"counts": {"pass": 3}, "margins": {}, "seconds": 1.0, **extra}


def test_markdown_lists_every_problem_and_the_time_limit():
    runs = {("jax", "float32"): _run(problems=["model/x: error: backend exceeded the 1800 s limit"]),
            ("onnx", "float16"): _run(problems=[])}
    text = engine_report.markdown(runs, None, None, "cmd", timeout=1800)
    assert "- jax float32: model/x: error: backend exceeded the 1800 s limit" in text
    assert "Per-case time limit: 1800 s." in text
    clean = engine_report.markdown({("onnx", "float16"): _run(problems=[])}, None, None, "cmd")
    assert "Failing or erroring cases: none." in clean and "Per-case time limit: 600 s." in clean
    assert "Per-case time limit: none." in engine_report.markdown(runs, None, None, "cmd", timeout=0)


def test_run_engine_keeps_the_reason_of_a_failing_case(monkeypatch):
    import pldr_ref.harness.protocol as protocol

    monkeypatch.setattr(protocol, "load_backend", lambda spec: ZeroLogits())
    case = load_case(DEFAULT_GOLDEN_DIR / "model/tiny_identity_g_short")
    out = engine_report.run_engine("zero", "float32", [case], timeout=30)
    assert out["counts"] == {"fail": 1}
    assert len(out["problems"]) == 1 and out["problems"][0].startswith("model/tiny_identity_g_short: fail: ")
    assert len(out["problems"][0]) <= len("model/tiny_identity_g_short: fail: ") + engine_report.REASON_CHARS


def test_run_engine_runs_an_engine_in_a_child_process_under_a_limit(monkeypatch):
    """Issue 29 cause 1: the report's per-case limit stops engines as validate's does (a child process killed at the
    deadline, not a SIGALRM that cannot interrupt a C++ call); without a limit the engine stays in process."""
    import pldr_ref.harness.engine_process as engine_process
    import pldr_ref.harness.protocol as protocol

    started, closed = [], []

    class FakeChild(ZeroLogits):
        enforces_deadline = True

        def __init__(self, recipe, *, start_timeout=None):
            started.append((recipe, start_timeout))

        def close(self):
            closed.append(True)

    monkeypatch.setattr(engine_process, "ProcessBackend", FakeChild)
    monkeypatch.setattr(protocol, "load_backend", lambda spec: ZeroLogits())
    case = load_case(DEFAULT_GOLDEN_DIR / "model/tiny_identity_g_short")
    spec = "pldr_ref.backends.onnx_backend:OnnxExportBackend"
    out = engine_report.run_engine(spec, "float32", [case], timeout=30)
    assert started == [(("spec", spec), 30)] and closed == [True] and out["counts"] == {"fail": 1}
    # negative control: no limit, no child
    started.clear()
    out = engine_report.run_engine(spec, "float32", [case], timeout=0)
    assert started == [] and out["counts"] == {"fail": 1}
