"""The arithmetic is passed, never patched (issue 32, item 2): no module attribute of the package is reassigned at
run time, and the emulated arithmetic overrides every primitive of :class:`pldr_ref.ops.Ops`.

The scan (:func:`module_patches`) reads every source file of the package (AST) and reports

* ``setattr(X, ...)`` calls, unless (file, X) is listed in :data:`SETATTR_NOT_ON_MODULES` (objects that are not
  modules, each with the reason);
* assignments (plain, augmented, annotated) and ``del`` of ``<module>.<name>``, where ``<module>`` is a name the
  file binds by importing a module (``import a.b as m``, ``from a import m`` with ``a.m`` a module), or any target
  written through ``sys.modules[...]``, ``globals()[...]`` or ``vars(...)[...]``;
* ``global X`` in a function when the module binds ``X`` to a function or a class (rebinding code at run time).

Each rule has a negative control: a synthetic snippet that does it is flagged.
"""

from __future__ import annotations

import ast
import inspect
import re
import sys
from pathlib import Path

import pldr_ref
from pldr_ref.harness.policy.arithmetic import Arithmetic, EmulatedOps, arithmetic_ops
from pldr_ref.ops import FLOAT64_OPS, PRIMITIVES, Ops

PACKAGE = Path(pldr_ref.__file__).parent

#: ``setattr`` calls of the package on objects that are not modules: (file relative to the package, first argument).
SETATTR_NOT_ON_MODULES = {
    ("harness/pytest_plugin.py", "config"),  # the pytest Config object (the backend chosen on the command line)
    ("adapters/torch_recorder.py", "clone"),  # a copy of a recorded torch value being rebuilt
    ("backends/engine_ops.py", "self"),  # an EngineOps instance's own primitives, set in its __init__
}


def _is_module(name: str) -> bool:
    """Whether ``name`` is a module: a file or package of pldr_ref, or (read without importing) a loaded module."""
    parts = name.split(".")
    if parts[0] == PACKAGE.name:
        path = PACKAGE.joinpath(*parts[1:])
        return path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()
    return name in sys.modules


