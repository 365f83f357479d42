"""Golden parameter names -> a wrapped module's parameter names (the ``params`` declaration of
:class:`~pldr_ref.adapters.torch_module.TorchModuleBackend`).

Golden parameters carry the PyTorch-v510 state-dict names (``decoder.dec_layers.0.mha1.wq.weight``,
:func:`pldr_ref.params.param_shapes`).  A declaration is ``None`` (the module uses them), a dict of name patterns
(``{"decoder.dec_layers.{l}.mha1.wq.": "blocks.{l}.attn.q_lin."}``: longest pattern first, ``{x}`` matches a
number, the rest of the name is kept) or a function ``golden name -> module name`` (None: not used).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping

from pldr_ref.adapters.torch_recorder import AdapterError

#: How many names an error message lists before "(+N)".
LISTED = 6


def name_mapper(params: Mapping[str, str] | Callable[[str], str | None] | None) -> Callable[[str], str | None]:
    """``golden name -> module name`` from the ``params`` declaration (see the module docstring)."""
    if params is None:
        return lambda name: name
    if callable(params):
        return params
    rules = []
    for pattern, target in sorted(params.items(), key=lambda kv: -len(kv[0])):
        rx = "^" + "".join(f"(?P<{m.group(1)}>\\d+)" if m.group(1) else re.escape(m.group(0))
                           for m in re.finditer(r"\{(\w+)\}|[^{]+|\{", pattern))
        rules.append((re.compile(rx), target))

    def mapped(name: str) -> str | None:
        for rx, target in rules:
            m = rx.match(name)
            if m:
                return target.format(**m.groupdict()) + name[m.end():]
        return name
    return mapped



def _listing(items: list[str]) -> str:
    return ", ".join(items[:LISTED]) + (f" (+{len(items) - LISTED})" if len(items) > LISTED else "")


def map_params(own: Mapping[str, tuple[int, ...]], shapes: Mapping[str, tuple[int, ...]],
               rename: Callable[[str], str | None]) -> dict[str, str]:
    """golden name -> module name for every golden parameter (``shapes``) the module (``own``: its parameter names
    and shapes) uses; ``AdapterError`` listing the golden names mapped to nothing, the module parameters no golden
    name fills, and shape mismatches."""
    names, unknown, wrong = {}, [], []
    for gname, shape in shapes.items():
        mname = rename(gname)
        if mname is None:
            continue
        if mname not in own:
            unknown.append(f"{gname} -> {mname}")
            continue
        if tuple(own[mname]) != tuple(shape):
            wrong.append(f"{gname} {tuple(shape)} -> {mname} {tuple(own[mname])}")
        names[gname] = mname
    unfilled = sorted(set(own) - set(names.values()))
    problems = []
    if unknown:
        problems.append("golden parameters mapped to no module parameter: " + _listing(unknown))
    if unfilled:
        problems.append("module parameters no golden parameter fills: " + _listing(unfilled))
    if wrong:
        problems.append("shape mismatches: " + _listing(wrong))
    if problems:
        raise AdapterError("parameter map: " + "; ".join(problems))
    return names
