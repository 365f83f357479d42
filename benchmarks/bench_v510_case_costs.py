"""Cost of single cases of the ``v510-110m`` own-config suite (what ``pldr-ref validate --onnx F --own-config`` builds
and calibrates on first use, ``docs/backends.md`` section 12), case by case: the generation of the named cases in one
process (as one suite build: parameters once, perturbed parameter sets shared), then the calibration of the first
named case in each dtype (every ensemble member's run of it, ``calibrate_entry``).

Prints, per step, wall and CPU seconds of this process and the load average.  CPU seconds include every thread
(the calibration members run on ``PLDR_REF_THREADS`` threads); on a machine shared with other jobs the wall time is
inflated, so quote the load.  It runs unchanged on older versions of the package (no shared perturbations there), so
the same command measures a parent commit: ``PYTHONPATH=<a checkout of it> python benchmarks/bench_v510_case_costs.py
...`` (``pldr_ref.__file__`` is printed first).  Usage::

    python benchmarks/bench_v510_case_costs.py [--case NAME ...] [--calibrate DTYPE ...] [--layers N] [--out DIR]
    python benchmarks/bench_v510_case_costs.py --multiply-adds

``--multiply-adds`` prints, without computing anything, the multiply-adds of one member's run of each forward case
of the suite (:func:`multiply_adds`) and their total: what a calibration's time is proportional to.

Default: ``--case model/tiny_exact --case model/tiny_padded_exact --case model/small --calibrate float16
--calibrate float32``.  Peak memory about 7 GB (110 M float64 parameters, three perturbed sets, rounded sets).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import tempfile
import time
from pathlib import Path


def multiply_adds(config, batch: int, seq: int) -> dict[str, int]:
    """Multiply-adds of one forward run of ``batch`` x ``seq`` tokens at ``config`` (learned G, global Gram), by
    part: the metric learner (per batch row, head and row of A0: R residual units of D GLUs, each two d_k -> A_dff
    maps and one A_dff -> d_k map), the PLGA products (Gram, A_LM and G_LM products, Q G, scores, E V), the
    attention projections (q, k, v, out), the FFN (three maps) and the LM head."""
    d_model, dk, layers = config.num_heads * config.d_k, config.d_k, config.num_layers
    rows = batch * config.num_heads * dk
    parts = {
        "metric_learner": rows * config.num_reslayerA * config.num_denseA * 3 * dk * config.A_dff * layers,
        "plga": batch * config.num_heads * (seq * dk * dk + 2 * dk ** 3 + seq * dk * dk + 2 * seq * seq * dk) * layers,
        "projections": batch * seq * d_model * d_model * 4 * layers,
        "ffn": batch * seq * d_model * config.dff * 3 * layers,
        "lm_head": batch * seq * d_model * config.vocab_size,
    }
    parts["total"] = sum(parts.values())
    return parts


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--case", action="append", default=None, metavar="NAME", help="a forward template's name")
    p.add_argument("--calibrate", action="append", default=None, choices=("float32", "bfloat16", "float16"))
    p.add_argument("--layers", type=int, default=None, help="num_layers of the config (default: the preset's 5)")
    p.add_argument("--out", default=None, help="folder for the generated cases (default: a temporary one)")
    p.add_argument("--multiply-adds", action="store_true", help="print each case's multiply-adds; compute nothing")
    args = p.parse_args(argv)
    if args.layers is not None and args.layers < 1:
        p.error(f"--layers {args.layers}: a positive number of layers")
    if args.out:
        from pldr_ref.output_paths import FOLDER, OutputPathError, check_output

        try:  # before any work: never inside golden/ or the package, a writable folder
            check_output(args.out, FOLDER, "--out")
        except OutputPathError as exc:
            p.error(str(exc))
    import pldr_ref
    from pldr_ref.config import PLDRConfig
    from pldr_ref.fixtures.profile_suite import SUITE_FOLDER, instances, select_templates, write_suite
    from pldr_ref.fixtures.templates import Target
    from pldr_ref.harness.profile_suites import calibrate_entry

    try:
        from pldr_ref.fixtures.build import shared_perturbations
    except ImportError:  # a version before the shared perturbed sets
        shared_perturbations = contextlib.nullcontext

    names = args.case or ["model/tiny_exact", "model/tiny_padded_exact", "model/small"]
    dtypes = args.calibrate if args.calibrate is not None else ["float16", "float32"]
    print(f"pldr_ref: {pldr_ref.__file__}", flush=True)
    config = PLDRConfig.preset("v510-110m", **({"num_layers": args.layers} if args.layers else {}))
    specs, _ = instances(select_templates(None, ("forward",)), Target(config=config), 64)
    if args.multiply_adds:
        total = 0
        for spec in specs:
            batch, seq = spec.inputs()["token_ids"].shape
            parts = multiply_adds(config, batch, seq)
            total += parts["total"]
            print(f"{spec.name} ({batch} x {seq}): " + ", ".join(f"{k} {v / 1e9:.2f} G" for k, v in parts.items()))
        print(f"{len(specs)} cases: {total / 1e9:.1f} G multiply-adds per member run")
        return 0
    specs = sorted((s for s in specs if s.name in names), key=lambda s: names.index(s.name))
    if [s.name for s in specs] != names:
        raise SystemExit(f"no forward instance named {sorted(set(names) - {s.name for s in specs})}")
    with tempfile.TemporaryDirectory(prefix="bench-v510-") as tmp:
        out = Path(args.out) if args.out else Path(tmp)
        t0, c0 = time.perf_counter(), time.process_time()
        with shared_perturbations():
            for spec in specs:
                t1, c1 = time.perf_counter(), time.process_time()
                write_suite([spec], out / spec.name.replace("/", "__") / SUITE_FOLDER, "bench")
                print(f"generation of {spec.name}: wall {time.perf_counter() - t1:.1f} s, CPU "
                      f"{time.process_time() - c1:.1f} s; load {os.getloadavg()[0]:.1f}", flush=True)
        print(f"generation of {len(specs)} cases: wall {time.perf_counter() - t0:.1f} s, CPU "
              f"{time.process_time() - c0:.1f} s", flush=True)
        for dtype in dtypes:
            t1, c1 = time.perf_counter(), time.process_time()
            calibrate_entry(out / specs[0].name.replace("/", "__"), (dtype,))
            print(f"calibration of {specs[0].name} in {dtype}: wall {time.perf_counter() - t1:.1f} s, CPU "
                  f"{time.process_time() - c1:.1f} s; load {os.getloadavg()[0]:.1f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
