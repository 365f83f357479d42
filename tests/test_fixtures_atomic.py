"""Issue 10 item 4: ``golden build`` never corrupts a suite (staging copy + swap; a failure changes nothing)."""

from __future__ import annotations

import importlib
import shutil
from pathlib import Path

import pytest
from core_support import file_tree

from pldr_ref.fixtures.build import build, verify
from pldr_ref.fixtures.case import DEFAULT_GOLDEN_DIR, FixtureError

# the module itself (the package re-exports a function of the same name)
build_mod = importlib.import_module("pldr_ref.fixtures.build")

SUBSET = ("op/linear", "op/causal_padding_mask", "op/masked_softmax_edges")


def _select(spec) -> bool:
    return spec.name in SUBSET


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("atomic") / "golden"
    build(root, select=_select, progress=None)
    return root


@pytest.fixture
def suite(built, tmp_path) -> Path:
    dst = tmp_path / "golden"
    shutil.copytree(built, dst)
    # make every case stale so that a rebuild has to rewrite files (and could half-write them)
    for f in dst.glob("*/*/outputs.safetensors"):
        f.write_bytes(f.read_bytes()[:-1] + bytes([f.read_bytes()[-1] ^ 1]))
    return dst


@pytest.mark.parametrize("error", [RuntimeError("injected failure"), KeyboardInterrupt()])
def test_failing_build_leaves_the_suite_byte_identical(suite, monkeypatch, error):
    before = file_tree(suite)
    real = build_mod.compute_case
    calls = []

    def failing(spec):
        calls.append(spec.name)
        if len(calls) == 2:  # the first case was already written (into the staging copy) when this fires
            raise error
        return real(spec)

    monkeypatch.setattr(build_mod, "compute_case", failing)
    with pytest.raises(type(error)):
        build(suite, select=_select, progress=None)
    assert len(calls) == 2
    assert file_tree(suite) == before
    assert sorted(p.name for p in suite.parent.iterdir()) == ["golden"]  # no staging folder left behind


def test_failing_swap_restores_the_previous_suite(suite, monkeypatch):
    before = file_tree(suite)
    real_rename = Path.rename

    def rename(self, target):
        if self.name.startswith(build_mod.STAGING_PREFIX):
            raise OSError("injected rename failure")
        return real_rename(self, target)

    monkeypatch.setattr(Path, "rename", rename)
    monkeypatch.setattr(build_mod, "exchange", lambda a, b: False)  # the two-rename fallback of _swap_in
    with pytest.raises(OSError, match="injected rename failure"):
        build(suite, select=_select, progress=None)
    assert file_tree(suite) == before
    assert sorted(p.name for p in suite.parent.iterdir()) == ["golden"]


def test_successful_build_swaps_in_the_new_suite(suite):
    """Negative control for the two tests above: the same build without the injected failure repairs the suite."""
    assert verify(suite, progress=None) != []
    status = build(suite, select=_select, progress=None)
    assert set(status.values()) == {"updated"}
    assert verify(suite, progress=None) == []
    assert sorted(p.name for p in suite.parent.iterdir()) == ["golden"]


def test_committed_suite_needs_overwrite():
    before = {p: p.stat().st_mtime_ns for p in DEFAULT_GOLDEN_DIR.rglob("*")}
    with pytest.raises(FixtureError, match=r"committed golden suite: building over it needs overwrite=True"):
        build(DEFAULT_GOLDEN_DIR, select=_select, progress=None)
    assert {p: p.stat().st_mtime_ns for p in DEFAULT_GOLDEN_DIR.rglob("*")} == before


def test_non_suite_folder_is_not_replaced(tmp_path):
    (tmp_path / "notes.txt").write_text("mine", encoding="utf-8")
    with pytest.raises(FixtureError, match=r"non-empty folder without MANIFEST\.json: not a golden suite"):
        build(tmp_path, select=_select, progress=None)
    assert (tmp_path / "notes.txt").read_text(encoding="utf-8") == "mine"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.txt"]


def test_build_and_verify_report_progress(tmp_path):
    import io

    stream = io.StringIO()
    build(tmp_path / "g", select=_select, progress=stream)
    text = stream.getvalue()
    assert f"golden build default: {len(SUBSET)}/{len(SUBSET)}" in text and "3 new" in text
    stream = io.StringIO()
    assert verify(tmp_path / "g", progress=stream) == []
    assert f"golden verify: {len(SUBSET)}/{len(SUBSET)}" in stream.getvalue()
    quiet = io.StringIO()
    build(tmp_path / "g", select=_select, progress=None)
    assert quiet.getvalue() == ""
