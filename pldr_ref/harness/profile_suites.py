"""The harness side of generated suites (issue 30): a backend judged on the templates at the switch values or the
config it declares, with the suite's low-precision calibration computed once and cached beside it.

:func:`generated_suite` returns the suite folder of a target (:class:`pldr_ref.fixtures.templates.Target`),
built on first use into the cache (:mod:`pldr_ref.fixtures.profile_suite`), calibrated in the backend's
low-precision dtypes by :func:`calibrate_entry` (the one call of the calibration store's writer), and makes that
calibration the one validation reads (:func:`use_calibration`).  ``pldr-ref validate --profile NAME | --switch
K=V | --own-config`` goes through it.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any, TextIO

from pldr_ref.fixtures.format import sha256_file
from pldr_ref.fixtures.profile_suite import CALIBRATION_FILE, SUITE_FOLDER, ensure_suite, entry_record
from pldr_ref.fixtures.templates import Target

#: The dtypes whose verdicts read calibrated statistics.
LOW_PRECISION = ("float32", "bfloat16", "float16")


def calibrate_entry(entry: Path, dtypes: tuple[str, ...], stages: tuple[str, ...] = (),
                    progress: TextIO | None = None) -> dict[str, Any] | None:
    """Write the calibration statistics of the suite in ``entry/golden`` for ``dtypes`` to
    ``entry/calibration.json``, in the committed store's format (:mod:`pldr_ref.harness.policy.calibration`); returns
    its sha256 and dtypes, or None when no low-precision dtype is asked for.

    The statistics are those validation reads for a backend that runs ``stages`` in isolation: a golden-output
    backend declaring exactly those stages is validated on every case (the calibration module's writer validates
    one declaring every stage, several times the work for a backend without isolated stages).  This is the one
    function that touches the calibration store's internals.

    The validations run without the per-case time limit (the ensemble's runs are the work here, not a backend's:
    under the default 600 s limit a ``v510-110m`` case on a loaded machine was cut and left without statistics);
    a case whose validation still ends in an error raises ``RuntimeError`` naming it (never a silent gap)."""
    from pldr_ref.harness.policy import calibration, ensemble
    from pldr_ref.harness.suite_loading import load_suite
    from pldr_ref.harness.validate import validate

    dtypes = tuple(d for d in LOW_PRECISION if d in dtypes)
    if not dtypes:
        return None
    cases = load_suite(entry / SUITE_FOLDER, None, None)
    golden = _GoldenOutputs(stages)
    for case in cases:
        failed = [r for r in validate(golden, [case], list(dtypes), isolate=bool(stages), timeout=None)
                  if r.status == "error"]
        if failed:
            raise RuntimeError(f"calibration of {case.name} in {failed[0].dtype} failed: {failed[0].reason}")
        if progress is not None:
            progress.write(f"calibrated {case.name} ({', '.join(dtypes)})\n")
    store = ensemble._store()
    kept = {}
    for case in cases:
        digest = ensemble.case_digest(case)
        if digest in store:
            kept[digest] = {dt: v for dt, v in store[digest].items() if dt in dtypes}
    doc = {"fingerprint": calibration.fingerprint(), "cases": kept}
    path = entry / CALIBRATION_FILE
    path.write_text(json.dumps(doc, sort_keys=True, separators=(",", ":")) + "\n", encoding="utf-8")
    return {"sha256": sha256_file(path), "dtypes": list(dtypes), "stages": list(stages)}


class _GoldenOutputs:
    """The golden outputs of every case, in every dtype, and the float64 reference of ``stages`` in isolation:
    validating it evaluates every statistic a backend running those stages needs."""

    name = "golden"

    def __init__(self, stages: tuple[str, ...]) -> None:
        self.stages = stages

    def capabilities(self) -> Any:
        from pldr_ref.fixtures.runners import RUNNERS
        from pldr_ref.harness.protocol import DTYPES, SWITCHES, Capabilities, every_value

        return Capabilities(dtypes=DTYPES, kinds=tuple(RUNNERS), stages=self.stages, caches=("kv", "g"),
                            position_ids=True, switches=every_value(*SWITCHES))

    def run_case(self, case: Any, dtype: str) -> dict[str, Any]:
        return dict(case.outputs)

    def run_stage(self, request: Any) -> dict[str, Any]:
        from pldr_ref.harness.policy.stage_reference import reference_stage

        return reference_stage(request.stage, request.layer, request.config, request.params, request.inputs)


def use_calibration(entry: Path) -> int:
    """Make the statistics of ``entry/calibration.json`` the ones validation reads (merged into the in-process
    store; a file of another ensemble fingerprint is ignored); returns the number of cases it holds."""
    from pldr_ref.harness.policy import ensemble

    path = entry / CALIBRATION_FILE
    if not path.is_file():
        return 0
    doc = json.loads(path.read_text(encoding="utf-8"))
    if doc.get("fingerprint") != ensemble.fingerprint():
        return 0
    store = ensemble._store()
    for digest, by_dtype in doc.get("cases", {}).items():
        for dtype, entries in by_dtype.items():
            store.setdefault(digest, {}).setdefault(dtype, {}).update(entries)
    return len(doc.get("cases", {}))


def generated_suite(target: Target, kinds: tuple[str, ...], dtypes: tuple[str, ...], *, stages: tuple[str, ...] = (),
                    max_seq_len: int | None = None, root: Path | None = None,
                    progress: TextIO | None = sys.stderr) -> Path:
    """The suite folder of the templates of ``kinds`` at ``target``, from the cache or built and calibrated in
    ``dtypes`` (for a backend running ``stages`` in isolation) now; its calibration is loaded for validation.  A
    cached suite calibrated for other dtypes or stages is used as it is: what it lacks is computed during
    validation, as for any uncalibrated case.  ``SuiteCacheError`` when the cache is unusable."""
    entry = ensure_suite(target, kinds=kinds, max_seq_len=max_seq_len, root=root, progress=progress,
                         calibrate=lambda e: calibrate_entry(e, dtypes, stages, progress))
    use_calibration(entry)
    return entry / SUITE_FOLDER


def left_out(suite: Path) -> dict[str, str]:
    """{template: why it has no instance} of a generated suite folder (``SUITE_KEY.json`` beside it)."""
    return dict(entry_record(suite.parent).get("left_out", {}))


def backend_config(backend: Any) -> Any:
    """The ``PLDRConfig`` a backend computes (an ONNX file's ``pldr_ref.config``: ``backend.model.config``; any
    backend's ``config`` attribute), or None."""
    from pldr_ref.config import PLDRConfig

    for candidate in (getattr(getattr(backend, "model", None), "config", None), getattr(backend, "config", None)):
        if isinstance(candidate, PLDRConfig):
            return candidate
    return None


__all__ = ["backend_config", "calibrate_entry", "generated_suite", "left_out", "use_calibration"]
