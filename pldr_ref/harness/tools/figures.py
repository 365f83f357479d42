"""The margin figures of ``docs/tolerances.md``: one PNG per dtype.

    python -m pldr_ref.harness.tools.figures --out docs        # writes docs/margins_{float32,bfloat16,float16}.png

For every model and layer case of the suite, the relative RMS error of its primary output (the logits, a layer's
``out2``) in that dtype: the calibration ensemble's statistic (grey dot; every member with ``--members``), the
allowance derived from it (black bar; grey where the output is not judgeable), the battery backends outside the
ensemble (blue), and wrong backends -- mutants of the torch backend, all-zero logits and 3 % noise (red; a red
cross below the bar is a mutant whose bug does not touch that case, e.g. a mask bug on a one-row case).  A correct
backend sits below the bar, a wrong one above it; the gaps are the margins.  Needs matplotlib.
"""

from __future__ import annotations

import argparse
import io
import sys
from pathlib import Path
from typing import Any

import numpy as np

from pldr_ref.output_paths import atomic_write_bytes

#: Dtypes with a figure.
FIGURE_DTYPES = ("float32", "bfloat16", "float16")

#: Mutants drawn in the figure (torch mutants whose bug reaches the primary output).
FIGURE_MUTANTS = ("NoScaleMutant", "UnbiasedVarianceLayerNormMutant", "RopeLayoutMutant", "MaskOffByOneMutant",
                  "TransposedGMutant", "SoftmaxAxisMutant")


def primary_name(case: Any) -> str | None:
    """The primary output drawn for ``case`` (None: not a model or layer case)."""
    if case.kind == "forward":
        return "logits"
    if case.kind == "decoder_layer":
        return f"layers.{int(case.args['layer'])}.out2"
    return None


def _rms(result: Any, name: str) -> float | None:
    for o in result.outputs:
        if o.name == name and o.comparison is not None and o.comparison.error is None:
            return float(o.comparison.rms_rel)
    return None


def collect(cases: list[Any], dtype: str, *, with_torch: bool = True, members: bool = False) -> list[dict[str, Any]]:
    """Per case: the members' relative RMS errors (``members`` False: their stored statistic only), the allowance,
    battery and wrong backends' errors."""
    from pldr_ref.harness.controls import mutants
    from pldr_ref.harness.controls.battery import BATTERY_ARITHMETIC, EmulatedBackend
    from pldr_ref.harness.controls.verdict_power import NoisyLogits, ZeroLogits
    from pldr_ref.harness.policy.ensemble import case_runs
    from pldr_ref.harness.policy.tolerance import case_statistics, error_stats, judged_arithmetic
    from pldr_ref.harness.validate import output_allowances, validate_case

    correct: list[Any] = [EmulatedBackend(a) for a in BATTERY_ARITHMETIC[:2]]
    wrong: list[Any] = [ZeroLogits(), NoisyLogits()]
    if with_torch:
        from pldr_ref.backends.torch_backend import TorchBackend
        from pldr_ref.harness.controls.battery import torch_native_matmul_backend

        correct += [TorchBackend(device="cpu"), torch_native_matmul_backend()]
        wrong += [getattr(mutants, m)(device="cpu") for m in FIGURE_MUTANTS]
    rows = []
    for case in cases:
        name = primary_name(case)
        if name is None or case.params is None:
            continue
        if members:
            g = np.asarray(case.outputs[name])
            member_err = [error_stats(g, run[name]).rms_rel for _, run in case_runs(case, dtype)
                          if run is not None and name in run]
        else:  # the stored statistic of the members (pldr_ref/harness/policy/calibration.json)
            stats, _ = case_statistics(case, dtype)
            st = (stats or {}).get(name)
            st = None if st is None or isinstance(st, str) else st.of(judged_arithmetic())
            member_err = [] if st is None else [st.rms_rel]
        ok = [validate_case(b, case, dtype, isolate=False) for b in correct]
        allow = output_allowances(case, dtype)[0].get(name)  # None: nothing of it representable in the dtype
        allowance, judged = (None, False) if allow is None else (allow.rms, allow.judged)
        bad = [validate_case(b, case, dtype, isolate=False) for b in wrong
               if case.kind == "forward" or not isinstance(b, ZeroLogits)]
        rows.append({"case": case.name, "members": member_err, "allowance": allowance, "judged": judged,
                     "correct": [e for e in (_rms(r, name) for r in ok) if e is not None],
                     "wrong": [e for e in (_rms(r, name) for r in bad) if e is not None]})
    return rows


