"""``pldr-ref accuracy``: the float64 tier's error against the exact tier, stage by stage.

For each named config and seed, parameters are ``perturb_params(init_params(config, seed),
seed + 1000)`` (so no LayerNorm or PLGA bias sits at its init value) and the input is a
fixed pseudo-random batch (B = 2, the second row right-padded with ``pad_id``).  Both tiers run
the full forward; every trace entry of the float64 tier is compared with the correctly rounded
exact value.  Per stage (all layers pooled) the report gives the max and median distance in
ULPs, the max and median elementwise relative error (exact zeros skipped) and the max
normwise relative error max|f64 - exact| / max|exact| per tensor.  Output is deterministic.

``--preset NAME`` measures one full-size preset instead (default batch 1), e.g. the real
architecture with ``--preset v510-110m --seq-len 16 --engine arb``: the exact values then come
from the certified ball-arithmetic engine (:mod:`pldr_ref.exact.arb`), and the report states how
many values are certified correctly rounded and at which working precision.  Progress goes to
stderr (``--quiet`` silences it); ``--out PATH`` writes the report to a file instead of stdout, as JSON
when PATH ends in ``.json`` (else markdown; ``--format json|markdown`` overrides).

Run ``pldr-ref accuracy`` or ``python -m pldr_ref.exact.accuracy``.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from pldr_ref.config import PRESETS, PLDRConfig
from pldr_ref.exact.model import ENGINES
from pldr_ref.exact.model import forward as exact_forward
from pldr_ref.exact.numbers import ulp_distance
from pldr_ref.layer import LAYER_TRACE_NAMES
from pldr_ref.model import forward as float64_forward
from pldr_ref.params import init_params, perturb_params
from pldr_ref.progress import Progress

#: Named configurations of the accuracy report (all small enough for the exact tier).
CONFIGS: dict[str, dict[str, Any]] = {
    "tiny": {},
    "tiny-half": {"rope_layout": "half"},
    "tiny-v510-quirks": {"rope_precision": "float32", "embed_scale_precision": "float32", "mask_mode": "additive"},
    "tiny-finfo-min": {"mask_mode": "finfo_min"},
    "tiny-v900": {"metric_learner": "v900", "A_dff_depth": 12},
    "tiny-cumulative": {"gram_mode": "cumulative"},
    "tiny-identity-G": {"g_mode": "identity", "metric_learner": "none"},
}
DEFAULT_CONFIGS = tuple(CONFIGS)
DEFAULT_SEEDS = (0, 1, 2)
DEFAULT_PRESET_SEEDS = (0,)
STAGE_ORDER = ("embed", "x0", *LAYER_TRACE_NAMES, "logits")


def named_config(name: str) -> PLDRConfig:
    """The ``tiny`` preset with the overrides of :data:`CONFIGS` ``[name]``."""
    if name not in CONFIGS:
        raise ValueError(f"unknown accuracy config {name!r}; available: {sorted(CONFIGS)}")
    return PLDRConfig.preset("tiny", **CONFIGS[name])


def case_inputs(config: PLDRConfig, seed: int, seq_len: int, batch: int = 2) -> tuple[Any, np.ndarray]:
    """(params, token ids [batch, seq_len]) of one case; ids avoid pad_id except the padded tail of row 1."""
    params = perturb_params(init_params(config, seed), seed + 1000)
    rng = np.random.Generator(np.random.PCG64(seed))
    ids = rng.integers(1, config.vocab_size, size=(batch, seq_len))
    ids[ids == config.pad_id] = (config.pad_id + 1) % config.vocab_size
    if batch > 1:
        ids[1, seq_len - max(1, seq_len // 4):] = config.pad_id
    return params, ids


def stage_errors(f64: dict[str, np.ndarray], exact: dict[str, np.ndarray]) -> dict[str, dict[str, np.ndarray]]:
    """Per trace entry: ``ulp`` distances, elementwise ``rel`` errors (exact zeros skipped), ``normwise`` scalar."""
    out = {}
    for name, x in exact.items():
        a = f64[name]
        if a.shape != x.shape:
            raise ValueError(f"stage {name!r}: float64 shape {a.shape} != exact shape {x.shape}")
        nz = x != 0
        rel = np.abs(a[nz] - x[nz]) / np.abs(x[nz])
        scale = np.max(np.abs(x)) if x.size else 0.0
        normwise = np.max(np.abs(a - x)) / scale if scale > 0 else float(np.max(np.abs(a - x), initial=0.0))
        out[name] = {"ulp": ulp_distance(a, x).ravel(), "rel": rel, "normwise": np.array([normwise])}
    return out


class Certification:
    """Certificates of the arb engine over the cases of a report: counts and working precisions."""

    def __init__(self) -> None:
        self.certified = 0
        self.total = 0
        self.precisions: list[int] = []
        self.least_bits: list[float] = []
        self.uncertified: dict[str, int] = {}

    def add(self, result: Any) -> None:
        """Record one :class:`pldr_ref.exact.arb.Certified` result."""
        ok, n = result.counts()
        self.certified += ok
        self.total += n
        self.precisions.append(result.prec)
        self.least_bits.append(min(result.accuracy.values()))
        for name, k in result.uncertified().items():
            self.uncertified[name] = self.uncertified.get(name, 0) + k

    def line(self) -> str:
        """One deterministic summary line."""
        frac = 100.0 * self.certified / self.total if self.total else 100.0
        text = (f"certified correctly rounded: {self.certified}/{self.total} values ({frac:.2f} %); "
                f"working precision {', '.join(f'{p} bits' for p in self.precisions)}; least normwise accuracy "
                f"of a stage's balls {', '.join(f'{b:.0f} bits' for b in self.least_bits)}")
        if self.uncertified:
            text += "; uncertified by stage: " + ", ".join(f"{k} {v}" for k, v in self.uncertified.items())
        return text


def exact_trace(params: Any, ids: np.ndarray, *, engine: str, dps: int, cert: Certification | None = None,
                progress: Progress | None = None) -> dict[str, np.ndarray]:
    """The exact trace of one case from ``engine`` (mpmath: guarded at 2 dps; arb: certified, recorded in ``cert``)."""
    if engine == "mpmath":
        return exact_forward(params, ids, dps=dps, guard=True)
    from pldr_ref.exact.arb import forward_certified

    res = forward_certified(params, ids, on_stage=None if progress is None else progress.advance, keep_balls=False)
    if cert is not None:
        cert.add(res)
    return res.values


def measure_case(config: PLDRConfig, seed: int, *, seq_len: int, batch: int, dps: int = 50, engine: str = "mpmath",
                 cert: Certification | None = None, progress: Progress | None = None
                 ) -> dict[str, dict[str, np.ndarray]]:
    """Errors of the float64 tier on one case of ``config`` (see :func:`stage_errors`)."""
    params, ids = case_inputs(config, seed, seq_len, batch)
    exact = exact_trace(params, ids, engine=engine, dps=dps, cert=cert, progress=progress)
    f64 = float64_forward(params, ids).flat()
    return stage_errors(f64, exact)


def measure(config_name: str, seed: int, *, seq_len: int = 8, dps: int = 50, engine: str = "mpmath",
            cert: Certification | None = None) -> dict[str, dict[str, np.ndarray]]:
    """Errors of the float64 tier for one named config and seed (see :func:`stage_errors`)."""
    return measure_case(named_config(config_name), seed, seq_len=seq_len, batch=2, dps=dps, engine=engine, cert=cert)


def pooled(results: Sequence[dict[str, dict[str, np.ndarray]]]) -> dict[str, dict[str, np.ndarray]]:
    """Pool the errors of many cases by stage leaf name (``layers.{l}.q`` -> ``q``), in forward order."""
    pool: dict[str, dict[str, list[np.ndarray]]] = {}
    for res in results:
        for name, errs in res.items():
            leaf = name.rsplit(".", 1)[-1]
            slot = pool.setdefault(leaf, {"ulp": [], "rel": [], "normwise": []})
            for key, val in errs.items():
                slot[key].append(val)
    order = [s for s in STAGE_ORDER if s in pool]
    return {s: {k: np.concatenate(v) for k, v in pool[s].items()} for s in order}


def _stat(values: np.ndarray, fn: Any) -> float:
    return float(fn(values)) if values.size else 0.0


def format_table(stats: dict[str, dict[str, np.ndarray]]) -> str:
    """Markdown table: stage, values, max/median ULP, max/median relative, max normwise relative."""
    lines = [
        "| stage | values | max ULP | median ULP | max rel | median rel | max normwise rel |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for stage, e in stats.items():
        lines.append(
            f"| {stage} | {e['ulp'].size} | {_stat(e['ulp'], np.max):.0f} | {_stat(e['ulp'], np.median):.1f} "
            f"| {_stat(e['rel'], np.max):.2e} | {_stat(e['rel'], np.median):.2e} "
            f"| {_stat(e['normwise'], np.max):.2e} |"
        )
    return "\n".join(lines)


def _engine_line(engine: str, dps: int) -> str:
    if engine == "mpmath":
        return f"engine mpmath, dps {dps} (guarded at {2 * dps})"
    return "engine arb (ball arithmetic, every value certified by Ziv's strategy)"


def report(configs: Sequence[str], seeds: Sequence[int], *, seq_len: int = 8, dps: int = 50,
           per_config: bool = True, engine: str = "mpmath", quiet: bool = True,
           tables: list[tuple[str, dict]] | None = None) -> str:
    """The full deterministic report: one pooled table per config (optional) and one over everything.
    ``tables`` (a list) receives (title, pooled stats) of every table, for :func:`json_report`."""
    tables = [] if tables is None else tables
    parts = [
        "float64 tier vs exact tier (correctly rounded), per stage, all layers pooled",
        f"configs: {', '.join(configs)}; seeds: {', '.join(map(str, seeds))}; batch 2, seq_len {seq_len}; "
        + _engine_line(engine, dps),
        "",
    ]
    everything = []
    cert = Certification() if engine == "arb" else None
    with Progress(len(configs) * len(seeds), "accuracy", enabled=not quiet) as progress:
        for name in configs:
            results = []
            for s in seeds:
                results.append(measure(name, s, seq_len=seq_len, dps=dps, engine=engine, cert=cert))
                progress.advance(f"{name} seed {s}")
            everything.extend(results)
            if per_config:
                tables.append((f"{name}: {CONFIGS[name] or 'preset tiny'}", pooled(results)))
                parts += [f"### {tables[-1][0]}", "", format_table(tables[-1][1]), ""]
    tables.append(("all configs pooled", pooled(everything)))
    parts += ["### all configs pooled", "", format_table(tables[-1][1]), ""]
    if cert is not None:
        parts += [cert.line(), ""]
    return "\n".join(parts)


def preset_report(preset: str, seeds: Sequence[int], *, seq_len: int, batch: int = 1, dps: int = 50,
                  engine: str = "mpmath", quiet: bool = True, overrides: Mapping[str, Any] | None = None,
                  tables: list[tuple[str, dict]] | None = None) -> str:
    """Report for one full preset (e.g. ``v510-110m``, with optional field ``overrides``): a table per stage
    over the seeds, and the certificates.  ``tables`` as in :func:`report`."""
    tables = [] if tables is None else tables
    overrides = dict(overrides or {})
    config = PLDRConfig.preset(preset, **overrides)
    changed = "".join(f", {k}={v}" for k, v in overrides.items())
    parts = [
        "float64 tier vs exact tier (correctly rounded), per stage, all layers pooled",
        f"preset: {preset}{changed}; seeds: {', '.join(map(str, seeds))}; batch {batch}, seq_len {seq_len}; "
        + _engine_line(engine, dps),
        "",
    ]
    cert = Certification() if engine == "arb" else None
    stages_per_case = 1 + len(_trace_names(config)) if engine == "arb" else 1
    results = []
    with Progress(len(seeds) * stages_per_case, f"accuracy {preset}", enabled=not quiet) as progress:
        for s in seeds:
            results.append(measure_case(config, s, seq_len=seq_len, batch=batch, dps=dps, engine=engine, cert=cert,
                                        progress=progress if engine == "arb" else None))
            progress.advance(f"seed {s} compared")
    tables.append((f"{preset}{changed}", pooled(results)))
    parts += [f"### {preset}{changed}", "", format_table(tables[-1][1]), ""]
    if cert is not None:
        parts += [cert.line(), ""]
    return "\n".join(parts)


def _trace_names(config: PLDRConfig) -> list[str]:
    from pldr_ref.exact.arb import trace_names

    return trace_names(config)


def _csv_ints(text: str) -> tuple[int, ...]:
    try:
        return tuple(int(t) for t in text.split(",") if t.strip())
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}") from exc


def _csv_names(text: str) -> tuple[str, ...]:
    """``--configs``: a non-empty comma-separated list of :data:`CONFIGS` names (``''`` would measure nothing)."""
    from pldr_ref.tool_cli import choice_list

    try:
        return choice_list(tuple(CONFIGS))(text)
    except argparse.ArgumentTypeError as exc:
        raise argparse.ArgumentTypeError(f"unknown config(s) or none: {exc}") from None


def _override(text: str) -> tuple[str, Any]:
    """``NAME=VALUE`` of a :class:`PLDRConfig` field, VALUE parsed as the field's type."""
    name, sep, raw = text.partition("=")
    fields = {f.name: f for f in dataclasses.fields(PLDRConfig)}
    if not sep or name not in fields:
        raise argparse.ArgumentTypeError(f"expected NAME=VALUE with NAME a PLDRConfig field, got {text!r}")
    kind = type(getattr(PLDRConfig(), name))
    try:
        if kind is bool:
            if raw not in ("true", "false"):
                raise ValueError(raw)
            return name, raw == "true"
        return name, kind(raw)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"{name}: cannot read {raw!r} as {kind.__name__}") from exc


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of the accuracy report."""
    parser.add_argument("--configs", type=_csv_names, default=DEFAULT_CONFIGS,
                        help=f"comma-separated config names (default: all: {','.join(DEFAULT_CONFIGS)})")
    parser.add_argument("--seeds", type=_csv_ints, default=None,
                        help="comma-separated seeds (default 0,1,2; 0 with --preset)")
    parser.add_argument("--seq-len", type=int, default=8, help="sequence length S (default 8)")
    parser.add_argument("--dps", type=int, default=50, help="exact-tier decimal digits (default 50)")
    parser.add_argument("--pooled-only", action="store_true", help="print only the table over all configs")
    parser.add_argument("--preset", choices=sorted(PRESETS), default=None,
                        help="measure this full preset instead of the named tiny configs (e.g. v510-110m)")
    parser.add_argument("--set", dest="overrides", type=_override, action="append", default=[], metavar="NAME=VALUE",
                        help="with --preset: override a config field, e.g. --set rope_precision=exact (repeatable)")
    parser.add_argument("--batch", type=int, default=None,
                        help="batch size (default 2 for the named configs, 1 with --preset)")
    parser.add_argument("--engine", choices=ENGINES, default="mpmath",
                        help="exact engine: mpmath (default) or arb (certified ball arithmetic, python-flint)")
    parser.add_argument("--out", default=None, help="write the report to this file instead of stdout (.json: JSON)")
    parser.add_argument("--format", choices=FORMATS, default=None,
                        help="markdown or json (default: json for an --out ending in .json, else markdown)")
    parser.add_argument("--quiet", action="store_true", help="no progress display on stderr")


#: Output formats of ``pldr-ref accuracy``.
FORMATS = ("markdown", "json")
#: Schema name of the JSON report.
JSON_SCHEMA = "pldr-ref-accuracy/1"


def json_report(text: str, tables: Sequence[tuple[str, dict]]) -> str:
    """The report as JSON: its heading lines, and per table and stage the statistics of :func:`format_table`."""
    def row(e: dict[str, np.ndarray]) -> dict[str, Any]:
        return {"values": int(e["ulp"].size), "max_ulp": _stat(e["ulp"], np.max),
                "median_ulp": _stat(e["ulp"], np.median), "max_rel": _stat(e["rel"], np.max),
                "median_rel": _stat(e["rel"], np.median), "max_normwise_rel": _stat(e["normwise"], np.max)}

    lines = text.splitlines()
    doc = {"schema": JSON_SCHEMA, "title": lines[0], "setup": lines[1],
           "tables": [{"title": title, "stages": {s: row(e) for s, e in stats.items()}} for title, stats in tables],
           "certification": next((ln for ln in lines if ln.startswith("certified")), None)}
    return json.dumps(doc, indent=1, allow_nan=False)


def run(args: argparse.Namespace) -> int:
    """Print (or write) the report for parsed ``args``; returns the exit code."""
    fmt = args.format or ("json" if args.out and str(args.out).lower().endswith(".json") else "markdown")
    tables: list[tuple[str, dict]] = []
    if args.seq_len < 1 or args.dps < 1 or (args.batch is not None and args.batch < 1):
        print("error: --seq-len, --dps and --batch must be positive", file=sys.stderr)
        return 2
    if args.preset is None and (args.batch not in (None, 2) or args.overrides):
        print("error: --batch and --set apply to --preset only (the named configs use batch 2)", file=sys.stderr)
        return 2
    if args.preset is not None:
        try:
            PLDRConfig.preset(args.preset, **dict(args.overrides))
        except ValueError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
        text = preset_report(args.preset, args.seeds or DEFAULT_PRESET_SEEDS, seq_len=args.seq_len,
                             batch=args.batch or 1, dps=args.dps, engine=args.engine, quiet=args.quiet,
                             overrides=dict(args.overrides), tables=tables)
    else:
        text = report(args.configs, args.seeds or DEFAULT_SEEDS, seq_len=args.seq_len, dps=args.dps,
                      per_config=not args.pooled_only, engine=args.engine, quiet=args.quiet, tables=tables)
    if fmt == "json":
        text = json_report(text, tables)
    if args.out is None:
        print(text)
    else:
        from pldr_ref.output_paths import atomic_write_text

        atomic_write_text(args.out, text + "\n")
    return 0


def register(subparsers: Any) -> None:
    """Add the ``accuracy`` subcommand to the ``pldr-ref`` CLI."""
    parser = subparsers.add_parser("accuracy", help="float64 vs exact tier error per stage (ULPs, relative)",
                                   description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_arguments(parser)
    parser.set_defaults(func=run)


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m pldr_ref.exact.accuracy``."""
    parser = argparse.ArgumentParser(prog="python -m pldr_ref.exact.accuracy", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    add_arguments(parser)
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
