"""Outputs, environment and external text under hostile input (issue 29, causes 6, 7, 10, 15, 20, 21, 22): an
output never overwrites an input or another output, is written atomically, a bad environment variable is one
error naming it, external strings are escaped in text, JUnit XML and terminal lines, ``--suite`` is the case set,
a non-JSON ``--config`` is named, and the build's folder-swap fallback keeps its promise."""

from __future__ import annotations

import errno
import importlib
import json
import os
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from core_support import file_tree
from hostile_support import REF, make_suite, one_error_line, run_main

from pldr_ref import output_paths
from pldr_ref.cli import main
from pldr_ref.env_vars import ENV_VARS, EnvVarError, check_environment, read_env
from pldr_ref.fixtures.case import DEFAULT_GOLDEN_DIR
from pldr_ref.harness.report import junit_xml, table
from pldr_ref.harness.validate import CaseResult
from pldr_ref.text_escape import escape_text

build_mod = importlib.import_module("pldr_ref.fixtures.build")


@pytest.fixture
def tiny(tmp_path: Path) -> Path:
    return make_suite(tmp_path / "tiny")


# ------------------------------------------------------------------ cause 6: outputs vs inputs and each other
def _same_path_cases(t: Path, s: Path) -> list[tuple[list[str], str]]:
    (t / "M.onnx").write_bytes(b"not really a model")
    (t / "real.json").write_text("{}")
    (t / "alias.json").symlink_to(t / "real.json")
    os.link(t / "real.json", t / "hard.json")
    return [
        (["validate", "--backend", REF, "--suite-dir", s, "--out", t / "F", "--junit", t / "F"], "same path"),
        (["validate", "--backend", REF, "--suite-dir", s, "--out", t / "real.json", "--junit", t / "alias.json"],
         "same path"),  # a symlink
        (["validate", "--backend", REF, "--suite-dir", s, "--out", t / "real.json", "--junit", t / "hard.json"],
         "same path"),  # a hard link
        (["validate", "--onnx", t / "M.onnx", "--suite-dir", s, "--out", t / "M.onnx"], "is the input --onnx"),
        (["validate", "--backend", REF, "--suite-dir", s, "--out", s / "MANIFEST.json"], "inside --suite-dir"),
        (["validate", "--backend", REF, "--suite", s, "--junit", s / "op" / "r.xml"], "inside --suite"),
        (["validate", "--backend", REF, "--suite-dir", s, "--out", Path(output_paths.__file__).parent / "r.json"],
         "package"),
        (["diagnose", "twirl", "--d-k", "8", "--json", t / "d.json", "--markdown", t / "d.json"], "same path"),
    ]


def test_an_output_never_overwrites_an_input_or_another_output(tiny: Path, tmp_path: Path,
                                                               capsys: pytest.CaptureFixture) -> None:
    for argv, word in _same_path_cases(tmp_path, tiny):
        before = {p: p.read_bytes() for p in [*tmp_path.rglob("*")] if p.is_file()}
        code, _, err = run_main(main, argv, capsys)
        line = one_error_line(err)
        assert code == 2 and word in line, (argv, err)
        assert {p: p.read_bytes() for p in [*tmp_path.rglob("*")] if p.is_file()} == before  # nothing written


