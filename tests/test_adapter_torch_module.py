"""Issue 31: validate an existing PyTorch model without writing a backend (``pldr_ref.adapters.torch_module``).

The model is ``tests/pldr_style_model.py``: an independent PLDR-LLM in the released v510 code's style (own module
names, inline ``torch.pow`` / softmax, the float32 additive mask).  It is wrapped below in a stage map and a
parameter-name map; a correct model passes in float32 and bfloat16, each injected bug fails at its own stage in
both, a stage map that does not fit is an error before any case runs, and a misbehaving module is a per-case error
naming the module and the stage.  The default run judges a few cases (chosen through the suite API); the whole
suite is ``-m slow``.
"""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="the module adapter wraps PyTorch modules (pip install torch)")

from pldr_style_model import BUGS, StyleLM  # noqa: E402

from pldr_ref.adapters.stage_map import Call, Input, Output  # noqa: E402
from pldr_ref.adapters.torch_module import TorchModuleBackend  # noqa: E402
from pldr_ref.harness.suite_loading import load_suite_checked, suite_root  # noqa: E402
from pldr_ref.harness.validate import validate, validate_case  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]

# ----------------------------------------------------------------------------- the wrap
A = "blocks.{l}.attn"
STAGE_MAP = {
    "embed": Input("in_norm"), "x0": Output("in_norm"), "layers.{l}.x": Input("blocks.{l}"),
    **{f"layers.{{l}}.{n}": Output(f"{A}.{n}_lin", layout="bs(hd)") for n in "qkv"},
    "layers.{l}.q_rot": Output(f"{A}.rotary", layout="bshd"),
    "layers.{l}.k_rot": Output(f"{A}.rotary", call=1, layout="bshd"),
    "layers.{l}.A0": Input(f"{A}.a_norm"), "layers.{l}.A": Input(f"{A}.plga", arg=3),
    "layers.{l}.A_LM": Output(f"{A}.plga.adj"), "layers.{l}.A_P": Call("torch.pow", f"{A}.plga"),
    "layers.{l}.G_LM": Call("add", f"{A}.plga", index=1), "layers.{l}.scores": Call("div", f"{A}.plga"),
    "layers.{l}.E": Call("softmax", f"{A}.plga"), "layers.{l}.ctx": Input(f"{A}.out_lin"),
    "layers.{l}.attn_out": Output(A), "layers.{l}.out1": Output("blocks.{l}.norm_a"),
    "layers.{l}.ffn_out": Output("blocks.{l}.mlp"), "layers.{l}.out2": Output("blocks.{l}.norm_b"),
    "logits": Output("head"),
}
_RENAME = {"decoder": "", "embedding": "tok", "dec_layers": "blocks", "mha1": "attn", "wq": "q_lin", "wk": "k_lin",
           "wv": "v_lin", "dense": "out_lin", "reslayerAs": "a_units", "denseAs": "glus", "gluw1": "gate",
           "gluw2": "up", "gluw3": "down", "layernormA": "norm", "plgatt_layer": "plga", "Wlst": "W", "blst": "b",
           "pwlst": "P", "alst": "a", "balst": "ba", "ffn": "mlp", "final_layer": "head"}


def golden_to_style(name: str) -> str:
    """``decoder.dec_layers.0.mha1.wq.weight`` -> ``blocks.0.attn.q_lin.weight`` (the style model's names)."""
    parts = name.split(".")
    if parts[-2] in ("layernorm1", "layernorm2"):
        head = parts[:-2]
        block_norm = "norm_a" if parts[-2] == "layernorm1" else "norm_b"
        where = {"decoder": "in_norm", "mha1": "a_norm"}.get(head[-1], block_norm)
        parts = [*head, where, parts[-1]]
    return ".".join(p for p in (_RENAME.get(p, p) for p in parts) if p)


