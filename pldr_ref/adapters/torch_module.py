"""Validate an existing PyTorch model without writing a backend: :class:`TorchModuleBackend`.

The backend is built from an ``nn.Module`` factory and a small declaration:

* ``factory(config) -> nn.Module`` builds the model for a case's :class:`~pldr_ref.config.PLDRConfig`;
* ``params``: how golden parameter names (``decoder.dec_layers.0.mha1.wq.weight``, the PyTorch-v510 state-dict
  names) become the module's -- ``None`` (the same names), a dict of name patterns (``{"decoder.dec_layers.{l}.
  mha1.wq.": "blocks.{l}.attn.q_lin."}``, longest match first; ``{x}`` matches a number) or a function
  ``golden name -> module name`` (None: not used);
* ``call(module, ids, mask, start_pos) -> logits``: how to run it; ``mask`` is given in the form ``mask_form``
  names (:data:`MASK_FORMS`: the released v510 float mask, a bool mask, or an HF attention mask);
* ``precision``: ``"autocast"`` (float32 module under ``torch.autocast`` for bfloat16 / float16) or ``"cast"``
  (``module.to(dtype)``, its buffers and the float mask cast with it);
* ``profile`` / ``switches``: the switch values it computes (:mod:`pldr_ref.adapters.switch_declaration`), declared
  through ``Capabilities.switches``;
* ``stage_map``: golden trace name -> :class:`~pldr_ref.adapters.stage_map.Output` / ``Input`` / ``Call``.

The trace comes from forward hooks plus a ``TorchFunctionMode`` recorder (:mod:`pldr_ref.adapters.torch_recorder`).
A stage is isolated by replacing the sources of its inputs with the golden values and reading its outputs; the
backend declares every stage whose outputs are mapped and whose inputs it verified to be replaceable (the dry run
perturbs each one and checks the logits move: a value the model only returns for inspection is not).  The other
stages are judged end to end.  The declaration is checked before any case runs: the constructor builds the model
on a probe config, maps its parameters, checks every module path, runs it once and checks every source was
reached with its shape -- a wrong map is a ``ValueError`` there (``pldr-ref validate`` exit 2).  A module that
raises, returns a wrong shape or dtype, changes its parameters or buffers, or stops making a recorded call between
cases is a per-case ``error`` naming the module and the stage.  torch is imported when the backend is created.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from pldr_ref.adapters.declaration_check import (
    PROBE_BATCH,
    PROBE_SEQ,
    ProbeCase,
    never_reached,
    probe_ids,
    static_problems,
)
from pldr_ref.adapters.param_names import map_params, name_mapper
from pldr_ref.adapters.stage_map import Call, Source, entry_stage, expand_stage_map, trace_names
from pldr_ref.adapters.switch_declaration import (
    computed_switches,
    declared_values,
    mask_mode_difference,
)
from pldr_ref.adapters.torch_recorder import AdapterError, ModuleHooks, Recording, StopForward
from pldr_ref.env_vars import read_env
from pldr_ref.harness.protocol import Capabilities, StageRequest, Unsupported
from pldr_ref.params import param_shapes
from pldr_ref.registry import ALL_STAGES

#: How ``call`` receives the mask.  ``float``: float ``[B, 1, S, T]``, 1.0 where a key is masked (the released
#: v510 code; the model's dtype under ``precision="cast"``, float32 otherwise); ``bool``: ``[B, 1, S, T]``, True
#: where masked; ``keep``: the HF ``attention_mask`` int64 ``[B, S]``, 1 = the key is kept (padding only; the model
#: adds the causal part itself).
MASK_FORMS = ("float", "bool", "keep")

#: Low-precision handling: ``autocast`` keeps a float32 module and runs it under ``torch.autocast``; ``cast`` casts
#: the module (parameters and buffers) and the float mask to the dtype.
PRECISIONS = ("autocast", "cast")

#: Compute dtypes whose values a run in each dtype may hold (a float64 value in a float32 run is a bug).
ALLOWED_VALUE_DTYPES = {"float64": ("float64",), "float32": ("float32",), "bfloat16": ("bfloat16", "float32"),
                        "float16": ("float16", "float32")}

#: Most (case, call inputs) kept for stage isolation (the harness isolates the case it has just run).
CALL_INPUTS_KEPT = 8

#: Registry stages by name; the stages a model-level run can isolate (``sequence_mask`` is built by the adapter).
STAGES = {s.name: s for s in ALL_STAGES}
ISOLATION_CANDIDATES = tuple(s.name for s in ALL_STAGES if s.name != "sequence_mask")


def _torch() -> Any:
    try:
        import torch
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise ImportError("pldr_ref.adapters.torch_module needs PyTorch: `pip install \"pldr-ref[torch]\"`") from exc
    return torch


def _heads_layout(torch: Any, t: Any, layout: str, heads: int, to_golden: bool) -> Any:
    """Convert ``t`` between a source layout and the golden one (:data:`pldr_ref.adapters.stage_map.LAYOUTS`)."""
    if layout == "same":
        return t
    if layout == "bshd":
        return t.permute(0, 2, 1, 3)
    if to_golden:  # bs(hd) -> [B, H, S, d_k]
        b, s, f = t.shape
        return t.reshape(b, s, heads, f // heads).permute(0, 2, 1, 3)
    b, h, s, dk = t.shape
    return t.permute(0, 2, 1, 3).reshape(b, s, h * dk)


def expected_shape(name: str, config: Any, batch: int, seq: int) -> tuple[int, ...]:
    """The golden shape of trace entry ``name`` for a forward of ``batch`` x ``seq`` tokens."""
    leaf = name.rsplit(".", 1)[-1]
    h, dk = config.num_heads, config.d_k
    if leaf in ("q", "k", "v", "q_rot", "k_rot"):
        return (batch, h, seq, dk)
    if leaf in ("A0", "A", "A_LM", "A_P", "G_LM"):
        return (batch, h, dk, dk)
    if leaf in ("scores", "E"):
        return (batch, h, seq, seq)
    if leaf == "logits":
        return (batch, seq, config.vocab_size)
    return (batch, seq, config.d_model)


class _Built:
    """A module built for one (config, run dtype): its hooks, golden -> module parameter names, its own parameters
    and buffers by name, the buffers' values at build time, and the parameters object last loaded into it."""

    def __init__(self, module: Any, names: dict[str, str]) -> None:
        self.module, self.names = module, names
        self.hooks = ModuleHooks(module)
        self.params = dict(module.named_parameters())
        self.buffers = dict(module.named_buffers())
        self.buffers_at_build = {n: b.detach().clone() for n, b in self.buffers.items()}
        self.loaded_from: Any = None
        self.loaded: dict[str, Any] = {}


