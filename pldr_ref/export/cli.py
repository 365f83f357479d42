"""``pldr-ref export onnx``: write an ONNX model of a PLDR-LLM config + parameters, and the ``--onnx`` option of
``pldr-ref validate``.

    pldr-ref export onnx (--preset NAME | --config CONFIG.json | --case GROUP/NAME) [--seed N]
                         [--dtype float32|float16] --out MODEL.onnx
    pldr-ref validate --onnx MODEL.onnx [--dtype ...] [-k REGEX] ...

``--case`` takes the config and the parameters of a golden case (then ``pldr-ref validate --onnx`` runs that
case and every other forward case of the same config, feeding each case's parameters); ``--preset`` /
``--config`` take the parameters of :func:`pldr_ref.params.init_params` with ``--seed``.  The file's input /
output contract is in ``docs/backends.md`` ("ONNX models").  Needs the ``onnx`` extra
(``pip install "pldr-ref[onnx]"``).  Exit status: 0 written; 2 a usage problem (bad preset, config or case,
missing extra).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from pldr_ref.text_escape import escape_text


def register(subparsers: Any) -> None:
    """Add ``export`` with its ``onnx`` subcommand."""
    p = subparsers.add_parser("export", help="export a PLDR-LLM config + parameters (ONNX)", description=__doc__,
                              formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="export_command", required=True, metavar="{onnx}")
    o = sub.add_parser("onnx", help="write an ONNX model (standard opset, every traced stage a named output)")
    src = o.add_mutually_exclusive_group(required=True)
    src.add_argument("--preset", metavar="NAME", help="a config preset (tiny, small, medium, v510-110m, ...)")
    src.add_argument("--config", type=Path, metavar="CONFIG.json", help="a config as JSON (PLDRConfig fields)")
    src.add_argument("--case", metavar="GROUP/NAME", help="config and parameters of a golden case (forward kind)")
    o.add_argument("--seed", type=int, default=0, help="init_params seed for --preset / --config (default 0)")
    o.add_argument("--dtype", choices=("float32", "float16"), default="float32", help="graph precision")
    o.add_argument("--suite-dir", default="default", metavar="DIR", help="golden suite for --case (default: golden/)")
    o.add_argument("--out", type=Path, required=True, metavar="MODEL.onnx", help="the file to write")
    o.set_defaults(func=export_onnx)


def model_source(args: argparse.Namespace) -> Any:
    """The Params to export (config included) from --preset / --config / --case; ValueError when wrong."""
    from pldr_ref.config import PLDRConfig
    from pldr_ref.params import init_params

    if args.case:
        from pldr_ref.fixtures.case import FixtureError, load_case
        from pldr_ref.harness.suite_loading import suite_root

        path = suite_root(args.suite_dir) / args.case
        if not (path / "case.json").is_file():
            raise ValueError(f"no golden case {args.case!r} under {suite_root(args.suite_dir)}")
        try:
            case = load_case(path)
        except (FixtureError, OSError) as exc:
            raise ValueError(f"golden case {args.case}: {exc}") from exc
        if case.params is None:
            raise ValueError(f"golden case {args.case} has no model parameters")
        return case.params
    if args.config:
        try:
            config = PLDRConfig.from_dict(json.loads(args.config.read_text(encoding="utf-8")))
        except (OSError, json.JSONDecodeError, TypeError) as exc:
            raise ValueError(f"--config {args.config}: {exc}") from exc
    else:
        config = PLDRConfig.preset(args.preset)
    return init_params(config, seed=args.seed)


def export_onnx(args: argparse.Namespace) -> int:
    """Write the ONNX file; return the exit status."""
    try:
        params = model_source(args)
        from pldr_ref.export.onnx_graph import export_model

        model = export_model(params.config, params, args.dtype)
    except (ValueError, ImportError) as exc:
        print(f"pldr-ref export onnx: error: {escape_text(exc, one_line=True)}", file=sys.stderr)
        return 2
    from pldr_ref.output_paths import atomic_write_bytes

    atomic_write_bytes(args.out, model.SerializeToString())
    outputs = len(model.graph.output)
    print(f"wrote {args.out} ({args.dtype}, opset {model.opset_import[0].version}, {outputs} outputs)")
    return 0


def add_validate_arguments(p: Any) -> None:
    """The ``--onnx`` option of ``pldr-ref validate``."""
    p.add_argument("--onnx", default=None, metavar="MODEL.onnx",
                   help="validate an ONNX file on ONNX Runtime's CPU provider instead of --backend "
                        "(contract: docs/backends.md, 'ONNX models')")


def validation_backend(args: argparse.Namespace) -> Any:
    """The backend ``pldr-ref validate`` judges: ``--onnx FILE`` or ``--backend MODULE:ATTR`` (exactly one);
    ValueError when neither or both is given or the file is unusable.  With ``--timeout``, an ONNX file (and an
    engine backend) runs in a child process killed at the limit (:mod:`pldr_ref.harness.engine_process`); the
    file's size and structure are checked here first."""
    from pldr_ref.harness.protocol import load_backend

    if bool(args.backend) == bool(getattr(args, "onnx", None)):
        raise ValueError("give exactly one of --backend MODULE:ATTR and --onnx MODEL.onnx")
    if args.backend:
        child = child_process_backend(("spec", args.backend), getattr(args, "timeout", None))
        return child if child is not None else load_backend(args.backend)
    from pldr_ref.backends.onnx_backend import OnnxFileBackend
    from pldr_ref.backends.onnx_loading import ModelFileError, stat_model_file
    from pldr_ref.memory_budget import MemoryBudgetError

    path = Path(args.onnx)
    if not path.is_file():
        raise ValueError(f"--onnx {path}: no such file")
    try:
        from pldr_ref.backends.onnx_loading import scan_model_fields

        size = stat_model_file(path)  # cheap checks before any child starts or the file is read
        with open(path, "rb") as fh:
            scan_model_fields(fh, size, str(path))
        backend = child_process_backend(("onnx", str(path)), getattr(args, "timeout", None))
        if backend is None:
            backend = OnnxFileBackend(str(path))
    except ImportError as exc:
        raise ValueError(str(exc)) from exc
    except (ModelFileError, MemoryBudgetError) as exc:  # refused before loading; the message names the file
        raise ValueError(f"--onnx {exc}") from exc
    except ValueError:
        raise
    except Exception as exc:  # onnx / onnxruntime raise their own error types for a malformed file
        raise ValueError(f"--onnx {path} cannot be loaded: {exc}") from exc
    args.backend = f"onnx:{path}"
    return backend


def child_process_backend(recipe: tuple[str, str], timeout: float | None) -> Any:
    """A :class:`pldr_ref.harness.engine_process.ProcessBackend` of ``recipe`` when ``validate`` runs it in a child
    process (:func:`pldr_ref.harness.engine_process.wants_child_process`), else None; its start and the backend's
    construction are bounded by ``timeout`` too (ValueError past it)."""
    from pldr_ref.harness.engine_process import ProcessBackend, wants_child_process
    from pldr_ref.harness.protocol import CaseTimeout

    if not wants_child_process(recipe, timeout):
        return None
    try:
        return ProcessBackend(recipe, start_timeout=timeout)
    except CaseTimeout as exc:
        raise ValueError(f"{'--onnx' if recipe[0] == 'onnx' else '--backend'} {recipe[1]}: loading the backend "
                         f"ran past --timeout {timeout:g} s") from exc