def style_backend(bug: str | None = None, **options) -> TorchModuleBackend:
    """The style model (with ``bug``) as a harness backend: the ~10 lines a user writes."""
    return TorchModuleBackend(lambda config: StyleLM(config, bug), stage_map=STAGE_MAP, params=golden_to_style,
                              call=lambda model, ids, mask, start: model(ids, mask, start), profile="pt-v510-float32",
                              num_threads=1, **options)


# ----------------------------------------------------------------------------- cases (suite API)
#: A case with the whole trace (every stage isolated and judged in float32; bfloat16 cannot resolve its logits:
#: "not covered") and one whose logits bfloat16 can judge (S = 257).
TRACE_CASE, BF16_CASE = "model/tiny_v510_switches_exact", "model/rows_s257_learned_g"


@pytest.fixture(scope="module")
def cases() -> dict:
    loaded, problems = load_suite_checked(suite_root("default"), ["model"], rf"^({TRACE_CASE}|{BF16_CASE})$")
    assert not problems
    return {c.name: c for c in loaded}


@pytest.fixture(scope="module")
def clean() -> TorchModuleBackend:
    return style_backend()


def test_golden_names_map_onto_the_style_model(clean) -> None:
    assert golden_to_style("decoder.dec_layers.1.mha1.reslayerAs.0.denseAs.1.gluw2.bias") == \
        "blocks.1.attn.a_units.0.glus.1.up.bias"
    assert golden_to_style("decoder.dec_layers.0.mha1.layernorm1.weight") == "blocks.0.attn.a_norm.weight"
    assert golden_to_style("decoder.dec_layers.0.layernorm2.bias") == "blocks.0.norm_b.bias"
    # every stage is reachable in this model: inputs replaceable, outputs mapped
    assert "masked_softmax" in clean.isolatable and len(clean.isolatable) == 17
    assert clean.capabilities().full_trace


def test_correct_model_passes_in_float32_and_bfloat16(clean, cases) -> None:
    """The negative control of the bug tests: the same case and runs pass (the isolation of every stage in both
    dtypes is also shown by tests/test_adapter_docs.py)."""
    r = validate_case(clean, cases[TRACE_CASE], "float32", isolate=False)
    assert r.status == "pass", r.reason
    assert {o.status for o in r.outputs} == {"pass"} and len(r.outputs) == 2 * 18 + 3  # the whole trace, judged
    for dtype in ("float32", "bfloat16"):
        r = validate_case(clean, cases[BF16_CASE], dtype)
        assert r.status == "pass", (dtype, r.reason)
    # bfloat16 judges the trace case (trained-like scales) end to end too, and every isolated stage passes
    r = validate_case(clean, cases[TRACE_CASE], "bfloat16")
    assert r.status == "pass" and sum(s.status == "pass" for s in r.stages) == 2 * 14 + 3, (r.reason, r.stages)


@pytest.mark.parametrize("bug", sorted(BUGS))
def test_injected_bug_fails_at_its_stage(bug: str, cases) -> None:
    backend = style_backend(bug)
    case = cases[TRACE_CASE]
    # float32: end to end alone already names the stage (the outputs upstream of it pass)
    r = validate_case(backend, case, "float32", isolate=False)
    assert r.status == "fail" and r.first_failure["stage"] == BUGS[bug] and r.first_failure["layer"] == 0, r
    # bfloat16: the stage's isolated run pins it (end to end, bfloat16 cannot resolve what follows the PLGA chain)
    r = validate_case(backend, case, "bfloat16")
    assert r.status == "fail", r.reason
    assert (r.first_failure["stage"], r.first_failure["layer"], r.first_failure["found_by"]) == (
        BUGS[bug], 0, "isolation"), r.first_failure


