"""``docs/engines.md``: the real engines (JAX/XLA, ONNX Runtime, Triton, torch in 16 bits) judged by the harness.

    python -m pldr_ref.harness.tools.engine_report --markdown docs/engines.md --figure docs/engines_margins.png

For each engine and dtype: the whole committed suite validated (cases passed / failed / not judgeable /
unsupported / not applicable, errors), the worst margin per stage -- the largest observed / allowed ratio of
any of the four tests (max, relative RMS, offset, gain; :func:`pldr_ref.harness.tools.margins.uses`) over every
judged output of that stage, end to end and in isolation (below 1 passes) -- and the run time; then every
injected bug of :mod:`pldr_ref.harness.controls.engine_mutants` with the stage the harness named first.  The figure
plots the per-stage worst margins.  Triton runs in its CPU interpreter (``TRITON_INTERPRET=1``, set here)
unless the environment sets it otherwise.  Needs the [jax], [onnx], [triton] and [plots] extras; an engine
whose extra is missing is listed as not run, with the reason.
"""

from __future__ import annotations

import argparse
import collections
import os
import platform
import sys
import time
from pathlib import Path
from typing import Any

from pldr_ref.harness.tools.margins import uses

#: (engine, backend spec, dtypes) in report order.
ENGINE_RUNS = (
    ("jax", "pldr_ref.backends.jax_backend:JaxBackend", ("float64", "float32", "bfloat16", "float16")),
    ("onnx", "pldr_ref.backends.onnx_backend:OnnxExportBackend", ("float32", "float16")),
    ("triton", "pldr_ref.backends.triton_attention:TritonAttentionBackend", ("float64", "float32", "bfloat16",
                                                                           "float16")),
    ("torch", "pldr_ref.backends.torch_backend:TorchBackend", ("bfloat16", "float16")),
)

#: Status columns of the summary table.
COLUMNS = ("pass", "fail", "not_judgeable", "unsupported", "not_applicable", "error")


def stage_margins(results: list[Any]) -> dict[str, tuple[float, str]]:
    """{stage: (worst observed / allowed over every judged output of that stage, "case:output")}."""
    worst: dict[str, tuple[float, str]] = {}
    for r in results:
        for o in [*r.outputs, *(x for s in r.stages for x in s.outputs)]:
            if o.stage is None:
                continue
            u = uses(o)
            if u and max(u.values()) > worst.get(o.stage, (-1.0, ""))[0]:
                worst[o.stage] = (max(u.values()), f"{r.case}:{o.name}")
    return worst


#: Longest reason kept per failing or erroring case in the report.
REASON_CHARS = 300


def run_engine(spec: str, dtype: str, cases: list[Any], timeout: float | None = None) -> dict[str, Any]:
    """Validate one engine in one dtype: {"counts", "margins", "seconds", "problems"} (JSON-able; ``problems``:
    "case: status: reason" of every failing or erroring case), or {"skipped": reason}.  ``timeout``: the per-case
    time limit (default :data:`~pldr_ref.harness.validate.DEFAULT_TIMEOUT_S`; 0 = none): with one, the engine runs in
    a child process killed at it, as in ``pldr-ref validate`` (:mod:`pldr_ref.harness.engine_process`)."""
    from pldr_ref.harness import engine_process
    from pldr_ref.harness.protocol import CaseTimeout, load_backend
    from pldr_ref.harness.validate import DEFAULT_TIMEOUT_S, FAILING_STATUSES, validate

    limit = DEFAULT_TIMEOUT_S if timeout is None else (timeout or None)
    recipe = ("spec", spec)
    try:  # with a limit an engine runs in a child process killed at it: a SIGALRM cannot stop a C++ call
        backend = (engine_process.ProcessBackend(recipe, start_timeout=limit)
                   if engine_process.wants_child_process(recipe, limit) else load_backend(spec))
    except (ValueError, ImportError, CaseTimeout, engine_process.EngineCallError) as exc:
        return {"skipped": str(exc)}
    t0 = time.perf_counter()
    try:
        results = validate(backend, cases, [dtype], timeout=limit)
    finally:
        close = getattr(backend, "close", None)
        if callable(close):
            close()
    seconds = time.perf_counter() - t0
    problems = [f"{r.case}: {r.status}: {r.reason[:REASON_CHARS]}" for r in results if r.status in FAILING_STATUSES]
    return {"counts": dict(collections.Counter(r.status for r in results)),
            "margins": {k: list(v) for k, v in stage_margins(results).items()}, "seconds": seconds,
            "problems": problems}


