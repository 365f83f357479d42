"""Measure again what adding a stage or a switch costs (issue 32, item 6), from the trial patches kept here.

Each trial is a patch (or a chain of patches) against the repository's HEAD, kept in this folder so that anyone
can re-apply it and recount: ``docs/adding_a_stage.md`` ("Measured again") and ``docs/adding_a_switch.md`` state the
counts this prints.

    python benchmarks/stage_trials/measure.py               # apply every trial, count its hand-edited files
    python benchmarks/stage_trials/measure.py --run-tests   # also run each trial's tests on it (a few minutes)
    python benchmarks/stage_trials/measure.py --only b      # one trial

For each trial the script makes a temporary ``git worktree`` at HEAD, applies the patches with ``git apply`` (in
order: trial b is trial a's patch, then its own), lists the files the patches change and counts the hand-edited
ones.  Not counted, as the docs say: the data the commands of ``docs/adding_a_stage.md`` step 7 regenerate
(``golden/``, the calibration store ``pldr_ref/harness/policy/calibration.json``; no patch holds them), and a switch
doc whose change is exactly what ``python -m pldr_ref.switch_docs --write`` regenerates (it is regenerated from
HEAD's text on the trial and compared: a doc with any other change, such as a stage's row in
``docs/equations.md``, counts as hand-edited).  A patch that no longer applies to HEAD is reported with git's
message and the script exits 1 (``tests/test_stage_trials.py`` checks that every patch applies, in the default
test run).

Re-creating a trial after a change to HEAD: make a worktree at HEAD, apply the old patch with ``git apply -3`` or
redo the edits, then ``git add -A && git diff --cached HEAD > benchmarks/stage_trials/<name>.patch`` (for trial b:
the diff between the tree with trial a applied and the tree with both; see ``chain_trees`` below).
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]

#: Regenerated data: never counted (the commands of docs/adding_a_stage.md step 7 rewrite them).
REGENERATED_PREFIXES = ("golden/", "pldr_ref/harness/policy/calibration.json")
#: Docs whose switch section ``python -m pldr_ref.switch_docs --write`` regenerates (pldr_ref.switch_docs.DOCS).
SWITCH_DOCS = ("docs/equations.md", "docs/adding_a_switch.md")


@dataclasses.dataclass(frozen=True)
class Trial:
    """One measured change: ``patches`` applied in order to HEAD; ``goal``: the issue's bound on its hand-edited
    files (``goal_excludes_tests``: the bound is on the files outside ``tests/``, the unit test being optional);
    ``tests``: what ``--run-tests`` runs on it."""

    key: str
    what: str
    patches: tuple[str, ...]
    goal: int
    tests: tuple[str, ...]
    goal_excludes_tests: bool = False


#: The registry checks every stage trial runs (docs, switch table, data-flow tables, the bitwise chain).
_STAGE_CHECKS = ("tests/test_core_docs.py", "tests/test_switch_table.py", "tests/test_registry_data_flow.py",
                 "tests/test_stage_registry_run.py")

TRIALS: tuple[Trial, ...] = (
    Trial("a", "an optional per-layer stage, float64 only (QK-norm, switch qk_norm)", ("a_qk_norm.patch",), 6,
          ("tests/test_trial_qk_norm.py", *_STAGE_CHECKS, "tests/test_engine_registry.py")),
    Trial("b", "the same stage in every engine (torch, Triton and JAX through the registry-body fallback)",
          ("a_qk_norm.patch", "b_qk_norm_every_engine.patch"), 10,
          ("tests/test_trial_qk_norm.py", *_STAGE_CHECKS, "tests/test_engine_registry.py",
           "tests/test_exact_forward.py", "tests/test_engine_stage_chain_torch.py",
           "tests/test_engine_stage_chain_jax.py")),
    Trial("c", "a model-level stage (a final LayerNorm, switch final_norm), float64 only", ("c_final_norm.patch",), 7,
          ("tests/test_trial_final_norm.py", *_STAGE_CHECKS, "tests/test_engine_registry.py")),
    Trial("d", "a switch at its default (emulation switch layer_norm_precision), float64 only",
          ("d_switch_at_default.patch",), 3,
          ("tests/test_trial_layer_norm_precision.py", "tests/test_switch_table.py", "tests/test_core_docs.py",
           "tests/test_switch_at_default.py"), goal_excludes_tests=True),
)


class PatchError(RuntimeError):
    """A trial patch that no longer applies to HEAD (git's message)."""


def git(*args: str, cwd: Path = ROOT, env: dict[str, str] | None = None) -> str:
    """``git args`` in ``cwd``; its stdout, or :class:`RuntimeError` with git's stderr."""
    res = subprocess.run(["git", *args], cwd=cwd, env=env, capture_output=True, text=True)
    if res.returncode != 0:
        raise RuntimeError(f"git {' '.join(args)}: {res.stderr.strip() or res.stdout.strip()}")
    return res.stdout


def is_git_checkout(root: Path = ROOT) -> bool:
    """True when ``root`` is a git work tree with a HEAD (CI's ``git archive`` copy is not)."""
    if shutil.which("git") is None or not (root / ".git").exists():
        return False
    try:
        git("rev-parse", "--verify", "HEAD", cwd=root)
    except RuntimeError:
        return False
    return True


def check_applies(patches: tuple[str, ...], root: Path = ROOT, folder: Path = HERE) -> None:
    """Raise :class:`PatchError` unless ``patches`` apply in order to HEAD (checked on a temporary index, so the
    working tree, dirty or not, is not touched)."""
    with tempfile.TemporaryDirectory() as tmp:
        env = {**os.environ, "GIT_INDEX_FILE": str(Path(tmp) / "index")}
        git("read-tree", "HEAD", cwd=root, env=env)
        for i, p in enumerate(patches):
            try:
                git("apply", "--cached", "--check", str(folder / p), cwd=root, env=env)
                git("apply", "--cached", str(folder / p), cwd=root, env=env)
            except RuntimeError as exc:
                after = f" after {', '.join(patches[:i])}" if i else ""
                raise PatchError(f"{p} no longer applies to HEAD{after}: {exc}") from None


def patched_paths(patches: tuple[str, ...], folder: Path = HERE) -> list[str]:
    """The repository paths ``patches`` change or add (their ``diff --git a/X b/Y`` headers), in order."""
    paths: list[str] = []
    for p in patches:
        for line in (folder / p).read_text(encoding="utf-8").splitlines():
            if line.startswith("diff --git a/"):
                a, _, b = line[len("diff --git a/"):].partition(" b/")
                paths += [x for x in (a, b) if x not in paths]
    return paths


def check_applies_to_files(patches: tuple[str, ...], root: Path = ROOT, folder: Path = HERE) -> None:
    """Raise :class:`PatchError` unless ``patches`` apply in order to the files under ``root`` as they are on disk.

    Why: CI runs from a ``git archive`` copy, which has no ``.git`` but holds HEAD's files; the files the patches
    touch are copied into a scratch folder and patched there with ``git apply`` (which needs no repository), so
    ``root`` is never touched.  ``GIT_CEILING_DIRECTORIES`` keeps git from taking an enclosing repository for the
    scratch folder's."""
    if shutil.which("git") is None:
        raise RuntimeError("git is not installed: `git apply` checks the trial patches")
    with tempfile.TemporaryDirectory() as tmp:
        scratch = Path(tmp) / "tree"
        for rel in patched_paths(patches, folder):
            if (root / rel).is_file():
                (scratch / rel).parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(root / rel, scratch / rel)
        scratch.mkdir(exist_ok=True)
        env = {**os.environ, "GIT_CEILING_DIRECTORIES": tmp}
        for i, p in enumerate(patches):
            try:
                git("apply", "--check", str(folder / p), cwd=scratch, env=env)
                git("apply", str(folder / p), cwd=scratch, env=env)
            except RuntimeError as exc:
                after = f" after {', '.join(patches[:i])}" if i else ""
                raise PatchError(f"{p} no longer applies to the files of {root}{after}: {exc}") from None


def check_trial_applies(patches: tuple[str, ...], root: Path = ROOT, folder: Path = HERE) -> None:
    """:func:`check_applies` (HEAD) in a git checkout, else :func:`check_applies_to_files` (the files on disk)."""
    check = check_applies if is_git_checkout(root) else check_applies_to_files
    check(patches, root, folder)


def chain_trees(patches: tuple[str, ...], root: Path = ROOT, folder: Path = HERE) -> list[str]:
    """The tree ids of HEAD with the first 1, 2, ... of ``patches`` applied (to write a chained patch: ``git diff
    <tree k-1> <tree k>``)."""
    trees = []
    with tempfile.TemporaryDirectory() as tmp:
        env = {**os.environ, "GIT_INDEX_FILE": str(Path(tmp) / "index")}
        git("read-tree", "HEAD", cwd=root, env=env)
        for p in patches:
            git("apply", "--cached", str(folder / p), cwd=root, env=env)
            trees.append(git("write-tree", cwd=root, env=env).strip())
    return trees


@dataclasses.dataclass
class Result:
    """What one trial measured."""

    trial: Trial
    hand_edited: list[str] = dataclasses.field(default_factory=list)
    generated: list[str] = dataclasses.field(default_factory=list)
    regenerated_data: list[str] = dataclasses.field(default_factory=list)
    error: str | None = None
    tests: str | None = None
    tests_ok: bool | None = None

    @property
    def counted(self) -> int:
        """The files the goal bounds."""
        if self.trial.goal_excludes_tests:
            return sum(not f.startswith("tests/") for f in self.hand_edited)
        return len(self.hand_edited)

    @property
    def ok(self) -> bool:
        return self.error is None and self.counted <= self.trial.goal and self.tests_ok is not False


def _switch_doc_is_generated(wt: Path, path: str) -> bool:
    """True when the patched ``path`` is exactly HEAD's text with its switch section regenerated on the trial."""
    patched = (wt / path).read_text(encoding="utf-8")
    try:
        (wt / path).write_text(git("show", f"HEAD:{path}", cwd=wt), encoding="utf-8")
        subprocess.run([sys.executable, "-m", "pldr_ref.switch_docs", "--write", "--root", str(wt)], cwd=wt,
                       check=True, capture_output=True, text=True)
        return (wt / path).read_text(encoding="utf-8") == patched
    finally:
        (wt / path).write_text(patched, encoding="utf-8")


def measure(trial: Trial, *, run_tests: bool = False, keep: bool = False) -> Result:
    """Apply ``trial`` to a temporary worktree at HEAD, count its files and (``run_tests``) run its tests."""
    res = Result(trial)
    try:
        check_applies(trial.patches)
    except PatchError as exc:
        res.error = str(exc)
        return res
    tmp = Path(tempfile.mkdtemp(prefix=f"stage_trial_{trial.key}_"))
    wt = tmp / "wt"
    git("worktree", "add", "--detach", str(wt), "HEAD")
    try:
        for p in trial.patches:
            git("apply", str(HERE / p), cwd=wt)
        git("add", "-A", cwd=wt)
        changed = git("diff", "--cached", "--name-only", "HEAD", cwd=wt).split()
        for f in changed:
            if f.startswith(REGENERATED_PREFIXES):
                res.regenerated_data.append(f)
            elif f in SWITCH_DOCS and _switch_doc_is_generated(wt, f):
                res.generated.append(f)
            else:
                res.hand_edited.append(f)
        stale = subprocess.run([sys.executable, "-m", "pldr_ref.switch_docs", "--check", "--root", str(wt)],
                               cwd=wt, capture_output=True, text=True)
        if stale.returncode != 0:
            res.error = f"the patch's switch docs are stale: {stale.stdout.strip()} {stale.stderr.strip()}"
        if run_tests:
            env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}
            out = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *trial.tests],
                                 cwd=wt, env=env, capture_output=True, text=True)
            lines = [ln for ln in out.stdout.strip().splitlines() if ln.strip()]
            res.tests = lines[-1] if lines else out.stderr.strip()[-300:]
            res.tests_ok = out.returncode == 0
            if not res.tests_ok:
                res.tests += "\n" + "\n".join(ln for ln in lines if ln.startswith(("FAILED", "ERROR")))
    finally:
        if keep:
            print(f"trial {trial.key}: kept at {wt} (remove with `git worktree remove --force {wt}`)")
        else:
            git("worktree", "remove", "--force", str(wt))
            shutil.rmtree(tmp, ignore_errors=True)
    return res


