"""Reports: JSON schema and version, valid JUnit XML, readable table, CLI exit codes, and determinism
(the same backend run twice gives byte-identical reports)."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET

import pytest

from pldr_ref.cli import main as cli_main
from pldr_ref.harness.report import REPORT_JSON_SCHEMA, SCHEMA_VERSION, schema_errors

REFERENCE = "pldr_ref.backends.reference:ReferenceBackend"
TESTCASE_CHILDREN = {"failure", "error", "skipped", "system-out", "system-err", "properties"}


def run_cli(*args: str) -> int:
    return cli_main(["validate", *args])


def check_junit(path) -> ET.Element:
    """Structural JUnit check (the common Jenkins/Ant layout): testsuites > testsuite > testcase, integer
    counts that match the children, name/classname on every testcase, at most one verdict element."""
    root = ET.parse(path).getroot()
    assert root.tag == "testsuites"
    totals = dict.fromkeys(("tests", "failures", "errors", "skipped"), 0)
    for suite in root:
        assert suite.tag == "testsuite" and suite.get("name")
        cases = list(suite)
        assert all(tc.tag == "testcase" for tc in cases)
        counts = {"tests": len(cases),
                  "failures": sum(tc.find("failure") is not None for tc in cases),
                  "errors": sum(tc.find("error") is not None for tc in cases),
                  "skipped": sum(tc.find("skipped") is not None for tc in cases)}
        for k, v in counts.items():
            assert int(suite.get(k)) == v, (k, suite.get(k), v)
            totals[k] += v
        for tc in cases:
            assert tc.get("name") and tc.get("classname")
            kids = [c.tag for c in tc]
            assert set(kids) <= TESTCASE_CHILDREN
            assert sum(k in ("failure", "error", "skipped") for k in kids) <= 1
            for verdict in tc:
                if verdict.tag in ("failure", "error", "skipped"):
                    assert verdict.get("message") is not None
    for k, v in totals.items():
        assert int(root.get(k)) == v
    return root


def test_reference_backend_report_schema_and_junit(tmp_path, capsys):
    rep, xml = tmp_path / "r.json", tmp_path / "r.xml"
    assert run_cli("--backend", REFERENCE, "-k", "tiny", "--report", str(rep), "--junit", str(xml)) == 0
    data = json.loads(rep.read_text())
    assert data["schema_version"] == SCHEMA_VERSION
    assert schema_errors(data) == []
    broken = json.loads(rep.read_text())  # negative control: the checker sees a wrong status and a missing key
    broken["results"][0]["status"] = "maybe"
    del broken["results"][0]["outputs"][0]["comparison"]
    assert len(schema_errors(broken)) == 2
    try:  # the schema is standard JSON Schema where the validator package happens to be installed
        import jsonschema
    except ImportError:
        jsonschema = None
    if jsonschema is not None:
        jsonschema.validate(data, REPORT_JSON_SCHEMA)
    assert set(data) >= {"backend", "suite", "dtypes", "policy", "summary", "passed", "results"}
    assert data["passed"] is True and data["summary"]["fail"] == 0
    assert data["summary"]["total"] == len(data["results"]) > 0
    r = data["results"][0]
    assert set(r) >= {"case", "dtype", "status", "outputs", "stages", "first_failure"}
    assert "seconds" not in r  # no timing unless requested
    cmp = next(o for o in r["outputs"] if o["comparison"])["comparison"]
    assert set(cmp) >= {"max_abs", "median_abs", "max_rel", "median_rel", "max_ulp", "mismatches", "worst_index",
                        "nan_mismatches", "posinf_mismatches", "neginf_mismatches"}
    root = check_junit(xml)
    assert int(root.get("failures")) == 0
    out = capsys.readouterr().out
    assert "STATUS" in out and "PASSED" in out


def test_cli_usage_errors_exit_2(tmp_path, capsys):
    assert run_cli("--backend", "no_such_module:X") == 2
    assert run_cli("--backend", "pldr_ref.backends.reference") == 2
    assert run_cli("--backend", "pldr_ref.backends.reference:Nope") == 2
    assert run_cli("--backend", REFERENCE, "--dtype", "float8") == 2
    assert run_cli("--backend", REFERENCE, "--suite", str(tmp_path / "missing")) == 2
    assert "MODULE:ATTR" in capsys.readouterr().err


def test_unsupported_dtype_is_reported_and_judging_nothing_fails(tmp_path):
    rep = tmp_path / "r.json"
    # the reference backend declares float64 only: asking for float32 gives 'unsupported' rows, and a run that
    # judged nothing cannot pass (exit 1, with the reason in the report)
    assert run_cli("--backend", REFERENCE, "--dtype", "float32", "-k", "op/linear", "--report", str(rep)) == 1
    data = json.loads(rep.read_text())
    assert [r["status"] for r in data["results"]] == ["unsupported"]
    assert "float32" in data["results"][0]["reason"]
    assert data["passed"] is False and any("no case was judged" in p for p in data["problems"])




@pytest.mark.torch
def test_failing_backend_exit_1_with_failure_elements(tmp_path, one_torch_thread):
    rep, xml = tmp_path / "r.json", tmp_path / "r.xml"
    code = run_cli("--backend", "pldr_ref.harness.controls.mutants:NoScaleMutant", "--dtype", "float64", "-k",
                   "model/tiny_exact", "--report", str(rep), "--junit", str(xml))
    assert code == 1
    data = json.loads(rep.read_text())
    assert data["passed"] is False
    (res,) = data["results"]
    assert res["first_failure"]["stage"] == "attention_scores"
    root = check_junit(xml)
    fail = root.find("./testsuite/testcase/failure")
    assert fail is not None and "attention_scores" in fail.get("message")
    assert "max_abs" in fail.text


@pytest.fixture
def one_torch_thread(monkeypatch):
    torch = pytest.importorskip("torch")
    before = torch.get_num_threads()
    monkeypatch.setenv("PLDR_REF_TORCH_THREADS", "1")
    yield
    torch.set_num_threads(before)


@pytest.mark.torch
def test_same_backend_twice_gives_identical_reports(tmp_path, one_torch_thread):
    """One case of each kind (forward, op, float32-position RoPE op, decoder layer) in a float64 and a 16-bit
    dtype, run twice through the CLI (byte-identical report and JUnit XML); the timing control runs one case."""
    args = ["--backend", "pldr_ref.backends.torch_backend:TorchBackend", "--dtype", "float64,bfloat16",
            "-k", "model/tiny_exact|op/(linear|rope_half_f32_pos4095)$|layer/tiny_l1_mask_finfo_min", "--quiet"]
    outs = []
    for i in range(2):
        rep, xml = tmp_path / f"r{i}.json", tmp_path / f"r{i}.xml"
        assert run_cli(*args, "--report", str(rep), "--junit", str(xml)) == 0
        outs.append((rep.read_bytes(), xml.read_bytes()))
    assert outs[0] == outs[1]
    # negative control (one case is enough): timing is opt-in precisely because it breaks byte equality
    one = [a if a.startswith("--") or "|" not in a else "model/tiny_exact" for a in args]
    rep = tmp_path / "timed.json"
    assert run_cli(*one, "--report", str(rep), "--timing") == 0
    assert run_cli(*one, "--report", str(tmp_path / "untimed.json")) == 0
    assert rep.read_bytes() != (tmp_path / "untimed.json").read_bytes()
    assert "seconds" in json.loads(rep.read_text())["results"][0]
