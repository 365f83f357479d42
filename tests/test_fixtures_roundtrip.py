"""Property tests: tensors and whole cases survive the on-disk format bit for bit, on edge shapes."""

from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp
from safetensors.numpy import load

from pldr_ref import PLDRConfig
from pldr_ref.fixtures.build import compute_case
from pldr_ref.fixtures.case import load_case, reference_outputs
from pldr_ref.fixtures.format import encode_safetensors, write_if_changed
from pldr_ref.fixtures.spec import CaseSpec
from pldr_ref.fixtures.splitmix import integers

shapes = hnp.array_shapes(min_dims=1, max_dims=4, min_side=1, max_side=4)


@given(hnp.arrays(np.float64, shapes, elements=st.floats(allow_nan=True, allow_infinity=True, allow_subnormal=True)),
       hnp.arrays(np.int64, shapes))
def test_tensors_round_trip_bitwise(f, i):
    back = load(encode_safetensors({"f": f, "i": i}))
    assert np.array_equal(back["f"].view(np.int64), f.view(np.int64))  # NaN payloads and -0.0 included
    assert np.array_equal(back["i"], i)


@given(st.integers(1, 2), st.sampled_from([2, 4]), st.integers(1, 3), st.integers(1, 2),
       st.sampled_from(["ideal", "additive", "finfo_min"]), st.sampled_from(["interleaved", "half"]))
def test_model_case_round_trips_on_edge_shapes(heads, d_k, seq, batch, mask_mode, layout):
    cfg = PLDRConfig(num_layers=1, num_heads=heads, d_k=d_k, dff=5, A_dff=3, num_reslayerA=1, num_denseA=1,
                     vocab_size=7, max_seq_len=8, mask_mode=mask_mode, rope_layout=layout)
    name = f"model/h{heads}_d{d_k}_s{seq}_b{batch}"
    spec = CaseSpec(name, "forward", "edge-shape round trip",
                    lambda: {"token_ids": integers(3, name, (batch, seq), cfg.vocab_size)}, config=cfg, params_seed=5)
    files, _ = compute_case(spec)
    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp) / name
        for fname, data in files.items():
            write_if_changed(d / fname, data)
        case = load_case(d, check_generator=True)
        ref = reference_outputs(case)
        assert set(ref) == set(case.outputs)
        for k, v in ref.items():
            assert np.array_equal(v.view(np.int64), case.outputs[k].view(np.int64)), k
        assert compute_case(spec)[0] == files  # deterministic
