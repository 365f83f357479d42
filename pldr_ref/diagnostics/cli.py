"""``pldr-ref diagnose {twirl, g-lm, model}``: the Appendix D diagnostics as a command (docs/diagnostics.md).

Outputs: ``--json F`` (the JSON document), ``--markdown F`` (the markdown report), ``--out DIR`` (both, as
``DIR/diagnose_<kind>.json`` / ``.md``, plus PNG figures when matplotlib is installed and ``--no-plots`` is
not given).  Without any output option the markdown report goes to stdout.  Progress goes to stderr
(``--quiet``: none).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

from pldr_ref.config import ROPE_LAYOUTS
from pldr_ref.constants import ROPE_BASE
from pldr_ref.diagnostics.report import document, markdown, write_json, write_markdown
from pldr_ref.diagnostics.twirl import DEFAULT_SEQ_LENS
from pldr_ref.progress import Progress

KINDS = ("twirl", "g-lm", "model")


def _outputs(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", metavar="F", help="write the JSON document to F")
    p.add_argument("--markdown", metavar="F", help="write the markdown report to F")
    p.add_argument("--out", metavar="DIR", help="write JSON, markdown and PNG figures into DIR")
    p.add_argument("--no-plots", action="store_true", help="with --out: skip the PNG figures")
    p.add_argument("--quiet", action="store_true", help="no progress display on stderr")


def register(subparsers: argparse._SubParsersAction) -> None:
    """Register ``diagnose`` and its three subcommands."""
    p = subparsers.add_parser("diagnose", help="Appendix D diagnostics: twirl, G_LM structure, model audit",
                              description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="diagnose_command")
    t = sub.add_parser("twirl", help="analytic RoPE twirl multipliers (no weights)")
    t.add_argument("--d-k", type=int, default=64, help="head width d_k (even, default 64)")
    t.add_argument("--rope-base", type=float, default=ROPE_BASE, help="RoPE base (default 10000)")
    t.add_argument("--seq-len", type=int, nargs="+", default=list(DEFAULT_SEQ_LENS), help="sequence lengths S")
    _outputs(t)
    t.set_defaults(func=run_twirl)
    g = sub.add_parser("g-lm", help="commutant residual, spectra, Perron-Frobenius, DAG loss of a stored G_LM")
    g.add_argument("--file", help="G_LM [L, H, d_k, d_k] as .npz (key G_LM) or .npy; default: the bundled "
                                  "trained PLDRv51-110M-1 tensor")
    g.add_argument("--rope-base", type=float, default=ROPE_BASE, help="RoPE base (recorded; default 10000)")
    g.add_argument("--layout", choices=ROPE_LAYOUTS, default="interleaved", help="RoPE plane pairing")
    _outputs(g)
    g.set_defaults(func=run_g_lm)
    m = sub.add_parser("model", help="the model sections on a preset's random init or a checkpoint")
    src = m.add_mutually_exclusive_group()
    src.add_argument("--preset", help="a PLDRConfig preset (random init with --seed)")
    src.add_argument("--checkpoint", help="a .safetensors / .npz state dict (needs --config)")
    m.add_argument("--config", help="config.json: a PLDRConfig dict or a Hugging Face config.json")
    m.add_argument("--seed", type=int, default=0, help="init seed of --preset (default 0)")
    m.add_argument("--prompts", help="JSON file: a list of equal-length token-id lists")
    m.add_argument("--random-prompts", type=int, default=8, help="number of random prompts (default 8)")
    m.add_argument("--length", type=int, default=40, help="length of the random prompts (default 40)")
    m.add_argument("--prompt-seed", type=int, default=0, help="seed of the random prompts (default 0)")
    from pldr_ref.diagnostics.model import SECTIONS

    m.add_argument("--sections", nargs="+", choices=list(SECTIONS), help="sections to run (default: all)")
    m.add_argument("--decode-steps", type=int, default=6, help="greedy steps of the decoding section")
    m.add_argument("--decode-prompts", type=int, default=4, help="prompts of the decoding section")
    m.add_argument("--decode-mode", default="kv+g", help="cached mode compared with recomputation (kv+g, kv, g, hf)")
    m.add_argument("--op-steps", type=int, default=16, help="sampled tokens per continuation (order parameter)")
    m.add_argument("--op-prompts", type=int, default=4, help="prompts of the order-parameter protocol")
    m.add_argument("--jacobian-rows", type=int, default=16, help="Jacobian rows per prompt and layer")
    m.add_argument("--online-prompts", type=int, default=1, help="prompts used by the online-contract checks")
    m.add_argument("--online-rows", type=int, default=8, help="rows scored sequentially by the online checks")
    _outputs(m)
    m.set_defaults(func=run_model)
    p.set_defaults(func=lambda args: (p.print_help(), 2)[1])


def _emit(args: argparse.Namespace, doc: dict, title: str) -> int:
    """Write the requested outputs (or the markdown to stdout); returns 0."""
    wrote = False
    if args.json:
        write_json(doc, args.json)
        wrote = True
    if args.markdown:
        write_markdown(doc, args.markdown, title)
        wrote = True
    if args.out:
        stem = "diagnose_" + doc["kind"].replace("-", "_")
        write_json(doc, Path(args.out) / f"{stem}.json")
        write_markdown(doc, Path(args.out) / f"{stem}.md", title)
        if not args.no_plots:
            try:
                from pldr_ref.diagnostics.plots import write_plots

                write_plots(doc, args.out)
            except ImportError as exc:
                print(f"diagnose: no figures ({exc})", file=sys.stderr)
        wrote = True
    if not wrote:
        sys.stdout.write(markdown(doc, title))
    return 0


def run_twirl(args: argparse.Namespace) -> int:
    """``diagnose twirl``."""
    from pldr_ref.diagnostics.twirl import twirl_table

    doc = document("twirl", twirl_table(args.d_k, args.rope_base, tuple(args.seq_len)))
    return _emit(args, doc, f"RoPE twirl multipliers (d_k = {args.d_k}, base = {args.rope_base:g})")


def run_g_lm(args: argparse.Namespace) -> int:
    """``diagnose g-lm``."""
    from pldr_ref.checkpoint import check_suffix_format
    from pldr_ref.diagnostics.g_lm import g_lm_report, load_g_lm

    if args.file is not None and Path(args.file).is_file():
        check_suffix_format(args.file, "--file")
    g, source = load_g_lm(args.file)
    doc = document("g-lm", g_lm_report(g, rope_base=args.rope_base, layout=args.layout, source=source))
    return _emit(args, doc, f"G_LM structure ({source})")


def read_config_json(path: str) -> object:
    """The parsed ``--config`` file; a file that is not JSON is a ValueError naming the file and the place."""
    try:
        with open(path, encoding="utf-8") as fh:
            return json.load(fh)
    except UnicodeDecodeError as exc:
        raise ValueError(f"diagnose model: --config {path}: not UTF-8 text ({exc.reason})") from None
    except RecursionError:
        raise ValueError(f"diagnose model: --config {path}: nested too deeply") from None
    except json.JSONDecodeError as exc:
        raise ValueError(f"diagnose model: --config {path}: not valid JSON ({exc.msg} at line {exc.lineno} column "
                         f"{exc.colno})") from None


def load_model(args: argparse.Namespace):  # -> tuple[Params, str]
    """(params, label) from --preset/--seed or --checkpoint/--config."""
    from pldr_ref import PLDRConfig, init_params
    from pldr_ref.checkpoint import load_state_dict

    if args.checkpoint:
        if not args.config:
            raise ValueError("diagnose model: --checkpoint needs --config config.json")
        raw = read_config_json(args.config)
        fields = set(PLDRConfig.__dataclass_fields__)
        config = PLDRConfig.from_dict(raw) if isinstance(raw, dict) and set(raw) <= fields \
            else PLDRConfig.from_hf_config(args.config)
        return load_state_dict(args.checkpoint, config), f"checkpoint {args.checkpoint}"
    if args.config:
        raise ValueError("diagnose model: --config goes with --checkpoint (use --preset for a random init)")
    name = args.preset or "tiny"
    return init_params(PLDRConfig.preset(name), seed=args.seed), f"{name} random init (seed {args.seed})"


def load_prompts(path: str) -> np.ndarray:
    """Token ids [B, T] from a JSON list of equal-length integer lists."""
    with open(path, encoding="utf-8") as fh:
        data = json.load(fh)
    if not isinstance(data, list) or not data or not all(isinstance(r, list) and r for r in data):
        raise ValueError(f"diagnose model: --prompts {path} must hold a non-empty list of token-id lists")
    if len({len(r) for r in data}) != 1:
        raise ValueError(f"diagnose model: --prompts {path}: prompts must share one length (unpadded batch)")
    return np.asarray(data, dtype=np.int64)


def run_model(args: argparse.Namespace) -> int:
    """``diagnose model``."""
    from pldr_ref.diagnostics.model import model_report
    from pldr_ref.diagnostics.run import ModelOptions, make_run, random_prompts

    t0 = time.perf_counter()
    with Progress(1, "diagnose model: load", enabled=not args.quiet) as bar:
        params, label = load_model(args)
        ids = load_prompts(args.prompts) if args.prompts else \
            random_prompts(params.config, args.random_prompts, args.length, args.prompt_seed)
        opts = ModelOptions(decode_steps=args.decode_steps, decode_prompts=args.decode_prompts,
                            decode_mode=args.decode_mode, op_steps=args.op_steps, op_prompts=args.op_prompts,
                            jacobian_rows=args.jacobian_rows,
                            online_prompts=args.online_prompts, online_rows=args.online_rows)
        run = make_run(params, ids, opts, label)
        bar.advance("parameters, prompts, traced prompt pass")
    load_s = time.perf_counter() - t0
    rep = model_report(run, tuple(args.sections) if args.sections else None, progress=not args.quiet)
    rep["timings_s"] = {"load_and_prompt_pass": round(load_s, 3), **rep["timings_s"],
                        "total": round(time.perf_counter() - t0, 3)}
    return _emit(args, document("model", rep), f"pldr-ref diagnose model: {label}")
