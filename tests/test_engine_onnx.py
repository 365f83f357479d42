"""ONNX export + ONNX Runtime (issue 23): ``pldr-ref export onnx`` writes a standard-opset model whose every
traced stage is a named output; ``pldr-ref validate --onnx`` judges it on the CPU provider; a hand-modified
node is caught and localized.  Needs the [onnx] extra (skips without it, fails under
PLDR_REF_REQUIRE_ENGINES=1).
"""

from __future__ import annotations

import collections
import json

import numpy as np
import pytest
from engine_support import require

require("onnx")

import onnx  # noqa: E402

from pldr_ref.backends.onnx_backend import OnnxExportBackend, OnnxFileBackend  # noqa: E402
from pldr_ref.cli import main  # noqa: E402
from pldr_ref.export.onnx_graph import CONFIG_KEY, OPSET  # noqa: E402
from pldr_ref.fixtures.case import DEFAULT_GOLDEN_DIR, iter_cases, load_case  # noqa: E402
from pldr_ref.harness.controls.engine_mutants import ENGINE_MUTATIONS, onnx_mutant  # noqa: E402
from pldr_ref.harness.protocol import Unsupported  # noqa: E402
from pldr_ref.harness.validate import FAILING_STATUSES, validate, validate_case  # noqa: E402

TINY = "model/tiny_exact"


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    path = tmp_path_factory.mktemp("onnx") / "tiny.onnx"
    assert main(["export", "onnx", "--case", TINY, "--out", str(path)]) == 0
    return path


def run_validate(args, tmp_path):
    report = tmp_path / "report.json"
    code = main(["validate", *args, "--quiet", "--out", str(report)])
    return code, json.loads(report.read_text())


def test_exported_graph_is_standard_onnx_with_every_stage_as_an_output(exported):
    model = onnx.load(str(exported))
    onnx.checker.check_model(model, full_check=True)
    assert [o.domain for o in model.opset_import] == [""] and model.opset_import[0].version == OPSET
    assert all(n.domain == "" for n in model.graph.node)  # no custom op
    names = {o.name for o in model.graph.output}
    case = load_case(DEFAULT_GOLDEN_DIR / TINY)
    assert set(case.outputs) <= names  # every golden trace entry, so the harness can localize
    props = {p.key: json.loads(p.value) for p in model.metadata_props}
    assert props[CONFIG_KEY] == case.params.config.to_dict()


def test_validate_onnx_passes_every_case_of_the_files_config(exported, tmp_path):
    code, report = run_validate(["--onnx", str(exported)], tmp_path)
    statuses = collections.Counter(r["status"] for r in report["results"])
    assert code == 0, statuses
    passed = {r["case"] for r in report["results"] if r["status"] == "pass"}
    # the file's parameters are overridable: cases of the same config with other parameters run too
    assert {"model/tiny_exact", "model/tiny_padded_exact", "g_mode/learned_tiny"} <= passed
    other = next(r for r in report["results"] if r["case"] == "model/small")
    assert other["status"] == "unsupported" and "another config" in other["reason"]


def test_hand_modified_softmax_axis_is_caught_at_masked_softmax(exported, tmp_path):
    model = onnx.load(str(exported))
    softmax = [n for n in model.graph.node if n.op_type == "Softmax"]
    assert softmax
    softmax[0].attribute[0].i = -2  # one node's axis, as a hand edit or a broken exporter pass would
    bad = tmp_path / "bad.onnx"
    onnx.save(model, str(bad))
    code, report = run_validate(["--onnx", str(bad), "-k", "tiny_exact"], tmp_path)
    assert code == 1
    (result,) = [r for r in report["results"] if r["case"] == TINY]
    assert result["status"] == "fail"
    assert result["first_failure"]["stage"] == "masked_softmax" and result["first_failure"]["layer"] == 0


def test_export_onnx_from_a_preset_and_float16(tmp_path):
    out = tmp_path / "p.onnx"
    assert main(["export", "onnx", "--preset", "tiny", "--seed", "3", "--dtype", "float16", "--out", str(out)]) == 0
    backend = OnnxFileBackend(str(out))
    assert backend.capabilities().dtypes == ("float16",)
    assert main(["export", "onnx", "--preset", "no-such-preset", "--out", str(out)]) == 2


