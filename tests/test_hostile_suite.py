"""Hostile and broken golden suites (issue 21 items 2, 3, 5, 7): names in MANIFEST.json never reach outside
the suite folder, malformed suites give one error line (exit 2) instead of a traceback, a build killed between
its renames is recovered, and verify survives a build swapping the suite under it."""

from __future__ import annotations

import importlib
import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from core_support import file_tree

from pldr_ref.cli import main
from pldr_ref.fixtures.case import DEFAULT_GOLDEN_DIR, FixtureError, load_case
from pldr_ref.fixtures.format import canonical_json, sha256_bytes
from pldr_ref.fixtures.manifest import build_manifest
from pldr_ref.harness.cli import load_suite_checked

build_mod = importlib.import_module("pldr_ref.fixtures.build")
format_mod = importlib.import_module("pldr_ref.fixtures.format")

#: Two small committed cases, one with stored parameters.
CASES = ("op/linear", "model/tiny_identity_g_short")


def make_suite(root: Path, cases: tuple[str, ...] = CASES) -> Path:
    """A copy of committed cases under ``root`` with its own MANIFEST.json."""
    for name in cases:
        shutil.copytree(DEFAULT_GOLDEN_DIR / name, root / name)
    manifest = build_manifest(root, cases, "default", {})
    (root / "MANIFEST.json").write_bytes(canonical_json(manifest))
    return root


@pytest.fixture
def suite(tmp_path: Path) -> Path:
    return make_suite(tmp_path / "suite")


def edit_manifest(root: Path, change) -> None:
    m = json.loads((root / "MANIFEST.json").read_text())
    change(m)
    (root / "MANIFEST.json").write_text(json.dumps(m))


def run(argv: list[str], capsys: pytest.CaptureFixture) -> tuple[int, str]:
    capsys.readouterr()
    try:
        code = main(argv)
    except SystemExit as exc:  # argparse usage errors
        code = exc.code
    captured = capsys.readouterr()
    return code, captured.err + captured.out


@pytest.fixture
def reads(monkeypatch: pytest.MonkeyPatch) -> list[Path]:
    """Every file whose hash or tensors the suite code reads, resolved."""
    seen: list[Path] = []
    real_hash, real_tensors = format_mod.sha256_file, format_mod.load_tensors

    def hashing(path):
        seen.append(Path(path).resolve())
        return real_hash(path)

    def loading(path):
        seen.append(Path(path).resolve())
        return real_tensors(path)

    for mod in ("pldr_ref.fixtures.manifest", "pldr_ref.fixtures.case"):
        monkeypatch.setattr(f"{mod}.sha256_file", hashing)
    monkeypatch.setattr("pldr_ref.fixtures.case.load_tensors", loading)
    return seen


# ------------------------------------------------------------------ item 2: path traversal
def _secret(tmp_path: Path) -> tuple[Path, str]:
    secret = tmp_path / "secret.txt"
    secret.write_text("top secret")
    return secret, sha256_bytes(secret.read_bytes())


def traversal_suite(tmp_path: Path, label: str) -> Path:
    """A suite whose MANIFEST.json names something outside it (``label``), each with the matching sha256."""
    secret, digest = _secret(tmp_path)
    root = make_suite(tmp_path / "suite", ("op/linear",))
    # a case folder outside the suite holding a case.json that hashes right
    evil = tmp_path / "x" / "evil"
    evil.mkdir(parents=True)
    (evil / "case.json").write_text("{}")
    evil_digest = sha256_bytes(b"{}")

    def add_case(name: str, files: dict) -> None:
        edit_manifest(root, lambda m: m["cases"].update({name: {"files": files}}))

    def add_file(name: str, file_digest: str) -> None:
        edit_manifest(root, lambda m: m["cases"]["op/linear"]["files"].update({name: file_digest}))

    if label == "case ../x/evil":
        add_case("../x/evil", {"case.json": evil_digest})
    elif label == "file ../../../secret.txt":
        add_file(os.path.relpath(secret, root / "op" / "linear"), digest)
    elif label == "absolute file path":
        add_file(str(secret), digest)
    elif label == "absolute case name":
        add_case(str(evil), {"case.json": evil_digest})
    elif label == "case name with three parts":
        add_case("op/linear/..", {"case.json": digest})
    elif label == "symlinked file pointing outside":
        (root / "op/linear/notes.txt").symlink_to(secret)
        add_file("notes.txt", digest)
    elif label == "symlinked case folder pointing outside":
        (root / "op/evil").symlink_to(evil)
        add_case("op/evil", {"case.json": evil_digest})
    else:
        raise AssertionError(label)
    return root


