"""Row-blocked, multi-threaded evaluation of row-independent elementwise stages.

Why: BLAS runs the matrix products on every core, but a NumPy ufunc runs on one core and streams each pass
through main memory.  The masked softmax makes about ten passes over the [B, H, S, T] scores (117 MB per layer
for v510-110m at S = 1024).  Evaluated on blocks of rows small enough for the L2 cache, the same passes run from
cache, and on as many threads as the process may use (NumPy releases the GIL inside its loops).  Measured on the
2-core development VM (``python benchmarks/bench_softmax.py``): 71-74 ms unblocked, 43-46 ms blocked on one
thread, 27-31 ms on two (20-26 ms in place on two).  Inside a forward pass the second core is rarely free,
though: OpenBLAS's worker thread busy-waits for about 0.1 s after every BLAS call, so it holds that core between
the products.

Exactness: a block only ever holds whole rows and every stage run through here computes each output row from
its own input row alone, so the result is bit-identical to the unblocked evaluation for any block size and any
thread count (``tests/test_core_row_blocks.py`` checks it, with a negative control).

Threads: ``PLDR_REF_THREADS`` (a positive integer) if set, else the CPUs this process may run on.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor, wait
from typing import TypeVar

import numpy as np

T = TypeVar("T")

#: Bytes of input per block: a block's few float64 temporaries then fit the 1-2 MiB L2 cache of one core.
BLOCK_BYTES: int = 1 << 20

#: Below this many bytes of input the stage runs inline: dispatching to threads would cost more than it saves.
PARALLEL_MIN_BYTES: int = 4 << 20

_THREADS_ENV = "PLDR_REF_THREADS"
_lock = threading.Lock()
_pool: ThreadPoolExecutor | None = None
_pool_key: tuple[int, int] | None = None  # (pid, threads): a forked child or a new thread count gets a new pool


def worker_count() -> int:
    """Threads used for row-blocked stages: ``PLDR_REF_THREADS`` if set, else the CPUs this process may use."""
    from pldr_ref.env_vars import read_env

    n = read_env(_THREADS_ENV)
    if n is not None:
        return int(n)
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not every platform has sched_getaffinity
        return max(1, os.cpu_count() or 1)


def row_slices(n_rows: int, row_bytes: int, block_bytes: int | None = None) -> list[slice]:
    """Consecutive slices covering ``range(n_rows)``, each of at least one row and about ``block_bytes`` (default
    :data:`BLOCK_BYTES`) of input."""
    if block_bytes is None:
        block_bytes = BLOCK_BYTES
    if n_rows < 0 or row_bytes < 0 or block_bytes < 1:
        raise ValueError(f"bad row blocking: n_rows={n_rows}, row_bytes={row_bytes}, block_bytes={block_bytes}")
    step = max(1, block_bytes // max(1, row_bytes))
    return [slice(i, min(i + step, n_rows)) for i in range(0, n_rows, step)]


def _executor(threads: int) -> ThreadPoolExecutor:
    global _pool, _pool_key
    key = (os.getpid(), threads)
    with _lock:
        if _pool is None or _pool_key != key:
            if _pool is not None and _pool_key is not None and _pool_key[0] == key[0]:
                # a new thread count: let the old threads end (a call still submitting to it runs inline)
                _pool.shutdown(wait=False)
            # the threads of a pool made before fork() do not exist in the child: never reuse it there
            _pool = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="pldr_ref-rows",
                                       initializer=_mark_worker)
            _pool_key = key
        return _pool


_in_worker = threading.local()


def _mark_worker() -> None:
    _in_worker.flag = True


def for_each_block(fn: Callable[[T], None], blocks: Sequence[T], total_bytes: int) -> None:
    """Call ``fn(block)`` for every block (a slice, or its index): inline for small work or one thread, else on
    the worker threads.

    ``fn`` must write only the rows of its own block.  Worker w takes blocks w, w + n, w + 2n, ... (the calling
    thread is worker 0); each worker runs under the caller's NumPy error state and ``np.seterrcall`` callback.
    When a block raises (or the caller is interrupted), the workers stop before their next block and the call
    returns only after every worker has stopped, re-raising the calling thread's exception if it had one, else
    the first worker's (in worker order).  It runs inline where threads cannot help or cannot be had: from a
    worker thread (a nested call: no deadlock on the pool) and when the pool refuses work (interpreter shutdown,
    or a thread count changed by another thread meanwhile).
    """
    threads = worker_count()
    workers = min(threads, len(blocks))
    if workers < 2 or total_bytes < PARALLEL_MIN_BYTES or getattr(_in_worker, "flag", False):
        for b in blocks:
            fn(b)
        return
    # NumPy's error state is per thread (1.x) or per context (2.x): hand it over explicitly, with the callback of
    # np.seterrcall that "call" modes need (without it a worker raises NameError where the caller would call it)
    err = np.geterr()
    callback = np.geterrcall()
    stop = threading.Event()

    def run(share: Sequence[T]) -> None:
        with np.errstate(call=callback, **err):
            for b in share:
                if stop.is_set():
                    return
                try:
                    fn(b)
                except BaseException:
                    stop.set()
                    raise

    pool = _executor(threads - 1)  # sized by the machine, not by this call: one pool for every call
    futures: list[Future] = []
    inline: list[Sequence[T]] = []
    for w in range(1, workers):
        try:
            futures.append(pool.submit(run, blocks[w::workers]))
        except RuntimeError:  # the pool was shut down (interpreter exit, or a new thread count): do it here
            inline.append(blocks[w::workers])
    error: BaseException | None = None
    try:
        run(blocks[0::workers])
        for share in inline:
            run(share)
    except BaseException as exc:  # even KeyboardInterrupt: first let the other workers stop writing
        error = exc
        stop.set()
    while True:
        try:
            wait(futures)
            break
        except BaseException as exc:  # interrupted while waiting: stop the workers, still wait for them
            stop.set()
            error = error or exc
    for f in futures:
        exc = f.exception()
        if error is None and exc is not None:
            error = exc
    if error is not None:
        raise error
