"""The false-positive battery: legitimate low-precision backends that are NOT in the calibration ensemble.

Each must pass (no ``fail``, no ``error``) every case of the default suite in float32, bfloat16 and float16
(``tests/test_harness_battery.py``; ``python -m pldr_ref.harness.controls.battery`` prints the verdict counts):

* :class:`EmulatedBackend` over :data:`BATTERY_ARITHMETIC`: other reduction tiles (8, 32, 128, 512) and orders,
  online (FlashAttention) softmax with other tile sizes, accumulation in the storage dtype with other blocks,
  reordered sums (the issue's "reorders sums" backend) and a tiled online softmax (its "tiled online-softmax"
  backend) -- every rounding by pldr_ref's own round-to-nearest-even (:mod:`pldr_ref.harness.policy.arithmetic`); each
  declares the arithmetic it computes with (:func:`declared_arithmetic`), so the dtype-accumulating ones are
  judged against the members accumulating in the dtype;
* :class:`~pldr_ref.backends.torch_backend.TorchBackend` (the bundled mixed-precision torch backend) and
  :class:`TorchNativeMatmulBackend` (torch's own bfloat16 / float16 CPU matrix-product kernels);
* :class:`~pldr_ref.backends.numpy32.Numpy32Backend` (float32; model and layer cases).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterable
from typing import Any

import numpy as np

from pldr_ref.harness.policy.arithmetic import Arithmetic, arithmetic_ops
from pldr_ref.harness.protocol import Capabilities, StageRequest, Unsupported, every_value
from pldr_ref.switches import names

#: Arithmetic of the emulated battery backends (none of them is a calibration member:
#: ``tests/test_harness_battery.py`` checks).
BATTERY_ARITHMETIC: tuple[Arithmetic, ...] = (
    Arithmetic("reordered-sums", order="reverse", tile=32),
    Arithmetic("tiled-online-softmax", tile=64, softmax="online", softmax_tile=32),
    Arithmetic("f32acc-t8-online8", tile=8, softmax="online", softmax_tile=8),
    Arithmetic("f32acc-t128-exp2", tile=128, exp2=True),
    Arithmetic("f32acc-t512-online128-recip", tile=512, softmax="online", softmax_tile=128, reciprocal=True),
    Arithmetic("f32acc-t32-unfused-exp2-recip", tile=32, fused=False, exp2=True, reciprocal=True),
    Arithmetic("f32acc-seq-online512-exp2", softmax="online", softmax_tile=512, exp2=True),
    Arithmetic("dtype-acc-t32", accumulate="storage", tile=32),
    Arithmetic("dtype-acc-reverse-t8-online16", accumulate="storage", order="reverse", tile=8, softmax="online",
               softmax_tile=16),
    # pure 16-bit arithmetic accumulating in blocks of 32: a one-pass bfloat16 accumulator over 896 terms
    # (``dtype-all-seq``) failed the real-width cases (d_model 896) and is not a legitimate kernel
    Arithmetic("dtype-all-t32-exp2-unfused", accumulate="storage", compute="storage", tile=32, exp2=True, fused=False),
)

def declared_arithmetic(arith: Arithmetic) -> tuple[str, ...]:
    """What a backend computing with ``arith`` declares (:data:`pldr_ref.harness.protocol.ARITHMETICS`): the
    dtype accumulation and dtype elementwise work it does, else the GPU default ``float32-accumulate``."""
    out = (("dtype-accumulate",) if arith.accumulate == "storage" else ()) + (
        ("dtype-elementwise",) if arith.compute == "storage" else ())
    return out or ("float32-accumulate",)


#: Dtypes the battery covers.
BATTERY_DTYPES = ("float32", "bfloat16", "float16")


class EmulatedBackend:
    """A backend computing every case kind and every stage with an :class:`Arithmetic` (float32, bfloat16,
    float16): parameters and inputs rounded to the dtype, the reference's structure, the arithmetic's products,
    sums, softmax and elementwise work, every stage output stored in the dtype."""

    def __init__(self, arith: Arithmetic, declared: tuple[str, ...] | None = None) -> None:
        self.arith = arith
        self.declared = declared_arithmetic(arith) if declared is None else declared
        self.name = f"emulated-{arith.name}" + ("" if declared is None else f"-declaring-{'+'.join(declared)}")

    def capabilities(self) -> Capabilities:
        """float32 / bfloat16 / float16; every kind with a runner; every stage; both caches; per-row positions; the
        arithmetic it computes with (:func:`declared_arithmetic`, or what it was told to declare)."""
        from pldr_ref.fixtures.runners import RUNNERS
        from pldr_ref.registry import ALL_STAGES

        return Capabilities(dtypes=BATTERY_DTYPES, kinds=tuple(RUNNERS), stages=tuple(s.name for s in ALL_STAGES),
                            caches=("kv", "g"), switches=every_value(*names("model", "quirk")), position_ids=True,
                            arithmetic=self.declared)

    def run_case(self, case: Any, dtype: str) -> dict[str, np.ndarray]:
        """Every output of ``case`` (the reference runner in this arithmetic, stage outputs stored in ``dtype``)."""
        from pldr_ref.harness.policy.tolerance import storage_outputs

        if dtype not in BATTERY_DTYPES:
            raise Unsupported(f"{self.name} computes in {BATTERY_DTYPES}, not {dtype}")
        out = storage_outputs(case, dtype, arithmetic_ops(self.arith, dtype))
        if out is None:
            raise Unsupported(f"case kind {case.kind!r} has no runner")
        return out

    def run_stage(self, request: StageRequest) -> dict[str, np.ndarray]:
        """One stage from the given upstream values, in this arithmetic."""
        from pldr_ref.harness.policy.stage_reference import reference_stage
        from pldr_ref.harness.policy.tolerance import round_to
        from pldr_ref.params import Params

        dt = request.dtype
        if dt not in BATTERY_DTYPES:
            raise Unsupported(f"{self.name} computes in {BATTERY_DTYPES}, not {dt}")
        params = Params(request.params.config, {k: round_to(dt, v) for k, v in request.params.items()})
        inputs = {k: round_to(dt, v) for k, v in request.inputs.items()}
        out = reference_stage(request.stage, request.layer, request.config, params, inputs,
                              round_to=lambda a: round_to(dt, a), ops=arithmetic_ops(self.arith, dt))
        return {k: round_to(dt, v) for k, v in out.items()}


def torch_native_matmul_backend() -> Any:
    """:class:`TorchNativeMatmulBackend` (torch is imported only here)."""
    from pldr_ref.backends.torch_backend import TorchBackend

    class TorchNativeMatmulBackend(TorchBackend):
        """The torch backend whose bfloat16 / float16 products run in torch's own 16-bit CPU matmul kernels
        (16-bit operands and result, the kernel's internal accumulation) instead of a float32 product of rounded
        operands."""

        name = "torch-native-16bit-matmul"

        def matmul(self, a: Any, b: Any) -> Any:
            torch = self.torch
            if self._mm is None or a.dtype != torch.float32:
                return torch.matmul(a, b)
            return torch.matmul(self.storage_round(a).to(self._mm), self.storage_round(b).to(self._mm)).to(
                torch.float32)

    return TorchNativeMatmulBackend(device="cpu")


def battery(include_torch: bool = True) -> list[Any]:
    """Every battery backend (torch ones only when ``include_torch`` and torch imports)."""
    out: list[Any] = [EmulatedBackend(a) for a in BATTERY_ARITHMETIC]
    from pldr_ref.backends.numpy32 import Numpy32Backend

    out.append(Numpy32Backend())
    if include_torch:
        try:
            from pldr_ref.backends.torch_backend import TorchBackend
        except ImportError:
            return out
        out += [TorchBackend(device="cpu"), torch_native_matmul_backend()]
    return out


def run_battery(backends: Iterable[Any], cases: list[Any], dtypes: Iterable[str]) -> dict[str, list[Any]]:
    """{backend name: [CaseResult, ...]} over ``cases`` x ``dtypes`` (the dtypes each backend declares)."""
    from pldr_ref.harness.validate import validate

    out = {}
    for b in backends:
        dts = [d for d in dtypes if d in b.capabilities().dtypes]
        out[b.name] = validate(b, cases, dts)
    return out


def margins(results: Iterable[Any]) -> tuple[tuple[float, str] | None, ...]:
    """Three largest ratios over the outputs of ``results`` (end to end and isolated stages), each with
    ``case:output`` where it occurs (None: nothing compared): over the judged outputs, the relative RMS error to
    w rho and the max error to w x the max-error reference (w = the float32 factor or 1; the max test's floor left
    out); over every compared output, judgeable or not, the relative RMS error to w rho_widest (the gross-error test
    fails above :data:`pldr_ref.harness.policy.tolerance.K_GROSS`)."""
    from pldr_ref.harness.policy.tolerance import whole_tensor_factor

    found: list[tuple[float, str] | None] = [None, None, None]

    def keep(i: int, x: float, where: str) -> None:
        found[i] = max(found[i], (x, where)) if found[i] else (x, where)

    for r in results:
        w = whole_tensor_factor(r.dtype)
        for o in list(r.outputs) + [o for s in r.stages for o in s.outputs]:
            a, c = o.allowance, o.comparison
            if a is None or c is None or c.error is not None or o.status not in ("pass", "fail", "not_judgeable",
                                                                                   "not_applicable"):
                continue
            where = f"{r.case}:{o.name}"
            if a.gross:
                keep(2, c.rms_rel / (a.gross / (a.detail["k_gross"])) / w, where)
            if not a.judged or a.rms is None or o.status not in ("pass", "fail"):
                continue
            keep(0, c.rms_rel / (w * a.detail["rho"]), where)
            if a.detail.get("max_statistic"):
                keep(1, c.max_abs / (w * a.detail["max_statistic"]), where)
    return tuple(found)


def main(argv: list[str] | None = None) -> int:
    """Print the status counts of every battery backend per dtype (``--margins``: and the largest ratios of
    :func:`margins`); exit 1 on any fail or error, 2 on bad input (:mod:`pldr_ref.tool_cli`)."""
    from pldr_ref.tool_cli import add_suite_arguments, run_tool, tool_parser

    p = tool_parser("python -m pldr_ref.harness.controls.battery", __doc__)
    p.add_argument("--dtype", action="append", default=None, choices=BATTERY_DTYPES)
    add_suite_arguments(p)
    p.add_argument("--no-torch", action="store_true", help="leave the torch backends out")
    p.add_argument("--backend", action="append", default=None, metavar="NAME",
                   help="only the battery backend(s) of this name (e.g. emulated-reordered-sums, torch)")
    p.add_argument("--case", action="append", default=None, metavar="NAME", help="only these cases")
    p.add_argument("--margins", action="store_true",
                   help="add two columns: the largest relative RMS error / (w rho) and max error / (w x max "
                        "statistic) over the judged outputs, with where they occur (docs/tolerances.md)")
    return run_tool(p, argv, _run)


def _run(args: argparse.Namespace) -> int:
    """The body of :func:`main`: inputs checked first (suite, --case, --backend), then the runs."""
    from pldr_ref.harness.validate import FAILING_STATUSES
    from pldr_ref.tool_cli import load_selected_suite, loaded_store, suite_selection

    dtypes = args.dtype or list(BATTERY_DTYPES)
    cases = load_selected_suite(*suite_selection(args, "python -m pldr_ref.harness.controls.battery"))
    if args.case:
        unknown = sorted(set(args.case) - {c.name for c in cases})
        if unknown:
            raise ValueError(f"--case: no such case: {', '.join(unknown)}")
        cases = [c for c in cases if c.name in args.case]
    loaded_store()  # a malformed calibration store: one error now, not one per case
    backends = battery(include_torch=not args.no_torch)
    if args.backend:
        unknown = sorted(set(args.backend) - {b.name for b in backends})
        if unknown:
            raise ValueError(f"--backend: no such battery backend: {', '.join(unknown)} (known: "
                             f"{', '.join(b.name for b in backends)})")
        backends = [b for b in backends if b.name in args.backend]
    bad = 0
    extra = " max RMS / rho | max error / max statistic | max RMS / widest rho (any output) |" if args.margins else ""
    print("| backend | arithmetic | dtype | pass | fail | error | not judgeable | not applicable | unsupported |"
          + extra)
    print("|---|---|---|---|---|---|---|---|---|" + ("---|---|---|" if args.margins else ""))
    for b in backends:
        for name, results in run_battery([b], cases, dtypes).items():
            for dt in dtypes:
                rs = [r for r in results if r.dtype == dt]
                if not rs:
                    continue
                n = {s: sum(r.status == s for r in rs) for s in ("pass", "fail", "error", "not_judgeable",
                                                                  "not_applicable", "unsupported")}
                cols = [str(v) for v in n.values()]
                if args.margins:
                    cols += [f"{m[0]:.2f} (`{m[1]}`)" if m else "-" for m in margins(rs)]
                arith = "+".join(b.capabilities().arithmetic)
                print(f"| {name} | {arith} | {dt} | " + " | ".join(cols) + " |", flush=True)
                for r in rs:
                    if r.status in FAILING_STATUSES:
                        bad += 1
                        print(f"  {r.status}: {r.case} {r.dtype}: {r.reason}", flush=True)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
