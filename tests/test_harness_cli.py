"""``pldr-ref validate`` verdicts that mean something (issue 11, item 4), each through the CLI: nothing judged,
missing manifest, cases missing from the manifest or from disk, unknown kinds, NaN shown as NaN, a hanging,
crashing, exiting or None-returning backend still gets a report, read-only inputs, a failing scoring case
writes the table, JSON and JUnit."""

from __future__ import annotations

import json
import shutil
import textwrap
import xml.etree.ElementTree as ET

import numpy as np
import pytest

from pldr_ref.cli import main as cli_main
from pldr_ref.fixtures.case import DEFAULT_GOLDEN_DIR, load_case
from pldr_ref.harness.report import schema_errors

REFERENCE = "pldr_ref.backends.reference:ReferenceBackend"

BACKENDS = textwrap.dedent('''
    import os
    import sys
    import time

    import numpy as np

    from pldr_ref.backends.reference import ReferenceBackend
    from pldr_ref.harness.protocol import Capabilities


    class TypoKinds(ReferenceBackend):
        """Declares a misspelt kind only: it supports nothing."""

        name = "typo"

        def capabilities(self):
            return Capabilities(dtypes=("float64",), kinds=("forwrd",))


    class NaNOut(ReferenceBackend):
        name = "nan"

        def run_case(self, case, dtype):
            return {k: np.full(np.shape(v), np.nan) for k, v in super().run_case(case, dtype).items()}


    class Sleeper(ReferenceBackend):
        name = "sleeper"

        def run_case(self, case, dtype):
            time.sleep(30)
            return super().run_case(case, dtype)


    class Crasher(ReferenceBackend):
        name = "crasher"

        def run_case(self, case, dtype):
            raise RuntimeError("kernel exploded")


    class Exiter(ReferenceBackend):
        name = "exiter"

        def run_case(self, case, dtype):
            sys.exit(3)


    class ReturnsNone(ReferenceBackend):
        name = "none"

        def run_case(self, case, dtype):
            return None


    class Writer(ReferenceBackend):
        """Writes into the inputs it was handed (must be refused) and reports what happened."""

        name = "writer"

        def run_case(self, case, dtype):
            case.inputs["x"][...] = 0.0
            return super().run_case(case, dtype)


    class BadScores(ReferenceBackend):
        """Scoring outputs off by 1 %: scoring cases fail (their outputs have no forward stage)."""

        name = "bad-scores"

        def run_case(self, case, dtype):
            out = super().run_case(case, dtype)
            if case.kind.startswith("scoring_"):
                out = {k: v * 1.01 if v.dtype.kind == "f" else v for k, v in out.items()}
            return out
''')


@pytest.fixture
def backends(tmp_path, monkeypatch):
    (tmp_path / "cli_backends.py").write_text(BACKENDS)
    monkeypatch.syspath_prepend(str(tmp_path))
    return "cli_backends"


def run(tmp_path, *args: str) -> tuple[int, dict, ET.Element]:
    rep, xml = tmp_path / "r.json", tmp_path / "r.xml"
    code = cli_main(["validate", *args, "--out", str(rep), "--junit", str(xml)])
    data = json.loads(rep.read_text())
    assert schema_errors(data) == []
    return code, data, ET.parse(xml).getroot()


def small_suite(tmp_path, names: tuple[str, ...] = ("op/linear", "op/glu")):
    """A copy of a few committed cases with a manifest listing exactly them."""
    root = tmp_path / "suite"
    for n in names:
        shutil.copytree(DEFAULT_GOLDEN_DIR / n, root / n)
    manifest = json.loads((DEFAULT_GOLDEN_DIR / "MANIFEST.json").read_text())
    manifest["cases"] = {n: manifest["cases"][n] for n in names}
    (root / "MANIFEST.json").write_text(json.dumps(manifest))
    return root


def test_reference_on_a_small_copy_passes(tmp_path, capsys):
    """Control for the suite tests below: the intact copy passes."""
    code, data, _ = run(tmp_path, "--backend", REFERENCE, "--suite-dir", str(small_suite(tmp_path)))
    assert code == 0 and data["passed"] and data["problems"] == []


def test_nothing_judged_exits_1(tmp_path, backends, capsys):
    code, data, junit = run(tmp_path, "--backend", f"{backends}:TypoKinds", "-k", "op/linear")
    assert code == 1 and data["passed"] is False
    assert any("unknown case kind" in p and "forwrd" in p for p in data["problems"])
    assert any("no case was judged" in p for p in data["problems"])
    assert junit.find("./testsuite/testcase/failure[@type='RunProblem']") is not None
    assert "PROBLEM" in capsys.readouterr().out


def test_missing_manifest_exits_1(tmp_path, capsys):
    root = small_suite(tmp_path)
    (root / "MANIFEST.json").unlink()
    code, data, _ = run(tmp_path, "--backend", REFERENCE, "--suite-dir", str(root))
    assert code == 1 and any("MANIFEST.json is missing" in p for p in data["problems"])
    assert data["summary"]["pass"] == 2  # the cases still ran and were reported


