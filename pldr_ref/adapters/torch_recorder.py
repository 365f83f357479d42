"""One recorded forward of a wrapped ``nn.Module``: forward hooks and a ``TorchFunctionMode`` that capture the
sources of a stage map (:mod:`pldr_ref.adapters.stage_map`) and, for stage isolation, replace some of them by
given values.

A :class:`Recording` lives for exactly one forward: through a pre-hook and a hook on every submodule
(:class:`ModuleHooks`, installed once per module and idle between recordings) it knows the innermost running
module, counts each module's calls and reads its arguments and return value, and, while a
module named by a :class:`~pldr_ref.adapters.stage_map.Call` runs, a function mode that counts the torch functions
each module calls directly; on exit the hooks go idle and every mode is left, whatever the forward did, so nothing
is shared between two forwards.  torch is passed in (the caller
imports it lazily).
"""

from __future__ import annotations

import collections
from collections.abc import Callable, Mapping
from typing import Any

from pldr_ref.adapters.stage_map import Input, Output, Source, function_name


class AdapterError(Exception):
    """A wrapped module misbehaved or its declaration does not fit it; the message names the module and stage."""


def pick_value(value: Any, pick: tuple[Any, ...]) -> Any:
    """``value[p0][p1]...`` for int indices / keys, ``getattr`` for names a mapping does not hold."""
    for p in pick:
        value = getattr(value, p) if isinstance(p, str) and not isinstance(value, Mapping) else value[p]
    return value


def replace_value(value: Any, pick: tuple[Any, ...], new: Any) -> Any:
    """A copy of ``value`` with ``value[pick...]`` set to ``new`` (tuples rebuilt, lists and dicts copied,
    objects with attributes copied shallowly)."""
    if not pick:
        return new
    head, rest = pick[0], pick[1:]
    if isinstance(value, tuple):
        items = list(value)
        items[head] = replace_value(items[head], rest, new)
        return type(value)(*items) if hasattr(value, "_fields") else tuple(items)
    if isinstance(value, list):
        items = list(value)
        items[head] = replace_value(items[head], rest, new)
        return items
    if isinstance(value, Mapping):
        copy = type(value)(value) if hasattr(value, "keys") else dict(value)
        copy[head] = replace_value(value[head], rest, new)
        return copy
    import copy as copy_module

    clone = copy_module.copy(value)
    setattr(clone, head, replace_value(getattr(value, head), rest, new))
    return clone


