"""``pldr-ref accuracy``: the float64 tier's error against the exact tier, stage by stage.

For each named config and seed, parameters are ``perturb_params(init_params(config, seed),
seed + 1000)`` (so no LayerNorm or PLGA bias sits at its init value) and the input is a
fixed pseudo-random batch (B = 2, the second row right-padded with ``pad_id``).  Both tiers run
the full forward; every trace entry of the float64 tier is compared with the correctly rounded
exact value.  Per stage (all layers pooled) the report gives the max and median distance in
ULPs, the max and median elementwise relative error (exact zeros skipped) and the max
normwise relative error max|f64 - exact| / max|exact| per tensor.  Output is deterministic.

Run ``pldr-ref accuracy`` or ``python -m pldr_ref.exact.accuracy``.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import Any

import numpy as np

from pldr_ref.config import PLDRConfig
from pldr_ref.exact.model import forward as exact_forward
from pldr_ref.exact.numbers import ulp_distance
from pldr_ref.layer import LAYER_STAGES
from pldr_ref.model import forward as float64_forward
from pldr_ref.params import init_params, perturb_params

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
STAGE_ORDER = ("embed", "x0", *LAYER_STAGES, "logits")


def named_config(name: str) -> PLDRConfig:
    """The ``tiny`` preset with the overrides of :data:`CONFIGS` ``[name]``."""
    if name not in CONFIGS:
        raise ValueError(f"unknown accuracy config {name!r}; available: {sorted(CONFIGS)}")
    return PLDRConfig.preset("tiny", **CONFIGS[name])


def case_inputs(config: PLDRConfig, seed: int, seq_len: int) -> tuple[Any, np.ndarray]:
    """(params, token ids [2, seq_len]) of one case; ids avoid pad_id except the padded tail of row 1."""
    params = perturb_params(init_params(config, seed), seed + 1000)
    rng = np.random.Generator(np.random.PCG64(seed))
    ids = rng.integers(1, config.vocab_size, size=(2, seq_len))
    ids[ids == config.pad_id] = (config.pad_id + 1) % config.vocab_size
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


def measure(config_name: str, seed: int, *, seq_len: int = 8, dps: int = 50) -> dict[str, dict[str, np.ndarray]]:
    """Errors of the float64 tier for one named config and seed (see :func:`stage_errors`)."""
    config = named_config(config_name)
    params, ids = case_inputs(config, seed, seq_len)
    exact = exact_forward(params, ids, dps=dps, guard=True)
    f64 = float64_forward(params, ids).flat()
    return stage_errors(f64, exact)


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


def report(configs: Sequence[str], seeds: Sequence[int], *, seq_len: int = 8, dps: int = 50,
           per_config: bool = True) -> str:
    """The full deterministic report: one pooled table per config (optional) and one over everything."""
    parts = [
        "float64 tier vs exact tier (correctly rounded), per stage, all layers pooled",
        f"configs: {', '.join(configs)}; seeds: {', '.join(map(str, seeds))}; batch 2, seq_len {seq_len}; "
        f"dps {dps} (guarded at {2 * dps})",
        "",
    ]
    everything = []
    for name in configs:
        results = [measure(name, s, seq_len=seq_len, dps=dps) for s in seeds]
        everything.extend(results)
        if per_config:
            parts += [f"### {name}: {CONFIGS[name] or 'preset tiny'}", "", format_table(pooled(results)), ""]
    parts += ["### all configs pooled", "", format_table(pooled(everything)), ""]
    return "\n".join(parts)


def _csv_ints(text: str) -> tuple[int, ...]:
    try:
        return tuple(int(t) for t in text.split(",") if t.strip())
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}") from exc


def _csv_names(text: str) -> tuple[str, ...]:
    names = tuple(t.strip() for t in text.split(",") if t.strip())
    bad = [n for n in names if n not in CONFIGS]
    if bad:
        raise argparse.ArgumentTypeError(f"unknown config(s) {bad}; available: {', '.join(CONFIGS)}")
    return names


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of the accuracy report."""
    parser.add_argument("--configs", type=_csv_names, default=DEFAULT_CONFIGS,
                        help=f"comma-separated config names (default: all: {','.join(DEFAULT_CONFIGS)})")
    parser.add_argument("--seeds", type=_csv_ints, default=DEFAULT_SEEDS, help="comma-separated seeds (default 0,1,2)")
    parser.add_argument("--seq-len", type=int, default=8, help="sequence length S (default 8)")
    parser.add_argument("--dps", type=int, default=50, help="exact-tier decimal digits (default 50)")
    parser.add_argument("--pooled-only", action="store_true", help="print only the table over all configs")


def run(args: argparse.Namespace) -> int:
    """Print the report for parsed ``args``; returns the exit code."""
    if args.seq_len < 1 or args.dps < 1:
        print("error: --seq-len and --dps must be positive", file=sys.stderr)
        return 2
    print(report(args.configs, args.seeds, seq_len=args.seq_len, dps=args.dps, per_config=not args.pooled_only))
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