def test_case_missing_from_disk_or_manifest_exits_1(tmp_path, capsys):
    root = small_suite(tmp_path)
    shutil.rmtree(root / "op/glu")  # listed in the manifest, deleted
    code, data, _ = run(tmp_path, "--backend", REFERENCE, "--suite-dir", str(root))
    assert code == 1 and any("missing on disk" in p and "op/glu" in p for p in data["problems"])
    shutil.copytree(DEFAULT_GOLDEN_DIR / "op/silu_edges", root / "op/silu_edges")  # present, not listed
    code, data, _ = run(tmp_path, "--backend", REFERENCE, "--suite", str(root))  # --suite: alias of --suite-dir
    assert code == 1 and any("op/silu_edges" in p and "not listed" in p for p in data["problems"])


def test_nan_outputs_print_as_nan(tmp_path, backends, capsys):
    code, data, _ = run(tmp_path, "--backend", f"{backends}:NaNOut", "-k", "op/linear")
    assert code == 1
    row = next(line for line in capsys.readouterr().out.splitlines() if "op/linear" in line)
    assert " nan " in row and "0.00e+00" not in row
    out = data["results"][0]["outputs"][0]
    assert out["status"] == "fail" and out["comparison"]["nan_mismatches"] > 0


@pytest.mark.parametrize("cls, expect", [("Sleeper", "timeout"), ("Crasher", "kernel exploded"),
                                         ("Exiter", "SystemExit"), ("ReturnsNone", "returned NoneType")])
def test_bad_backends_get_an_error_verdict_and_a_report(tmp_path, backends, capsys, cls, expect):
    code, data, junit = run(tmp_path, "--backend", f"{backends}:{cls}", "-k", "op/linear", "--timeout", "1")
    assert code == 1
    (r,) = data["results"]
    assert r["status"] == "error" and expect in r["reason"]
    assert junit.find("./testsuite/testcase/error") is not None


def test_backends_get_read_only_inputs(tmp_path, backends, capsys):
    code, data, _ = run(tmp_path, "--backend", f"{backends}:Writer", "-k", "op/linear$")
    assert code == 1
    assert data["results"][0]["status"] == "error" and "read-only" in data["results"][0]["reason"]
    # negative control: the golden inputs themselves are untouched
    case = load_case(DEFAULT_GOLDEN_DIR / "op/linear")
    assert np.any(case.inputs["x"] != 0.0)


def test_failing_scoring_case_writes_table_json_junit(tmp_path, backends, capsys):
    code, data, junit = run(tmp_path, "--backend", f"{backends}:BadScores", "-k", "scoring/tiny_(blockwise|one)")
    assert code == 1
    out = capsys.readouterr().out
    assert "FAILED" in out and "scoring/tiny_one_pass" in out
    fails = [r for r in data["results"] if r["status"] == "fail"]
    assert {r["case"] for r in fails} == {"scoring/tiny_blockwise", "scoring/tiny_blockwise_hf",
                                          "scoring/tiny_one_pass"}
    # scores are labelled with their scoring semantics, not with a forward stage
    assert {r["first_failure"]["stage"] for r in fails} == {"scoring_blockwise", "scoring_blockwise_hf",
                                                            "scoring_one_pass"}
    assert len(junit.findall(".//failure")) == 3


def _whole_suite_mutant_run(tmp_path, name: str, *extra: str) -> None:
    code, data, junit = run(tmp_path, "--backend", f"pldr_ref.harness.controls.mutants:{name}", "--quiet", *extra)
    assert code == 1, name
    assert data["passed"] is False and data["summary"]["fail"] > 0, name
    assert data["summary"]["total"] == len(data["results"]) and data["results"], name
    assert junit.find(".//failure") is not None, name


@pytest.mark.torch
def test_whole_suite_cli_run_of_a_mutant_writes_every_report(tmp_path, capsys, monkeypatch):
    """The whole suite through the CLI (no -k): table, JSON and JUnit, exit 1 -- including the scoring cases
    whose failure used to crash the table."""
    pytest.importorskip("torch")
    monkeypatch.setenv("PLDR_REF_TORCH_THREADS", "1")
    _whole_suite_mutant_run(tmp_path, "NoScaleMutant", "--dtype", "float64")
    assert "FAILED" in capsys.readouterr().out


@pytest.mark.slow
@pytest.mark.torch
def test_whole_suite_cli_runs_of_every_mutant_in_every_dtype(tmp_path, capsys, monkeypatch):
    pytest.importorskip("torch")
    from pldr_ref.harness.controls.mutants import MUTATIONS

    monkeypatch.setenv("PLDR_REF_TORCH_THREADS", "1")
    for m in MUTATIONS:
        _whole_suite_mutant_run(tmp_path, m.backend.__name__)