def _module_names(tree: ast.Module, package: str) -> set[str]:
    """Names the file binds to modules by its imports (``package``: the file's package, for relative imports)."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                names.add(a.asname or a.name.split(".")[0])
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                base = ".".join(parts[: len(parts) - node.level + 1] + ([base] if base else []))
            for a in node.names:
                if a.name != "*" and _is_module(f"{base}.{a.name}"):
                    names.add(a.asname or a.name)
    return names


def _flat(targets: list[ast.expr]) -> list[ast.expr]:
    """Assignment targets with tuples, lists and starred targets unpacked."""
    out: list[ast.expr] = []
    for t in targets:
        if isinstance(t, (ast.Tuple, ast.List)):
            out += _flat(list(t.elts))
        elif isinstance(t, ast.Starred):
            out += _flat([t.value])
        else:
            out.append(t)
    return out


def _sys_modules(node: ast.AST) -> bool:
    return any(isinstance(s, ast.Attribute) and s.attr == "modules" and isinstance(s.value, ast.Name)
               and s.value.id == "sys" for s in ast.walk(node))


def _through_namespace(t: ast.expr) -> bool:
    """A target written through ``sys.modules[...]`` (an entry, or an attribute of one), ``globals()[...]`` or
    ``vars(...)[...]``."""
    if isinstance(t, ast.Attribute):
        return _sys_modules(t.value)
    if isinstance(t, ast.Subscript):
        v = t.value
        return _sys_modules(v) or (isinstance(v, ast.Call) and isinstance(v.func, ast.Name)
                                   and v.func.id in ("globals", "vars"))
    return False


def module_patches(source: str, where: str, package: str = "pldr_ref") -> list[str]:
    """Every run-time reassignment of a module attribute in ``source`` (module docstring), as ``where:line: what``."""
    tree = ast.parse(source)
    modules = _module_names(tree, package)
    code_names = {n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))}
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "setattr" and node.args:
            first = ast.unparse(node.args[0])
            if (where, first) not in SETATTR_NOT_ON_MODULES:
                found.append(f"{where}:{node.lineno}: setattr({first}, ...)")
        targets: list[ast.expr] = []
        if isinstance(node, ast.Assign):
            targets = list(node.targets)
        elif isinstance(node, (ast.AugAssign, ast.AnnAssign)):
            targets = [node.target]
        elif isinstance(node, ast.Delete):
            targets = list(node.targets)
        for t in _flat(targets):
            on_module = isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name) and t.value.id in modules
            if on_module or _through_namespace(t):
                found.append(f"{where}:{node.lineno}: assigns {ast.unparse(t)}")
        if isinstance(node, ast.Global):
            for name in sorted(set(node.names) & code_names):
                found.append(f"{where}:{node.lineno}: global {name} (a module-level function or class)")
    return sorted(set(found))


#: A line that may patch a module (a superset of what :func:`module_patches` flags): only files with one are parsed,
#: which keeps the scan of the whole package under a second.
MAY_PATCH = re.compile(
    r"setattr\(|^\s*global\s|sys\.modules|globals\(\)|\bvars\(|^\s*del\s|"
    r"(?<![\w.])(?!self\b|cls\b)[A-Za-z_]\w*\.[A-Za-z_][\w.]*(?:\s*:[^=\n]+)?\s*(?:[-+*/%&|^@]|//|\*\*|>>|<<)?=(?!=)|"
    r"^\s*[\[(]?\s*[A-Za-z_]\w*\.[\w.]+\s*,[^=\n(]*=(?!=)",  # a tuple target starting with an attribute
    re.M)


def _package_of(path: Path) -> str:
    rel = path.relative_to(PACKAGE.parent).with_suffix("")
    parts = rel.parts[:-1] if rel.name != "__init__" else rel.parts
    return ".".join(parts)


def test_no_module_attribute_is_reassigned_anywhere_in_the_package() -> None:
    files = sorted(PACKAGE.rglob("*.py"))
    assert len(files) > 100  # the whole package is read
    found = []
    for f in files:
        text = f.read_text(encoding="utf-8")
        if MAY_PATCH.search(text):
            found += module_patches(text, f.relative_to(PACKAGE).as_posix(), _package_of(f))
    assert not found, found
    # every allowed setattr still exists (a stale entry would hide a new call on the same name)
    for rel, first in SETATTR_NOT_ON_MODULES:
        assert f"setattr({first}," in (PACKAGE / rel).read_text(encoding="utf-8"), (rel, first)


def test_the_scan_flags_each_way_of_patching_a_module() -> None:
    """Negative controls: the calibration's old swap, an attribute assignment, ``del``, a write through
    ``sys.modules`` / ``globals()``, and a ``global`` rebinding of a function are each flagged."""
    old_swap = (
        "import sys\n"
        "def patch(sites):\n"
        "    for mod, attr, _, new in sites:\n"
        "        setattr(mod, attr, new)\n"
    )
    assert module_patches(old_swap, "x.py") == ["x.py:4: setattr(mod, ...)"]
    ann = "import pldr_ref.layer as layer\ndef f(g):\n    layer.linear: object = g\n"
    assert module_patches(ann, "x.py") == ["x.py:3: assigns layer.linear"]
    assignment = "from pldr_ref import layer\nimport pldr_ref.norms as n\ndef f(g):\n    layer.linear = g\n" \
                 "    n.layer_norm += g\n    del layer.glu\n"
    assert module_patches(assignment, "x.py") == ["x.py:4: assigns layer.linear", "x.py:5: assigns n.layer_norm",
                                                  "x.py:6: assigns layer.glu"]
    unpacked = "from pldr_ref import layer\ndef f(g):\n    layer.linear, x = g, 1\n"
    assert module_patches(unpacked, "x.py") == ["x.py:3: assigns layer.linear"]
    namespace = "import sys\ndef f(g):\n    sys.modules['pldr_ref.layer'].linear = g\n    globals()['h'] = g\n"
    assert len(module_patches(namespace, "x.py")) == 2
    rebinding = "def helper():\n    return 1\ndef swap():\n    global helper\n    helper = len\n"
    assert module_patches(rebinding, "x.py") == ["x.py:4: global helper (a module-level function or class)"]
    # the text prefilter lets every one of them through to the scan
    assert all(MAY_PATCH.search(src) for src in (old_swap, ann, assignment, unpacked, namespace, rebinding))
    # not flagged: attributes of objects that are not modules, a global holding data
    clean = ("import os\n_POOL = None\ndef f(obj, a):\n    global _POOL\n    _POOL = a\n    obj.x = 1\n"
             "    a.flags.writeable = False\n    os.environ['X'] = '1'\n")
    assert module_patches(clean, "x.py") == []


def overridden_wrongly(cls: type) -> list[str]:
    """The primitives of :data:`pldr_ref.ops.PRIMITIVES` that ``cls`` does not define itself, or defines with
    other parameters than the float64 function (``self`` aside)."""
    bad = []
    for name in PRIMITIVES:
        mine = cls.__dict__.get(name)
        if mine is None:
            bad.append(f"{name}: inherited")
            continue
        want = [p for p in inspect.signature(getattr(Ops, name)).parameters]
        got = [p for p in inspect.signature(mine).parameters if p != "self"]
        extra = {"options"} if name == "layer_norm" else set()  # refuses any option it does not implement
        if [p for p in got if p not in extra] != want:
            bad.append(f"{name}: {got} != {want}")
    return bad


def test_emulated_ops_override_every_primitive_with_its_parameters() -> None:
    assert sorted(PRIMITIVES) == sorted(n for n in vars(Ops) if not n.startswith("_"))
    assert overridden_wrongly(EmulatedOps) == []

    class Partial(EmulatedOps):  # negative control: a primitive left to the float64 base class
        pass

    partial = type("Partial", (Ops,), {n: EmulatedOps.__dict__[n] for n in PRIMITIVES if n != "mix_values"})
    assert overridden_wrongly(partial) == ["mix_values: inherited"]
    assert len(overridden_wrongly(Partial)) == len(PRIMITIVES)
    assert arithmetic_ops(Arithmetic("naive", internal=False), "bfloat16") is FLOAT64_OPS
    assert isinstance(arithmetic_ops(Arithmetic("seq"), "bfloat16"), EmulatedOps)
