"""Cost of the suites generated for a backend's own switch values or config (issue 30, item 5), measured.

For each profile: the first use of ``pldr-ref validate --backend pldr_ref.backends.profiled:... --profile NAME``
(generation of the profile suite of the kinds the backend runs, its float32 calibration, the validation) in an
empty cache, then the cached re-run (the cache entry checked against its key and MANIFEST.json, the validation).
``--onnx`` adds the ``v510-110m`` ONNX export judged on its own config (``validate --onnx F --own-config``;
``--onnx-dtype`` float32 / float16): first use and cached re-run.

Goals: a tiny-config profile suite <= 300 s first use and <= 30 s cached; the v510-110m ONNX suite <= 600 s first
use.  Usage::

    python benchmarks/bench_profile_suites.py [--profile NAME ... | --no-profiles] [--v510-case]
                                              [--v510-suite [--calibrate-one DTYPE] [--v510-case-name NAME]]
                                              [--onnx] [--markdown]

Prints one line per measurement (wall seconds, goal, within / OVER) and, with ``--markdown``, the table of
``docs/backends.md``.  Timings on a shared machine are inflated: say so when quoting them; the ``--v510-suite``
rows also give the process's CPU seconds, what a quiet core would take (NumPy's BLAS threads aside).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import sys
import tempfile
import time
from pathlib import Path

#: The profiles of issue 30.
PROFILES = ("pt-v510-float32", "tf-v500", "tf-v900", "hf-sdpa", "hf-eager")
#: Goals in seconds.
FIRST_USE_GOAL = 300.0
CACHED_GOAL = 30.0
ONNX_FIRST_USE_GOAL = 600.0


def run_validate(argv: list[str], cache: Path) -> tuple[float, int, str]:
    """(seconds, exit status, summary line) of ``pldr-ref validate ARGV`` with the cache folder ``cache``."""
    from pldr_ref.cli import main

    os.environ["PLDR_REF_CACHE"] = str(cache)
    out, err = io.StringIO(), io.StringIO()
    t0 = time.perf_counter()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(["validate", *argv, "--quiet"])
    if code not in (0, 1):  # a usage error or a crash is no measurement (1: a verdict, in the note)
        raise SystemExit(f"pldr-ref validate {' '.join(argv)} exited {code}: {err.getvalue().strip()[-2000:]}")
    return time.perf_counter() - t0, code, out.getvalue().strip().splitlines()[-1] if out.getvalue() else ""


def build_seconds(cache: Path) -> dict[str, float]:
    """The build and calibration seconds the newest cache entry recorded."""
    import json

    keys = sorted(cache.glob("*/SUITE_KEY.json"), key=lambda p: p.stat().st_mtime)
    return json.loads(keys[-1].read_text())["seconds"] if keys else {}


def measure_profile(profile: str, cache: Path) -> list[tuple[str, float, float | None, str]]:
    """Rows (what, seconds, goal, note) of one profile."""
    slug = profile.replace("-", "_")
    argv = ["--backend", f"pldr_ref.backends.profiled:numpy32_profile_{slug}", "--profile", profile]
    first, code, summary = run_validate(argv, cache)
    secs = build_seconds(cache)
    cached, code2, _ = run_validate(argv, cache)
    note = f"exit {code}; {summary}"
    return [(f"{profile}: first use (generation {secs.get('build', 0):.0f} s + calibration "
             f"{secs.get('calibration', 0):.0f} s + validation)", first, FIRST_USE_GOAL, note),
            (f"{profile}: cached re-run", cached, CACHED_GOAL, f"exit {code2}")]


def measure_onnx(dtype: str, cache: Path, workdir: Path) -> list[tuple[str, float, float | None, str]]:
    """Rows of the v510-110m ONNX export judged on its own config."""
    from pldr_ref.config import PLDRConfig
    from pldr_ref.export.onnx_graph import export_model
    from pldr_ref.params import init_params

    t0 = time.perf_counter()
    config = PLDRConfig.preset("v510-110m")
    model = workdir / f"v510_{dtype}.onnx"
    import onnx

    onnx.save(export_model(config, init_params(config, seed=0), dtype), str(model))  # 0.44 GB: one protobuf
    export = time.perf_counter() - t0
    argv = ["--onnx", str(model), "--own-config"]
    first, code, summary = run_validate(argv, cache)
    secs = build_seconds(cache)
    cached, code2, _ = run_validate(argv, cache)
    return [(f"v510-110m ONNX {dtype}: export", export, None, ""),
            (f"v510-110m ONNX {dtype}: first use (generation {secs.get('build', 0):.0f} s + calibration "
             f"{secs.get('calibration', 0):.0f} s + validation)", first, ONNX_FIRST_USE_GOAL,
             f"exit {code}; {summary}"),
            (f"v510-110m ONNX {dtype}: cached re-run", cached, None,
             f"exit {code2}; no goal (the {CACHED_GOAL:.0f} s goal is the tiny-config profile suites')")]


def measure_v510_case() -> list[tuple[str, float, float | None, str]]:
    """Rows of one instance of the v510-110m config suite: its parameters, then the whole case (golden values,
    float64 tolerances from 1-ulp perturbation runs, low-precision baselines)."""
    from pldr_ref.config import PLDRConfig
    from pldr_ref.fixtures.build import compute_case
    from pldr_ref.fixtures.templates import Target, all_templates, instantiate
    from pldr_ref.fixtures.weights import fixture_params

    config = PLDRConfig.preset("v510-110m")
    t0 = time.perf_counter()
    fixture_params(config, 1)
    params = time.perf_counter() - t0
    (template,) = [t for t in all_templates() if t.name == "model/tiny_padded_exact"]
    spec = instantiate(template, Target(config=config), max_seq_len=64)
    t0 = time.perf_counter()
    compute_case(spec)
    return [("v510-110m config suite: parameters of one seed", params, None, ""),
            ("v510-110m config suite: one forward case of 2 x 8 tokens", time.perf_counter() - t0, None, "")]


def measure_v510_suite(workdir: Path, calibrate: tuple[str, ...] = (), only: tuple[str, ...] = ()
                       ) -> list[tuple[str, float, float | None, str]]:
    """Rows of the generation of the ``v510-110m`` forward suite (what ``validate --onnx F --own-config`` builds
    first: every forward template at the config, up to 64 positions), case by case in one process (``only``: those
    cases), and of the calibration of its first case (``only``: of each of them) in each dtype of ``calibrate``
    (the ensemble's members on that case, each member's seconds printed)."""
    from pldr_ref.config import PLDRConfig
    from pldr_ref.fixtures.profile_suite import SUITE_FOLDER, instances, select_templates, write_suite
    from pldr_ref.fixtures.templates import Target

    config = PLDRConfig.preset("v510-110m")
    specs, _ = instances(select_templates(None, ("forward",)), Target(config=config), 64)
    if only:
        specs = [s for s in specs if s.name in only]
    out = workdir / "v510-suite"
    (out / SUITE_FOLDER).parent.mkdir(parents=True, exist_ok=True)
    from pldr_ref.fixtures.build import shared_perturbations

    t0, c0 = time.perf_counter(), time.process_time()
    times = []
    with shared_perturbations():  # as one suite build shares them (write_suite of every case at once)
        for spec in specs:
            t1 = time.perf_counter()
            failed = write_suite([spec], out / spec.name.replace("/", "__") / SUITE_FOLDER, "bench")
            times.append(time.perf_counter() - t1)
            print(f"{times[-1]:8.1f} s  {spec.name}{' FAILED ' + str(failed) if failed else ''}", flush=True)
    total = time.perf_counter() - t0
    rows = [(f"v510-110m forward suite ({len(specs)} cases{': ' + ', '.join(only) if only else ''}): generation "
             "(golden values, tolerances, baselines)",
             total, None, f"CPU {time.process_time() - c0:.0f} s; first case {times[0]:.0f} s, the others "
                          f"{sum(times[1:]) / max(1, len(times) - 1):.0f} s "
                          "each on average")]
    if calibrate:
        from pldr_ref.harness.profile_suites import calibrate_entry

        for spec in specs if only else specs[:1]:
            for dtype in calibrate:
                t1, c1 = time.perf_counter(), time.process_time()
                with _member_seconds() as seconds:
                    calibrate_entry(out / spec.name.replace("/", "__"), (dtype,))
                rows.append((f"v510-110m: calibration of {spec.name} in {dtype} (every member of the ensemble)",
                             time.perf_counter() - t1, None,
                             f"CPU {time.process_time() - c1:.0f} s; wall s per member: "
                             + ", ".join(f"{k} {v:.0f}" for k, v in seconds.items())))
                print(f"{rows[-1][1]:8.1f} s  {rows[-1][0]}  ({rows[-1][3]})", flush=True)
    return rows


@contextlib.contextmanager
def _member_seconds():
    """Seconds spent in each calibration member's runs inside the block (by member name)."""
    from pldr_ref.harness.policy import arithmetic, ensemble

    seconds: dict[str, float] = {}
    naive = next(m.name for m in ensemble.ENSEMBLE if not m.internal)  # its ops are the float64 reference's
    storage_outputs, stage_runs = ensemble.storage_outputs, ensemble.stage_runs

    def timed(ops, run, *args):
        t0 = time.perf_counter()
        try:
            return run(*args)
        finally:
            name = ops.arith.name if isinstance(ops, arithmetic.EmulatedOps) else naive
            seconds[name] = seconds.get(name, 0.0) + time.perf_counter() - t0

    def timed_case(case, dtype, ops):
        return timed(ops, storage_outputs, case, dtype, ops)

    def timed_stage(case, stage, layer, dtype, run):
        return stage_runs(case, stage, layer, dtype, lambda ops: timed(ops, run, ops))

    # a benchmark's instrumentation (the package itself never rebinds a module attribute)
    ensemble.storage_outputs, ensemble.stage_runs = timed_case, timed_stage
    try:
        yield seconds
    finally:
        ensemble.storage_outputs, ensemble.stage_runs = storage_outputs, stage_runs


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--profile", action="append", choices=PROFILES, help="profiles to measure (default: all)")
    p.add_argument("--no-profiles", action="store_true", help="measure none of the profile suites")
    p.add_argument("--onnx", action="store_true", help="also the v510-110m ONNX export on its own config")
    p.add_argument("--onnx-dtype", action="append", choices=("float32", "float16"), help="default: both")
    p.add_argument("--v510-case", action="store_true",
                   help="also one instance of the v510-110m config suite (parameters; the whole case)")
    p.add_argument("--v510-suite", action="store_true",
                   help="also the generation of the whole v510-110m forward suite, case by case")
    p.add_argument("--calibrate-one", action="append", choices=("float32", "bfloat16", "float16"),
                   help="with --v510-suite: also calibrate its first case (or each --v510-case-name) in this dtype")
    p.add_argument("--v510-case-name", action="append", default=[], metavar="NAME",
                   help="with --v510-suite: generate (and calibrate) only this case, e.g. model/tiny_exact")
    p.add_argument("--markdown", action="store_true", help="print the docs table")
    args = p.parse_args(argv)
    rows = []
    with tempfile.TemporaryDirectory(prefix="bench-profile-suites-") as tmp:
        for profile in () if args.no_profiles else (args.profile or PROFILES):
            rows += measure_profile(profile, Path(tmp) / "cache" / profile)
            print(*(f"{r[1]:8.1f} s  {r[0]}  {r[3]}" for r in rows[-2:]), sep="\n", flush=True)
        if args.v510_case:
            rows += measure_v510_case()
            print(*(f"{r[1]:8.1f} s  {r[0]}" for r in rows[-2:]), sep="\n", flush=True)
        if args.v510_suite:
            rows += measure_v510_suite(Path(tmp), tuple(args.calibrate_one or ()), tuple(args.v510_case_name))
        if args.onnx:
            for dtype in args.onnx_dtype or ("float32", "float16"):
                rows += measure_onnx(dtype, Path(tmp) / "cache" / f"onnx-{dtype}", Path(tmp))
                print(*(f"{r[1]:8.1f} s  {r[0]}  {r[3]}" for r in rows[-3:]), sep="\n", flush=True)
    over = [r for r in rows if r[2] is not None and r[1] > r[2]]
    if args.markdown:
        print("| measurement | seconds | goal | |\n|---|---|---|---|")
        for what, secs, goal, note in rows:
            verdict = "" if goal is None else ("within" if secs <= goal else "OVER")
            print(f"| {what} | {secs:.0f} | {'' if goal is None else f'{goal:.0f}'} | {verdict} {note} |")
    print(f"{len(rows) - len(over)} of {len(rows)} within their goal" + (f"; OVER: {[r[0] for r in over]}"
                                                                            if over else ""))
    return 1 if over else 0


if __name__ == "__main__":
    sys.exit(main())