def test_cast_precision_casts_parameters_buffers_and_mask(cases) -> None:
    """``precision="cast"``: ``model.to(bfloat16)`` with its RoPE table buffer, and the float mask cast too (the
    released-style ``matmul(E, V)`` raises on a float32 ``E`` next to bfloat16 values otherwise)."""
    backend = style_backend(precision="cast", isolate=False)
    r = validate_case(backend, cases[BF16_CASE], "bfloat16", isolate=False)
    assert r.status == "pass", r.reason
    model = backend._module(cases[BF16_CASE].config, "bfloat16").module
    assert model.tok.weight.dtype == model.blocks[0].attn.rotary.table.dtype == torch.bfloat16
    autocast = style_backend(isolate=False)._module(cases[BF16_CASE].config, "bfloat16").module
    assert autocast.tok.weight.dtype == torch.float32  # control: autocast keeps a float32 model


def test_stage_map_vocabulary_is_checked() -> None:
    from pldr_ref.adapters.stage_map import expand_stage_map, function_name
    from pldr_ref.adapters.torch_module import name_mapper

    assert [function_name(n) for n in ("torch.pow", "__truediv__", "F.softmax", "__radd__")] == [
        "pow", "div", "softmax", "add"]
    with pytest.raises(ValueError, match=r"'layers\.\{l\}\.attention' is not a golden trace name|'attention' is not a "
                                         r"layer trace name"):
        expand_stage_map({"layers.{l}.attention": Output("x")}, 2)
    with pytest.raises(ValueError, match="layout 'bhsd' is not one of"):
        Output("x", layout="bhsd")
    rename = name_mapper({"decoder.dec_layers.{l}.mha1.": "blocks.{l}.attn.", "decoder.": "model."})
    assert rename("decoder.dec_layers.3.mha1.wq.bias") == "blocks.3.attn.wq.bias"
    assert rename("decoder.embedding.weight") == "model.embedding.weight"  # longest pattern first, then the rest


# ----------------------------------------------------------------------------- a declaration that does not fit
def test_stage_map_naming_a_missing_module_is_an_error_before_any_case() -> None:
    built = []

    def factory(config):
        built.append(config)
        return StyleLM(config)

    bad = {**STAGE_MAP, "layers.{l}.q": Output("blocks.{l}.attn.q_proj", layout="bs(hd)")}
    with pytest.raises(ValueError, match=r"entry 'layers\.0\.q' \(stage qkv_projection\): no module "
                                         r"'blocks\.0\.attn\.q_proj' \(did you mean 'blocks\.0\.attn\.q_lin'"):
        TorchModuleBackend(factory, stage_map=bad, params=golden_to_style, call=lambda m, i, k, s: m(i, k, s))
    assert len(built) == 1  # the probe config only: nothing was run


def test_stage_map_naming_a_call_that_never_happens_is_an_error_before_any_case() -> None:
    bad = {**STAGE_MAP, "layers.{l}.E": Call("softmax", "blocks.{l}.attn.plga", index=1)}
    with pytest.raises(ValueError, match=r"call #1 of 'softmax' inside module 'blocks\.0\.attn\.plga' never happens "
                                         r"\(module 'blocks\.0\.attn\.plga' made 1 such call\(s\); its direct calls: "
                                         r"add x3, div x1, matmul x5, mul x1, pow x1, softmax x1"):
        TorchModuleBackend(StyleLM, stage_map=bad, params=golden_to_style, call=lambda m, i, k, s: m(i, k, s))


