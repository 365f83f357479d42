"""Every ``pldr-ref`` subcommand through its failure modes (issue 21 items 4, 6, 7, 9): one error line and exit
status 2, never a traceback, never a write into the committed golden/ suite, never a silently accepted bad
value; Ctrl-C ends with one line and status 130; a full disk or a file-size limit is found before the run."""

from __future__ import annotations

import errno
import importlib
import json
import os
import resource
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from core_support import file_tree

from pldr_ref.cli import main
from pldr_ref.fixtures.case import DEFAULT_GOLDEN_DIR
from pldr_ref.fixtures.format import encode_safetensors

build_mod = importlib.import_module("pldr_ref.fixtures.build")
GOLDEN = str(DEFAULT_GOLDEN_DIR)
REF = "pldr_ref.backends.reference:ReferenceBackend"

BACKENDS = {
    "hostile_import_backend": "raise RuntimeError('backend module exploded on import')\n",
    "hostile_ctor_backend": "class B:\n    def __init__(self):\n        raise RuntimeError('constructor exploded')\n",
    "hostile_caps_backend": ("class B:\n    name = 'b'\n    def capabilities(self):\n"
                             "        raise ZeroDivisionError('capabilities exploded')\n"
                             "    def run_case(self, case, dtype):\n        return {}\n"),
}


