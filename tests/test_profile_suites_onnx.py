"""Issue 30 item 3 (ONNX): an ONNX file is judged on the templates instantiated at its own ``pldr_ref.config``.

Both are in the slow run (``python -m pytest -m slow``; the first takes about 15 s on a loaded 2-core machine): an
export of a small config with a vocabulary and width no committed case has (so the committed suite gives it no
verdict) judged on the long-position template at that config (``--own-config``), and the ``v510-110m`` export
judged in float32 and float16 on at least 10 forward cases of up to 64 positions, positions reaching
``max_seq_len`` (long-position RoPE).  Each has a negative control: the same export with every RoPE frequency 1e-3
off fails the long-position cases of the same (cached) suite.  The ``v510-110m`` one is far longer than the other
(its calibration: ``docs/backends.md`` section 12).  Needs the [onnx] extra (skips without it, fails under
PLDR_REF_REQUIRE_ENGINES=1).
"""

from __future__ import annotations

import pytest
from engine_support import require, scaled_rope_frequencies

require("onnx")

import onnx  # noqa: E402

from pldr_ref.backends.onnx_backend import OnnxFileBackend  # noqa: E402
from pldr_ref.config import PLDRConfig  # noqa: E402
from pldr_ref.export.onnx_graph import export_model  # noqa: E402
from pldr_ref.fixtures.case import DEFAULT_GOLDEN_DIR  # noqa: E402
from pldr_ref.fixtures.profile_suite import SUITE_FOLDER, ensure_suite  # noqa: E402
from pldr_ref.fixtures.templates import Target, all_templates  # noqa: E402
from pldr_ref.harness.profile_suites import backend_config, calibrate_entry, use_calibration  # noqa: E402
from pldr_ref.harness.suite_loading import load_suite  # noqa: E402
from pldr_ref.harness.validate import validate  # noqa: E402
from pldr_ref.params import init_params  # noqa: E402

#: A config no committed case has: tiny with a vocabulary of 48 and 3 heads.
OWN = PLDRConfig.preset("tiny", vocab_size=48, num_heads=3, max_seq_len=32)


#: Relative error of the RoPE frequencies of the wrong export (the negative control; issue 28's size).
FREQUENCY_ERROR = 1e-3


#: The export with every RoPE frequency constant times (1 + FREQUENCY_ERROR).
wrong_rope_frequencies = scaled_rope_frequencies(FREQUENCY_ERROR)


def export(config: PLDRConfig, dtype: str, path, rewrite=None) -> OnnxFileBackend:
    model = export_model(config, init_params(config, seed=0), dtype)
    onnx.save(model if rewrite is None else rewrite(model), str(path))
    return OnnxFileBackend(str(path))


def own_config_results(backend: OnnxFileBackend, root, dtype: str, names=None, max_seq_len=None):
    config = backend_config(backend)
    templates = [t for t in all_templates() if names is None or t.name in names]
    entry = ensure_suite(Target(config=config), templates=templates, kinds=backend.capabilities().kinds,
                         max_seq_len=max_seq_len, root=root, progress=None,
                         calibrate=lambda e: calibrate_entry(e, (dtype,)))
    use_calibration(entry)
    cases = load_suite(entry / SUITE_FOLDER, None, None)
    assert all(c.config == config for c in cases)
    return validate(backend, cases, [dtype], isolate=False), cases


@pytest.mark.slow
def test_an_onnx_file_is_judged_on_its_own_config(tmp_path):
    backend = export(OWN, "float32", tmp_path / "own.onnx")
    assert backend_config(backend) == OWN
    committed = validate(backend, load_suite(DEFAULT_GOLDEN_DIR, ["model"], "^model/tiny_padded_exact$"),
                         ["float32"])
    assert [r.status for r in committed] == ["unsupported"]  # no committed case has its config
    results, cases = own_config_results(backend, tmp_path / "cache", "float32", ("model/long_positions_s16",))
    assert [(r.case, r.status) for r in results] == [("model/long_positions_s16", "pass")], results[0].reason
    (case,) = cases
    assert case.args["start_pos"] + case.inputs["token_ids"].shape[1] == OWN.max_seq_len
    # negative control: the same export with RoPE frequencies 1e-3 off fails on the same (cached) suite
    wrong = export(OWN, "float32", tmp_path / "wrong.onnx", wrong_rope_frequencies)
    results, _ = own_config_results(wrong, tmp_path / "cache", "float32", ("model/long_positions_s16",))
    assert [r.status for r in results] == ["fail"], results[0].reason


@pytest.mark.slow
@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_the_v510_110m_export_is_judged_on_ten_forward_cases_to_max_seq_len(dtype, tmp_path):
    config = PLDRConfig.preset("v510-110m")
    backend = export(config, dtype, tmp_path / "v510.onnx")
    results, cases = own_config_results(backend, tmp_path / "cache", dtype)
    judged = [r for r in results if r.status in ("pass", "fail")]
    assert len(judged) >= 10, [(r.case, r.status, r.reason) for r in results]
    assert [r for r in results if r.status in ("fail", "error")] == []
    lengths = [c.inputs["token_ids"].shape[1] for c in cases]
    assert max(lengths) <= 64
    assert max(c.args.get("start_pos", 0) + s for c, s in zip(cases, lengths, strict=True)) == config.max_seq_len
    # negative control: the export with RoPE frequencies 1e-3 off fails the long-position cases of the same suite
    wrong = export(config, dtype, tmp_path / "wrong.onnx", wrong_rope_frequencies)
    long_cases = [c for c in cases if "long-position" in c.meta.get("tags", [])]
    assert long_cases
    verdicts = validate(wrong, long_cases, [dtype], isolate=False)
    assert [r.status for r in verdicts] == ["fail"] * len(long_cases), [(r.case, r.reason) for r in verdicts]
