"""The stage map of a wrapped model: where each golden trace entry lives inside an ``nn.Module``.

A stage map is a dict from golden trace names (``embed``, ``x0``, ``layers.{l}.q`` ..., ``logits``; ``{l}`` is the
layer index) to a *source*:

* :class:`Output` -- the value a module returns (``pick`` selects inside a tuple / list / dict / attribute);
* :class:`Input` -- an argument a module is called with (``arg``: a position or keyword, then ``pick``);
* :class:`Call` -- the result of a torch function (``torch.pow``, ``F.softmax``, ``torch.matmul``, ``a + b`` ...)
  called directly in a module's ``forward`` or its methods (not inside one of its submodules), selected by order.

Each source selects the ``call``-th call of its module (a module called twice per forward, e.g. a rotary
embedding applied to queries then keys) and converts the module's layout to the golden one (:data:`LAYOUTS`).
Module paths use ``{l}`` for the layer; everything here is plain data (no torch), checked by
:func:`expand_stage_map` and, on a real module, by the adapter's dry run.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from pldr_ref.layer import LAYER_STAGES
from pldr_ref.registry import stage_of_output

#: Layouts a source may have, and how the golden layout follows from it.  ``same``: the golden layout;
#: ``bshd``: heads ``[B, S, H, d_k]`` (golden ``[B, H, S, d_k]``); ``bs(hd)``: heads not yet split,
#: ``[B, S, H * d_k]``, head h in columns ``h*d_k .. (h+1)*d_k - 1``.
LAYOUTS: Mapping[str, str] = {
    "same": "the golden layout",
    "bshd": "[B, S, H, d_k], golden [B, H, S, d_k]",
    "bs(hd)": "[B, S, H*d_k] before the head split, golden [B, H, S, d_k]",
}

#: Model-level trace entries, in forward order (the layer entries are ``layers.{l}.{LAYER_STAGES}``).
MODEL_ENTRIES = ("embed", "x0", "logits")

#: Operator spellings that are the same function for a :class:`Call` (``a / b`` is ``div``, ``b + a`` is ``add``).
_ALIASES = {"truediv": "div", "rtruediv": "div", "radd": "add", "rmul": "mul", "rsub": "sub", "rpow": "pow",
            "rmatmul": "matmul"}


def function_name(name: str) -> str:
    """The normalized name a :class:`Call` matches: the last dotted part, dunder underscores stripped, operator
    spellings merged (``torch.pow``, ``Tensor.pow``, ``a ** b`` -> ``pow``; ``F.softmax`` -> ``softmax``)."""
    base = name.rsplit(".", 1)[-1].strip("_")
    return _ALIASES.get(base, base)


def _check_common(where: str, module: str, call: int, layout: str) -> None:
    if not isinstance(module, str):
        raise ValueError(f"{where}: module path must be a string, got {module!r}")
    if not isinstance(call, int) or isinstance(call, bool) or call < 0:
        raise ValueError(f"{where}: call must be an int >= 0, got {call!r}")
    if layout not in LAYOUTS:
        raise ValueError(f"{where}: layout {layout!r} is not one of {tuple(LAYOUTS)}")


@dataclasses.dataclass(frozen=True)
class Output:
    """The value module ``module`` returns on its ``call``-th call of a forward; ``pick``: indices (tuple / list)
    or keys / attribute names (dict, HF ``ModelOutput``) applied in turn."""

    module: str
    pick: tuple[Any, ...] = ()
    call: int = 0
    layout: str = "same"

    def __post_init__(self) -> None:
        _check_common(f"Output({self.module!r})", self.module, self.call, self.layout)

    def describe(self) -> str:
        """How the source reads in an error message."""
        return f"output{''.join(f'[{p!r}]' for p in self.pick)} of module {self.module!r}" + (
            f" (call {self.call})" if self.call else "")


@dataclasses.dataclass(frozen=True)
class Input:
    """An argument of module ``module``'s ``call``-th call: ``arg`` is a position (int) or keyword (str), then
    ``pick`` selects inside it (the released v510 layers take one list ``[q, k, v, A, mask]``)."""

    module: str
    arg: int | str = 0
    pick: tuple[Any, ...] = ()
    call: int = 0
    layout: str = "same"

    def __post_init__(self) -> None:
        _check_common(f"Input({self.module!r})", self.module, self.call, self.layout)

    def describe(self) -> str:
        """How the source reads in an error message."""
        return f"argument {self.arg!r}{''.join(f'[{p!r}]' for p in self.pick)} of module {self.module!r}" + (
            f" (call {self.call})" if self.call else "")


@dataclasses.dataclass(frozen=True)
class Call:
    """The result of the ``index``-th call of torch function ``function`` made directly by module ``module``
    (its ``forward`` and methods, not its submodules), in one forward.  ``function`` is matched after
    :func:`function_name` (``"torch.pow"``, ``"softmax"``, ``"matmul"``, ``"add"`` for ``a + b``)."""

    function: str
    module: str
    index: int = 0
    layout: str = "same"

    def __post_init__(self) -> None:
        _check_common(f"Call({self.function!r}, {self.module!r})", self.module, self.index, self.layout)

    @property
    def name(self) -> str:
        """The normalized function name (:func:`function_name`)."""
        return function_name(self.function)

    def describe(self) -> str:
        """How the source reads in an error message."""
        return f"call #{self.index} of {self.name!r} inside module {self.module!r}"


Source = Output | Input | Call


def trace_names(num_layers: int) -> tuple[str, ...]:
    """Every golden trace entry of a forward case with ``num_layers`` layers, in forward order."""
    layers = tuple(f"layers.{i}.{leaf}" for i in range(num_layers) for leaf in LAYER_STAGES)
    return ("embed", "x0", *layers, "logits")


def entry_stage(name: str) -> str:
    """The forward stage that produces trace entry ``name`` (``layers.0.q`` -> ``qkv_projection``)."""
    try:
        return stage_of_output(name).name
    except KeyError:
        return "?"


def _expand(source: Source, layer: int | None) -> Source:
    if layer is None:
        return source
    return dataclasses.replace(source, module=source.module.replace("{l}", str(layer)))


def expand_stage_map(stage_map: Mapping[str, Source], num_layers: int) -> dict[str, Source]:
    """The stage map for ``num_layers`` layers: ``layers.{l}.NAME`` keys and ``{l}`` in module paths replaced by
    each layer index.  ``ValueError`` naming the key for an unknown trace name or a source of the wrong type."""
    known = set(LAYER_STAGES)
    out: dict[str, Source] = {}
    for key, source in stage_map.items():
        if not isinstance(source, (Output, Input, Call)):
            raise ValueError(f"stage map entry {key!r}: expected Output(...), Input(...) or Call(...), got "
                             f"{type(source).__name__}")
        if key.startswith("layers.{l}."):
            leaf = key[len("layers.{l}."):]
            if leaf not in known:
                raise ValueError(f"stage map entry {key!r}: {leaf!r} is not a layer trace name (known: "
                                 f"{', '.join(LAYER_STAGES)})")
            for i in range(num_layers):
                out[f"layers.{i}.{leaf}"] = _expand(source, i)
        elif key in MODEL_ENTRIES:
            if "{l}" in source.module:
                raise ValueError(f"stage map entry {key!r}: a model-level entry cannot use {{l}} in its module path")
            out[key] = source
        else:
            raise ValueError(f"stage map entry {key!r} is not a golden trace name: use 'embed', 'x0', 'logits' or "
                             "'layers.{l}.NAME'")
    order = {n: i for i, n in enumerate(trace_names(num_layers))}
    return dict(sorted(out.items(), key=lambda kv: order[kv[0]]))