def run_mutations(engine: str, bug: str) -> list[dict[str, Any]]:
    """One injected bug of ``engine`` in each of its dtypes, as JSON-able rows (JAX mutants run eagerly: the same
    jnp code without a compilation per mutant; ``tests/test_engine_jax.py -m slow`` runs them jitted)."""
    from pldr_ref.harness.controls.engine_mutants import run_engine_mutations

    return [{"engine": o.mutation.engine, "bug": o.mutation.bug, "description": o.mutation.description,
             "case": o.mutation.case, "dtype": o.dtype, "expected_stage": o.mutation.expected_stage,
             "status": o.status, "stage": o.stage, "found_by": o.found_by, "ok": o.ok}
            for o in run_engine_mutations((engine,), bugs=(bug,), jax_eager=True)]


def run_task(task: str) -> Any:
    """One unit of work: ``run:ENGINE:DTYPE[:TIMEOUT]`` (the suite) or ``mutants:ENGINE:BUG`` (one injected bug)."""
    from pldr_ref.fixtures.case import DEFAULT_GOLDEN_DIR, iter_cases

    kind, engine, *rest = task.split(":")
    if kind == "mutants":
        return run_mutations(engine, rest[0])
    spec = {e: sp for e, sp, _ in ENGINE_RUNS}[engine]
    timeout = float(rest[1]) if len(rest) > 1 else None
    return run_engine(spec, rest[0], list(iter_cases(DEFAULT_GOLDEN_DIR)), timeout)


def run_tasks(tasks: list[str], jobs: int, workdir: Path) -> dict[str, Any]:
    """Run each task in its own process (``jobs`` at a time: XLA compilation and Triton's interpreter are
    single-threaded, so engines run side by side); {task: result}."""
    import concurrent.futures
    import json
    import subprocess

    def one(i: int, task: str) -> tuple[str, Any]:
        out = workdir / f"task{i}.json"
        cmd = [sys.executable, "-m", "pldr_ref.harness.tools.engine_report", "--task", task, "--task-out", str(out)]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode != 0:
            return task, {"skipped": f"task failed ({proc.returncode}): {proc.stderr.strip().splitlines()[-1:]}"}
        print(f"done {task}", file=sys.stderr, flush=True)
        return task, json.loads(out.read_text(encoding="utf-8"))

    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        return dict(pool.map(lambda it: one(*it), enumerate(tasks)))


#: The report's paragraph on how the torch and JAX engines compose a layer (issue 32, item 4).
COMPOSITION = (
    "One composition per engine: the torch and JAX backends (and the Triton one, torch's with a fused attention "
    "core) build a decoder layer and a forward by walking the registry's stages in order "
    "(`pldr_ref/backends/stage_walk.py`, with the cache hooks of spec §8), each stage run by the engine's own stage "
    "table (`STAGE_RUNNERS`), the entry an isolated stage request runs too. So a whole case equals, bit for bit, the "
    "engine's isolated stages chained by hand: `python -m pytest tests/test_engine_stage_chain_torch.py "
    "tests/test_engine_stage_chain_jax.py -m \"slow or not slow\"` (torch in float64 and float32; JAX in all four "
    "dtypes, eager: jitted, XLA fuses a whole layer differently from its separately compiled stages; negative "
    "controls: a one-ulp drift, two stage bodies swapped in the layer)."
)


