"""The ``python -m pldr_ref.harness.{controls,tools,policy}.*`` module tools through their failure modes (issue 29,
causes 4, 5, 13, 14, 16): the conventions of ``pldr-ref`` (pldr_ref.tool_cli) -- one error line, exit 2, no
traceback, Ctrl-C 130, validated choices and time limits, output paths refused before any computation, nothing
written into golden/ or the package -- and the calibration store: checked on load, never shrunk by a small suite.
Every tool runs in-process on a suite of one or two cases copied from golden/."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from hostile_support import REF, make_suite, one_error_line, run_main, tree_stat

from pldr_ref.cli import main as pldr_ref_main
from pldr_ref.fixtures.case import DEFAULT_GOLDEN_DIR
from pldr_ref.harness.controls import battery, mutants, verdict_power
from pldr_ref.harness.policy import calibration, calibration_store, ensemble
from pldr_ref.harness.tools import engine_report, figures
from pldr_ref.tool_cli import MAX_SECONDS

GOLDEN = str(DEFAULT_GOLDEN_DIR)
TOOLS = {"battery": battery.main, "verdict_power": verdict_power.main, "figures": figures.main,
         "engine_report": engine_report.main, "calibration": calibration.main, "mutants": mutants.main}


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A suite of one op case and one forward case (read only: shared by the tests of this file)."""
    return make_suite(tmp_path_factory.mktemp("suite") / "tiny", ("op/linear", "model/tiny_identity_g_short"))