def test_distinct_outputs_run_negative_control(tiny: Path, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    code, _, err = run_main(main, ["validate", "--backend", REF, "--suite-dir", tiny, "--quiet", "--out",
                                   tmp_path / "r.json", "--junit", tmp_path / "r.xml"], capsys)
    assert code == 0, err
    assert json.loads((tmp_path / "r.json").read_text())["passed"] is True
    ET.parse(tmp_path / "r.xml")
    assert file_tree(tiny) == file_tree(make_suite(tmp_path / "again"))  # the suite read is untouched


# ------------------------------------------------------------------ cause 15: atomic writes
def _full_disk_after(nbytes: int):
    """An ``os.write``-level failure: the first ``nbytes`` reach the file, then ENOSPC."""
    def write(fh, data):
        fh.write(data[:nbytes])
        fh.flush()
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    return write


def test_a_full_disk_mid_write_keeps_the_earlier_report(tiny: Path, tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch,
                                                        capsys: pytest.CaptureFixture) -> None:
    report = tmp_path / "r.json"
    argv = ["validate", "--backend", REF, "--suite-dir", tiny, "--quiet", "--out", report]
    assert run_main(main, argv, capsys)[0] == 0
    earlier = report.read_bytes()
    real_fdopen = os.fdopen

    class Failing:
        def __init__(self, fh):
            self.fh = fh

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self.fh.close()

        def write(self, data):
            if data == b"\0" * output_paths.PROBE_BYTES:  # the check before the run: the disk has room then
                return self.fh.write(data)
            return _full_disk_after(100)(self.fh, data)

        def flush(self):
            self.fh.flush()

        def fileno(self):
            return self.fh.fileno()

    monkeypatch.setattr(output_paths.os, "fdopen", lambda *a, **k: Failing(real_fdopen(*a, **k)))
    code, _, err = run_main(main, argv, capsys)
    assert code == 2 and "No space left on device" in one_error_line(err)
    assert report.read_bytes() == earlier  # the earlier report, intact
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.json", "tiny"]  # no temporary file left


def test_a_plain_write_would_corrupt_negative_control(tmp_path: Path) -> None:
    """The same fault against a non-atomic write leaves a truncated file: the check above can fail."""
    report = tmp_path / "r.json"
    report.write_text(json.dumps({"earlier": True}))
    with pytest.raises(OSError), open(report, "w", encoding="utf-8") as fh:
        _full_disk_after(5)(fh, json.dumps({"new": [1] * 50}))
    with pytest.raises(json.JSONDecodeError):
        json.loads(report.read_text())


# ------------------------------------------------------------------ cause 7: environment variables
BAD_ENV = [("PLDR_REF_MEMORY_BUDGET", "abc"), ("PLDR_REF_ORT_THREADS", "abc"), ("PLDR_REF_TORCH_THREADS", "0"),
           ("PLDR_REF_THREADS", "-2"), ("PLDR_REF_TORCH_DEVICE", "cu da"), ("PLDR_REF_TRACEBACK", "yes"),
           ("PLDR_REF_MEMORY_BUDGET", "nanG"), ("PLDR_REF_ORT_THREADS", "99999999999")]


@pytest.mark.parametrize(("name", "value"), BAD_ENV, ids=[f"{n}={v}" for n, v in BAD_ENV])
def test_a_bad_environment_variable_is_named_not_blamed_on_a_case(name: str, value: str, tiny: Path,
                                                                   monkeypatch: pytest.MonkeyPatch,
                                                                   capsys: pytest.CaptureFixture) -> None:
    monkeypatch.setenv(name, value)
    with pytest.raises(EnvVarError, match=name):
        read_env(name)
    for argv in (["golden", "verify", "--suite-dir", tiny, "--quiet"],
                 ["validate", "--backend", REF, "--suite-dir", tiny, "--quiet"]):
        code, out, err = run_main(main, argv, capsys)
        line = one_error_line(err)
        assert code == 2 and name in line and repr(value) in line, err
        assert "op/linear" not in out + err and "malformed" not in line and "cannot be loaded" not in line


def test_good_environment_values_are_read_negative_control(tiny: Path, monkeypatch: pytest.MonkeyPatch,
                                                           capsys: pytest.CaptureFixture) -> None:
    for name, value, parsed in (("PLDR_REF_MEMORY_BUDGET", "64G", 64 * 2**30), ("PLDR_REF_MEMORY_BUDGET", "none", None),
                                ("PLDR_REF_ORT_THREADS", "2", 2), ("PLDR_REF_TORCH_DEVICE", "cuda:1", "cuda:1"),
                                ("PLDR_REF_TRACEBACK", "0", False)):
        monkeypatch.setenv(name, value)
        assert read_env(name) == parsed
    check_environment()
    assert run_main(main, ["golden", "verify", "--suite-dir", tiny, "--quiet"], capsys)[0] == 0


def _reads_pldr_ref_env_via_constant(source: str) -> bool:
    """Whether ``source`` calls ``os.environ.get`` / ``os.getenv`` with a module constant holding a PLDR_REF_ name."""
    import ast

    tree = ast.parse(source)
    names = {t.id for node in tree.body if isinstance(node, (ast.Assign, ast.AnnAssign))
             and isinstance(node.value, ast.Constant) and str(node.value.value).startswith("PLDR_REF_")
             for t in (node.targets if isinstance(node, ast.Assign) else [node.target]) if isinstance(t, ast.Name)}
    return any(isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr in ("get", "getenv")
               and "environ" in ast.unparse(n.func) + ("environ" if n.func.attr == "getenv" else "")
               and n.args and isinstance(n.args[0], ast.Name) and n.args[0].id in names for n in ast.walk(tree))


def test_every_environment_read_goes_through_the_reader() -> None:
    """No module reads a PLDR_REF_* variable with os.environ directly (the class, not the two examples)."""
    root = Path(output_paths.__file__).parent
    direct = [f"{p.relative_to(root)}" for p in root.rglob("*.py")
              if "os.environ.get(\"PLDR_REF" in p.read_text(encoding="utf-8")
              or "getenv(\"PLDR_REF" in p.read_text(encoding="utf-8")]
    assert direct == []
    # the same read through a module constant (CACHE_ENV = "PLDR_REF_CACHE"; os.environ.get(CACHE_ENV))
    via_constant = [f"{p.relative_to(root)}" for p in root.rglob("*.py")
                    if p.name != "env_vars.py" and _reads_pldr_ref_env_via_constant(p.read_text(encoding="utf-8"))]
    assert via_constant == []
    assert _reads_pldr_ref_env_via_constant('import os\nX = "PLDR_REF_CACHE"\nv = os.environ.get(X)\n')  # control
    assert {"PLDR_REF_MEMORY_BUDGET", "PLDR_REF_ORT_THREADS", "PLDR_REF_TORCH_THREADS"} <= set(ENV_VARS)


# ------------------------------------------------------------------ cause 10: escaping external strings
HOSTILE_TEXT = ["ESC\x1b]0;title\x07", "NUL\x00byte", "\x1b[31mred\x1b[0m", "lone \ud800 surrogate", "C1 \x9b31m",
                "bell\x07 del\x7f", "\ufffe non-character"]


def _result(reason: str) -> CaseResult:
    return CaseResult(f"op/{reason}", "op", "op", "float64", "float32", "error", reason, (), (), None, None)


def test_hostile_backend_messages_keep_reports_parseable_and_terminals_clean() -> None:
    results = [_result(text) for text in HOSTILE_TEXT]
    xml = junit_xml(results, backend_name="b\x1b[2J", problems=["problem \x00 \ud83d"])
    root = ET.fromstring(xml.encode("utf-8"))  # parses (and encodes: no lone surrogate)
    messages = [e.get("message") for e in root.iter("error")]
    assert messages == [escape_text(t) for t in HOSTILE_TEXT]
    assert "\\x1b[31mred" in messages[2] and "\\x00" in messages[1] and "\\ud800" in messages[3]
    text = table(results, ["problem \x1b[31m"])
    text.encode("utf-8")
    assert not any(ch in text for ch in "\x00\x1b\x07\x7f\x9b\ud800\ufffe")
    assert "lone \\ud800 surrogate" in text


def test_unescaped_text_breaks_junit_negative_control() -> None:
    """Without the escaping the same messages make XML that does not parse or cannot be encoded."""
    for text in ("NUL\x00byte", "ESC\x1b", "lone \ud800"):
        el = ET.Element("error", message=text)
        with pytest.raises((ET.ParseError, UnicodeEncodeError)):
            ET.fromstring(ET.tostring(el, encoding="unicode").encode("utf-8"))


def test_error_lines_escape_backend_text(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                         capsys: pytest.CaptureFixture) -> None:
    (tmp_path / "evil_backend.py").write_text("raise RuntimeError('op \\x1b[31mEvil\\x00 \\ud800 name\\nsecond')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    code, _, err = run_main(main, ["validate", "--backend", "evil_backend:B"], capsys)
    line = one_error_line(err)  # the newline did not split it either
    assert code == 2 and "op \\x1b[31mEvil\\x00 \\ud800 name\\nsecond" in line
    assert escape_text("café 世界 🙂\ttab") == "café 世界 🙂\ttab"  # printable text is kept


# ------------------------------------------------------------------ cause 20: --suite is the case set
def test_suite_names_the_case_set_and_the_folder_spelling_warns(tiny: Path, tmp_path: Path,
                                                                capsys: pytest.CaptureFixture) -> None:
    out = tmp_path / "r.json"
    code, _, err = run_main(main, ["validate", "--backend", REF, "--suite", tiny, "--quiet", "--out", out], capsys)
    assert code == 0 and "deprecated" in err and f"--suite-dir {tiny}" in err
    assert json.loads(out.read_text())["suite"]["root"] == str(tiny)
    # --suite full on a folder without the on-demand cases: they are reported missing, not silently absent
    code, stdout, err = run_main(main, ["validate", "--backend", REF, "--suite-dir", tiny, "--suite", "full",
                                        "--group", "op"], capsys)
    assert code == 1 and "of suite 'full' are not in" in stdout + err
    # negative control: the same folder without --suite passes; a word that is neither a set nor a folder is refused
    assert run_main(main, ["validate", "--backend", REF, "--suite-dir", tiny, "--quiet"], capsys)[0] == 0
    code, _, err = run_main(main, ["validate", "--backend", REF, "--suite-dir", tiny, "--suite", "nope"], capsys)
    assert code == 2 and "not a case set" in one_error_line(err)


def test_fixtures_doc_counts_the_on_demand_cases() -> None:
    from pldr_ref.fixtures.suite import build_suite

    extra = [s.name for s in build_suite("full") if not s.committed]
    doc = (DEFAULT_GOLDEN_DIR.parent / "docs" / "fixtures.md").read_text(encoding="utf-8")
    assert f"`--suite full` adds {len(extra)} on-demand cases" in doc
    assert all(f"`{name}`" in doc for name in extra)
    assert "--only" in doc and "--only" in (DEFAULT_GOLDEN_DIR.parent / "README.md").read_text(encoding="utf-8")


# ------------------------------------------------------------------ cause 21: a non-JSON --config is named
def test_diagnose_model_names_the_bad_config_file(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    bad = tmp_path / "config.json"
    bad.write_text("{num_layers: 1,}")
    code, _, err = run_main(main, ["diagnose", "model", "--checkpoint", tmp_path / "x.npz", "--config", bad], capsys)
    line = one_error_line(err)
    assert code == 2 and str(bad) in line and "not valid JSON" in line and "line 1" in line
    # negative control: a JSON config is read past this point (the checkpoint is what is missing then)
    bad.write_text(json.dumps({"num_layers": 1}))
    code, _, err = run_main(main, ["diagnose", "model", "--checkpoint", tmp_path / "x.npz", "--config", bad], capsys)
    assert code == 2 and "x.npz" in one_error_line(err) and "not valid JSON" not in err


# ------------------------------------------------------------------ cause 22: the swap fallback
def _stale(root: Path) -> None:
    """Change one case's description so that a rebuild has something to swap in (the manifest updated to match;
    the case still validates)."""
    from pldr_ref.fixtures.format import sha256_bytes

    f = root / "op/linear/case.json"
    meta = json.loads(f.read_text())
    meta["description"] += " (stale)"
    f.write_text(json.dumps(meta))
    m = json.loads((root / "MANIFEST.json").read_text())
    m["cases"]["op/linear"]["files"]["case.json"] = sha256_bytes(f.read_bytes())
    (root / "MANIFEST.json").write_text(json.dumps(m))


def _interrupt_renames(monkeypatch: pytest.MonkeyPatch, undo_too: bool) -> None:
    """No atomic exchange; Ctrl-C on the second rename (and, with ``undo_too``, on the undo: the state a kill
    between the renames leaves)."""
    monkeypatch.setattr(build_mod, "exchange", lambda a, b: False)
    real = Path.rename

    def rename(self, target):
        if self.name.startswith(build_mod.STAGING_PREFIX) or (undo_too and self.name.startswith(
                build_mod.PREVIOUS_PREFIX)):
            raise KeyboardInterrupt
        return real(self, target)

    monkeypatch.setattr(Path, "rename", rename)


def test_fallback_interrupted_between_renames_leaves_the_suite_byte_identical(tmp_path: Path,
                                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    root = make_suite(tmp_path / "g")
    _stale(root)
    before = file_tree(root)
    _interrupt_renames(monkeypatch, undo_too=False)
    with pytest.raises(KeyboardInterrupt):
        build_mod.build(root, select=lambda s: s.name == "op/linear", progress=None)
    assert file_tree(root) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["g"]  # no staging or previous folder left


@pytest.mark.parametrize("recovering", [True, False], ids=["recovery", "negative-control-no-recovery"])
def test_every_reader_restores_a_suite_a_kill_left_aside(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                         capsys: pytest.CaptureFixture, recovering: bool) -> None:
    root = make_suite(tmp_path / "g")
    _stale(root)
    before = file_tree(root)
    with monkeypatch.context() as m:
        _interrupt_renames(m, undo_too=True)
        with pytest.raises(KeyboardInterrupt):
            build_mod.build(root, select=lambda s: s.name == "op/linear", progress=None)
    assert not root.exists() and len(build_mod.previous_folders(root)) == 1  # the window a kill leaves
    if not recovering:
        monkeypatch.setattr(build_mod, "recover_swap", lambda r: None)
    code, _, err = run_main(main, ["validate", "--backend", REF, "--suite-dir", root, "--quiet"], capsys)
    if recovering:
        assert code == 0, err
        assert file_tree(root) == before  # the previous suite, byte-identical, where it was
    else:
        assert code == 2 and "does not exist" in one_error_line(err)


def test_atomic_write_follows_a_symlinked_output(tmp_path: Path) -> None:
    """The report behind a symlink is replaced, the link kept (a bare os.replace would replace the link: the
    negative control)."""
    (tmp_path / "real.json").write_text("old")
    link = tmp_path / "link.json"
    link.symlink_to(tmp_path / "real.json")
    output_paths.atomic_write_text(link, "new")
    assert link.is_symlink() and (tmp_path / "real.json").read_text() == "new"
    (tmp_path / "tmp").write_text("newer")
    os.replace(tmp_path / "tmp", link)
    assert not link.is_symlink() and (tmp_path / "real.json").read_text() == "new"
