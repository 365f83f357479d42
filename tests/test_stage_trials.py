"""The trials of issue 32 item 6 stay reproducible: every patch of ``benchmarks/stage_trials/`` applies to HEAD (in
order, for a chained trial), checked on a temporary git index in a fraction of a second; the docs point to the
patches and to the command that measures them.  Counting and running a trial's tests is
``python benchmarks/stage_trials/measure.py [--run-tests]`` (the slow test below runs the counts).

Outside a git checkout (CI runs the suite from a ``git archive`` copy, which has no ``.git`` but holds HEAD's
files) the patches are checked against the files on disk instead (``measure.check_applies_to_files``); only the
slow count, which makes git worktrees, needs a checkout.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
MEASURE = ROOT / "benchmarks" / "stage_trials" / "measure.py"


def _measure():
    spec = importlib.util.spec_from_file_location("stage_trials_measure", MEASURE)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # its dataclasses resolve their module
    spec.loader.exec_module(mod)
    return mod


measure = _measure()

needs_git = pytest.mark.skipif(not measure.is_git_checkout(ROOT),
                               reason="not a git checkout (CI runs from a `git archive`, which has no .git): the "
                                      "trial patches are diffs against HEAD")


@pytest.mark.parametrize("trial", measure.TRIALS, ids=[t.key for t in measure.TRIALS])
def test_every_trial_patch_applies_to_head(trial):
    measure.check_trial_applies(trial.patches)


@pytest.mark.parametrize("check", [measure.check_trial_applies, measure.check_applies_to_files],
                         ids=["here", "files"])
def test_negative_control_a_stale_patch_is_reported(tmp_path, check):
    """A patch whose context no longer matches HEAD fails the check with git's message naming the file."""
    text = (measure.HERE / "c_final_norm.patch").read_text(encoding="utf-8")
    line = '           inputs=("out1",), body=layer.ffn),'
    stale = text.replace(line, line.replace("layer.ffn", "layer.glu"), 1)
    assert stale != text
    (tmp_path / "stale.patch").write_text(stale, encoding="utf-8")
    with pytest.raises(measure.PatchError, match=r"stale\.patch no longer applies to .*registry\.py"):
        check(("stale.patch",), folder=tmp_path)


def test_the_files_check_works_in_a_copy_without_git(tmp_path):
    """A ``git archive``-like copy of the files the patches touch (no .git): the patches apply there, and the
    copy is left untouched."""
    patches = measure.TRIALS[1].patches  # the chained trial
    for rel in measure.patched_paths(patches):
        if (ROOT / rel).is_file():
            (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
            (tmp_path / rel).write_bytes((ROOT / rel).read_bytes())
    before = {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()}
    assert not measure.is_git_checkout(tmp_path)
    measure.check_applies_to_files(patches, root=tmp_path)
    assert {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()} == before


def test_every_patch_is_a_trial_and_the_docs_point_to_them():
    on_disk = {p.name for p in measure.HERE.glob("*.patch")}
    used = {p for t in measure.TRIALS for p in t.patches}
    assert on_disk == used
    stage_doc = (ROOT / "docs" / "adding_a_stage.md").read_text(encoding="utf-8")
    switch_doc = (ROOT / "docs" / "adding_a_switch.md").read_text(encoding="utf-8")
    for doc in (stage_doc, switch_doc):
        assert "python benchmarks/stage_trials/measure.py" in doc
    for name in used:
        assert f"benchmarks/stage_trials/{name}" in stage_doc, name
    assert "benchmarks/stage_trials/d_switch_at_default.patch" in switch_doc


@needs_git
@pytest.mark.slow
def test_measured_counts_meet_the_goals():
    """The counts of ``measure.py`` (a worktree per trial, about 10 s): each trial within its goal."""
    results = [measure.measure(t) for t in measure.TRIALS]
    assert [r.error for r in results] == [None] * len(results)
    assert [(r.trial.key, r.counted <= r.trial.goal) for r in results] == [(t.key, True) for t in measure.TRIALS]


def test_a_folder_without_git_is_not_a_checkout(tmp_path):
    """What the skip above keys on: a `git archive` copy (no .git) is not a checkout."""
    (tmp_path / "pldr_ref").mkdir()
    assert not measure.is_git_checkout(tmp_path)
