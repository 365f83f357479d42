"""The one output-path policy of every writer: ``pldr-ref`` and the ``python -m pldr_ref.harness.*.*`` tools.

Checked before the command starts work (:func:`check_command_paths`), so that a report written after a
ten-minute run does not fail then:

* the place must be writable: its folder exists, is not read-only or full (a probe write, :data:`PROBE_BYTES`);
* nothing is written inside the committed ``golden/`` suite (``golden verify`` would then fail) except by
  ``golden build --out golden --overwrite``, nor inside the installed package folder ``pldr_ref/`` (its data,
  e.g. ``harness/policy/calibration.json``) except by a writer given an explicit flag for it (the calibration writer's
  ``--out`` default, see :mod:`pldr_ref.harness.policy.calibration`);
* no output is an input of the same command or another output (symlinks and hard links resolved:
  ``validate --onnx M.onnx --out M.onnx``, ``--out F --junit F``), and no output file lies inside a folder
  the command reads (``--out S/MANIFEST.json --suite-dir S``).

Every file is then written atomically (:func:`atomic_write_bytes`, :func:`atomic_write_text`): a temporary file
in the same folder, flushed and fsync'ed, then ``os.replace`` -- a full disk or a kill mid-write leaves the
earlier file intact.  Each check raises :class:`OutputPathError` with one line naming the flag and the path.
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


def package_dir() -> Path:
    """The installed ``pldr_ref`` package folder (resolved): its data files are not outputs."""
    return Path(__file__).resolve().parent


def inside_package(path: str | os.PathLike[str]) -> bool:
    """True if ``path`` (resolved) is the ``pldr_ref`` package folder or lies inside it."""
    real = Path(path).resolve()
    top = package_dir()
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


def check_output(path: str | os.PathLike[str], kind: str, flag: str, *, allow_package: bool = False) -> None:
    """Refuse ``path`` as the ``flag`` output of kind FILE / FOLDER / SUITE before the run.

    FILE: its folder must exist and the path must not be a folder; FOLDER / SUITE: the path must be a folder
    or not exist, below an existing folder (no file on the way).  The place written must accept PROBE_BYTES.
    Nothing inside the committed golden/ suite is accepted, except the suite folder itself as a SUITE
    (``golden build`` refuses it in turn without ``--overwrite``), and nothing inside the ``pldr_ref`` package
    folder unless ``allow_package`` (a writer's explicit, documented flag for its own package data file).
    """
    p = Path(path)
    if inside_package(p) and not allow_package:
        raise OutputPathError(f"{flag} {p}: inside the installed pldr_ref package folder {package_dir()} (package "
                              "data, not an output); choose another path")
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


# ----------------------------------------------------------------------------- outputs vs inputs
#: Kinds of input: a file, or a folder whose content the command reads (a golden suite).
INPUT_FILE, INPUT_FOLDER = "file", "folder"


def _same_file(a: Path, b: Path) -> bool:
    """True if ``a`` and ``b`` name one file: equal real paths, or (both existing) one inode (a hard link)."""
    if os.path.realpath(a) == os.path.realpath(b):
        return True
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False


def check_distinct(outputs: list[tuple[str, str | os.PathLike[str], str]],
                   inputs: list[tuple[str, str | os.PathLike[str], str]] = ()) -> None:
    """Refuse an output that is another output, an input, or a file inside an input folder.

    ``outputs``: (flag, path, kind FILE / FOLDER / SUITE); ``inputs``: (flag, path, INPUT_FILE / INPUT_FOLDER).
    Paths are compared after resolving symlinks (and hard links where both exist).
    """
    outs = [(flag, Path(path), kind) for flag, path, kind in outputs]
    for i, (flag, p, _) in enumerate(outs):
        for other_flag, q, _ in outs[:i]:
            if _same_file(p, q):
                raise OutputPathError(f"{flag} {p} and {other_flag} {q} name the same path: one output would "
                                      "overwrite the other; choose two paths")
    for flag, p, kind in outs:
        real = Path(os.path.realpath(p))
        for in_flag, path, in_kind in inputs:
            q = Path(path)
            if _same_file(p, q):
                raise OutputPathError(f"{flag} {p} is the input {in_flag} {q}: writing it would destroy what the "
                                      "command reads; choose another path")
            top = Path(os.path.realpath(q))
            if in_kind == INPUT_FOLDER and kind == FILE and top in real.parents:
                raise OutputPathError(f"{flag} {p} lies inside {in_flag} {q}, which the command reads; write "
                                      "outside it")
            if kind in (FOLDER, SUITE) and in_kind == INPUT_FOLDER and (real == top or real in top.parents):
                raise OutputPathError(f"{flag} {p} holds the input {in_flag} {q}; choose another folder")


def check_command_paths(outputs: list[tuple[str, str | os.PathLike[str] | None, str]],
                        inputs: list[tuple[str, str | os.PathLike[str] | None, str]] = (), *,
                        allow_package: frozenset[str] = frozenset()) -> None:
    """The whole policy before a command runs: :func:`check_output` on every given output (None: flag not
    given; ``allow_package``: flags allowed to write package data) and :func:`check_distinct`."""
    outs = [(flag, path, kind) for flag, path, kind in outputs if path is not None]
    for flag, path, kind in outs:
        check_output(path, kind, flag, allow_package=flag in allow_package)
    check_distinct(outs, [(flag, path, kind) for flag, path, kind in inputs if path is not None])


# ----------------------------------------------------------------------------- atomic writes
def atomic_write_bytes(path: str | os.PathLike[str], data: bytes) -> None:
    """Write ``data`` to ``path`` atomically: a temporary file in the same folder, flushed and fsync'ed, then
    ``os.replace``; on any failure (a full disk, Ctrl-C) the temporary file is removed and ``path`` keeps its
    earlier content.  The new file gets the usual mode (0666 less the umask); a symlink is followed (its target is
    replaced, the link kept)."""
    target = Path(os.path.realpath(path))
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.absolute().parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def atomic_write_text(path: str | os.PathLike[str], text: str) -> None:
    """:func:`atomic_write_bytes` of ``text`` encoded as UTF-8."""
    atomic_write_bytes(path, text.encode("utf-8"))
