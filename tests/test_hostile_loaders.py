"""Issue 29, cause 8: file loads check names, shapes and the memory budget from headers, before any array is read
or decompressed (``diagnose model --checkpoint X.npz``, ``diagnose g-lm --file X``, external G, safetensors).

A "bomb" is a small ``.npz`` whose deflated zeros declare a large array: each test shows the loader refusing it
with a small allocation peak (tracemalloc), and, as the negative control, that reading the same member as the
old loaders did allocates the whole array.
"""

from __future__ import annotations

import json
import tracemalloc
import zipfile
from pathlib import Path

import numpy as np
import pytest
from numpy.lib import format as npy_format

from pldr_ref import PLDRConfig
from pldr_ref.cli import main
from pldr_ref.memory_budget import BUDGET_ENV, MemoryBudgetError

#: The bombs' declared size: 16 MiB of float64 zeros (about 16 KiB deflated).
BOMB_SHAPE = (1024, 2048)
BOMB_BYTES = 8 * 1024 * 2048
#: A refused load may allocate this much (headers, zip directory, Python objects).
SMALL_PEAK = 2**20


def write_bomb(path: Path, name: str, shape: tuple[int, ...] = BOMB_SHAPE) -> Path:
    """An .npz with member ``name`` of float64 zeros of ``shape``, deflated, written in chunks."""
    header = {"descr": "<f8", "fortran_order": False, "shape": shape}
    count = int(np.prod(shape)) * 8
    chunk = bytes(2**20)
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as z, z.open(f"{name}.npy", "w") as fh:
        npy_format.write_array_header_1_0(fh, header)
        for start in range(0, count, len(chunk)):
            fh.write(chunk[: min(len(chunk), count - start)])
    return path


def peak_of(fn) -> tuple[int, BaseException | None]:
    """(tracemalloc peak bytes, the exception raised or None) of ``fn()``."""
    tracemalloc.start()
    err = None
    try:
        fn()
    except Exception as exc:
        err = exc
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return peak, err


def old_read(path: Path, name: str) -> None:
    """What the loaders did first: decompress the member."""
    with np.load(path, allow_pickle=False) as z:
        z[name]


@pytest.fixture(scope="module")
def embedding_bomb(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_bomb(tmp_path_factory.mktemp("bomb") / "ckpt.npz", "decoder.embedding.weight")


def test_a_checkpoint_bomb_is_refused_from_its_headers(embedding_bomb: Path) -> None:
    from pldr_ref.checkpoint import load_state_dict

    assert embedding_bomb.stat().st_size < 2**20  # under 1 MiB on disk
    config = PLDRConfig.preset("tiny")
    peak, err = peak_of(lambda: load_state_dict(embedding_bomb, config))
    assert isinstance(err, ValueError) and "has shape (1024, 2048), expected" in str(err), err
    assert peak < SMALL_PEAK, peak
    peak, err = peak_of(lambda: old_read(embedding_bomb, "decoder.embedding.weight"))  # negative control
    assert err is None and peak >= BOMB_BYTES, peak


def test_diagnose_model_with_a_checkpoint_bomb_is_one_error_line(embedding_bomb: Path, tmp_path: Path,
                                                                  capsys: pytest.CaptureFixture) -> None:
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps(PLDRConfig.preset("tiny").to_dict()))
    code = main(["diagnose", "model", "--checkpoint", str(embedding_bomb), "--config", str(cfg), "--out",
                 str(tmp_path / "o"), "--quiet"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and "has shape (1024, 2048)" in err[0], err


def test_an_unexpected_huge_key_is_refused_unread(tmp_path: Path) -> None:
    from pldr_ref.checkpoint import load_state_dict, save_state_dict
    from pldr_ref.params import init_params

    config = PLDRConfig.preset("tiny")
    good = tmp_path / "good.npz"
    save_state_dict(init_params(config, 0), str(good))
    bad = tmp_path / "bad.npz"
    with zipfile.ZipFile(good) as src, zipfile.ZipFile(bad, "w", compression=zipfile.ZIP_DEFLATED) as dst:
        for info in src.infolist():
            dst.writestr(info, src.read(info))
    with zipfile.ZipFile(bad, "a", compression=zipfile.ZIP_DEFLATED) as dst, dst.open("junk.npy", "w") as fh:
        npy_format.write_array_header_1_0(fh, {"descr": "<f8", "fortran_order": False, "shape": BOMB_SHAPE})
        for _ in range(BOMB_BYTES // 2**20):
            fh.write(bytes(2**20))
    peak, err = peak_of(lambda: load_state_dict(bad, config))
    assert isinstance(err, ValueError) and "unexpected key(s) ['junk']" in str(err) and peak < SMALL_PEAK, (err, peak)
    assert load_state_dict(good, config).config == config  # negative control: the clean copy loads


def test_a_g_lm_bomb_is_refused_by_the_budget_before_decompressing(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    from pldr_ref.diagnostics.g_lm import load_g_lm
    from pldr_ref.inference.modes import load_external_g

    bomb = write_bomb(tmp_path / "g.npz", "G_LM", (1, 2, 1024, 1024))  # a valid G_LM shape, 16 MiB
    monkeypatch.setenv(BUDGET_ENV, "32M")
    peak, err = peak_of(lambda: load_g_lm(bomb))
    assert isinstance(err, MemoryBudgetError) and f"G_LM file {bomb}" in str(err) and peak < SMALL_PEAK, (err, peak)
    monkeypatch.setenv(BUDGET_ENV, "1G")  # negative control: within the budget it loads (and allocates it all)
    peak, err = peak_of(lambda: load_g_lm(bomb))
    assert err is None and peak >= 16 * 2**20, (err, peak)
    config = PLDRConfig.preset("tiny")
    peak, err = peak_of(lambda: load_external_g(bomb, config))  # the external-G loader checks shapes first
    assert isinstance(err, ValueError) and "G_LM has shape (1, 2, 1024, 1024)" in str(err) and peak < SMALL_PEAK


def test_a_npy_g_lm_with_a_wrong_shape_is_refused_from_its_header(tmp_path: Path) -> None:
    from pldr_ref.diagnostics.g_lm import load_g_lm

    path = tmp_path / "g.npy"
    np.save(path, np.zeros((4, 4, 6)))
    with pytest.raises(ValueError, match=r"expected G_LM of shape \[L, H, d_k, d_k\]"):
        load_g_lm(path)
    np.save(path, np.zeros((1, 2, 4, 4)))
    assert load_g_lm(path)[0].shape == (1, 2, 4, 4)  # negative control


def test_a_safetensors_file_above_the_budget_is_refused_from_its_size(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    from safetensors.numpy import save_file

    from pldr_ref.checkpoint import read_safetensors

    path = tmp_path / "w.safetensors"
    save_file({"w": np.zeros((256, 1024))}, str(path))  # 2 MiB
    monkeypatch.setenv(BUDGET_ENV, "4M")
    peak, err = peak_of(lambda: read_safetensors(path))
    assert isinstance(err, MemoryBudgetError) and peak < SMALL_PEAK, (err, peak)
    monkeypatch.setenv(BUDGET_ENV, "64M")  # negative control
    assert read_safetensors(path)["w"].shape == (256, 1024)
