"""The environment variables pldr-ref reads, and the one reader that checks them.

Every variable is read through :func:`read_env`, which parses it and raises :class:`EnvVarError` naming the
variable, its value and what it must be.  Before a command starts work, :func:`check_environment` reads every
variable of :data:`ENV_VARS` that is set, so a bad value is one error about that variable -- never a golden case
reported as malformed or a model that "cannot be loaded" (issue 29, cause 7).

=========================  ======================================================================================
``PLDR_REF_MEMORY_BUDGET``  size guard budget: bytes with an optional K/M/G/T suffix (powers of 1024), or ``none``
``PLDR_REF_THREADS``        threads of the row-blocked float64 stages and of the calibration members (1 to
                           :data:`MAX_THREADS`)
``PLDR_REF_TORCH_THREADS``  ``torch.set_num_threads`` of the torch backends (1 to :data:`MAX_THREADS`)
``PLDR_REF_ORT_THREADS``    ONNX Runtime intra-op threads (1 to :data:`MAX_THREADS`; default 1)
``PLDR_REF_TORCH_DEVICE``   torch device of the torch backends (``cpu``, ``cuda``, ``cuda:N``, ``mps``, ...)
``PLDR_REF_TRACEBACK``      ``1``: a failing command shows its traceback instead of one error line; ``0`` or empty: not
``PLDR_REF_CACHE``          folder of the generated suites (``validate --profile``; else ``~/.cache/pldr_ref/suites``)
``PLDR_REF_COMPILED_SUMS``  ``0``: the calibration's emulated sums run as NumPy loops even where numba is installed;
                           ``1`` or empty: compiled when numba is installed (same bits either way)
=========================  ======================================================================================
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

#: Largest thread count accepted by the thread variables.
MAX_THREADS = 4096
#: Suffix -> multiplier of a byte count.
BYTE_SUFFIXES = {"K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}


class EnvVarError(ValueError):
    """An environment variable with a value pldr-ref cannot use; the message names the variable."""


@dataclass(frozen=True)
class EnvVar:
    """One environment variable: its name, what it must hold (for the error) and its parser (raises ValueError)."""

    name: str
    expected: str
    parse: Callable[[str], Any]
    #: An empty value counts as unset (else it is parsed, and refused by a parser that needs a value).
    empty_is_unset: bool = True


def parse_byte_count(raw: str) -> int | None:
    """A positive byte count with an optional K/M/G/T suffix (powers of 1024), or ``none`` -> None."""
    text = raw.strip()
    if text.lower() == "none":
        return None
    scale = BYTE_SUFFIXES.get(text[-1:].upper(), 1)
    digits = text[:-1] if text[-1:].upper() in BYTE_SUFFIXES else text
    value = float(digits) * scale
    if not (math.isfinite(value) and value >= 1):
        raise ValueError(raw)
    return int(value)


def parse_thread_count(raw: str) -> int:
    """An integer from 1 to :data:`MAX_THREADS`."""
    value = int(raw.strip())
    if not 1 <= value <= MAX_THREADS:
        raise ValueError(raw)
    return value


def parse_device(raw: str) -> str:
    """A torch device name: letters, then optionally ``:N``."""
    text = raw.strip()
    if not re.fullmatch(r"[a-z_]+(:[0-9]+)?", text):
        raise ValueError(raw)
    return text


def parse_folder(raw: str) -> str:
    """A folder path (``~`` expanded later): one line without NUL, never only spaces."""
    if not raw.strip() or "\x00" in raw or "\n" in raw:
        raise ValueError(raw)
    return raw


def parse_flag(raw: str) -> bool:
    """``1`` -> True; ``0`` or empty -> False."""
    text = raw.strip()
    if text not in ("", "0", "1"):
        raise ValueError(raw)
    return text == "1"


#: Every environment variable pldr-ref reads.
ENV_VARS: dict[str, EnvVar] = {v.name: v for v in (
    EnvVar("PLDR_REF_MEMORY_BUDGET", "a positive byte count (e.g. 64G, 500M, 1e11) or 'none'", parse_byte_count),
    EnvVar("PLDR_REF_THREADS", f"a positive integer (1 to {MAX_THREADS})", parse_thread_count, empty_is_unset=False),
    EnvVar("PLDR_REF_TORCH_THREADS", f"a positive integer (1 to {MAX_THREADS})", parse_thread_count),
    EnvVar("PLDR_REF_ORT_THREADS", f"a positive integer (1 to {MAX_THREADS})", parse_thread_count),
    EnvVar("PLDR_REF_TORCH_DEVICE", "a torch device name such as cpu, cuda or cuda:1", parse_device),
    EnvVar("PLDR_REF_TRACEBACK", "1 (show tracebacks), 0 or empty", parse_flag, empty_is_unset=False),
    EnvVar("PLDR_REF_CACHE", "a folder path on one line", parse_folder),
    EnvVar("PLDR_REF_COMPILED_SUMS", "1 (compiled sums where numba is installed), 0 (NumPy loops) or empty",
           parse_flag),
)}


def read_env(name: str, default: Any = None) -> Any:
    """The parsed value of the environment variable ``name`` (one of :data:`ENV_VARS`), ``default`` when it is
    unset (or empty, where :attr:`EnvVar.empty_is_unset`).  A value its parser refuses is an :class:`EnvVarError`
    naming it."""
    var = ENV_VARS[name]
    raw = os.environ.get(name)
    if raw is None or (not raw.strip() and var.empty_is_unset):
        return default
    try:
        return var.parse(raw)
    except (ValueError, OverflowError):
        raise EnvVarError(f"{name} must be {var.expected}, got {raw!r} (environment variable: fix or unset "
                          "it)") from None


def check_environment() -> None:
    """Read every variable of :data:`ENV_VARS` that is set: the first bad one is an :class:`EnvVarError`."""
    for name in ENV_VARS:
        read_env(name)


def traceback_requested() -> bool:
    """True when ``PLDR_REF_TRACEBACK=1`` (a malformed value counts as not set here: the error about it is shown
    by :func:`check_environment`)."""
    try:
        return bool(read_env("PLDR_REF_TRACEBACK", False))
    except EnvVarError:
        return False