TRAVERSALS = ("case ../x/evil", "file ../../../secret.txt", "absolute file path", "absolute case name",
              "case name with three parts", "symlinked file pointing outside",
              "symlinked case folder pointing outside")


@pytest.mark.parametrize("label", TRAVERSALS)
def test_manifest_names_outside_the_suite_are_refused_unread(tmp_path: Path, label: str, reads: list[Path],
                                                           capsys: pytest.CaptureFixture) -> None:
    root = traversal_suite(tmp_path, label)
    top = root.resolve()
    problems = build_mod.verify(root, progress=None, recompute=False)
    assert problems and any("outside the suite" in p or "not a plain name" in p for p in problems), problems
    code, text = run(["golden", "verify", "--suite-dir", str(root), "--quiet"], capsys)
    assert code == 2 and "Traceback" not in text
    _cases, problems = load_suite_checked(root, None, None)  # what validate reads
    assert problems
    assert all(p == top or top in p.parents for p in reads), [p for p in reads if top not in p.parents]


def test_a_clean_copy_verifies_negative_control(suite: Path, reads: list[Path]) -> None:
    """The same suite without the hostile name verifies, and reading it is seen by the probe."""
    assert build_mod.verify(suite, progress=None) == []
    assert reads and all(suite.resolve() in p.parents for p in reads)


# ------------------------------------------------------------------ item 3: malformed suites
def _deep(n: int = 100_000) -> str:
    return '{"schema": ' + "[" * n + "]" * n + "}"


MALFORMED = {
    "MANIFEST a list": lambda r: (r / "MANIFEST.json").write_text("[1, 2]"),
    "cases a list": lambda r: edit_manifest(r, lambda m: m.update(cases=list(m["cases"]))),
    "files a list": lambda r: edit_manifest(r, lambda m: m["cases"]["op/linear"].update(files=["case.json"])),
    "case entry a string": lambda r: edit_manifest(r, lambda m: m["cases"].update({"op/linear": "x"})),
    "digest not hex": lambda r: edit_manifest(r, lambda m: m["cases"]["op/linear"]["files"].update(
        {"case.json": 5})),
    "MANIFEST deeply nested": lambda r: (r / "MANIFEST.json").write_text(_deep()),
    "MANIFEST not JSON": lambda r: (r / "MANIFEST.json").write_text("{"),
    "MANIFEST missing": lambda r: (r / "MANIFEST.json").unlink(),
}
#: Broken case.json files (their hash is refreshed so that only the content is wrong) -> the exit status of
#: golden verify, show and list --table (1: the suite was checked and fails; 0: the command does not need
#: the broken field).
BROKEN_CASE = {
    "case.json deeply nested": (lambda m: _deep(), (1, 2, 2)),
    "case.json a list": (lambda m: "[]", (1, 2, 2)),
    "case.json without outputs": (lambda m: json.dumps({k: v for k, v in m.items() if k != "outputs"}), (1, 2, 0)),
    "case.json without tolerance": (lambda m: json.dumps({k: v for k, v in m.items() if k != "tolerance"}),
                                    (1, 0, 2)),
    "case.json tolerance a list": (lambda m: json.dumps({**m, "tolerance": []}), (1, 0, 2)),
    "case.json inputs a list": (lambda m: json.dumps({**m, "inputs": [1]}), (1, 2, 0)),
    "case.json config a string": (lambda m: json.dumps({**m, "config": "tiny"}), (1, 2, 0)),
    "params.safetensors missing": (None, (1, 2, 0)),
}


