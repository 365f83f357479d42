"""Issue 32 item 5: the harness is split by job, and the layers import downwards only.

``pldr_ref/harness/`` holds the public API (``validate``, ``protocol``, ``cli`` ...), ``verdict/`` how one case is
judged, ``policy/`` the pass/fail policy (tolerances, calibration ensemble, emulated arithmetic, calibration
store), ``controls/`` the mutants, battery and verdict power, ``tools/`` the report and figure tools.  Read from
the source (AST, nothing imported): neither the API, the verdict nor the policy reaches the controls or the tools,
through any chain of imports, deferred ones included; no folder holds more than :data:`MAX_MODULES` modules.
"""

from __future__ import annotations

import functools
import textwrap
from pathlib import Path

from test_import_graph import import_graph as _import_graph

ROOT = Path(__file__).resolve().parents[1]
#: The most modules (``__init__`` not counted) one harness folder may hold.
MAX_MODULES = 12
#: The subpackages of ``<pkg>.harness``; every other module of it is the public API.
SUBPACKAGES = ("verdict", "policy", "controls", "tools")
#: The subpackages that the API, the verdict and the policy must not reach.
FORBIDDEN = ("controls", "tools")


@functools.cache
def import_graph(package_dir: Path) -> dict[str, set[str]]:
    """:func:`test_import_graph.import_graph`, parsed once per package folder in this process."""
    return _import_graph(package_dir)


def group(module: str, harness: str) -> str:
    """``api`` or the subpackage name for a module of ``harness`` (dotted)."""
    first = module[len(harness):].lstrip(".").split(".")[0]
    return first if first in SUBPACKAGES else "api"


def forbidden_chains(package_dir: Path, harness: str) -> list[list[str]]:
    """Every import chain (shortest, one per start module) from an API, verdict or policy module of ``harness``
    to a module of its controls or tools."""
    graph = import_graph(package_dir)
    mods = {m for m in graph if m == harness or m.startswith(harness + ".")}
    found = []
    for start in sorted(m for m in mods if group(m, harness) not in FORBIDDEN):
        parent = {start: ""}
        queue = [start]
        while queue:
            node = queue.pop(0)
            if node in mods and group(node, harness) in FORBIDDEN:
                chain = [node]
                while parent[chain[-1]]:
                    chain.append(parent[chain[-1]])
                found.append(chain[::-1])
                break
            for nxt in sorted(graph[node]):
                if nxt not in parent:
                    parent[nxt] = node
                    queue.append(nxt)
    return found


def crowded_folders(harness_dir: Path, limit: int = MAX_MODULES) -> dict[str, int]:
    """Folders under ``harness_dir`` (itself included) holding more than ``limit`` modules, with their count."""
    counts = {}
    for folder in [harness_dir, *sorted(p for p in harness_dir.rglob("*") if p.is_dir())]:
        n = sum(1 for p in folder.glob("*.py") if p.name != "__init__.py")
        if n > limit:
            counts[str(folder.relative_to(harness_dir.parent))] = n
    return counts


def test_api_verdict_and_policy_reach_neither_controls_nor_tools():
    chains = forbidden_chains(ROOT / "pldr_ref", "pldr_ref.harness")
    assert not chains, "\n".join(" -> ".join(c) for c in chains)


def test_the_groups_are_the_documented_ones():
    graph = import_graph(ROOT / "pldr_ref")
    groups = {}
    for m in graph:
        if m.startswith("pldr_ref.harness."):
            groups.setdefault(group(m, "pldr_ref.harness"), set()).add(m.rpartition(".")[2])
    assert set(groups) == {"api", "verdict", "policy", "controls", "tools"}
    assert {"validate", "protocol", "cli", "pytest_plugin"} <= groups["api"]
    assert {"tolerance", "ensemble", "arithmetic", "calibration"} <= groups["policy"]
    assert {"mutants", "battery"} <= groups["controls"]
    assert {"compare", "localize"} <= groups["verdict"]
    assert (ROOT / "pldr_ref" / "harness" / "policy" / "calibration.json").is_file()


def test_no_harness_folder_is_crowded():
    assert crowded_folders(ROOT / "pldr_ref" / "harness") == {}


def _write(root: Path, files: dict[str, str]) -> None:
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text), encoding="utf-8")


def test_the_checker_flags_a_synthetic_upward_edge(tmp_path):
    """Negative control: a policy module importing a mutant (deferred, inside a function), and an API module
    reaching a tool through a verdict module, are flagged with their chains; a folder of 13 modules is crowded."""
    _write(tmp_path, {
        "toy/__init__.py": "",
        "toy/harness/__init__.py": "",
        "toy/harness/validate.py": "from toy.harness.verdict import judge\n",
        "toy/harness/verdict/__init__.py": "",
        "toy/harness/verdict/judge.py": "from toy.harness.tools.figures import draw\n",
        "toy/harness/policy/__init__.py": "",
        "toy/harness/policy/tolerance.py": """
            def allowance():
                from toy.harness.controls import mutants
                return mutants
        """,
        "toy/harness/controls/__init__.py": "",
        "toy/harness/controls/mutants.py": "from toy.harness.policy import tolerance\n",  # downwards: allowed
        "toy/harness/tools/__init__.py": "",
        "toy/harness/tools/figures.py": "def draw():\n    pass\n",
    })
    chains = forbidden_chains(tmp_path / "toy", "toy.harness")
    assert ["toy.harness.policy.tolerance", "toy.harness.controls.mutants"] in chains
    assert ["toy.harness.validate", "toy.harness.verdict.judge", "toy.harness.tools.figures"] in chains
    assert not any(c[0].startswith(("toy.harness.controls", "toy.harness.tools")) for c in chains)
    _write(tmp_path, {f"toy/harness/verdict/m{i}.py": "" for i in range(12)})
    assert crowded_folders(tmp_path / "toy" / "harness") == {"harness/verdict": 13}


def test_the_checker_passes_a_layered_toy(tmp_path):
    _write(tmp_path, {
        "toy/__init__.py": "",
        "toy/harness/__init__.py": "",
        "toy/harness/validate.py": "from toy.harness.policy import tolerance\n",
        "toy/harness/policy/__init__.py": "",
        "toy/harness/policy/tolerance.py": "",
        "toy/harness/tools/__init__.py": "",
        "toy/harness/tools/figures.py": "from toy.harness import validate\n",
    })
    assert forbidden_chains(tmp_path / "toy", "toy.harness") == []
