"""Wall-clock targets that the default test run used to assert (issue 19, item 5), measured and reported here.

A test that asserts a wall-clock limit fails on a loaded or slow machine (``golden verify`` took 68-113 s on a
loaded 2-core machine against a 60 s limit), so the default test run keeps only the correctness part of those
tests and this script reports the timings against the targets:

* ``golden verify`` of the committed suite (every case recomputed and compared)   -- target 60 s
* ``pldr-ref diagnose model --preset tiny`` with small section sizes              -- target 60 s
* the exact-tier (mpmath) forward of the preset "tiny", guard on (dps 50 and 100)  -- target 60 s
* ``--v510``: ``diagnose model --preset v510-110m``, 8 prompts of 40 tokens          -- target 300 s

Usage: ``python benchmarks/bench_time_limits.py [--only NAME ...] [--v510]``.  Prints one line per item
(seconds, target, within / OVER) and exits 1 when an item is over its target or fails, else 0.  Measure on a
quiet machine: timings on a shared one are not meaningful.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

#: Section sizes of the small ``diagnose model`` run (the same as tests/test_diagnostics_cli.py).
SMALL_MODEL = ["--random-prompts", "2", "--length", "8", "--decode-steps", "2", "--decode-prompts", "2",
               "--op-steps", "2", "--jacobian-rows", "2", "--online-rows", "2", "--quiet"]


def golden_verify() -> bool:
    from pldr_ref.fixtures.build import verify
    from pldr_ref.fixtures.case import DEFAULT_GOLDEN_DIR

    return verify(DEFAULT_GOLDEN_DIR, progress=None) == []


def diagnose_tiny() -> bool:
    from pldr_ref.cli import main

    with tempfile.TemporaryDirectory() as out:
        return main(["diagnose", "model", "--preset", "tiny", *SMALL_MODEL, "--out", out]) == 0


def exact_tiny_forward() -> bool:
    import pldr_ref
    from pldr_ref.exact import forward
    from pldr_ref.exact.accuracy import case_inputs

    params, ids = case_inputs(pldr_ref.PLDRConfig.preset("tiny"), 0, 8)
    return "logits" in forward(params, ids)


def diagnose_v510() -> bool:
    from pldr_ref.cli import main

    with tempfile.TemporaryDirectory() as out:
        return main(["diagnose", "model", "--preset", "v510-110m", "--random-prompts", "8", "--length", "40",
                     "--json", str(Path(out) / "v.json"), "--quiet"]) == 0


#: name -> (function returning success, target seconds, run by default)
ITEMS: dict[str, tuple[Callable[[], bool], float, bool]] = {
    "golden_verify": (golden_verify, 60.0, True),
    "diagnose_model_tiny": (diagnose_tiny, 60.0, True),
    "exact_forward_tiny": (exact_tiny_forward, 60.0, True),
    "diagnose_model_v510": (diagnose_v510, 300.0, False),
}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", nargs="+", choices=sorted(ITEMS), help="time only these items")
    ap.add_argument("--v510", action="store_true", help="also time diagnose model on v510-110m (minutes)")
    args = ap.parse_args(argv)
    names = args.only or [n for n, (_, _, default) in ITEMS.items() if default or args.v510]
    status = 0
    for name in names:
        fn, target, _ = ITEMS[name]
        t0 = time.perf_counter()
        ok = fn()
        seconds = time.perf_counter() - t0
        verdict = "FAILED" if not ok else ("within" if seconds <= target else "OVER")
        status |= verdict != "within"
        print(f"{name:24s} {seconds:8.1f} s   target {target:5.0f} s   {verdict}", flush=True)
    return status


if __name__ == "__main__":
    sys.exit(main())