def _break_case(root: Path, label: str) -> None:
    d = root / "model/tiny_identity_g_short"
    if label == "params.safetensors missing":
        (d / "params.safetensors").unlink()
        edit_manifest(root, lambda m: m["cases"]["model/tiny_identity_g_short"]["files"].pop("params.safetensors"))
        return
    text = BROKEN_CASE[label][0](json.loads((d / "case.json").read_text()))
    (d / "case.json").write_text(text)
    edit_manifest(root, lambda m: m["cases"]["model/tiny_identity_g_short"]["files"].update(
        {"case.json": sha256_bytes(text.encode())}))


@pytest.mark.parametrize("label", sorted(MALFORMED))
def test_malformed_manifest_is_one_error_line(suite: Path, label: str, capsys: pytest.CaptureFixture) -> None:
    MALFORMED[label](suite)
    code, text = run(["golden", "verify", "--suite-dir", str(suite), "--quiet"], capsys)
    assert code == 2 and "Traceback" not in text and len(text.strip().splitlines()) == 1, text
    assert "MANIFEST.json" in text
    code, text = run(["golden", "list", "--table", "--suite-dir", str(suite)], capsys)
    if label == "MANIFEST missing":  # the table reads case.json files only
        assert code == 0
    else:
        assert code == 2 and "Traceback" not in text and len(text.strip().splitlines()) == 1, text


@pytest.mark.parametrize("label", sorted(BROKEN_CASE))
def test_malformed_case_is_reported_not_raised(suite: Path, label: str, capsys: pytest.CaptureFixture) -> None:
    _break_case(suite, label)
    want = dict(zip(("verify", "show", "list"), BROKEN_CASE[label][1], strict=True))
    code, text = run(["golden", "verify", "--suite-dir", str(suite), "--quiet"], capsys)
    assert code == want["verify"] and "Traceback" not in text, text
    if code and "tolerance" in label:  # loads, but verify will not compare bit for bit (BLAS-dependent)
        assert "no float64 tolerance for output" in text and "FAILED" in text
    elif code:
        assert "model/tiny_identity_g_short" in text and "FAILED" in text
        with pytest.raises(FixtureError, match="tiny_identity_g_short"):
            load_case(suite / "model/tiny_identity_g_short")
    for argv in (["golden", "show", "model/tiny_identity_g_short", "--suite-dir", str(suite)],
                 ["golden", "list", "--table", "--suite-dir", str(suite)]):
        code, text = run(argv, capsys)
        assert code == want[argv[1]] and "Traceback" not in text, (argv, text)
        if code:
            assert len(text.strip().splitlines()) == 1, (argv, text)


