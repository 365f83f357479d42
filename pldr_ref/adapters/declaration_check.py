"""The checks of a wrapped module's declaration on the probe forward, before any case runs (the dry run of
:class:`~pldr_ref.adapters.torch_module.TorchModuleBackend`): module paths that do not exist, sources never reached,
and the probe input."""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from typing import Any

import numpy as np

from pldr_ref.adapters.stage_map import Call, Source, entry_stage
from pldr_ref.adapters.torch_recorder import Recording

#: Batch and sequence length of the dry run (the probe input: one row without padding, one with a pad at the end).
PROBE_BATCH, PROBE_SEQ = 2, 5


def probe_ids(config: Any) -> np.ndarray:
    """The probe token ids ``[PROBE_BATCH, PROBE_SEQ]``: ids 1.. (never the pad id), the last one of row 1 a pad."""
    ids = (np.arange(PROBE_BATCH * PROBE_SEQ).reshape(PROBE_BATCH, PROBE_SEQ) % (config.vocab_size - 1)) + 1
    ids[1, -1] = config.pad_id
    return ids


def static_problems(paths: list[str], sources: Mapping[str, Source]) -> list[str]:
    """A problem line for every source whose module path is not among ``paths`` (with the closest paths)."""
    problems = []
    for name, src in sources.items():
        if src.module not in paths:
            near = difflib.get_close_matches(src.module, paths, n=2)
            problems.append(f"entry {name!r} (stage {entry_stage(name)}): no module {src.module!r}"
                            + (f" (did you mean {' or '.join(map(repr, near))}?)" if near else ""))
    return problems


def never_reached(name: str, src: Source, rec: Recording) -> str:
    """The problem line of a source the probe forward did not reach, with what its module did instead."""
    if isinstance(src, Call):
        made = sorted((f, n) for (p, f), n in rec.function_calls.items() if p == src.module)
        listing = ", ".join(f"{f} x{n}" for f, n in made if not f.startswith("get") and f != "__get__")
        return (f"entry {name!r} (stage {entry_stage(name)}): {src.describe()} never happens "
                f"(module {src.module!r} made {rec.function_calls.get((src.module, src.name), 0)} such call(s); "
                f"its direct calls: {listing or 'none'})")
    calls = rec.module_calls.get(src.module, 0)
    return (f"entry {name!r} (stage {entry_stage(name)}): {src.describe()} never happens "
            f"(module {src.module!r} was called {calls} time(s))")


class ProbeCase:
    """The minimal case of the dry run (what :func:`pldr_ref.harness.verdict.localize.model_positions_and_mask`
    reads)."""

    def __init__(self, config: Any, ids: np.ndarray) -> None:
        self.config, self.inputs, self.args, self.kind = config, {"token_ids": ids}, {}, "forward"