def markdown(runs: dict[tuple[str, str], dict[str, Any]], mutations: list[dict[str, Any]] | None,
             figure: str | None, command: str, jobs: int = 1, timeout: float | None = None) -> str:
    """The report text."""
    from pldr_ref.harness.validate import DEFAULT_TIMEOUT_S
    from pldr_ref.registry import ALL_STAGES

    lines = [
        "# Real engines through the harness",
        "",
        "Generated by `" + command + "` (do not edit by hand).",
        "",
        "Each engine runs the whole committed golden suite through `pldr-ref validate`'s code path. "
        "Engines: **jax** -- `pldr_ref.backends.jax_backend:JaxBackend` (jitted `jax.numpy` on XLA's CPU "
        "backend); **onnx** -- `pldr_ref.backends.onnx_backend:OnnxExportBackend` (each forward case's config "
        "exported by `pldr-ref export onnx`'s graph builder, run on ONNX Runtime's CPU provider; forward cases "
        "only); **triton** -- `pldr_ref.backends.triton_attention:TritonAttentionBackend` (the torch backend "
        "with the fused Triton PLGA attention kernel; here in Triton's CPU interpreter, `TRITON_INTERPRET=1`, "
        "no GPU); **torch** -- the bundled `TorchBackend` in bfloat16 / float16 on the CPU (autocast style).",
        "",
        "Unsupported cases are the kinds and switches an engine declares it does not implement (cached "
        "generation, scoring and the issue-12 emulation switches for jax; everything but forward cases for "
        "onnx), reported with the reason, never skipped silently. not_judgeable is \"not covered\": an output the "
        "dtype cannot resolve end to end, never a pass and never a failure (`docs/tolerances.md`); every row with "
        "0 fail and 0 error exits 0.",
        "",
        COMPOSITION,
        "",
        f"Machine: {platform.machine()}, Python {platform.python_version()}, {os.cpu_count()} CPU(s). "
        "Run times are wall-clock seconds of the whole suite in one dtype, compilation (XLA, Triton's interpreter) "
        f"and stage isolation included, measured with {jobs} task(s) side by side (`--jobs`) on a machine "
        "shared with other work: compare rows, not machines. Per-case time limit: "
        + ("none" if timeout == 0 else f"{DEFAULT_TIMEOUT_S if timeout is None else timeout:g} s") + ".",
        "",
        "## Verdicts",
        "",
        "| engine | dtype | " + " | ".join(COLUMNS) + " | run time (s) |",
        "|---|---|" + "---:|" * (len(COLUMNS) + 1),
    ]
    for (engine, dtype), run in runs.items():
        if "skipped" in run:
            lines.append(f"| {engine} | {dtype} | not run: {run['skipped']} |" + " |" * len(COLUMNS))
            continue
        cells = [str(run["counts"].get(c, 0)) for c in COLUMNS]
        lines.append(f"| {engine} | {dtype} | " + " | ".join(cells) + f" | {run['seconds']:.0f} |")
    problems = [f"- {engine} {dtype}: {p}" for (engine, dtype), run in runs.items() for p in run.get("problems", [])]
    lines += ["", "Failing or erroring cases: " + ("none." if not problems else ""), *problems]
    stages = [s.name for s in ALL_STAGES if any(s.name in r.get("margins", {}) for r in runs.values())]
    lines += ["", "## Worst margin per stage (observed error / allowance; below 1 passes)", "",
              "| engine | dtype | " + " | ".join(stages) + " |", "|---|---|" + "---:|" * len(stages)]
    for (engine, dtype), run in runs.items():
        if "margins" not in run:
            continue
        cells = [f"{run['margins'][s][0]:.3g}" if s in run["margins"] else "-" for s in stages]
        lines.append(f"| {engine} | {dtype} | " + " | ".join(cells) + " |")
    worst = [(run["margins"][s][0], engine, dtype, s, run["margins"][s][1]) for (engine, dtype), run in runs.items()
             if "margins" in run for s in run["margins"]]
    if worst:
        w = max(worst)
        lines += ["", f"Largest margin of all: {w[0]:.3g} ({w[1]} {w[2]}, stage {w[3]}, `{w[4]}`)."]
    if figure:
        lines += ["", f"![worst margin per stage]({figure})"]
    if mutations is not None:
        lines += ["", "## Injected bugs", "",
                  "Each bug is written in the engine's own terms (`pldr_ref/harness/controls/engine_mutants.py`) and "
                  "validated on its case; **ok** = the case fails and the first stage named is the expected "
                  "one (found by stage isolation or, for fused / graph engines, by the first failing "
                  "end-to-end output).", "",
                  "| engine | bug | case | dtype | expected stage | verdict | stage named (found by) | ok |",
                  "|---|---|---|---|---|---|---|---|"]
        for o in mutations:
            lines.append(f"| {o['engine']} | `{o['bug']}`: {o['description']} | {o['case']} | {o['dtype']} | "
                         f"{o['expected_stage']} | {o['status']} | {o['stage']} ({o['found_by']}) | "
                         f"{'ok' if o['ok'] else '**NO**'} |")
        per = collections.Counter((o["engine"], o["dtype"]) for o in mutations if o["ok"])
        lines += ["", "Bugs caught at their stage, per engine and dtype: "
                  + ", ".join(f"{e} {d}: {n}" for (e, d), n in sorted(per.items())) + "."]
    return "\n".join(lines) + "\n"