def test_missing_suite_folder_and_unknown_case(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """Item 7: list --table / verify / show on a missing folder exit 2; show refuses ../ names."""
    missing = str(tmp_path / "MISSING")
    for argv in (["golden", "list", "--table", "--suite-dir", missing],
                 ["golden", "verify", "--suite-dir", missing],
                 ["golden", "show", "op/linear", "--suite-dir", missing],
                 ["golden", "show", "../../etc", "--suite-dir", str(DEFAULT_GOLDEN_DIR)]):
        code, text = run(argv, capsys)
        assert code == 2 and "Traceback" not in text and len(text.strip().splitlines()) == 1, (argv, text)


def test_build_only_unknown_case_exits_2_naming_it(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    out = tmp_path / "g"
    code, text = run(["golden", "build", "--out", str(out), "--only", "no-such-case", "--quiet"], capsys)
    assert code == 2 and "'no-such-case'" in text and not out.exists()


# ------------------------------------------------------------------ item 5: the swap window
KILL_BETWEEN_RENAMES = textwrap.dedent("""
    import os, sys
    from pathlib import Path
    import importlib
    b = importlib.import_module("pldr_ref.fixtures.build")
    b.exchange = lambda a, c: False  # a system without renameat2: the two-rename fallback
    real = Path.rename
    def rename(self, target):
        if self.name.startswith(b.STAGING_PREFIX):
            os._exit(137)  # killed after the old suite went aside, before the new one is in place
        return real(self, target)
    Path.rename = rename
    b.build(sys.argv[1], select=lambda s: s.name == "op/linear", progress=None)
""")


def _stale(root: Path) -> None:
    f = root / "op/linear/outputs.safetensors"
    data = f.read_bytes()
    f.write_bytes(data[:-1] + bytes([data[-1] ^ 1]))
    edit_manifest(root, lambda m: m["cases"]["op/linear"]["files"].update(
        {"outputs.safetensors": sha256_bytes(f.read_bytes())}))


@pytest.mark.parametrize("next_run", ["verify", "build"])
def test_build_killed_between_the_renames_is_recovered(tmp_path: Path, next_run: str) -> None:
    root = make_suite(tmp_path / "g", ("op/linear",))
    _stale(root)  # the rebuild has something to change, so it swaps
    before = file_tree(root)
    proc = subprocess.run([sys.executable, "-c", KILL_BETWEEN_RENAMES, str(root)], capture_output=True, text=True)
    assert proc.returncode == 137, proc.stderr
    assert not root.exists()  # the window the fault was injected into
    assert len(build_mod.previous_folders(root)) == 1
    if next_run == "verify":
        build_mod.verify(root, progress=None, recompute=False)
        assert file_tree(root) == before  # the previous suite is back, byte-identical
    else:
        build_mod.build(root, select=lambda s: s.name == "op/linear", progress=None)
        assert build_mod.verify(root, progress=None) == []
    assert build_mod.previous_folders(root) == []


def test_swap_is_one_atomic_exchange(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Where the system swaps atomically no rename of the suite folder happens: the path never goes missing."""
    root = make_suite(tmp_path / "g", ("op/linear",))
    _stale(root)
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir()
    b.mkdir()
    (a / "x").write_text("a")
    if not build_mod.exchange(a, b):
        pytest.skip("this file system has no atomic exchange (renameat2); the recovery test covers it")
    assert (b / "x").read_text() == "a" and not (a / "x").exists()
    renamed = []
    real = Path.rename
    monkeypatch.setattr(Path, "rename", lambda self, t: (renamed.append(self), real(self, t))[1])
    build_mod.build(root, select=lambda s: s.name == "op/linear", progress=None)
    assert renamed == []
    assert build_mod.verify(root, progress=None) == []


def test_verify_while_a_build_swaps_the_suite(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A build swaps the suite during verify: verify checks the new suite again instead of raising."""
    root = make_suite(tmp_path / "g", ("op/linear", "model/tiny_identity_g_short"))
    other = make_suite(tmp_path / "other", ("op/linear", "model/tiny_identity_g_short"))
    real = build_mod.verify_case
    swaps = []

    def swapping(case_dir):
        if not swaps:  # mid-verify, a build replaces the suite (and deletes the old copy)
            swaps.append(case_dir)
            build_mod._swap_in(other, root)
        return real(case_dir)

    monkeypatch.setattr(build_mod, "verify_case", swapping)
    assert build_mod.verify(root, progress=None) == []
    assert len(swaps) == 1

    # negative control: a suite swapped on every pass is reported, not verified
    def always(case_dir):
        spare = tmp_path / f"spare{len(swaps)}"
        swaps.append(case_dir)
        shutil.copytree(root, spare)
        build_mod._swap_in(spare, root)
        return real(case_dir)

    monkeypatch.setattr(build_mod, "verify_case", always)
    problems = build_mod.verify(root, progress=None)
    assert problems and "replaced" in problems[-1]