def test_bad_map_through_the_cli_is_exit_2_before_any_case(tmp_path, monkeypatch, capsys) -> None:
    from pldr_ref.cli import main

    (tmp_path / "bad_map_backend.py").write_text(
        "from pldr_style_model import StyleLM\n"
        "from pldr_ref.adapters.stage_map import Output\n"
        "from pldr_ref.adapters.torch_module import TorchModuleBackend\n"
        "backend = TorchModuleBackend(StyleLM, stage_map={'x0': Output('input_norm')},\n"
        "                             call=lambda m, i, k, s: m(i, k, s), params=lambda n: None)\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.delitem(sys.modules, "bad_map_backend", raising=False)
    assert main(["validate", "--backend", "bad_map_backend:backend", "--group", "model", "--quiet"]) == 2
    err = capsys.readouterr().err
    assert "no module 'input_norm' (did you mean 'in_norm'?)" in err and "PASS" not in err


def test_parameter_map_gaps_are_an_error_before_any_case() -> None:
    with pytest.raises(ValueError, match=r"golden parameters mapped to no module parameter: decoder\.embedding\.weight "
                                         r"-> embedding\.weight.*module parameters no golden parameter fills: "
                                         r"blocks\.0\.attn\.plga\.W, blocks\.1\.attn\.plga\.W, tok\.weight"):
        TorchModuleBackend(StyleLM, stage_map=STAGE_MAP, call=lambda m, i, k, s: m(i, k, s),
                           params=lambda n: None if "Wlst" in n else ("embedding.weight" if "embedding" in n
                                                                     else golden_to_style(n)))


# ----------------------------------------------------------------------------- a module that misbehaves
def _misbehaving(how: str):
    """A factory whose module misbehaves ``how`` (``raises``: on its first forward only)."""
    def factory(config):
        model = StyleLM(config)
        state = {"calls": 0}
        mlp, head, plga = model.blocks[1].mlp, model.head, model.blocks[0].attn.plga
        mlp_forward, head_forward = mlp.forward, head.forward

        def mlp_wrong(x):
            state["calls"] += 1
            if how == "raises" and state["calls"] == 1:
                raise RuntimeError("out of memory (injected)")
            if how == "changes_parameters":
                with torch.no_grad():
                    mlp.up.weight.mul_(1.5)
            out = mlp_forward(x)
            return out.unsqueeze(0) if how == "wrong_shape" else out

        def plga_cached(q, k, v, a, mask):  # keeps A_P from its first forward: no pow call later
            if "a_p" not in state:
                state["a_p"] = torch.pow(plga.adj(torch.matmul(plga.W, a) + plga.b), plga.P)
            g = torch.matmul(plga.a, state["a_p"]) + plga.ba
            s = torch.matmul(torch.matmul(q, g), k.transpose(-1, -2)) / torch.sqrt(torch.tensor(8.0))
            return torch.matmul(torch.softmax(s + (0 if mask is None else mask * -1e9), dim=-1), v)

        mlp.forward = mlp_wrong
        if how == "wrong_dtype":
            head.forward = lambda x: head_forward(x).double()
        if how == "keeps_state":
            plga.forward = plga_cached
        return model
    return factory


@pytest.mark.parametrize(("how", "message"), [
    ("raises", r"module 'blocks\.1\.mlp' \(stage ffn \(layer 1\)\) raised RuntimeError: out of memory \(injected\)"),
    ("wrong_shape", r"output of module 'blocks\.1\.mlp' \(layers\.1\.ffn_out, stage ffn\) has shape \(1, 2, 8, 16\) "
                    r"in the golden layout, expected \(2, 8, 16\)"),
    ("wrong_dtype", r"output of module 'head' \(logits, stage lm_head\) has dtype float64 in a float32 run"),
    ("changes_parameters", r"module 'blocks\.1\.mlp\.up' \(stage ffn \(layer 1\)\) changed its parameter "
                           r"'blocks\.1\.mlp\.up\.weight' during the run"),
    ("keeps_state", r"stage map entry 'layers\.0\.A_LM' \(stage metric_tensor\): output of module "
                    r"'blocks\.0\.attn\.plga\.adj' was not reached in this case \(0 call\(s\)\); the dry run reached "
                    r"it: the module keeps state between forwards .*; 1 more entries not reached"),
])
def test_misbehaving_module_is_a_per_case_error_naming_module_and_stage(how, message, cases) -> None:
    backend = style_backend(isolate=False)  # declared on the correct model; the cases run the misbehaving one
    backend.factory = _misbehaving(how)
    case = cases[TRACE_CASE]
    results = validate(backend, [case, case], ["float32"], isolate=False)  # the run goes on after the error
    assert len(results) == 2
    first, second = results
    if how == "keeps_state":  # the module is built once per config: the second case meets the first one's state
        assert first.status == "pass", first.reason
        first, second = second, None
    assert first.status == "error", first.reason
    assert re.search(message, first.reason), first.reason
    if how == "raises":  # nothing of the failed forward (recorder, modes, call stack) leaks into the next case
        assert second.status == "pass", second.reason
    elif how == "changes_parameters":  # the module is rebuilt, and changes them again
        assert second.status == "error"


# ----------------------------------------------------------------------------- switches
def test_switch_declaration_and_run_time_checks(clean) -> None:
    caps = clean.capabilities()
    assert caps.switches["rope_precision"] == ("exact", "float32")  # equal within float32 rounding
    assert caps.switches["metric_learner"] == ("v500",) and caps.switches["rope_layout"] == ("interleaved",)
    cases, _ = load_suite_checked(suite_root("default"), ["model"], r"^model/tiny_left_pad_(additive|finfo_min)$")
    by = {c.name: c for c in cases}
    r = validate_case(clean, by["model/tiny_left_pad_finfo_min"], "float32", isolate=False)
    assert r.status == "unsupported" and "on 2 fully masked row(s)" in r.reason
    r = validate_case(clean, by["model/tiny_left_pad_additive"], "float32", isolate=False)  # negative control
    assert r.status == "pass", r.reason
    f64 = style_backend(dtypes=("float64",))
    assert f64.capabilities().switches["rope_precision"] == ("float32",)  # float64 tells the values apart


def module_level_torch_imports(source: str) -> list[int]:
    """Line numbers of ``import torch`` / ``from torch ...`` statements outside every function of ``source``."""
    tree = ast.parse(source)
    inside = {id(n) for f in ast.walk(tree) if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef))
              for n in ast.walk(f)}
    return [n.lineno for n in ast.walk(tree) if id(n) not in inside and (
        (isinstance(n, ast.Import) and any(a.name.split(".")[0] == "torch" for a in n.names))
        or (isinstance(n, ast.ImportFrom) and (n.module or "").split(".")[0] == "torch"))]