@pytest.fixture
def no_work(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Records (and refuses) any start of the tools' computations: a refusal must come before them."""
    started: list[str] = []

    def refuse(name):
        def run(*args, **kwargs):
            started.append(name)
            raise AssertionError(f"{name} started before the input was refused")
        return run

    for mod, attr in ((battery, "run_battery"), (verdict_power, "measure"), (figures, "collect"),
                      (engine_report, "run_tasks"), (calibration, "write_store"), (mutants, "run_mutations")):
        monkeypatch.setattr(mod, attr, refuse(f"{mod.__name__}.{attr}"))
    return started


#: (tool, arguments with {t} = a scratch folder, {g} = golden/, {p} = the package folder) -> a word of the error.
FAILURES = [
    ("figures", "--out {g}", "committed golden suite"),
    ("figures", "--out {g}/op", "committed golden suite"),
    ("figures", "--out {p}", "package"),
    ("figures", "--out {t}/MISSING", "does not exist"),
    ("figures", "--dtype float99", "invalid choice"),
    ("engine_report", "--engines nonsense", "nonsense"),
    ("engine_report", "--engines ,", "one or more"),
    ("engine_report", "--case-timeout nan", "--case-timeout"),
    ("engine_report", "--case-timeout -1", "--case-timeout"),
    ("engine_report", "--case-timeout 1e10", "--case-timeout"),  # cause 13: setitimer would overflow
    ("engine_report", "--case-timeout inf", "--case-timeout"),
    ("engine_report", "--jobs 0", "--jobs"),
    ("engine_report", "--markdown {g}/engines.md", "committed golden suite"),
    ("engine_report", "--markdown {t}/r.md --figure {t}/r.md", "same path"),
    ("engine_report", "--markdown {p}/harness/engines.md", "package"),
    ("battery", "--case no/such --suite-dir {s}", "no/such"),
    ("battery", "--backend nope --no-torch --suite-dir {s}", "no such battery backend"),
    ("battery", "--suite-dir {t}/MISSING", "does not exist"),
    ("battery", "--suite full --suite-dir {s}", "not in"),
    ("verdict_power", "--suite-dir {t}/MISSING", "does not exist"),
    ("verdict_power", "--dtype float64", "invalid choice"),
    ("calibration", "--write --out {g}/calibration.json --suite-dir {s}", "committed golden suite"),
    ("calibration", "--write --out {p}/harness/other.json --suite-dir {s}", "package"),
    ("calibration", "--write --out {s}/MANIFEST.json --suite-dir {s}", "inside --suite-dir"),
    ("calibration", "--write --out {t}/c.json --merge {t}/c.json --suite-dir {s}", "input --merge"),
    ("calibration", "--out {t}/c.json", "go with --write"),
    ("mutants", "--markdown {g}/mutations.md", "committed golden suite"),
    ("mutants", "--dtype float99", "invalid choice"),
]


@pytest.mark.parametrize(("tool", "argv", "word"), FAILURES, ids=[f"{t} {a}" for t, a, _ in FAILURES])
def test_every_tool_failure_is_one_line_exit_2_before_any_work(tool: str, argv: str, word: str, tiny: Path,
                                                               tmp_path: Path, no_work: list[str],
                                                               capsys: pytest.CaptureFixture) -> None:
    before = tree_stat(DEFAULT_GOLDEN_DIR)
    store_before = tree_stat(ensemble.CACHE_FILE.parent)
    args = argv.format(t=tmp_path, g=GOLDEN, p=Path(calibration.__file__).parents[2], s=tiny).split()
    code, _, err = run_main(TOOLS[tool], args, capsys)
    assert code == 2, (code, err)
    line = one_error_line(err)
    assert line.startswith(f"python -m {TOOLS[tool].__module__}: error: ") or line.startswith("usage") or \
        "error:" in line, line
    assert word in line, line
    assert no_work == []  # refused before any computation
    assert tree_stat(DEFAULT_GOLDEN_DIR) == before
    assert tree_stat(ensemble.CACHE_FILE.parent) == store_before


def test_valid_tool_runs_exit_0_negative_control(tiny: Path, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """The same tools with good values run and exit 0: the refusals above are not a broken parser."""
    code, out, err = run_main(battery.main, ["--no-torch", "--backend", "emulated-reordered-sums", "--dtype",
                                             "float32", "--suite-dir", tiny], capsys)
    assert code == 0 and "| emulated-reordered-sums | float32-accumulate | float32 | 2 | 0 |" in out, err
    code, out, err = run_main(verdict_power.main, ["--dtype", "float32", "--suite-dir", tiny], capsys)
    assert code == 0 and "| float32 | 1 | 1 |" in out, err
    assert engine_report.main.__module__ and engine_report.ENGINES == ("jax", "onnx", "triton", "torch")


@pytest.mark.parametrize("tool", sorted(TOOLS))
def test_every_tool_help_documents_the_conventions(tool: str, capsys: pytest.CaptureFixture) -> None:
    code, out, _ = run_main(TOOLS[tool], ["--help"], capsys)
    assert code == 0
    assert "exit status 2" in out and "PLDR_REF_TRACEBACK" in out and "exits 130" in out


def test_tool_ctrl_c_is_one_line_and_130(tiny: Path, monkeypatch: pytest.MonkeyPatch,
                                         capsys: pytest.CaptureFixture) -> None:
    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(verdict_power, "measure", interrupted)
    code, _, err = run_main(verdict_power.main, ["--suite-dir", tiny], capsys)
    assert code == 130 and err.strip() == "python -m pldr_ref.harness.controls.verdict_power: interrupted"


def test_tool_traceback_only_on_request(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture) -> None:
    monkeypatch.setenv("PLDR_REF_TRACEBACK", "1")
    with pytest.raises(ValueError, match="does not exist"):
        verdict_power.main(["--suite-dir", "/nonexistent-pldr-ref-suite"])


def test_timeout_upper_bound_is_what_setitimer_accepts(capsys: pytest.CaptureFixture) -> None:
    """Cause 13: the largest accepted limit arms and disarms a real timer; 1e10 is refused by validate too."""
    import signal

    signal.setitimer(signal.ITIMER_REAL, MAX_SECONDS)
    signal.setitimer(signal.ITIMER_REAL, 0)
    code, _, err = run_main(pldr_ref_main, ["validate", "--backend", REF, "--timeout", "1e10"], capsys)
    assert code == 2 and "--timeout" in one_error_line(err)
    with pytest.raises(OverflowError):  # negative control: the value refused really breaks the timer
        signal.setitimer(signal.ITIMER_REAL, 1e10)


def test_accuracy_empty_configs_is_refused(capsys: pytest.CaptureFixture) -> None:
    """Cause 16: ``--configs ''`` measured nothing and exited 0."""
    from pldr_ref.cli import build_parser

    for bad in ("", ",", " , "):
        code, _, err = run_main(pldr_ref_main, ["accuracy", "--configs", bad], capsys)
        assert code == 2 and "--configs" in one_error_line(err)
    # negative control: a named config parses
    assert build_parser().parse_args(["accuracy", "--configs", "tiny"]).configs == ("tiny",)


# ------------------------------------------------------------------ cause 5: the store never shrinks
@pytest.fixture
def store_copy(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A copy of the committed store standing in for it (the default --out of the calibration writer)."""
    copy = tmp_path / "pkg" / "calibration.json"
    copy.parent.mkdir()
    shutil.copy(ensemble.CACHE_FILE, copy)
    monkeypatch.setattr(calibration, "CACHE_FILE", copy)
    monkeypatch.setattr(ensemble, "CACHE_FILE", copy)
    monkeypatch.setattr(ensemble, "_STORE", None)
    return copy


def test_calibration_write_of_a_small_suite_keeps_the_store(tiny: Path, store_copy: Path,
                                                            capsys: pytest.CaptureFixture) -> None:
    before = json.loads(store_copy.read_text())["cases"]
    assert len(before) > 100
    code, _out, err = run_main(calibration.main, ["--write", "--dtype", "float32", "--suite-dir", tiny], capsys)
    assert code == 0, err
    after = json.loads(store_copy.read_text())
    assert after["version"] == calibration_store.STORE_VERSION
    assert set(after["cases"]) == set(before)  # nothing dropped
    assert after["cases"] == before  # the small suite's statistics were already stored: nothing changed
    # negative control: --prune keeps only the suite's cases (what the default did before)
    code, _, err = run_main(calibration.main, ["--write", "--prune", "--dtype", "float32", "--suite-dir", tiny],
                            capsys)
    assert code == 0, err
    assert len(json.loads(store_copy.read_text())["cases"]) == 2


# ------------------------------------------------------------------ cause 14: a checked store
def _conflicted(text: str) -> str:
    return "<<<<<<< HEAD\n" + text + "=======\n" + text + ">>>>>>> other\n"


def _nan_stats(text: str) -> str:
    doc = json.loads(text)
    first = next(iter(doc["cases"].values()))
    entries = next(iter(first.values()))
    key = next(k for k, v in entries.items() if isinstance(v, list))
    entries[key][1] = float("nan")
    return json.dumps(doc)


BROKEN_STORES = {
    "merge conflict": (_conflicted, "merge-conflict"),
    "NaN statistic": (_nan_stats, "NaN"),
    "negative statistic": (lambda t: t.replace("[0.67,0.8,", "[-0.67,0.8,", 1), "non-negative"),
    "text statistic": (lambda t: t.replace("[0.67,0.8,", "[\"0.67\",0.8,", 1), "not a number"),
    "cases a list": (lambda t: json.dumps({**json.loads(t), "cases": []}), "cases"),
    "future version": (lambda t: json.dumps({**json.loads(t), "version": 99}), "version 99"),
    "not JSON": (lambda t: t[: len(t) // 2], "not valid JSON"),
}


@pytest.mark.parametrize("kind", sorted(BROKEN_STORES))
def test_a_broken_store_is_an_error_naming_the_file(kind: str, store_copy: Path) -> None:
    breaker, word = BROKEN_STORES[kind]
    store_copy.write_text(breaker(store_copy.read_text()))
    with pytest.raises(calibration_store.CalibrationStoreError, match=word) as info:
        calibration_store.read_document(store_copy)
    assert str(store_copy) in str(info.value)


@pytest.mark.parametrize("kind", ["merge conflict", "NaN statistic"])
def test_a_broken_store_stops_a_command_in_one_line(kind: str, store_copy: Path, tiny: Path,
                                                   capsys: pytest.CaptureFixture) -> None:
    """Through a command: one line naming the file, exit 2, no case run (before: every case an error that never
    named the file, or a correct backend failing on a NaN allowance)."""
    breaker, word = BROKEN_STORES[kind]
    store_copy.write_text(breaker(store_copy.read_text()))
    for cli, argv in ((verdict_power.main, ["--dtype", "float32", "--suite-dir", tiny]),
                      (pldr_ref_main, ["validate", "--backend", REF, "--suite-dir", tiny, "--quiet"])):
        code, _, err = run_main(cli, argv, capsys)
        line = one_error_line(err)
        assert code == 2 and str(store_copy) in line and word in line


def test_the_committed_store_passes_the_check_negative_control(store_copy: Path) -> None:
    doc = calibration_store.read_document(ensemble.CACHE_FILE)
    assert calibration_store.check_document(doc) == []
    for good in (None, "absent", [0.5, 0.0, 3], [[1e-3, 2.0], [0.1]], {"all": [1.0], "tile=8": [0.5, 2]}):
        assert calibration_store.entry_problem(good) is None, good
    for bad in ([], {}, [float("inf")], {"all": [-1.0]}, True, "Not A Marker!"):
        assert calibration_store.entry_problem(bad), bad
    assert len(ensemble._store()) == len(doc["cases"]) > 100
