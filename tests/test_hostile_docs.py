"""Newcomer traps and misleading output (issue 21 items 9, 10): the guide's example backend, copied verbatim,
ends green; ``accuracy --out F.json`` writes JSON; a file whose bytes do not match its suffix is named as what
it is."""

from __future__ import annotations

import json
import re
import shlex
import sys
from pathlib import Path

import numpy as np
import pytest

from pldr_ref import PLDRConfig, init_params
from pldr_ref.checkpoint import load_state_dict, save_state_dict
from pldr_ref.cli import main

DOCS = Path(__file__).resolve().parents[1] / "docs"


def guide_example() -> tuple[str, list[str]]:
    """(my_backend.py, the validate command) exactly as docs/backends.md section 3 prints them."""
    text = (DOCS / "backends.md").read_text(encoding="utf-8")
    section = text[text.index("## 3. Write your backend"):text.index("## 4.")]
    code = next(b for b in re.findall(r"```python\n(.*?)```", section, re.S) if b.startswith("# my_backend.py"))
    (command,) = re.findall(r"```bash\n(.*?)```", section, re.S)
    return code, shlex.split(command)


def test_backends_guide_example_ends_green(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                           capsys: pytest.CaptureFixture) -> None:
    code, command = guide_example()
    assert command[:2] == ["pldr-ref", "validate"]
    (tmp_path / "my_backend.py").write_text(code, encoding="utf-8")
    monkeypatch.chdir(tmp_path)  # "Save it as my_backend.py": the module is imported from the current folder
    monkeypatch.delitem(sys.modules, "my_backend", raising=False)
    assert main([*command[1:], "--quiet"]) == 0, capsys.readouterr()
    report = json.loads((tmp_path / "my.json").read_text())
    assert report["passed"] is True
    statuses = {r["status"] for r in report["results"]}
    assert "pass" in statuses and statuses <= {"pass", "unsupported", "not_judgeable"}
    # "not covered" (an output the dtype cannot resolve end to end) is never a pass and never a failure
    assert all(r["reason"].startswith("not covered") for r in report["results"] if r["status"] == "not_judgeable")
    assert (tmp_path / "my.xml").is_file()


def test_accuracy_out_json_writes_json(tmp_path: Path) -> None:
    argv = ["accuracy", "--configs", "tiny", "--seeds", "0", "--seq-len", "2", "--quiet"]
    assert main([*argv, "--out", str(tmp_path / "a.json")]) == 0
    doc = json.loads((tmp_path / "a.json").read_text())
    assert doc["schema"] == "pldr-ref-accuracy/1"
    stages = doc["tables"][-1]["stages"]
    assert doc["tables"][-1]["title"] == "all configs pooled" and "logits" in stages
    assert stages["logits"]["values"] == 2 * 2 * 64 and stages["logits"]["max_ulp"] >= 0
    # the suffix decides unless --format says otherwise; markdown stays the default
    assert main([*argv, "--out", str(tmp_path / "a.md")]) == 0
    assert (tmp_path / "a.md").read_text().startswith("float64 tier vs exact tier")
    assert main([*argv, "--out", str(tmp_path / "b.txt"), "--format", "json"]) == 0
    assert json.loads((tmp_path / "b.txt").read_text())["tables"] == doc["tables"]


@pytest.mark.parametrize(("suffix", "what"), [(".npz", "a safetensors file"), (".safetensors", "a zip")])
def test_a_renamed_checkpoint_is_named_as_what_it_is(tmp_path: Path, suffix: str, what: str) -> None:
    config = PLDRConfig.preset("tiny")
    params = init_params(config)
    real = tmp_path / ("model.safetensors" if suffix == ".npz" else "model.npz")
    save_state_dict(params, real)
    renamed = real.rename(tmp_path / f"renamed{suffix}")
    with pytest.raises(ValueError, match=rf"renamed\{suffix}.*{what}") as info:
        load_state_dict(renamed, config)
    assert "pickled" not in str(info.value)
    # negative control: the file under its own suffix loads
    back = renamed.rename(real)
    assert np.array_equal(load_state_dict(back, config)["final_layer.bias"], params["final_layer.bias"])