class TorchModuleBackend:
    """A harness backend around an ``nn.Module`` (see the module docstring for every argument).

    ``dtypes``: the dtypes to run (default float32 and bfloat16); ``device``: default ``$PLDR_REF_TORCH_DEVICE``,
    else CPU; ``num_threads`` (or ``$PLDR_REF_TORCH_THREADS``): ``torch.set_num_threads``, process-wide;
    ``probe_config``: the config of the dry run (default: the ``tiny`` preset at the declared switch values);
    ``isolate``: find the stages the module can run in isolation (False: judge every stage end to end).
    """

    def __init__(self, factory: Callable[[Any], Any], *, stage_map: Mapping[str, Source],
                 call: Callable[[Any, Any, Any, int], Any],
                 params: Mapping[str, str] | Callable[[str], str | None] | None = None,
                 mask_form: str = "float", precision: str = "autocast",
                 dtypes: tuple[str, ...] = ("float32", "bfloat16"), profile: str | None = None,
                 switches: Mapping[str, Any] | None = None, name: str = "torch-module", device: str | None = None,
                 num_threads: int | None = None, probe_config: Any = None, isolate: bool = True) -> None:
        torch = _torch()
        self.torch = torch
        if mask_form not in MASK_FORMS:
            raise ValueError(f"mask_form {mask_form!r} is not one of {MASK_FORMS}")
        if precision not in PRECISIONS:
            raise ValueError(f"precision {precision!r} is not one of {PRECISIONS}")
        bad = [d for d in dtypes if d not in ALLOWED_VALUE_DTYPES]
        if bad or not dtypes:
            raise ValueError(f"dtypes {tuple(dtypes)}: each must be one of {tuple(ALLOWED_VALUE_DTYPES)}")
        self.name, self.factory, self.call, self.stage_map = name, factory, call, dict(stage_map)
        self.mask_form, self.precision, self.dtypes = mask_form, precision, tuple(dtypes)
        self.rename = name_mapper(params)
        self.computed = computed_switches(profile, switches)
        self.switches = declared_values(self.computed, below_float64_only="float64" not in self.dtypes)
        self.device = torch.device(device or read_env("PLDR_REF_TORCH_DEVICE") or "cpu")
        threads = num_threads if num_threads is not None else read_env("PLDR_REF_TORCH_THREADS")
        if threads:
            torch.set_num_threads(int(threads))
        self._modules: dict[tuple[str, str], _Built] = {}
        self._expanded: dict[int, dict[str, Source]] = {}
        self._call_inputs: dict[int, tuple[Any, dict[str, Any]]] = {}
        self.reached_in_dry_run: dict[str, int] = {}
        self.isolatable: tuple[str, ...] = ()
        self.isolate = isolate
        self._dry_run(probe_config)

    # ------------------------------------------------------------------ protocol
    def capabilities(self) -> Capabilities:
        """The declared dtypes, ``forward`` cases, the isolatable stages found by the dry run, the switch values."""
        covered = set(self.stage_map) >= {"embed", "x0"} | {f"layers.{{l}}.{n}" for n in _layer_leaves()}
        return Capabilities(dtypes=self.dtypes, kinds=("forward",), stages=self.isolatable, switches=self.switches,
                            full_trace=covered)

    def run_case(self, case: Any, dtype: str) -> dict[str, np.ndarray]:
        """The trace and logits of a ``forward`` case in ``dtype`` (golden names, float64 arrays)."""
        if case.kind != "forward":
            raise Unsupported(f"case kind {case.kind!r} is not run by the module adapter")
        inputs = self._case_inputs(case)
        self._check_switches(case.config, inputs["mask"])
        if len(self._call_inputs) >= CALL_INPUTS_KEPT:
            self._call_inputs.pop(next(iter(self._call_inputs)))
        self._call_inputs[id(case.params)] = (case.params, inputs)
        sources = self._sources(case.config.num_layers)
        rec, logits = self._forward(case.config, case.params, dtype, inputs, sources)
        self._check_reached(rec, sources)
        out = {}
        for name in sources:
            want = np.shape(case.outputs[name]) if name in case.outputs else None
            out[name] = self._golden_array(name, sources[name], rec.captured[name], case.config, dtype, want)
        if "logits" not in sources:
            out["logits"] = self._golden_array("logits", None, logits, case.config, dtype,
                                               np.shape(case.outputs.get("logits")))
        return out

    def run_stage(self, request: StageRequest) -> dict[str, np.ndarray]:
        """One stage from golden upstream values: the sources of its inputs replaced, its outputs read."""
        if request.stage not in self.isolatable:
            raise Unsupported(f"stage {request.stage!r} cannot be isolated in this module")
        kept = self._call_inputs.get(id(request.params))
        if kept is None or kept[0] is not request.params:
            raise Unsupported("stage isolation needs the case's call inputs: run_case first")
        inputs = dict(kept[1])
        config, stage = request.config, STAGES[request.stage]
        if request.stage == "embedding":
            inputs["ids"] = np.asarray(request.inputs["token_ids"])
        positions = np.asarray(request.inputs.get("positions", []))
        start = inputs["start_pos"]
        if positions.size and not np.array_equal(positions, np.arange(start, start + positions.size)):
            raise Unsupported("per-row positions cannot be given to this module")
        names_in = {leaf: self._entry(leaf, request.layer, config) for leaf in stage.inputs
                    if leaf not in ("token_ids", "positions")}
        names_out = {leaf: self._entry(leaf, request.layer, config) for leaf in stage.outputs}
        sources = self._sources(config.num_layers)
        wanted = {n: sources[n] for n in (*names_in.values(), *names_out.values())}
        swaps = {names_in[leaf]: self._replacement(np.asarray(request.inputs[leaf]), sources[names_in[leaf]],
                                                   config, request.dtype) for leaf in names_in}
        rec, _ = self._forward(config, request.params, request.dtype, inputs, wanted, swaps,
                               stop_after=set(names_out.values()))
        out = {}
        for leaf, name in names_out.items():
            if name not in rec.captured:
                raise AdapterError(f"stage {request.stage}: {sources[name].describe()} ({name}) was not reached")
            out[leaf] = self._golden_array(name, sources[name], rec.captured[name], config, request.dtype,
                                           expected_shape(name, config, *inputs["ids"].shape))
        return out

    # ------------------------------------------------------------------ switches and inputs
    def _check_switches(self, config: Any, mask: np.ndarray) -> None:
        """``Unsupported`` for a mask mode that differs from the model's on a fully masked row of this case (the
        declared switch values, :attr:`switches`, are checked by the harness before the case runs)."""
        why = mask_mode_difference(config, self.computed, mask)
        if why is not None:
            raise Unsupported(why)

    def _case_inputs(self, case: Any) -> dict[str, Any]:
        """ids, start_pos, the bool mask ``[B, 1, S, S]`` and the HF keep-mask of a forward case."""
        from pldr_ref.harness.verdict.localize import model_positions_and_mask

        ids = np.asarray(case.inputs["token_ids"])
        mask = np.broadcast_to(model_positions_and_mask(case)["mask"], (ids.shape[0], 1, ids.shape[1], ids.shape[1]))
        if "attention_mask" in case.inputs:
            keep = np.asarray(case.inputs["attention_mask"]).astype(np.int64)
        else:
            keep = (~np.all(mask, axis=(1, 2))).astype(np.int64)  # keys masked for every query row are padding
        return {"ids": ids, "start_pos": int(case.args.get("start_pos", 0)), "mask": np.array(mask), "keep": keep}

    def _sources(self, num_layers: int) -> dict[str, Source]:
        """The stage map expanded for ``num_layers`` layers (cached)."""
        if num_layers not in self._expanded:
            self._expanded[num_layers] = expand_stage_map(self.stage_map, num_layers)
        return self._expanded[num_layers]

    def _entry(self, leaf: str, layer: int | None, config: Any) -> str:
        """The trace name of a stage input or output leaf (``hidden``: the last layer's ``out2``)."""
        if leaf == "hidden":
            return f"layers.{config.num_layers - 1}.out2"
        if leaf in ("embed", "x0", "logits"):
            return leaf
        return f"layers.{layer}.{leaf}"

    # ------------------------------------------------------------------ the module
    def _run_dtype(self, dtype: str) -> tuple[Any, Any, Any]:
        """(the module's dtype, the autocast dtype or None, the 16-bit storage dtype or None) of a run."""
        torch = self.torch
        table = {"float64": torch.float64, "float32": torch.float32, "bfloat16": torch.bfloat16,
                 "float16": torch.float16}
        dt = table[dtype]
        low = dt if dtype in ("bfloat16", "float16") else None
        if low is not None and self.precision == "autocast":
            return torch.float32, low, low
        return dt, None, low

    def _module(self, config: Any, dtype: str, module: Any = None) -> _Built:
        """The module for ``config`` in the run dtype of ``dtype`` (built once; ``module``: one already built)."""
        key = (repr(config), dtype)
        hit = self._modules.get(key)
        if hit is not None:
            return hit
        if module is None:
            module = self._build(config, dtype)
        own = {n: tuple(p.shape) for n, p in module.named_parameters()}
        self._modules[key] = _Built(module, map_params(own, param_shapes(config), self.rename))
        return self._modules[key]

    def _build(self, config: Any, dtype: str) -> Any:
        """``factory(config)`` on the device, in the module dtype of the run, in eval mode."""
        try:
            module = self.factory(config)
        except Exception as exc:
            raise AdapterError(f"the module factory raised {type(exc).__name__}: {exc}") from exc
        return module.to(device=self.device, dtype=self._run_dtype(dtype)[0]).eval()

    def _load(self, built: _Built, params: Any) -> None:
        """Copy the case's parameters into the module (rounded to its dtype), unless they are already there (the
        module was last loaded from the same parameters and left them unchanged: :meth:`_check_unchanged`)."""
        if built.loaded_from is params:
            return
        torch = self.torch
        built.loaded_from = None
        with torch.no_grad():
            for gname, mname in built.names.items():
                p = built.params[mname]
                p.copy_(torch.tensor(np.asarray(params[gname], dtype=np.float64)))
                built.loaded[mname] = p.detach().clone()
        built.loaded_from = params

    def _mask_tensor(self, inputs: Mapping[str, Any], dtype: str) -> Any:
        torch = self.torch
        if self.mask_form == "keep":
            return torch.as_tensor(inputs["keep"], device=self.device)
        mask = torch.as_tensor(np.array(inputs["mask"]), device=self.device)
        if self.mask_form == "bool":
            return mask
        return mask.to(self._run_dtype(dtype)[0])

    def _forward(self, config: Any, params: Any, dtype: str, inputs: Mapping[str, Any], sources: Mapping[str, Source],
                 swaps: Mapping[str, Callable[[Any], Any]] | None = None, grad: bool = False,
                 stop_after: set[str] | None = None) -> tuple[Recording, Any]:
        """One recorded forward; ``AdapterError`` naming the module and stage when the module raises or changes its
        parameters or buffers."""
        torch = self.torch
        built = self._module(config, dtype)
        self._load(built, params)
        _, autocast, _ = self._run_dtype(dtype)
        ids = torch.as_tensor(np.asarray(inputs["ids"]).astype(np.int64), device=self.device)
        mask = self._mask_tensor(inputs, dtype)
        rec = Recording(torch, built.hooks, sources, swaps, stop_after)
        amp = torch.autocast(self.device.type, dtype=autocast) if autocast is not None else _null()
        logits = None
        try:
            with torch.set_grad_enabled(grad), amp, rec:
                logits = self.call(built.module, ids, mask, int(inputs["start_pos"]))
        except StopForward:
            pass
        except (AdapterError, Unsupported):
            built.loaded_from = None
            raise
        except Exception as exc:
            built.loaded_from = None
            raise AdapterError(self._blame(rec.stack, sources, f"raised {type(exc).__name__}: {exc}")) from exc
        self._check_unchanged(built, sources)
        return rec, logits

    def _check_unchanged(self, built: _Built, sources: Mapping[str, Source]) -> None:
        """``AdapterError`` naming the module and stage when the forward changed a parameter or buffer (the module is
        then rebuilt for the next case)."""
        torch = self.torch
        for kind, own, before in (("parameter", built.params, built.loaded),
                                  ("buffer", built.buffers, built.buffers_at_build)):
            for name, was in before.items():
                now = own[name]
                if now.shape != was.shape or not torch.equal(now.detach(), was):
                    owner = name.rpartition(".")[0]
                    built.hooks.remove()
                    self._modules = {k: v for k, v in self._modules.items() if v is not built}
                    raise AdapterError(self._blame([(owner, 0)], sources,
                                                   f"changed its {kind} {name!r} during the run"))

    def _blame(self, stack: list[tuple[str, int]], sources: Mapping[str, Source], what: str) -> str:
        """``module 'PATH' (stage S, ...) WHAT``: the innermost running module and the stages it computes."""
        if not stack:  # outside every module: in the declared call itself
            return f"the declared call (outside the module) {what}"
        path = stack[-1][0]
        below = [n for n, s in sources.items() if s.module == path or s.module.startswith(path + ".") or not path]
        if not below:  # the deepest enclosing module that has a stage map entry
            above = [n for n, s in sources.items() if path.startswith(s.module + ".")]
            deepest = max((len(sources[n].module) for n in above), default=0)
            below = [n for n in above if len(sources[n].module) == deepest]
        stages = list(dict.fromkeys(entry_stage(n) + (f" (layer {n.split('.')[1]})" if n.startswith("layers.")
                                                      else "") for n in below))
        where = ", ".join(stages[:4]) + (" ..." if len(stages) > 4 else "") if stages else "no stage map entry"
        label = repr(path) if path else "the root module"
        return f"module {label} (stage {where}) {what}"

    def _check_reached(self, rec: Recording, sources: Mapping[str, Source]) -> None:
        missing = [n for n in sources if n not in rec.hits]
        if not missing:
            return
        name = missing[0]
        src = sources[name]
        count = rec.function_calls.get((src.module, src.name), 0) if isinstance(src, Call) else \
            rec.module_calls.get(src.module, 0)
        before = self.reached_in_dry_run.get(name)
        why = f"{src.describe()} was not reached in this case ({count} call(s))"
        if before is not None:
            why += ("; the dry run reached it: the module keeps state between forwards (a cache or a flag) "
                    "that changes what it computes")
        raise AdapterError(f"stage map entry {name!r} (stage {entry_stage(name)}): {why}"
                           + (f"; {len(missing) - 1} more entries not reached" if len(missing) > 1 else ""))

    # ------------------------------------------------------------------ values
    def _golden_array(self, name: str, src: Source | None, t: Any, config: Any, dtype: str,
                      want: tuple[int, ...] | None) -> np.ndarray:
        """A captured tensor in the golden layout as float64, after checking its dtype and shape."""
        torch = self.torch
        what = "the logits returned by call" if src is None else src.describe()
        if not isinstance(t, torch.Tensor):
            raise AdapterError(f"{what} ({name}, stage {entry_stage(name)}) is a {type(t).__name__}, not a tensor")
        got_dtype = str(t.dtype).replace("torch.", "")
        if got_dtype not in ALLOWED_VALUE_DTYPES[dtype]:
            raise AdapterError(f"{what} ({name}, stage {entry_stage(name)}) has dtype {got_dtype} in a {dtype} run "
                               f"(expected {' or '.join(ALLOWED_VALUE_DTYPES[dtype])})")
        layout = "same" if src is None else src.layout
        if layout != "same" and (t.dim() not in (3, 4) or (layout == "bshd") != (t.dim() == 4)):
            raise AdapterError(f"{what} ({name}, stage {entry_stage(name)}) has shape {tuple(t.shape)}, which is not "
                               f"layout {layout!r}")
        g = _heads_layout(torch, t, layout, config.num_heads, to_golden=True)
        if want is not None and tuple(g.shape) != tuple(want):
            raise AdapterError(f"{what} ({name}, stage {entry_stage(name)}) has shape {tuple(g.shape)} in the golden "
                               f"layout, expected {tuple(want)}")
        return g.detach().to("cpu", torch.float64).numpy()

    def _replacement(self, golden: np.ndarray, src: Source, config: Any, dtype: str) -> Callable[[Any], Any]:
        """original tensor -> the golden value in the source's layout, rounded through the run's 16-bit dtype and
        cast to the original's dtype."""
        torch = self.torch
        low = self._run_dtype(dtype)[2]
        value = _heads_layout(torch, torch.tensor(np.array(golden, dtype=np.float64)), src.layout, config.num_heads,
                              to_golden=False)

        def swap(original: Any) -> Any:
            v = value.to(original.device)
            if low is not None:
                v = v.to(low)
            v = v.to(original.dtype)
            if tuple(v.shape) != tuple(original.shape):
                raise AdapterError(f"{src.describe()}: the golden value has shape {tuple(v.shape)} in the module's "
                                   f"layout, the module's value {tuple(original.shape)}")
            return v.contiguous()
        return swap

    # ------------------------------------------------------------------ the dry run
    def _dry_run(self, probe_config: Any) -> None:
        """Check the declaration on ``probe_config`` before any case runs; ``ValueError`` listing the problems."""
        from pldr_ref.config import PLDRConfig
        from pldr_ref.params import init_params

        config = probe_config
        if config is None:
            fixed = {k: v for k, v in self.computed.items() if k not in ("pad_id",)}
            config = PLDRConfig.preset("tiny").replace(**fixed)
        try:
            sources = expand_stage_map(self.stage_map, config.num_layers)
        except ValueError as exc:
            raise ValueError(f"{self.name}: {exc}") from None
        dtype = self.dtypes[0] if "float32" not in self.dtypes else "float32"
        try:
            module = self._build(config, dtype)
            problems = static_problems([p for p, _ in module.named_modules()], sources)
            if problems:
                raise AdapterError("the stage map does not fit the module built for the probe config: "
                                   + "; ".join(problems))
            self._module(config, dtype, module)
        except AdapterError as exc:
            raise ValueError(f"{self.name}: {exc}") from None
        case = ProbeCase(config, probe_ids(config))
        inputs = self._case_inputs(case)
        params = init_params(config, seed=0)
        try:
            rec, _ = self._forward(config, params, dtype, inputs, sources)
        except AdapterError as exc:
            raise ValueError(f"{self.name}: dry run on the probe config failed: {exc}") from None
        problems = []
        for name, src in sources.items():
            if name not in rec.hits:
                problems.append(never_reached(name, src, rec))
                continue
            try:
                self._golden_array(name, src, rec.captured[name], config, dtype,
                                   expected_shape(name, config, PROBE_BATCH, PROBE_SEQ))
            except AdapterError as exc:
                problems.append(str(exc))
        if problems:
            raise ValueError(f"{self.name}: the stage map does not fit the module (dry run on the probe config): "
                             + "; ".join(problems))
        self.reached_in_dry_run = {n: 1 for n in sources}
        self.isolatable = self._find_isolatable(config, params, dtype, inputs, sources) if self.isolate else ()
        for built in self._modules.values():
            built.hooks.remove()
        self._modules.clear()

    def _find_isolatable(self, config: Any, params: Any, dtype: str, inputs: Mapping[str, Any],
                         sources: Mapping[str, Source]) -> tuple[str, ...]:
        """The stages whose outputs are mapped and whose inputs are sources the logits depend on.  One forward on
        the probe adds to every source a zero leaf tensor that requires a gradient; the sources whose leaf gets a
        gradient from the logits are consumed downstream (a value the model only returns for inspection is not)."""
        torch = self.torch
        leaves: dict[str, Any] = {}

        def leaf(name: str) -> Callable[[Any], Any]:
            def swap(original: Any) -> Any:
                if not original.is_floating_point():
                    return original
                leaves[name] = torch.zeros_like(original, requires_grad=True)
                return original + leaves[name]
            return swap

        _, logits = self._forward(config, params, dtype, inputs, sources, {n: leaf(n) for n in sources}, grad=True)
        if logits.requires_grad:
            logits.float().sum().backward()
        consumed = {n for n, t in leaves.items() if t.grad is not None}
        found = []
        for stage_name in ISOLATION_CANDIDATES:
            stage = STAGES[stage_name]
            layer = 0 if stage.per_layer else None
            outs = [self._entry(leaf, layer, config) for leaf in stage.outputs]
            ins = [self._entry(leaf, layer, config) for leaf in stage.inputs if leaf not in ("token_ids", "positions")]
            if all(n in sources for n in outs) and all(n in consumed for n in ins):
                found.append(stage_name)
        return tuple(found)


class _null:  # noqa: N801 - a context manager that does nothing
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: Any) -> None:
        return None


def _layer_leaves() -> tuple[str, ...]:
    from pldr_ref.layer import LAYER_STAGES

    return LAYER_STAGES


__all__ = ["MASK_FORMS", "PRECISIONS", "AdapterError", "TorchModuleBackend", "expected_shape", "name_mapper",
           "trace_names"]
