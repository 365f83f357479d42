"""Repository contract: CI runs exactly the README test command; README starts with a two-command Quickstart."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _quickstart_commands() -> list[str]:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    section = text.split("## Quickstart", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"```bash\n(.+?)\n```", section, flags=re.S)


def test_readme_quickstart_has_two_commands():
    commands = _quickstart_commands()
    assert len(commands) == 2, commands
    assert all("\n" not in c for c in commands)
    assert "pldr-ref golden verify" in commands[0]
    assert "pytest" in commands[1]


def test_ci_runs_exactly_the_readme_test_command():
    ci_lines = (ROOT / ".ci" / "run").read_text(encoding="utf-8").splitlines()
    assert _quickstart_commands()[1] in ci_lines


# ------------------------------------------------------------------ issue 10 item 1: self-contained
#: Folders that are not part of the repository's content (environments, caches, build output).
NOT_CONTENT = {".git", ".venv", "venv", "__pycache__", ".pytest_cache", ".ruff_cache", ".hypothesis", "build", "dist",
               ".mypy_cache", "node_modules"}
#: References to data outside the repository (spelled in pieces so that this file does not match itself).
OUTSIDE_REFERENCES = ("..", "/shared"), ("shared", "/data"), ("shared", "/spec"), ("shared", "/paper")


def _content_files(root: Path) -> list[Path]:
    """Every file under ``root`` outside :data:`NOT_CONTENT` folders (pruned, so a venv is never walked)."""
    import os

    out = []
    for folder, dirs, files in os.walk(root):
        dirs[:] = sorted(d for d in dirs if d not in NOT_CONTENT and not d.endswith(".egg-info"))
        out.extend(Path(folder) / f for f in sorted(files))
    return out


def outside_references(root: Path) -> list[str]:
    """``file:line`` of every text line under ``root`` that points at data outside the repository."""
    needles = ["".join(p) for p in OUTSIDE_REFERENCES]
    hits = []
    for path in _content_files(root):
        try:
            text = path.read_text(encoding="utf-8")
        except (UnicodeDecodeError, OSError):  # binary data (safetensors, npz): no paths inside
            continue
        for i, line in enumerate(text.splitlines(), 1):
            if any(n in line for n in needles):
                hits.append(f"{path.relative_to(root)}:{i}: {line.strip()[:100]}")
    return hits


def test_nothing_refers_to_data_outside_the_repository():
    hits = outside_references(ROOT)
    assert hits == [], "the repository must be self-contained (use pldr_ref.resources):\n" + "\n".join(hits[:20])


def test_outside_reference_check_catches_a_reference(tmp_path):
    """Negative control: a file mentioning the sibling data folder is reported, binary files are skipped."""
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "mod.py").write_text('PATH = "' + "".join(OUTSIDE_REFERENCES[0]) + '/data/x.npz"\n')
    (tmp_path / "blob.bin").write_bytes(b"\xff\xfe" + "".join(OUTSIDE_REFERENCES[0]).encode())
    (tmp_path / ".venv").mkdir()
    (tmp_path / ".venv" / "x.py").write_text("".join(OUTSIDE_REFERENCES[0]))
    assert outside_references(tmp_path) == [f"pkg{'/'}mod.py:1: PATH = \"{''.join(OUTSIDE_REFERENCES[0])}/data/x.npz\""]


def test_bundled_data_is_package_data():
    """Every bundled data file is inside the package and matched by pyproject's package-data patterns."""
    import fnmatch

    import pldr_ref.resources as res

    toml = (ROOT / "pyproject.toml").read_text(encoding="utf-8")  # tomllib needs Python 3.11; the line is simple
    line = re.search(r"^\[tool\.setuptools\.package-data\]\npldr_ref = \[(.*)\]$", toml, flags=re.M)
    assert line, "pyproject.toml has no [tool.setuptools.package-data] pldr_ref = [...] line"
    patterns = re.findall(r'"([^"]+)"', line.group(1))
    pkg = ROOT / "pldr_ref"
    files = [p for p in (pkg / "resources").iterdir() if p.is_file() and p.suffix != ".py"]
    assert {p.name for p in files} >= {res.TRAINED_G_LM_FILE, res.LEAN_CATALOG_FILE}
    for p in files:
        rel = p.relative_to(pkg).as_posix()
        assert any(fnmatch.fnmatch(rel, pat) for pat in patterns), f"{rel} is not shipped: add it to package-data"
    assert res.trained_g_lm().shape == res.TRAINED_G_LM_SHAPE
    assert res.lean_catalog_path().read_text(encoding="utf-8").count(res.LEAN_COMMIT[:12]) >= 1
