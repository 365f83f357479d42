"""The deadline of the case being validated, for backends that enforce it themselves.

:func:`pldr_ref.harness.validate.time_limit` sets it (:func:`case_deadline`) for a backend with
``enforces_deadline`` (:class:`pldr_ref.harness.engine_process.ProcessBackend`), which waits for its child
process until :func:`current_deadline` and kills it there.  Per thread.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator

_local = threading.local()


@contextlib.contextmanager
def case_deadline(seconds: float | None) -> Iterator[None]:
    """The deadline (now + ``seconds``; None: none) that :class:`ProcessBackend` calls inside the block wait to."""
    previous = current_deadline()
    _local.deadline = None if seconds is None or seconds <= 0 else (time.monotonic() + float(seconds), float(seconds))
    try:
        yield
    finally:
        _local.deadline = previous


def current_deadline() -> tuple[float, float] | None:
    """The innermost :func:`case_deadline`: (a ``time.monotonic`` deadline, the limit in seconds), or None."""
    return getattr(_local, "deadline", None)


__all__ = ["case_deadline", "current_deadline"]
