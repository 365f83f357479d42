"""Checks on the paths a ``pldr-ref`` command will write, made before the command runs.

A report written after a ten-minute run must not fail then because its folder is missing, read-only or
full, and no command may write into the committed ``golden/`` suite (``golden verify`` would then fail)
except ``golden build --out golden --overwrite``.  Each check raises :class:`OutputPathError` with one
line naming the path and the flag.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path

#: Bytes written (and removed) by the writability probe: one file-system block, so that a full disk
#: (ENOSPC) or an exhausted file-size limit (EFBIG) shows before the run, not after it.
PROBE_BYTES = 4096
#: Kinds of output: a file (its folder must exist), a folder (created with its parents), a golden suite.
FILE, FOLDER, SUITE = "file", "folder", "suite"


class OutputPathError(ValueError):
    """An output path the command cannot or must not write; the message names the flag and the path."""


def committed_suite() -> Path:
    """The committed ``golden/`` folder of this checkout (resolved)."""
    from pldr_ref.fixtures.case import DEFAULT_GOLDEN_DIR

    return DEFAULT_GOLDEN_DIR.resolve()


def inside_committed_suite(path: str | os.PathLike[str]) -> bool:
    """True if ``path`` (resolved) is the committed ``golden/`` folder or lies inside it."""
    real = Path(path).resolve()
    top = committed_suite()
    return real == top or top in real.parents


def _probe(folder: Path, flag: str) -> None:
    """Write and delete PROBE_BYTES in ``folder``; OutputPathError naming the reason if that fails."""
    try:
        fd, name = tempfile.mkstemp(prefix=".pldr-ref-probe-", dir=folder)
    except OSError as exc:
        raise OutputPathError(f"{flag} {folder}: cannot write there ({exc.strerror or exc})") from None
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(b"\0" * PROBE_BYTES)
            fh.flush()
    except OSError as exc:
        raise OutputPathError(f"{flag} {folder}: cannot write there ({exc.strerror or exc})") from None
    finally:
        with contextlib.suppress(OSError):
            os.unlink(name)


def _existing_ancestor(path: Path) -> Path:
    """The nearest ancestor of ``path`` (or itself) that exists."""
    p = path.absolute()
    while not p.exists() and p != p.parent:
        p = p.parent
    return p


def check_output(path: str | os.PathLike[str], kind: str, flag: str) -> None:
    """Refuse ``path`` as the ``flag`` output of kind FILE / FOLDER / SUITE before the run.

    FILE: its folder must exist and the path must not be a folder; FOLDER / SUITE: the path must be a folder
    or not exist, below an existing folder (no file on the way).  The place written must accept PROBE_BYTES.
    Nothing inside the committed golden/ suite is accepted, except the suite folder itself as a SUITE
    (``golden build`` refuses it in turn without ``--overwrite``).
    """
    p = Path(path)
    if inside_committed_suite(p) and not (kind == SUITE and p.resolve() == committed_suite()):
        raise OutputPathError(f"{flag} {p}: inside the committed golden suite {committed_suite()}, which only "
                                  "`pldr-ref golden build --out golden --overwrite` may write; choose another path")
    if kind == FILE:
        if p.is_dir():
            raise OutputPathError(f"{flag} {p}: is a folder, expected a file path")
        folder = p.absolute().parent
        if not folder.is_dir():
            what = "is not a folder" if folder.exists() else "does not exist"
            raise OutputPathError(f"{flag} {p}: the folder {folder} {what}")
        _probe(folder, flag)
        return
    if p.exists() and not p.is_dir():
        raise OutputPathError(f"{flag} {p}: exists and is not a folder")
    base = _existing_ancestor(p)
    if not base.is_dir():
        raise OutputPathError(f"{flag} {p}: {base} is not a folder")
    # a suite is built beside its folder (staging, then a rename); a plain folder is written into
    _probe(base if base != p.absolute() or kind == FOLDER else base.parent, flag)
