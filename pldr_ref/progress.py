"""Progress display for long commands: a bar on a terminal, plain lines otherwise (CI logs, pipes).

One class, :class:`Progress`, used by every long-running CLI (``golden build/verify``, ``validate``,
``accuracy``, ``prove``, ``diagnose``).  Output goes to stderr so that stdout stays machine-readable
(tables, JSON).  Quiet (nothing printed) when ``enabled`` is False.
"""

from __future__ import annotations

import sys
import time
from types import TracebackType
from typing import TextIO

#: Seconds between two plain progress lines when the stream is not a terminal.
PLAIN_INTERVAL_S = 5.0
#: Width of the terminal bar, in characters.
BAR_WIDTH = 30


class Progress:
    """Counts ``total`` steps of a job called ``label``.

    >>> with Progress(3, "demo", enabled=False) as p:
    ...     for name in ("a", "b", "c"):
    ...         p.advance(name)
    """

    def __init__(self, total: int, label: str, *, stream: TextIO | None = None, enabled: bool = True) -> None:
        if isinstance(total, bool) or not isinstance(total, int) or total < 0:
            raise ValueError(f"Progress total must be a non-negative int, got {total!r}")
        self.total = total
        self.label = label
        self.stream = stream if stream is not None else sys.stderr
        self.enabled = enabled
        self.done = 0
        self._start = time.monotonic()
        self._last_plain = -PLAIN_INTERVAL_S
        self._tty = bool(getattr(self.stream, "isatty", lambda: False)())

    def __enter__(self) -> Progress:
        self._start = time.monotonic()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.finish()

    def advance(self, item: str = "", n: int = 1) -> None:
        """Mark ``n`` more steps done; ``item`` names the step just finished."""
        self.done = min(self.total, self.done + n)
        if not self.enabled:
            return
        elapsed = time.monotonic() - self._start
        if self._tty:
            frac = self.done / self.total if self.total else 1.0
            filled = round(frac * BAR_WIDTH)
            bar = "#" * filled + "-" * (BAR_WIDTH - filled)
            self._write(f"\r{self.label} [{bar}] {self.done}/{self.total} {elapsed:6.1f}s {item[:40]:<40}")
        elif elapsed - self._last_plain >= PLAIN_INTERVAL_S or self.done == self.total:
            self._last_plain = elapsed
            self._write(f"{self.label}: {self.done}/{self.total} ({elapsed:.1f}s) {item}\n")

    def finish(self) -> None:
        """End the display (a newline after a terminal bar)."""
        if self.enabled and self._tty:
            self._write("\n")
        self.enabled = False

    def _write(self, text: str) -> None:
        try:
            self.stream.write(text)
            self.stream.flush()
        except (BrokenPipeError, ValueError):  # a closed pipe (e.g. `| head`) must not crash the job
            self.enabled = False