def table(results: list[Result]) -> str:
    """The counts as a markdown table."""
    rows = ["| trial | change | patches | hand-edited files | goal | not counted (generated) | tests |",
            "|---|---|---|---|---|---|---|"]
    for r in results:
        t = r.trial
        if r.error is not None:
            rows.append(f"| ({t.key}) | {t.what} | {', '.join(t.patches)} | **{r.error}** | <= {t.goal} | | |")
            continue
        files = ", ".join(f"`{f}`" for f in r.hand_edited)
        n = f"{len(r.hand_edited)}" + (f" ({r.counted} outside tests/)" if t.goal_excludes_tests else "")
        goal = f"<= {t.goal}" + (" outside tests/" if t.goal_excludes_tests else "")
        verdict = "met" if r.counted <= t.goal else "NOT met"
        gen = ", ".join(f"`{f}`" for f in r.generated + r.regenerated_data) or "none"
        tests = "not run" if r.tests is None else ("passed: " if r.tests_ok else "FAILED: ") + r.tests
        rows.append(f"| ({t.key}) | {t.what} | {', '.join(t.patches)} | {n}: {files} | {goal} ({verdict}) | "
                    f"{gen} | {tests} |")
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--run-tests", action="store_true", help="run each trial's tests on it (a few minutes)")
    ap.add_argument("--only", action="append", choices=[t.key for t in TRIALS], help="measure these trials only")
    ap.add_argument("--keep", action="store_true", help="keep the trial worktrees (paths printed)")
    args = ap.parse_args(argv)
    if not is_git_checkout():
        print(f"{ROOT} is not a git checkout with a HEAD: the trials are patches against HEAD", file=sys.stderr)
        return 2
    results = [measure(t, run_tests=args.run_tests, keep=args.keep) for t in TRIALS
               if not args.only or t.key in args.only]
    print(f"HEAD {git('rev-parse', '--short', 'HEAD').strip()}")
    print(table(results))
    bad = [r for r in results if not r.ok]
    for r in bad:
        print(f"trial ({r.trial.key}): {r.error or r.tests or 'over its goal'}", file=sys.stderr)
    return 1 if any(r.error is not None or r.tests_ok is False for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())
