"""Issue 31: the worked examples of docs/backends.md "An existing PyTorch model" (section 11) run as written.

The HF-style example wraps ``tests/pldr_style_model.py`` (default run); its failure example and the authors' v510
example are ``-m slow`` -- the latter runs the authors' released code when ``PLDR_REF_AUTHORS_V510`` names a clone
of their repository (github.com/burcgokden/PLDR-LLM-with-KVG-cache; pldr_ref does not vendor it).
"""

from __future__ import annotations

import json
import os
import re
import shlex
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch", reason="the module adapter wraps PyTorch modules (pip install torch)")

from pldr_ref.cli import main

DOCS = Path(__file__).resolve().parents[1] / "docs" / "backends.md"
AUTHORS_ENV = "PLDR_REF_AUTHORS_V510"


def section() -> str:
    """The adapter's section of docs/backends.md, up to the next section (whatever their numbers)."""
    text = DOCS.read_text(encoding="utf-8")
    start = re.search(r"^## \d+\. An existing PyTorch model", text, re.M).start()
    end = re.search(r"^## \d+\. ", text[start + 3:], re.M)
    return text[start:] if end is None else text[start:start + 3 + end.start()]


def states(line: str) -> bool:
    """Whether section 11 states ``line`` (line breaks of the prose ignored)."""
    return " ".join(line.split()) in " ".join(section().replace("`", "").split())


def example(file_name: str) -> tuple[str, list[str], str]:
    """(the python block saved as ``file_name``, the validate command that uses it, the text after the command)."""
    text = section()
    code = next(b for b in re.findall(r"```python\n(.*?)```", text, re.S) if b.startswith(f"# {file_name}"))
    module = file_name.removesuffix(".py")
    command = next(c for c in re.findall(r"```bash\n(.*?)```", text, re.S) if f"--backend {module}:" in c)
    argv = [a for a in shlex.split(command) if "=" not in a or a.startswith("-")]  # drop VAR=value prefixes
    assert argv[:2] == ["pldr-ref", "validate"], argv
    return code, argv[1:], text[text.index(command):]


def run_example(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, file_name: str, code: str,
                argv: list[str]) -> tuple[int, dict]:
    (tmp_path / file_name).write_text(code, encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    monkeypatch.delitem(sys.modules, file_name.removesuffix(".py"), raising=False)
    out = tmp_path / "report.json"
    args = [a for a in argv if not a.startswith("--out")]
    if "--out" in argv:  # keep the command, write its report where the test reads it
        i = args.index(argv[argv.index("--out") + 1])
        del args[i]
    rc = main([*args, "--out", str(out), "--quiet"])
    return rc, json.loads(out.read_text())


def summary(report: dict) -> str:
    """The summary line of the terminal report, from the JSON report's results."""
    statuses = [r["status"] for r in report["results"]]
    n = {s: statuses.count(s) for s in ("pass", "fail", "error", "not_judgeable", "unsupported", "not_applicable")}
    return (f"{len(statuses)} checks: {n['pass']} pass, {n['fail']} fail, {n['error']} error, {n['not_judgeable']} "
            f"not judgeable (not covered), {n['unsupported']} unsupported, {n['not_applicable']} not applicable -> "
            + ("PASSED" if report["passed"] else "FAILED"))


def test_hf_style_example_ends_green_as_documented(tmp_path, monkeypatch, capsys) -> None:
    code, argv, after = example("hf_style_backend.py")
    rc, report = run_example(tmp_path, monkeypatch, "hf_style_backend.py", code, argv)
    assert rc == 0, capsys.readouterr()
    line = summary(report)
    assert line in after.split("```text", 1)[1].split("```", 1)[0], line  # the documented output is this run's
    assert {(r["case"], r["dtype"], r["status"]) for r in report["results"]} == {
        ("model/rows_s257_learned_g", "float32", "pass"), ("model/tiny_v510_switches_exact", "float32", "pass"),
        ("model/rows_s257_learned_g", "bfloat16", "pass"),
        ("model/tiny_v510_switches_exact", "bfloat16", "pass")}
    stages = [s for r in report["results"] if r["case"].endswith("tiny_v510_switches_exact") for s in r["stages"]]
    assert sum(s["status"] == "pass" for s in stages) == 2 * 31  # "every one of the 31 isolated stages"


@pytest.mark.slow
def test_hf_style_failure_example_as_documented(tmp_path, monkeypatch) -> None:
    code, argv, _ = example("hf_style_backend.py")
    broken = code.replace("backend = TorchModuleBackend(StyleForCausalLM,",
                          'backend = TorchModuleBackend(lambda c: StyleForCausalLM(c, bug="softmax_axis"),')
    assert broken != code
    rc, report = run_example(tmp_path, monkeypatch, "hf_style_backend.py", broken, argv)
    assert rc == 1
    assert states(summary(report))
    firsts = {(r["case"], r["dtype"]): r["first_failure"] for r in report["results"]}
    for dtype in ("float32", "bfloat16"):
        ff = firsts[("model/tiny_v510_switches_exact", dtype)]
        assert (ff["stage"], ff["layer"], ff["found_by"]) == ("masked_softmax", 0, "isolation")


@pytest.mark.slow
def test_authors_v510_example(tmp_path, monkeypatch) -> None:
    """The authors' released v510 code through the adapter on the whole default suite, float32 and bfloat16."""
    root = os.environ.get(AUTHORS_ENV)
    if not root:
        pytest.skip(f"set {AUTHORS_ENV} to a clone of github.com/burcgokden/PLDR-LLM-with-KVG-cache to run the "
                    "authors' code (pldr_ref does not vendor it)")
    pytest.importorskip("torchtune", reason="the authors' code uses torchtune's RoPE (pip install torchtune torchao)")
    code, argv, _ = example("v510_backend.py")
    (tmp_path / "authors").symlink_to(Path(root).resolve())  # the docs clone it into ./authors
    rc, report = run_example(tmp_path, monkeypatch, "v510_backend.py", code, argv)
    statuses = [r["status"] for r in report["results"]]
    assert rc == 0 and "fail" not in statuses and "error" not in statuses, [
        (r["case"], r["dtype"], r["reason"]) for r in report["results"] if r["status"] in ("fail", "error")]
    assert states(summary(report))  # the documented verdict numbers are this run's
