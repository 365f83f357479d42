"""Issue 22 item 5: no import cycle inside pldr_ref, deferred or not.

The graph has one node per module of the package and one edge per ``import`` statement naming another pldr_ref
module, wherever the statement stands (module level or inside a function: an import inside a function that hides a
cycle is still a cycle, it only moves the failure to call time).  ``from pkg import name`` is an edge to the
submodule ``pkg.name`` when that is a module, else to the package ``pkg`` (whose ``__init__`` runs).  An import
under ``if TYPE_CHECKING:`` is no edge: it never executes (the type checker reads it, the interpreter does not),
which is how a low-level module names :class:`pldr_ref.ops.Ops` in an annotation.
"""

from __future__ import annotations

import ast
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def module_names(package_dir: Path) -> dict[str, Path]:
    """Dotted module name -> file, for every ``.py`` file under ``package_dir`` (packages by their ``__init__``)."""
    out = {}
    for path in sorted(package_dir.rglob("*.py")):
        parts = path.relative_to(package_dir.parent).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = path
    return out


def import_graph(package_dir: Path) -> dict[str, set[str]]:
    """module -> the package modules it imports anywhere in its source (see the module docstring)."""
    mods = module_names(package_dir)
    graph: dict[str, set[str]] = {m: set() for m in mods}
    for name, path in mods.items():
        here = name if path.name == "__init__.py" else name.rpartition(".")[0]
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        typing_only = {id(n) for block in ast.walk(tree) if _is_type_checking_block(block)
                       for stmt in block.body for n in ast.walk(stmt)}
        for node in ast.walk(tree):
            if id(node) in typing_only:
                continue
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:  # relative import: resolve against this module's package
                    anchor = here.split(".")[: len(here.split(".")) - node.level + 1]
                    base = ".".join(anchor + ([base] if base else []))
                targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in mods else base for a in node.names]
            else:
                continue
            graph[name].update(t for t in targets if t in mods and t != name)
    return graph


def _is_type_checking_block(node: ast.AST) -> bool:
    """``if TYPE_CHECKING:`` or ``if typing.TYPE_CHECKING:``."""
    if not isinstance(node, ast.If):
        return False
    t = node.test
    return (isinstance(t, ast.Name) and t.id == "TYPE_CHECKING") or (
        isinstance(t, ast.Attribute) and t.attr == "TYPE_CHECKING")


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan, iterative), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            v, it = work[-1]
            for w in it:
                if w not in index:
                    index[w] = low[w] = counter
                    counter += 1
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(sorted(graph[w]))))
                    break
                if w in on_stack:
                    low[v] = min(low[v], index[w])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[v])
                if low[v] == index[v]:
                    comp = []
                    while True:
                        w = stack.pop()
                        on_stack.discard(w)
                        comp.append(w)
                        if w == v:
                            break
                    if len(comp) > 1:
                        found.append(sorted(comp))
    return sorted(found)


def test_pldr_ref_has_no_import_cycle():
    graph = import_graph(ROOT / "pldr_ref")
    assert len(graph) > 100  # the scan found the package
    assert any("pldr_ref.layer" in deps for deps in graph.values())
    found = cycles(graph)
    assert not found, "import cycles (module-level or inside functions):\n" + "\n".join(" <-> ".join(c) for c in found)


def test_deferred_cycle_is_detected(tmp_path):
    """Negative control: a cycle hidden by an import inside a function, and one through a relative import."""
    pkg = tmp_path / "toy"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "sub" / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from toy.b import f\n")
    (pkg / "b.py").write_text(textwrap.dedent("""
        def f():
            from toy import a  # deferred: still a cycle
            return a
    """))
    (pkg / "sub" / "c.py").write_text("from . import d\n")
    (pkg / "sub" / "d.py").write_text("def g():\n    from .c import x\n")
    (pkg / "e.py").write_text("from toy.a import f\n")  # imports into a cycle, is not part of it
    (pkg / "f.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from toy.g import T\n")
    (pkg / "g.py").write_text("from toy import f\nT = int\n")  # f -> g only for the type checker: no cycle
    (pkg / "h.py").write_text("import typing\nif typing.TYPE_CHECKING:\n    pass\nelse:\n    from toy import i\n")
    (pkg / "i.py").write_text("def k():\n    from toy import h\n")  # the else branch runs: a cycle
    assert cycles(import_graph(pkg)) == [["toy.a", "toy.b"], ["toy.h", "toy.i"], ["toy.sub.c", "toy.sub.d"]]


def test_acyclic_toy_package_passes(tmp_path):
    pkg = tmp_path / "toy"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("from toy import low\n")
    (pkg / "low.py").write_text("import math\n")
    (pkg / "high.py").write_text("def f():\n    from toy.low import math\n")
    assert cycles(import_graph(pkg)) == []
