"""Verdict power: how often the harness tells a right logits-only backend from a wrong one, per dtype.

    python -m pldr_ref.harness.controls.verdict_power [--dtype bfloat16 ...] [--suite-dir DIR]

Three logits-only backends (what the harness sees of a serving engine) run every ``forward`` case of the suite:
:class:`GoldenLogits` (the golden logits correctly rounded to the dtype: must pass), :class:`ZeroLogits` (all-zero
logits) and :class:`NoisyLogits` (golden logits plus Gaussian noise of 3 % of their RMS): both must fail.  A
forward case is **judgeable** in a dtype when its logits allowance there is judged (below the not-judgeable
thresholds of :mod:`pldr_ref.harness.policy.tolerance`); a not-judgeable case is reported "not covered", never as a
pass. The table gives, per dtype: forward cases, judgeable ones, and the pass / fail rates over the judgeable ones.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from collections.abc import Callable, Iterable
from typing import Any

import numpy as np

from pldr_ref.harness.protocol import DTYPES, SWITCHES, Capabilities, every_value

#: Relative size of the noise of :class:`NoisyLogits` (of the RMS of the golden logits, so its relative RMS error is
#: about this fraction whatever the logits' largest entry).
NOISE_FRACTION = 0.03


class ZeroLogits:
    """All-zero logits for every forward case (and nothing else)."""

    name = "zero-logits"

    def capabilities(self) -> Capabilities:
        """Every dtype, forward cases, logits only, any per-row positions, every switch value."""
        return Capabilities(dtypes=DTYPES, kinds=("forward",), full_trace=False, position_ids=True,
                            switches=every_value(*SWITCHES))

    def run_case(self, case: Any, dtype: str) -> dict[str, np.ndarray]:
        """Zeros shaped like the golden logits."""
        return {"logits": np.zeros(np.shape(case.outputs["logits"]))}


class NoisyLogits(ZeroLogits):
    """The golden logits plus noise of 3 % of their RMS: g + 0.03 rms(g) r, r standard normal (seeded per case)."""

    name = "noisy-logits"

    def run_case(self, case: Any, dtype: str) -> dict[str, np.ndarray]:
        """Golden logits plus seeded Gaussian noise (NaN / inf entries kept)."""
        g = np.asarray(case.outputs["logits"], dtype=np.float64)
        fin = np.isfinite(g)
        scale = float(np.sqrt(np.mean(np.square(g[fin])))) if fin.any() else 0.0
        seed = sum(case.name.encode())  # fixed per case, independent of the order cases are run in
        noise = NOISE_FRACTION * scale * np.random.default_rng(seed).standard_normal(g.shape)
        return {"logits": np.where(fin, g + noise, g)}


class GoldenLogits(ZeroLogits):
    """Negative control: the golden logits correctly rounded to the dtype."""

    name = "golden-logits"

    def run_case(self, case: Any, dtype: str) -> dict[str, np.ndarray]:
        """round_to(dtype, golden logits)."""
        from pldr_ref.harness.policy.tolerance import round_to

        return {"logits": round_to(dtype, case.outputs["logits"])}


@dataclasses.dataclass(frozen=True)
class PowerRow:
    """The verdict power in one dtype (rates over the judgeable forward cases)."""

    dtype: str
    forward: int
    judgeable: int
    golden_pass: int
    zero_fail: int
    noise_fail: int
    not_judgeable: tuple[str, ...]
    noise_passes: tuple[str, ...]

    def rate(self, count: int) -> float:
        """count / judgeable (0 when nothing is judgeable)."""
        return count / self.judgeable if self.judgeable else 0.0


def measure(cases: Iterable[Any], dtypes: Iterable[str],
            results: Callable[[type, str], list[Any]] | None = None) -> list[PowerRow]:
    """:class:`PowerRow` per dtype over the ``forward`` cases among ``cases``.

    ``results(backend_class, dtype)``, when given, returns the validation results of that backend (one of the
    three classes above) on those forward cases, for a caller that runs the same backends for other checks too
    (the tests); by default each case is validated here.
    """
    from pldr_ref.harness.validate import validate_case

    forward = [c for c in cases if c.kind == "forward"]

    def verdicts(backend: type, dtype: str, among: list[Any]) -> dict[str, Any]:
        if results is None:
            return {c.name: validate_case(backend(), c, dtype) for c in among}
        by_case = {r.case: r for r in results(backend, dtype)}
        return {c.name: by_case[c.name] for c in among}

    rows = []
    for dtype in dtypes:
        golden = verdicts(GoldenLogits, dtype, forward)
        judgeable = [c for c in forward if golden[c.name].status in ("pass", "fail")]
        zero = {name: r.status for name, r in verdicts(ZeroLogits, dtype, judgeable).items()}
        noise = {name: r.status for name, r in verdicts(NoisyLogits, dtype, judgeable).items()}
        rows.append(PowerRow(dtype, len(forward), len(judgeable),
                             sum(golden[c.name].status == "pass" for c in judgeable),
                             sum(s == "fail" for s in zero.values()), sum(s == "fail" for s in noise.values()),
                             tuple(c.name for c in forward if golden[c.name].status == "not_judgeable"),
                             tuple(n for n, s in noise.items() if s != "fail")))
    return rows


def table(rows: list[PowerRow]) -> str:
    """Markdown table of :func:`measure`."""
    lines = ["| dtype | forward cases | judgeable | golden logits pass | zero logits fail | 3 % noise fails |",
             "|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r.dtype} | {r.forward} | {r.judgeable} | {r.golden_pass} ({r.rate(r.golden_pass):.0%}) | "
                     f"{r.zero_fail} ({r.rate(r.zero_fail):.0%}) | {r.noise_fail} ({r.rate(r.noise_fail):.0%}) |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """Print the verdict-power table (and the cases behind the misses)."""
    from pldr_ref.tool_cli import add_suite_arguments, run_tool, tool_parser

    p = tool_parser("python -m pldr_ref.harness.controls.verdict_power", __doc__)
    p.add_argument("--dtype", action="append", default=None, choices=[d for d in DTYPES if d != "float64"])
    add_suite_arguments(p)
    return run_tool(p, argv, _run)


def _run(args: argparse.Namespace) -> int:
    """The body of :func:`main`."""
    from pldr_ref.tool_cli import load_selected_suite, loaded_store, suite_selection

    dtypes = args.dtype or ["float32", "bfloat16", "float16"]
    cases = load_selected_suite(*suite_selection(args, "python -m pldr_ref.harness.controls.verdict_power"))
    loaded_store()
    rows = measure(cases, dtypes)
    print(table(rows))
    for r in rows:
        if r.not_judgeable:
            print(f"{r.dtype}: not judgeable (not covered): {', '.join(r.not_judgeable)}")
        if r.noise_passes:
            print(f"{r.dtype}: 3 % noise not failed on: {', '.join(r.noise_passes)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