def draw(rows: list[dict[str, Any]], dtype: str, path: Path) -> None:
    """One PNG: x = case, y = relative RMS error of the primary output (log scale)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(max(8.0, 0.32 * len(rows)), 5.0))
    floor = 1e-9
    for i, r in enumerate(rows):
        ax.scatter([i] * len(r["members"]), np.maximum(r["members"], floor), s=10, c="0.6",
                   label="calibration ensemble (members, or their statistic)" if i == 0 else None)
        ax.scatter([i] * len(r["correct"]), np.maximum(r["correct"], floor), s=18, c="tab:blue", marker="o",
                   label="battery (correct, not calibrated on)" if i == 0 else None)
        ax.scatter([i] * len(r["wrong"]), np.maximum(r["wrong"], floor), s=22, c="tab:red", marker="x",
                   label="mutants, zeros, 3 % noise" if i == 0 else None)
        if r["allowance"] is not None:
            ax.plot([i - 0.4, i + 0.4], [r["allowance"]] * 2, c="k" if r["judged"] else "0.75", lw=2,
                    label="allowance (grey: not judgeable)" if i == 0 else None)
    ax.set_yscale("log")
    ax.set_xticks(range(len(rows)))
    ax.set_xticklabels([r["case"] for r in rows], rotation=90, fontsize=6)
    ax.set_ylabel("relative RMS error of the primary output")
    ax.set_title(f"{dtype}: calibration ensemble, allowance, correct battery and wrong backends")
    ax.legend(fontsize=7, loc="upper left")
    fig.tight_layout()
    buffer = io.BytesIO()
    fig.savefig(buffer, dpi=110, format="png")
    plt.close(fig)
    atomic_write_bytes(path, buffer.getvalue())


def main(argv: list[str] | None = None) -> int:
    """Write ``margins_<dtype>.png`` for every dtype into ``--out`` (paths checked before any work)."""
    from pldr_ref.tool_cli import add_suite_arguments, run_tool, tool_parser

    p = tool_parser("python -m pldr_ref.harness.tools.figures", __doc__)
    p.add_argument("--out", default="docs", metavar="DIR",
                   help="existing folder the PNGs are written into (default: docs)")
    p.add_argument("--dtype", action="append", default=None, choices=FIGURE_DTYPES)
    add_suite_arguments(p)
    p.add_argument("--no-torch", action="store_true")
    p.add_argument("--members", action="store_true", help="run every member (slow) instead of the stored statistic")
    return run_tool(p, argv, _run)


def _run(args: argparse.Namespace) -> int:
    """The body of :func:`main`."""
    from pldr_ref.output_paths import FILE, INPUT_FOLDER, check_command_paths
    from pldr_ref.tool_cli import load_selected_suite, loaded_store, suite_selection

    dtypes = list(dict.fromkeys(args.dtype or FIGURE_DTYPES))
    root, names = suite_selection(args, "python -m pldr_ref.harness.tools.figures")
    paths = {dtype: Path(args.out) / f"margins_{dtype}.png" for dtype in dtypes}
    check_command_paths([("--out", path, FILE) for path in paths.values()], [("--suite-dir", root, INPUT_FOLDER)])
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise ValueError("the figures need matplotlib (pip install 'pldr-ref[plots]')") from None
    cases = [c for c in load_selected_suite(root, names) if primary_name(c) is not None]
    loaded_store()
    for dtype in dtypes:
        rows = collect(cases, dtype, with_torch=not args.no_torch, members=args.members)
        draw(rows, dtype, paths[dtype])
        print(f"wrote {paths[dtype]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