@pytest.fixture
def place(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A folder with the hostile inputs the failure modes name."""
    for name, text in BACKENDS.items():
        (tmp_path / f"{name}.py").write_text(text)
    monkeypatch.syspath_prepend(str(tmp_path))
    (tmp_path / "FILE").write_text("a file, not a folder")
    (tmp_path / "folder").mkdir()
    np.save(tmp_path / "pickled.npy", np.array([{"a": 1}], dtype=object), allow_pickle=True)
    np.savez(tmp_path / "pickled.npz", G_LM=np.array([{"a": 1}], dtype=object))
    (tmp_path / "st.npz").write_bytes(encode_safetensors({"G_LM": np.zeros((1, 1, 2, 2))}))
    (tmp_path / "st_checkpoint.npz").write_bytes(encode_safetensors({"x": np.zeros(2)}))
    (tmp_path / "tiny.json").write_text(json.dumps({"num_layers": 1}))
    (tmp_path / "notes.txt").write_text("hello")
    (tmp_path / "ragged.json").write_text(json.dumps([[1, 2, 3], [1, 2]]))
    (tmp_path / "broken.json").write_text("[[1, 2")
    (tmp_path / "manifest_list").mkdir()
    (tmp_path / "manifest_list" / "MANIFEST.json").write_text("[]")
    return tmp_path


#: (subcommand words and flags with {t} = the hostile folder, {g} = the committed golden/) -> a word the one
#: error line must contain.
FAILURES = [
    # golden
    ("golden build --out {t}/FILE/sub", "not a folder"),
    ("golden build --out {g}/sub", "committed golden suite"),
    ("golden build --out {g} --only op/linear", "needs overwrite"),
    ("golden build --out {t}/new --only no-such-case", "no-such-case"),
    ("golden build --suite bogus", "invalid choice"),
    ("golden verify --suite-dir {t}/MISSING", "does not exist"),
    ("golden verify --suite-dir {t}/manifest_list", "not a JSON object"),
    ("golden list --table --suite-dir {t}/MISSING", "does not exist"),
    ("golden list --table --suite-dir {t}/FILE", "is not a folder"),
    ("golden list --table --suite-dir {t}/folder", "no golden case"),
    ("golden show ../../etc --suite-dir {g}", "not a plain name"),
    ("golden show op/nope --suite-dir {t}/MISSING", "does not exist"),
    # validate
    ("validate --backend nope_module:X", "cannot import"),
    ("validate --backend no_colon", "MODULE:ATTR"),
    ("validate --backend hostile_import_backend:B", "exploded on import"),
    ("validate --backend hostile_ctor_backend:B", "constructor exploded"),
    ("validate --backend hostile_caps_backend:B", "capabilities exploded"),
    ("validate --backend " + REF + " -k [", "regular expression"),
    ("validate --backend " + REF + " --timeout -5", "--timeout"),
    ("validate --backend " + REF + " --timeout nan", "--timeout"),
    ("validate --backend " + REF + " --timeout inf", "--timeout"),
    ("validate --backend " + REF + " --timeout soon", "--timeout"),
    ("validate --backend " + REF + " --out {t}/MISSING/r.json", "does not exist"),
    ("validate --backend " + REF + " --out /proc/pldr-ref-report.json", "cannot write there"),
    ("validate --backend " + REF + " --junit {t}/folder", "is a folder"),
    ("validate --backend " + REF + " --out {t}/FILE/r.json", "is not a folder"),
    ("validate --backend " + REF + " --out {g}/report.json", "committed golden suite"),
    ("validate --backend " + REF + " --junit {g}/op/r.xml", "committed golden suite"),
    ("validate --backend " + REF + " --dtype float99", "unknown dtype"),
    ("validate --backend " + REF + " --suite-dir {t}/MISSING", "does not exist"),
    # accuracy
    ("accuracy --out {t}/MISSING/f.json", "does not exist"),
    ("accuracy --out {g}/accuracy.md", "committed golden suite"),
    ("accuracy --seq-len 0", "positive"),
    ("accuracy --configs nope", "unknown config"),
    ("accuracy --preset tiny --set nope=1", "PLDRConfig field"),
    ("accuracy --preset tiny --set num_layers=100000000", "PLDR_REF_MEMORY_BUDGET"),
    ("accuracy --format yaml", "invalid choice"),
    # prove
    ("prove --out {g}/coverage.md", "committed golden suite"),
    ("prove --out {t}/MISSING/coverage.md", "does not exist"),
    ("prove --only no-such-check-anywhere", "no-such-check-anywhere"),
    # diagnose
    ("diagnose twirl --d-k 7", "d_k"),
    ("diagnose twirl --d-k 0", "d_k"),
    ("diagnose twirl --out {g}/diag", "committed golden suite"),
    ("diagnose twirl --json {t}/MISSING/x.json", "does not exist"),
    ("diagnose twirl --out {t}/FILE", "not a folder"),
    ("diagnose g-lm --file {t}/pickled.npy", "pickle"),
    ("diagnose g-lm --file {t}/pickled.npz", "pickle"),
    ("diagnose g-lm --file {t}/missing.npy", "does not exist"),
    ("diagnose g-lm --file {t}/st.npz", "safetensors file"),
    ("diagnose g-lm --file {t}/notes.txt", "expected a .npz"),
    ("diagnose model --checkpoint {t}/x.npz", "--config"),
    ("diagnose model --preset tiny --config {t}/tiny.json", "--checkpoint"),
    ("diagnose model --prompts {t}/ragged.json", "one length"),
    ("diagnose model --prompts {t}/broken.json", "Expecting"),
    ("diagnose model --preset nope", "unknown preset"),
    ("diagnose model --checkpoint {t}/st_checkpoint.npz --config {t}/tiny.json", "safetensors file"),
    ("diagnose model --checkpoint {t}/missing.safetensors --config {t}/tiny.json", "does not exist"),
    # export
    ("export onnx --preset tiny --out {g}/model.onnx", "committed golden suite"),
    ("export onnx --preset tiny --out {t}/MISSING/model.onnx", "does not exist"),
    ("export onnx --preset nope --out {t}/model.onnx", "nope"),
    ("export onnx --case op/no-such-case --out {t}/model.onnx", "no-such-case"),
]


@pytest.mark.parametrize(("command", "word"), FAILURES, ids=[c for c, _ in FAILURES])
def test_every_subcommand_failure_is_one_error_line_and_exit_2(place: Path, command: str, word: str,
                                                               capsys: pytest.CaptureFixture) -> None:
    before = sorted(str(p) for p in DEFAULT_GOLDEN_DIR.rglob("*"))
    argv = [w.format(t=place, g=GOLDEN) for w in command.split()]
    capsys.readouterr()
    try:
        code = main(argv)
    except SystemExit as exc:  # argparse's own usage errors
        code = exc.code
    err = capsys.readouterr().err
    assert "Traceback" not in err
    assert code == 2, (code, err)
    errors = [line for line in err.splitlines() if "error" in line or "pldr-ref" in line]
    assert len([line for line in err.splitlines() if line.strip() and not line.startswith(("usage:", " "))]) == 1, err
    assert word in errors[-1], err
    assert sorted(str(p) for p in DEFAULT_GOLDEN_DIR.rglob("*")) == before  # nothing written into golden/


def test_a_valid_command_still_runs_negative_control(place: Path, capsys: pytest.CaptureFixture) -> None:
    """The same parser with good values exits 0 (the failures above are not a broken parser)."""
    out = place / "twirl.json"
    assert main(["diagnose", "twirl", "--d-k", "8", "--json", str(out)]) == 0
    assert json.loads(out.read_text())["kind"] == "twirl"
    assert main(["golden", "list", "--table", "--suite-dir", GOLDEN]) == 0


def test_ctrl_c_is_one_line_and_exit_130(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture) -> None:
    def interrupted(args):
        raise KeyboardInterrupt

    monkeypatch.setattr("pldr_ref.diagnostics.cli.run_twirl", interrupted)
    assert main(["diagnose", "twirl", "--d-k", "8"]) == 130
    err = capsys.readouterr().err
    assert err.strip() == "pldr-ref diagnose: interrupted"


def test_full_disk_during_golden_build_is_one_line_and_the_suite_is_unchanged(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture) -> None:
    out = tmp_path / "g"
    assert main(["golden", "build", "--out", str(out), "--only", "op/linear", "--quiet"]) == 0
    (out / "op/linear/outputs.safetensors").write_bytes(b"stale")  # the rebuild must write
    before = file_tree(out)

    def full(path, data):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))

    monkeypatch.setattr(build_mod, "write_if_changed", full)
    capsys.readouterr()
    assert main(["golden", "build", "--out", str(out), "--only", "op/linear", "--quiet"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "No space left on device" in err and "Traceback" not in err
    assert file_tree(out) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["g"]  # no staging folder left behind


# ------------------------------------------------------------------ subprocess runs (the installed entry point)
def _limit_file_size() -> None:
    resource.setrlimit(resource.RLIMIT_FSIZE, (1024, 1024))
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # EFBIG instead of a kill


def test_subprocess_efbig_is_found_before_the_run(tmp_path: Path) -> None:
    """A file-size limit (EFBIG) on the report is refused before validate runs, in one line, exit 2."""
    for argv in (["validate", "--backend", REF, "--out", str(tmp_path / "r.json")],
                 ["golden", "build", "--out", str(tmp_path / "g"), "--only", "op/linear", "--quiet"]):
        proc = subprocess.run([sys.executable, "-m", "pldr_ref.cli", *argv], capture_output=True, text=True,
                              preexec_fn=_limit_file_size, timeout=120)
        assert proc.returncode == 2, proc.stderr
        assert "Traceback" not in proc.stderr and proc.stderr.count("\n") == 1, proc.stderr
        assert "File too large" in proc.stderr
        assert not (tmp_path / "r.json").exists() and not (tmp_path / "g").exists()


def test_subprocess_error_and_ctrl_c(tmp_path: Path) -> None:
    proc = subprocess.run([sys.executable, "-m", "pldr_ref.cli", "diagnose", "twirl", "--d-k", "7"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr
    # Ctrl-C in the middle of a verify: one line, status 130
    # a shell starts background jobs with SIGINT ignored, and an ignored signal stays ignored across exec: give the
    # command the default disposition a terminal's Ctrl-C meets, whatever launched pytest
    run = subprocess.Popen([sys.executable, "-m", "pldr_ref.cli", "golden", "verify"], stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True,
                           preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    assert run.stderr.readline()  # the first progress line: the command is running
    run.send_signal(signal.SIGINT)
    _, err = run.communicate(timeout=120)
    assert run.returncode == 130, err
    assert "Traceback" not in err and err.strip().endswith("pldr-ref golden: interrupted")