def test_core_package_and_adapter_import_no_torch() -> None:
    adapters = sorted((ROOT / "pldr_ref" / "adapters").glob("*.py"))
    assert len(adapters) >= 5
    assert {p.name: module_level_torch_imports(p.read_text()) for p in adapters} == {p.name: [] for p in adapters}
    assert module_level_torch_imports("import numpy\nimport torch.nn\ndef f():\n    import torch\n") == [2]  # control
    code = ("import sys, pldr_ref, pldr_ref.adapters, pldr_ref.adapters.torch_module, pldr_ref.adapters.released_v510; "
            "print('torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    assert out.stdout.split() == ["False"], out


# ----------------------------------------------------------------------------- whole suite (slow)
@pytest.mark.slow
def test_correct_model_on_the_whole_suite() -> None:
    loaded, problems = load_suite_checked(suite_root("default"), None, None)
    assert not problems
    results = validate(style_backend(), loaded, ["float32", "bfloat16"])
    statuses = [r.status for r in results]
    assert "fail" not in statuses and "error" not in statuses, [(r.case, r.dtype, r.reason) for r in results
                                                                 if r.status in ("fail", "error")]
    assert statuses.count("pass") >= 10


def test_values_match_the_float32_model_run_directly(clean, cases) -> None:
    """The trace the adapter returns is the module's own computation: the logits equal a direct call."""
    case = cases[BF16_CASE]
    out = clean.run_case(case, "float32")
    model = clean._module(case.config, "float32").module
    ids = torch.as_tensor(np.asarray(case.inputs["token_ids"]))
    mask = torch.as_tensor(np.array(clean._case_inputs(case)["mask"])).float()
    with torch.no_grad():
        direct = model(ids, mask, 0).double().numpy()
    assert np.array_equal(out["logits"], direct)
