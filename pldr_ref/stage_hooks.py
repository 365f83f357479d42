"""The one hook of the float64 layer: ``on_stage(name, array) -> array`` (spec §2.3; issue 22).

:func:`pldr_ref.layer.decoder_layer` passes every stage output through its hook in trace order (and the masked
logits, ``"masked_logits"``, block by block inside the softmax).  A hook that changes values (a naive
low-precision run's rounding, :class:`pldr_ref.fixtures.baselines.StageRounding`) returns a new array and must be
elementwise, since the softmax calls it on blocks of query rows; a hook that only inspects (the finiteness check,
:class:`FiniteCheck`) returns the array itself.  An inspector that sets ``finite_only = True`` promises that it does
nothing on an all-finite array: the softmax then screens the two [B, H, S, T] arrays (scores, E) blockwise while
they are in cache and calls it only when some block's sum is not finite, so a finite run never re-reads them.

:func:`default_stage_hook` sets, for a ``with`` block and the current context only, a hook that every layer call
applies before its own (the baselines round the layer stages of the inference and scoring code this way).
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
from collections.abc import Callable, Iterator

import numpy as np

#: ``on_stage(name, array) -> array``: the stage output to use (the same array, or a new one).
StageHook = Callable[[str, np.ndarray], np.ndarray]


def check_finite(name: str, arr: np.ndarray | None) -> None:
    """Raise ``FloatingPointError`` naming the stage if ``arr`` has NaN or inf."""
    # fast path: a finite sum proves every entry finite (NaN and inf propagate through addition)
    if arr is not None and not np.isfinite(np.sum(arr)) and not np.all(np.isfinite(arr)):
        n_nan = int(np.isnan(arr).sum())
        n_inf = int(np.isinf(arr).sum())
        raise FloatingPointError(f"stage {name!r} produced {n_nan} NaN and {n_inf} inf values")


@dataclasses.dataclass(frozen=True)
class FiniteCheck:
    """Hook: :func:`check_finite` on ``prefix + name``, returning the array itself (``finite_only``: a no-op on
    finite arrays, so the softmax may screen its arrays blockwise).  The masked logits are not a stage output (an
    ideal mask makes them -inf) and are not checked."""

    prefix: str = ""
    finite_only = True

    def __call__(self, name: str, arr: np.ndarray) -> np.ndarray:
        if name != "masked_logits":
            check_finite(self.prefix + name, arr)
        return arr


@dataclasses.dataclass(frozen=True)
class Chain:
    """Hook: ``hooks`` applied in order, each to the previous one's result."""

    hooks: tuple[StageHook, ...]

    def __call__(self, name: str, arr: np.ndarray) -> np.ndarray:
        for hook in self.hooks:
            arr = hook(name, arr)
        return arr


def chain(*hooks: StageHook | None) -> StageHook | None:
    """The hooks that are not None, applied in order (None when there are none)."""
    parts: list[StageHook] = []
    for h in hooks:
        if isinstance(h, Chain):
            parts.extend(h.hooks)
        elif h is not None:
            parts.append(h)
    if not parts:
        return None
    return parts[0] if len(parts) == 1 else Chain(tuple(parts))


def split_hook(hook: StageHook | None) -> tuple[StageHook | None, StageHook | None]:
    """(transform, screen): the parts of ``hook`` that may change values, and its ``finite_only`` inspectors,
    each in their original order (None for an empty part)."""
    parts = hook.hooks if isinstance(hook, Chain) else () if hook is None else (hook,)
    screens = tuple(h for h in parts if getattr(h, "finite_only", False))
    transforms = tuple(h for h in parts if not getattr(h, "finite_only", False))
    return chain(*transforms), chain(*screens)


_DEFAULT: contextvars.ContextVar[StageHook | None] = contextvars.ContextVar("pldr_ref_default_stage_hook",
                                                                            default=None)


@contextlib.contextmanager
def default_stage_hook(hook: StageHook | None) -> Iterator[None]:
    """Inside the block (current thread / context only), every layer call applies ``hook`` to its stage outputs
    before the hook it was given (e.g. a naive run's rounding, then the caller's finiteness check)."""
    token = _DEFAULT.set(hook)
    try:
        yield
    finally:
        _DEFAULT.reset(token)


def layer_hook(on_stage: StageHook | None) -> StageHook | None:
    """The hook a layer call applies: the context's default (:func:`default_stage_hook`), then ``on_stage``."""
    return chain(_DEFAULT.get(), on_stage)