def test_validate_needs_exactly_one_of_backend_and_onnx(exported, tmp_path):
    assert main(["validate", "--quiet"]) == 2
    assert main(["validate", "--quiet", "--onnx", str(exported), "--backend", "x:y"]) == 2
    assert main(["validate", "--quiet", "--onnx", str(tmp_path / "missing.onnx")]) == 2


def test_file_without_the_contract_metadata_is_refused(exported, tmp_path):
    model = onnx.load(str(exported))
    del model.metadata_props[:]
    path = tmp_path / "nometa.onnx"
    onnx.save(model, str(path))
    with pytest.raises(ValueError, match=CONFIG_KEY):
        OnnxFileBackend(str(path))


def test_baked_parameters_must_match_the_case(exported, tmp_path):
    """A file whose parameters are plain initializers (not overridable) runs only the cases with its values."""
    model = onnx.load(str(exported))
    keep = {"token_ids", "attention_mask", "start_pos"}
    inputs = [i for i in model.graph.input if i.name in keep]
    del model.graph.input[:]
    model.graph.input.extend(inputs)
    path = tmp_path / "baked.onnx"
    onnx.save(model, str(path))
    backend = OnnxFileBackend(str(path))
    assert backend.run_case(load_case(DEFAULT_GOLDEN_DIR / TINY), "float32")["logits"].shape[-1] > 0
    with pytest.raises(Unsupported, match="other values"):
        backend.run_case(load_case(DEFAULT_GOLDEN_DIR / "g_mode/learned_tiny"), "float32")  # same config


#: Forward cases of the default run (one export and one ONNX Runtime session each): the tiny model, left padding
#: with a finfo_min and an additive mask, a G_LM mode, the cumulative Gram and a 72-token row; the whole forward
#: suite is the ``-m slow`` test below.
DEFAULT_FORWARD_CASES = ("model/tiny_exact", "model/tiny_left_pad_finfo_min", "model/tiny_left_pad_additive",
                         "g_mode/identity_small", "model/rows_s72_cumulative_gram")


def test_export_backend_passes_representative_forward_cases_in_float32():
    cases = [load_case(DEFAULT_GOLDEN_DIR / name) for name in DEFAULT_FORWARD_CASES]
    results = validate(OnnxExportBackend(), cases, ["float32"])
    bad = [f"{r.case}: {r.status} {r.reason}" for r in results if r.status in FAILING_STATUSES]
    assert not bad, "\n".join(bad)
    assert sum(r.status == "pass" for r in results) >= 4, [(r.case, r.status, r.reason) for r in results]


@pytest.mark.slow
def test_export_backend_passes_every_forward_case_in_float32():
    cases = list(iter_cases(DEFAULT_GOLDEN_DIR, groups=("model", "g_mode")))
    results = validate(OnnxExportBackend(), cases, ["float32"])
    bad = [f"{r.case}: {r.status} {r.reason}" for r in results if r.status in FAILING_STATUSES]
    assert not bad, "\n".join(bad)
    assert sum(r.status == "pass" for r in results) >= 10


ONNX_MUTATIONS = [m for m in ENGINE_MUTATIONS if m.engine == "onnx"]


def test_at_least_five_onnx_bugs_per_dtype():
    for dtype in ("float32", "float16"):
        assert sum(dtype in m.dtypes for m in ONNX_MUTATIONS) >= 5, dtype


@pytest.mark.parametrize("mutation", ONNX_MUTATIONS, ids=lambda m: m.bug)
def test_onnx_bug_is_caught_at_its_stage(mutation):
    case = load_case(DEFAULT_GOLDEN_DIR / mutation.case)
    backend = onnx_mutant(mutation.bug)
    for dtype in mutation.dtypes:
        r = validate_case(backend, case, dtype)
        assert r.status == "fail", (dtype, r.status, r.reason)
        assert r.first_failure["stage"] == mutation.expected_stage, (dtype, r.first_failure)


def test_float16_export_matches_float32_to_float16_precision():
    case = load_case(DEFAULT_GOLDEN_DIR / TINY)
    a = OnnxExportBackend().run_case(case, "float32")["logits"]
    b = OnnxExportBackend().run_case(case, "float16")["logits"]
    assert 0 < np.abs(a - b).max() < 0.05 * np.abs(a).max()