class Recording:
    """Capture (and optionally replace) the sources of ``sources`` (trace name -> expanded source) during one
    forward of the module ``hooks`` watches; used as a context manager around the forward.  ``stop_after``: trace
    names whose capture ends the forward early (:class:`StopForward`, raised from a hook).

    ``replacements``: trace name -> a function ``original tensor -> replacement tensor`` (already in the module's
    layout and dtype).  After the forward, :attr:`captured` holds trace name -> tensor in the module's layout,
    :attr:`hits` the sources that were reached, :attr:`function_calls` (module, function) -> count, and
    :attr:`stack` the modules still running when an exception escaped (innermost last).
    """

    def __init__(self, torch: Any, hooks: ModuleHooks, sources: Mapping[str, Source],
                 replacements: Mapping[str, Callable[[Any], Any]] | None = None,
                 stop_after: set[str] | None = None) -> None:
        self.torch, self.hooks = torch, hooks
        self.stop_after = set(stop_after or ())
        self.replacements = dict(replacements or {})
        self.captured: dict[str, Any] = {}
        self.hits: set[str] = set()
        self.stack: list[tuple[str, int]] = []
        self.module_calls: collections.Counter = collections.Counter()
        self.function_calls: collections.Counter = collections.Counter()
        self.paused = False
        self._modes: list[Any] = []
        self._mode_type: Any = None
        self._outputs: dict[tuple[str, int], list[tuple[str, Output]]] = collections.defaultdict(list)
        self._inputs: dict[tuple[str, int], list[tuple[str, Input]]] = collections.defaultdict(list)
        self._calls: dict[tuple[str, str, int], str] = {}
        self._call_modules: set[str] = set()
        for name, src in sources.items():
            if isinstance(src, Output):
                self._outputs[(src.module, src.call)].append((name, src))
            elif isinstance(src, Input):
                self._inputs[(src.module, src.call)].append((name, src))
            else:
                self._calls[(src.module, src.name, src.index)] = name
                self._call_modules.add(src.module)

    # ------------------------------------------------------------------ capture helpers
    def _keep(self, name: str, value: Any, where: str) -> Any:
        """Record ``value`` under ``name`` (a private copy) and return its replacement, if any."""
        if not isinstance(value, self.torch.Tensor):
            raise AdapterError(f"stage map entry {name!r}: {where} is a {type(value).__name__}, not a tensor")
        self.hits.add(name)
        self.captured[name] = value.detach().clone()
        swap = self.replacements.get(name)
        return None if swap is None else swap(value)

    def pre(self, path: str, args: tuple, kwargs: dict) -> Any:
        """Forward pre-hook of module ``path``: count the call, push it, capture / replace its arguments."""
        index = self.module_calls[path]
        self.module_calls[path] += 1
        self.stack.append((path, index))
        if path in self._call_modules:  # record function calls only while a watched module runs
            mode = self._mode_type()
            mode.__enter__()
            self._modes.append(mode)
        wanted = self._inputs.get((path, index))
        if not wanted:
            return None
        self.paused = True
        try:
            args, kwargs, changed = list(args), dict(kwargs), False
            for name, src in wanted:
                holder = kwargs if isinstance(src.arg, str) else args
                if (isinstance(src.arg, int) and src.arg >= len(args)) or (isinstance(src.arg, str) and (
                        src.arg not in kwargs)):
                    raise AdapterError(f"stage map entry {name!r}: module {path!r} was called without "
                                       f"argument {src.arg!r}")
                new = self._keep(name, pick_value(holder[src.arg], src.pick), src.describe())
                if new is not None:
                    holder[src.arg] = replace_value(holder[src.arg], src.pick, new)
                    changed = True
            if self.stop_after and self.stop_after <= self.hits:
                raise StopForward
            return (tuple(args), kwargs) if changed else None
        finally:
            self.paused = False

    def post(self, path: str, output: Any) -> Any:
        """Forward hook of module ``path``: pop the call, capture / replace its return value."""
        _, index = self.stack.pop()
        if path in self._call_modules:
            self._modes.pop().__exit__(None, None, None)
        wanted = self._outputs.get((path, index))
        if not wanted:
            return None
        self.paused = True
        try:
            changed = False
            for name, src in wanted:
                try:
                    value = pick_value(output, src.pick)
                except (IndexError, KeyError, AttributeError, TypeError) as exc:
                    raise AdapterError(f"stage map entry {name!r}: cannot select {src.pick!r} in the output of "
                                       f"module {path!r} ({type(exc).__name__}: {exc})") from None
                new = self._keep(name, value, src.describe())
                if new is not None:
                    output = replace_value(output, src.pick, new)
                    changed = True
            if self.stop_after and self.stop_after <= self.hits:
                raise StopForward
            return output if changed else None
        finally:
            self.paused = False

    def _on_function(self, func: Any, args: tuple, kwargs: dict) -> Any:
        if self.paused:
            return func(*args, **kwargs)
        path = self.stack[-1][0] if self.stack else ""
        fname = function_name(getattr(func, "__name__", str(func)))
        key = (path, fname)
        index = self.function_calls[key]
        self.function_calls[key] += 1
        name = self._calls.get((path, fname, index))
        if name is None:
            return func(*args, **kwargs)
        out = func(*args, **kwargs)
        self.paused = True
        try:
            new = self._keep(name, out, f"call #{index} of {fname!r} inside module {path!r}")
        finally:
            self.paused = False
        if self.stop_after and self.stop_after <= self.hits:
            raise StopForward
        return out if new is None else new

    # ------------------------------------------------------------------ context manager
    def __enter__(self) -> Recording:
        torch = self.torch
        recording = self

        class _Mode(torch.overrides.TorchFunctionMode):
            def __torch_function__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
                return recording._on_function(func, args, kwargs or {})

        self._mode_type = _Mode
        self.hooks.current = self
        return self

    def __exit__(self, *exc: Any) -> None:
        self.hooks.current = None
        while self._modes:  # a module that raised left its mode entered
            self._modes.pop().__exit__(None, None, None)


class StopForward(BaseException):
    """Raised once every wanted source is captured (stage isolation): the rest of the forward is not needed."""


class ModuleHooks:
    """A pre-hook and a hook on every submodule of ``module``, installed once, that forward to the
    :class:`Recording` in progress (:attr:`current`) and do nothing between recordings."""

    def __init__(self, module: Any) -> None:
        self.current: Recording | None = None
        self.handles = []
        for path, mod in module.named_modules():
            self.handles.append(mod.register_forward_pre_hook(self._pre(path), with_kwargs=True))
            self.handles.append(mod.register_forward_hook(self._post(path), with_kwargs=True))

    def _pre(self, path: str) -> Callable:
        def hook(mod: Any, args: tuple, kwargs: dict) -> Any:
            return None if self.current is None else self.current.pre(path, args, kwargs)
        return hook

    def _post(self, path: str) -> Callable:
        def hook(mod: Any, args: tuple, kwargs: dict, output: Any) -> Any:
            return None if self.current is None else self.current.post(path, output)
        return hook

    def remove(self) -> None:
        """Remove every hook."""
        for h in self.handles:
            h.remove()
        self.handles.clear()