def plot(runs: dict[tuple[str, str], dict[str, Any]], path: str) -> None:
    """Worst margin per stage, one line of markers per engine x dtype, log scale, the pass line at 1."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from pldr_ref.registry import ALL_STAGES

    stages = [s.name for s in ALL_STAGES if any(s.name in r.get("margins", {}) for r in runs.values())]
    fig, ax = plt.subplots(figsize=(12, 5))
    markers = {"jax": "o", "onnx": "s", "triton": "^", "torch": "D"}
    for (engine, dtype), run in runs.items():
        if "margins" not in run:
            continue
        xs = [i for i, s in enumerate(stages) if s in run["margins"]]
        ys = [max(run["margins"][stages[i]][0], 1e-6) for i in xs]
        ax.plot(xs, ys, marker=markers.get(engine, "x"), linestyle=":", label=f"{engine} {dtype}")
    ax.axhline(1.0, color="red", linewidth=1)
    ax.set_yscale("log")
    ax.set_xticks(range(len(stages)))
    ax.set_xticklabels(stages, rotation=60, ha="right", fontsize=8)
    ax.set_ylabel("worst observed / allowed (below 1 passes)")
    ax.set_title("Real engines: worst margin per stage over the golden suite")
    ax.legend(fontsize=7, ncol=2)
    fig.tight_layout()
    import io

    from pldr_ref.output_paths import atomic_write_bytes

    buffer = io.BytesIO()
    fig.savefig(buffer, dpi=110, format="png", metadata={"Software": None})
    plt.close(fig)
    atomic_write_bytes(path, buffer.getvalue())


#: Engines ``--engines`` accepts.
ENGINES = tuple(e for e, _, _ in ENGINE_RUNS)
#: Largest ``--jobs``.
MAX_JOBS = 256


def main(argv: list[str] | None = None) -> int:
    """Run every engine x dtype (and the injected bugs) and write the report."""
    from pldr_ref.tool_cli import choice_list, positive_int, run_tool, seconds, tool_parser

    p = tool_parser("python -m pldr_ref.harness.tools.engine_report", __doc__)
    p.add_argument("--markdown", default=None, metavar="OUT.md", help="write the report here (default: stdout)")
    p.add_argument("--figure", default=None, metavar="OUT.png", help="write the margins figure here")
    p.add_argument("--engines", type=choice_list(ENGINES), default=ENGINES, metavar="LIST",
                   help=f"comma-separated engines to run, of {','.join(ENGINES)} (default: all)")
    p.add_argument("--no-mutations", action="store_true", help="skip the injected-bug table")
    p.add_argument("--jobs", type=positive_int(MAX_JOBS), default=8,
                   help=f"tasks run side by side (processes; 1 to {MAX_JOBS}, default 8)")
    p.add_argument("--case-timeout", type=seconds, default=None, metavar="SECONDS",
                   help="per-case time limit of every engine (default: pldr-ref validate's, 600 s; 0 = none)")
    p.add_argument("--task", default=None, help=argparse.SUPPRESS)  # one unit of work, run by a worker process
    p.add_argument("--task-out", default=None, help=argparse.SUPPRESS)
    return run_tool(p, argv, lambda args: _run(args, argv))


def _run(args: argparse.Namespace, argv: list[str] | None) -> int:
    """The body of :func:`main`: outputs checked, then the tasks."""
    import json
    import tempfile

    from pldr_ref.output_paths import FILE, atomic_write_text, check_command_paths

    os.environ.setdefault("TRITON_INTERPRET", "1")  # before triton is imported (inherited by the workers)
    os.environ.setdefault("PLDR_REF_TORCH_THREADS", "1")
    if args.task:
        atomic_write_text(args.task_out, json.dumps(run_task(args.task)))
        return 0
    check_command_paths([("--markdown", args.markdown, FILE), ("--figure", args.figure, FILE)])
    if args.figure:  # fail before the long run, not after it
        try:
            import matplotlib  # noqa: F401
        except ImportError:
            raise ValueError("--figure needs matplotlib (pip install 'pldr-ref[plots]')") from None
    from pldr_ref.tool_cli import loaded_store

    loaded_store()  # a malformed calibration store: one error now, not in every task
    wanted = args.engines
    order = [(engine, dtype) for engine, _, dtypes in ENGINE_RUNS if engine in wanted for dtype in dtypes]
    from pldr_ref.harness.controls.engine_mutants import ENGINE_MUTATIONS

    bugs = [] if args.no_mutations else [f"mutants:{m.engine}:{m.bug}" for m in ENGINE_MUTATIONS if m.engine in wanted]
    suffix = "" if args.case_timeout is None else f":{args.case_timeout:g}"
    run_names = {(e, d): f"run:{e}:{d}{suffix}" for e, d in order}
    tasks = list(run_names.values()) + bugs
    with tempfile.TemporaryDirectory() as tmp:
        done = run_tasks(tasks, args.jobs, Path(tmp))
    runs = {key: done[t] for key, t in run_names.items()}
    mutations = None
    if not args.no_mutations:
        mutations = [row for t in bugs for row in (done[t] if isinstance(done[t], list) else
                                                    [{"engine": t.split(":")[1], "bug": t.split(":")[2],
                                                      "description": done[t]["skipped"], "case": "-", "dtype": "-",
                                                      "expected_stage": "-", "status": "not run", "stage": None,
                                                      "found_by": None, "ok": False}])]
    figure_ref = None
    if args.figure:
        plot(runs, args.figure)
        if args.markdown:
            figure_ref = os.path.relpath(args.figure, Path(args.markdown).parent)
    given = list(argv if argv is not None else sys.argv[1:])
    shown = [a for i, a in enumerate(given) if not a.startswith("--jobs") and (i == 0 or given[i - 1] != "--jobs")]
    command = "python -m pldr_ref.harness.tools.engine_report " + " ".join(shown)
    text = markdown(runs, mutations, figure_ref, command.strip(), args.jobs, args.case_timeout)
    if args.markdown:
        atomic_write_text(args.markdown, text)
    else:
        print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
