"""Measure which ``pldr_ref`` functions a check really calls (``sys.settrace`` "call" events), and read the
reductions an operator evaluates out of its own frame (``captured_locals``).

The ``exercises`` column of the coverage table is what :class:`Tracer` recorded, not what a check declares;
the runner fails a check whose declared operators were never called.  The per-example counter behind
"examples reached" is :attr:`Tracer.hits`: calls into the check's declared operators (any ``pldr_ref``
function when a check declares none).
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from types import CodeType, FrameType
from typing import Any

import pldr_ref

#: Folder whose Python functions count as pldr_ref operators.
PLDR_REF_DIR = str(Path(pldr_ref.__file__).resolve().parent)


def _module_name(filename: str) -> str | None:
    """'pldr_ref.norms' for <PLDR_REF_DIR>/norms.py; None outside pldr_ref."""
    try:
        rel = Path(filename).resolve().relative_to(PLDR_REF_DIR)
    except ValueError:
        return None
    parts = list(rel.with_suffix("").parts)
    if parts and parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(["pldr_ref", *parts])


def _functions_of(owner: Any, prefix: str, module: str, seen: set[int]) -> Iterator[tuple[Any, str]]:
    """(function, qualname) of every function defined in ``module`` reachable from ``owner``'s namespace:
    module-level functions, methods (static, class, properties) and those of nested classes."""
    if id(owner) in seen:
        return
    seen.add(id(owner))
    for name, value in vars(owner).items():
        target = value
        if isinstance(target, (staticmethod, classmethod)):
            target = target.__func__
        if isinstance(target, property):
            for accessor in (target.fget, target.fset, target.fdel):
                if accessor is not None and getattr(accessor, "__module__", None) == module:
                    yield accessor, f"{prefix}{name}"
            continue
        while hasattr(target, "__wrapped__"):  # functools.wraps: the code that runs is the wrapped one's too
            if getattr(target, "__module__", None) == module and hasattr(target, "__code__"):
                yield target, f"{prefix}{name}"
            target = target.__wrapped__
        if getattr(target, "__module__", None) != module:
            continue
        if isinstance(target, type):
            yield from _functions_of(target, f"{prefix}{name}.", module, seen)
        elif hasattr(target, "__code__"):
            yield target, f"{prefix}{name}"


def _qualname_without_co_qualname(code: Any, module: str) -> str:
    """A function's qualified name found from its module (Python 3.10 code objects have no ``co_qualname``).

    Functions and methods reachable from the module namespace are matched by (name, first line); anything else
    (a closure, a lambda) is named ``<local>.name``, which :meth:`Tracer.public_called` leaves out as Python 3.11's
    ``outer.<locals>.name`` is.
    """
    mod = sys.modules.get(module)
    if mod is not None:
        key = (code.co_name, code.co_firstlineno)
        for fn, qualname in _functions_of(mod, "", module, set()):
            if (fn.__code__.co_name, fn.__code__.co_firstlineno) == key:
                return qualname
    return f"<local>.{code.co_name}"


def qualified_name(code: Any, module: str) -> str:
    """The qualified name of ``code``: ``co_qualname`` (Python >= 3.11), else looked up in ``module``."""
    qualname = getattr(code, "co_qualname", None)
    return qualname if qualname is not None else _qualname_without_co_qualname(code, module)


#: Code objects of stand-in functions (operator mutants) -> the pldr_ref operator they replace.
ALIASES: dict[CodeType, str] = {}


class Tracer:
    """Trace hook recording every pldr_ref function called (``module.qualname``) while installed."""

    def __init__(self, targets: frozenset[str] = frozenset()) -> None:
        self.targets = targets
        self.called: set[str] = set()
        self.hits = 0
        self.captures: dict[str, list[dict[str, Any]]] = {}
        self._names: dict[CodeType, str | None] = {}
        self._previous: Any = None

    def _name(self, code: CodeType) -> str | None:
        alias = ALIASES.get(code)
        if alias is not None:
            return alias
        try:
            return self._names[code]
        except KeyError:
            module = _module_name(code.co_filename)
            name = None if module is None else f"{module}.{qualified_name(code, module)}"
            self._names[code] = name
            return name

    def __call__(self, frame: FrameType, event: str, arg: Any) -> None:
        if event == "call":
            name = self._name(frame.f_code)
            if name is not None:
                self.called.add(name)
                if not self.targets or name in self.targets:
                    self.hits += 1
        elif event == "return" and self.captures:
            name = self._name(frame.f_code)
            if name in self.captures:
                self.captures[name].append(dict(frame.f_locals))

    def _hook(self) -> Callable[[FrameType, str, Any], Any]:
        """The global trace function installed by :meth:`__enter__` (``sys.settrace``): :meth:`__call__`'s
        events, with the code -> name cache read first.

        A global trace function sees one "call" event per Python frame and nothing else (no C calls, no lines);
        a frame's "return" is observed only for the operators whose locals are captured (a local trace function
        with line events off).  A profile hook would run on every call and return of every Python and C function
        as well, which made the traced sympy checks about ten times slower than untraced."""
        names, lookup, called, captures = self._names, self._name, self.called, self.captures

        def on_return(frame: FrameType, event: str, arg: Any) -> Any:
            if event == "return":
                name = lookup(frame.f_code)
                if name in captures:
                    captures[name].append(dict(frame.f_locals))
            return on_return

        def hook(frame: FrameType, event: str, arg: Any) -> Any:
            if event != "call":
                return None
            code = frame.f_code
            name = names[code] if code in names and code not in ALIASES else lookup(code)
            if name is None:
                return None
            called.add(name)
            if not self.targets or name in self.targets:
                self.hits += 1
            if captures and name in captures:
                frame.f_trace_lines = False
                return on_return
            return None

        return hook

    def __enter__(self) -> Tracer:
        self._previous = sys.gettrace()
        sys.settrace(self._hook())
        _STACK.append(self)
        return self

    def __exit__(self, *exc: object) -> None:
        _STACK.pop()
        sys.settrace(self._previous)

    def public_called(self) -> tuple[str, ...]:
        """Called pldr_ref functions without private or nested components, sorted."""
        return tuple(sorted(n for n in self.called if "<" not in n and not any(
            p.startswith("_") for p in n.split("."))))


_STACK: list[Tracer] = []


def active() -> Tracer | None:
    """The innermost installed tracer, if any."""
    return _STACK[-1] if _STACK else None


@contextlib.contextmanager
def ensure_tracer() -> Iterator[Tracer]:
    """The active tracer, or a fresh one installed for the duration."""
    current = active()
    if current is not None:
        yield current
        return
    with Tracer() as tracer:
        yield tracer


@contextlib.contextmanager
def captured_locals(qualified: str) -> Iterator[list[dict[str, Any]]]:
    """Collect the local variables of every return of the pldr_ref function ``qualified`` (e.g.
    ``pldr_ref.norms.layer_norm``) inside the block: the values the operator itself evaluated."""
    with ensure_tracer() as tracer:
        frames: list[dict[str, Any]] = []
        previous = tracer.captures.get(qualified)
        tracer.captures[qualified] = frames
        try:
            yield frames
        finally:
            if previous is None:
                del tracer.captures[qualified]
            else:
                tracer.captures[qualified] = previous
                previous.extend(frames)
