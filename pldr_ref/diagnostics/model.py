"""``diagnose model``: run the selected sections on a :class:`~pldr_ref.diagnostics.run.ModelRun`."""

from __future__ import annotations

import time
from collections.abc import Callable

from pldr_ref.diagnostics.budget import budget_section
from pldr_ref.diagnostics.contraction import contraction_section
from pldr_ref.diagnostics.dagloss import dag_section
from pldr_ref.diagnostics.decoding import decoding_section
from pldr_ref.diagnostics.layernorm_scale import layernorm_section
from pldr_ref.diagnostics.online import online_section
from pldr_ref.diagnostics.order import order_parameter_section
from pldr_ref.diagnostics.run import ModelRun
from pldr_ref.diagnostics.spectra import spectra_section
from pldr_ref.diagnostics.twirl_energy import twirl_energy_section
from pldr_ref.progress import Progress

#: Section name -> function, in report order (``budget`` reads ``decoding`` when both run).
SECTIONS: dict[str, Callable[..., dict]] = {
    "spectra": spectra_section,
    "order-parameter": order_parameter_section,
    "layernorm": layernorm_section,
    "twirl-energy": twirl_energy_section,
    "contraction": contraction_section,
    "decoding": decoding_section,
    "budget": budget_section,
    "dag": dag_section,
    "online": online_section,
}


def model_report(run: ModelRun, sections: tuple[str, ...] | None = None, *, progress: bool = False) -> dict:
    """Every selected section's numbers and wall times, with the run's description, as a JSON-ready dict."""
    names = tuple(SECTIONS) if sections is None else tuple(sections)
    unknown = [s for s in names if s not in SECTIONS]
    if unknown:
        raise ValueError(f"unknown section(s) {unknown}; choose from {list(SECTIONS)}")
    c = run.config
    rep: dict = {
        "model": run.label,
        "config": c.to_dict(),
        "prompts": {"n": int(run.ids.shape[0]), "length": int(run.ids.shape[1])},
        "options": {k: (list(v) if isinstance(v, tuple) else v) for k, v in vars(run.options).items()},
        "sections": {},
        "timings_s": {},
    }
    with Progress(len(names), "diagnose model", enabled=progress) as bar:
        for name in SECTIONS:  # report order, whatever order the caller named them in
            if name not in names:
                continue
            t0 = time.perf_counter()
            if name == "budget":
                rep["sections"][name] = budget_section(run, rep["sections"].get("decoding"))
            else:
                rep["sections"][name] = SECTIONS[name](run)
            rep["timings_s"][name] = round(time.perf_counter() - t0, 3)
            bar.advance(name)
    return rep
