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
