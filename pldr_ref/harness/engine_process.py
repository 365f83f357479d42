"""A time limit that stops any engine: the backend runs in a child process that is killed at the limit.

The per-case limit of :func:`pldr_ref.harness.validate.time_limit` is a SIGALRM: it interrupts Python code, but
not one long C++ call (an ONNX Runtime ``Loop`` that never ends, an XLA compile), and Ctrl-C cannot interrupt
such a call either.  :class:`ProcessBackend` is a backend proxy: the real backend is built and called in a child
process (a fresh interpreter, ``python -m pldr_ref.harness.engine_process --serve``: like multiprocessing's
"spawn", nothing is inherited from the parent's engine threads, and the caller's main module is not re-imported),
and the parent waits on the child's stdout pipe until the case's deadline (:func:`case_deadline`).  At the
deadline, on Ctrl-C or on any exception in the parent, the child is killed (SIGKILL) and the call raises
:class:`CaseTimeout` (or re-raises); the next call starts a fresh child; the backend's construction there counts
against that case's limit (the interpreter's start does not: :data:`START_ALLOWANCE_S`).

Only arrays cross the pipe, as ``np.save`` bytes read back with ``allow_pickle=False``, with a JSON header for
everything else (the case's config, args and metadata): no pickle of data.  The child checks output types
(:func:`pldr_ref.harness.verdict.output_types.checked_outputs`) before sending, so an object array never needs pickling.

Where it applies (``pldr-ref validate``, :func:`wants_child_process`): ``--onnx`` and the engine backends
(:data:`ENGINE_MODULES`) whenever ``--timeout`` is set (the default); every other backend runs in process under
the SIGALRM limit.  Its cost is one child start per run (and one per timed-out case): about 2 s of CPU for
Python, NumPy and pldr_ref (measured: ``python -m pldr_ref.harness.engine_process --measure``), and
milliseconds per call for the arrays.
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import json
import os
import select
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from pldr_ref.harness.deadline import current_deadline
from pldr_ref.harness.protocol import Capabilities, CaseTimeout, StageRequest, Unsupported

#: Backend modules whose calls are native code a SIGALRM cannot interrupt: run in a child process under a limit.
ENGINE_MODULES = ("pldr_ref.backends.onnx_backend", "pldr_ref.backends.jax_backend", "pldr_ref.backends.jax",
                  "pldr_ref.backends.torch_backend", "pldr_ref.backends.torch", "pldr_ref.backends.triton_attention")
#: The module the child runs (``python -m``; its name, not ``__name__``, which is ``__main__`` when run as a tool).
CHILD_MODULE = "pldr_ref.harness.engine_process"
#: Bytes of the length prefix of every message on the pipes.
LENGTH_BYTES = 8
#: Seconds a child may take to start Python, NumPy and pldr_ref (not counted against a case's limit).
START_ALLOWANCE_S = 120.0
#: Seconds the parent waits for a killed child to be reaped.
REAP_TIMEOUT_S = 5.0
#: Seconds between checks while waiting for the child (Ctrl-C and SIGALRM are handled between them).
POLL_INTERVAL_S = 0.25

class EngineCallError(RuntimeError):
    """The backend raised in the child process, or the child died; the message names the original error."""


# ----------------------------------------------------------------------------- messages: JSON header + np.save
def pack(header: Mapping[str, Any], arrays: Mapping[str, Any] | None = None) -> bytes:
    """One message: 8-byte header length, the JSON header (with the array names and byte lengths), the arrays as
    ``np.save`` bytes (``allow_pickle=False``: an object array is a ValueError)."""
    blobs, index = [], []
    for name, value in (arrays or {}).items():
        buf = io.BytesIO()
        np.save(buf, np.asarray(value), allow_pickle=False)
        blobs.append(buf.getvalue())
        index.append([name, len(blobs[-1])])
    head = json.dumps({**header, "arrays": index}).encode("utf-8")
    return len(head).to_bytes(8, "little") + head + b"".join(blobs)


def unpack(message: bytes) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    """(header, arrays) of :func:`pack`; arrays read with ``allow_pickle=False``."""
    n = int.from_bytes(message[:8], "little")
    header = json.loads(message[8:8 + n].decode("utf-8"))
    arrays, at = {}, 8 + n
    for name, length in header.pop("arrays"):
        arrays[name] = np.load(io.BytesIO(message[at:at + length]), allow_pickle=False)
        at += length
    return header, arrays


def _prefixed(prefix: str, arrays: Mapping[str, Any] | None) -> dict[str, Any]:
    return {f"{prefix}{k}": v for k, v in (arrays or {}).items()}


def _split(arrays: Mapping[str, np.ndarray], prefix: str) -> dict[str, np.ndarray]:
    return {k[len(prefix):]: v for k, v in arrays.items() if k.startswith(prefix)}


def pack_case(case: Any, dtype: str, *, with_params: bool = True) -> bytes:
    """A ``run_case`` request: the case's fields (JSON) and arrays (inputs, outputs, parameters; without
    ``with_params`` the parameters are the ones the child holds from the previous request, :func:`unpack_case`)."""
    config = None if case.config is None else case.config.to_dict()
    params = getattr(case, "params", None)
    header = {"call": "run_case", "dtype": dtype, "name": case.name, "group": case.group, "kind": case.kind,
              "tier": case.tier, "config": config, "args": case.args, "tolerance": case.tolerance,
              "baselines": case.baselines, "meta": case.meta,
              "params_config": None if params is None else params.config.to_dict(), "params_sent": with_params}
    arrays = {**_prefixed("i.", case.inputs), **_prefixed("o.", case.outputs),
              **_prefixed("p.", None if params is None or not with_params else dict(params.items()))}
    return pack(header, arrays)


def _params(header: Mapping[str, Any], arrays: Mapping[str, np.ndarray], held: Any) -> Any:
    """The parameters of a request: sent with it, or (``params_sent`` false) ``held``, the child's parameters of the
    previous request -- 110 M values at ``v510-110m``, sent once instead of with every case and stage."""
    from pldr_ref.config import PLDRConfig
    from pldr_ref.params import Params

    if header["params_config"] is None:
        return None
    if header.get("params_sent", True):
        return Params(PLDRConfig.from_dict(header["params_config"]), _split(arrays, "p."))
    if held is None or held.config != PLDRConfig.from_dict(header["params_config"]):
        raise RuntimeError("the engine process holds no parameters of this config (the parent did not send them)")
    return held


def unpack_case(header: Mapping[str, Any], arrays: Mapping[str, np.ndarray], held: Any = None) -> Any:
    """The case of :func:`pack_case` (a :class:`pldr_ref.fixtures.case.Case`); ``held``: the parameters the child
    holds (used when the request carries none)."""
    from pldr_ref.config import PLDRConfig
    from pldr_ref.fixtures.case import Case

    config = None if header["config"] is None else PLDRConfig.from_dict(header["config"])
    params = _params(header, arrays, held)
    return Case(header["name"], header["group"], header["kind"], header["tier"], config, params, header["args"],
                _split(arrays, "i."), _split(arrays, "o."), header["tolerance"], header["baselines"], header["meta"])


def pack_stage(req: StageRequest, *, with_params: bool = True) -> bytes:
    """A ``run_stage`` request (``with_params``: as :func:`pack_case`)."""
    header = {"call": "run_stage", "stage": req.stage, "layer": req.layer, "dtype": req.dtype,
              "config": req.config.to_dict(), "params_config": req.params.config.to_dict(),
              "params_sent": with_params}
    return pack(header, {**_prefixed("i.", req.inputs),
                         **_prefixed("p.", dict(req.params.items()) if with_params else None)})


def unpack_stage(header: Mapping[str, Any], arrays: Mapping[str, np.ndarray], held: Any = None) -> StageRequest:
    """The StageRequest of :func:`pack_stage` (``held``: as :func:`unpack_case`)."""
    from pldr_ref.config import PLDRConfig

    return StageRequest(header["stage"], header["layer"], PLDRConfig.from_dict(header["config"]),
                        _params(header, arrays, held), header["dtype"], _split(arrays, "i."))


def capabilities_dict(caps: Capabilities) -> dict[str, Any]:
    """Every field of ``caps`` as JSON-able values."""
    return {f.name: (dict(getattr(caps, f.name)) if f.name == "switches" else getattr(caps, f.name))
            for f in dataclasses.fields(caps)}


def capabilities_from(data: Mapping[str, Any]) -> Capabilities:
    """The Capabilities of :func:`capabilities_dict`."""
    fields = dict(data)
    for key in ("dtypes", "kinds", "stages", "caches"):
        fields[key] = tuple(fields[key])
    fields["switches"] = {k: tuple(v) for k, v in fields["switches"].items()}
    return Capabilities(**fields)


# ----------------------------------------------------------------------------- the child
def build_backend(recipe: tuple[str, str]) -> Any:
    """The backend of ``recipe``: ``("onnx", path)`` or ``("spec", "MODULE:ATTR")``."""
    kind, value = recipe
    if kind == "onnx":
        from pldr_ref.backends.onnx_backend import OnnxFileBackend

        return OnnxFileBackend(value)
    from pldr_ref.harness.protocol import load_backend

    return load_backend(value)


def _error_message(exc: BaseException) -> bytes:
    kind = "unsupported" if isinstance(exc, Unsupported) else "error"
    return pack({"status": kind, "type": type(exc).__name__, "message": str(exc)})


class PipeChannel:
    """Length-prefixed messages over two file descriptors (read ``rfd``, write ``wfd``)."""

    def __init__(self, rfd: int, wfd: int) -> None:
        self.rfd, self.wfd = rfd, wfd

    def send_bytes(self, data: bytes) -> None:
        """Write one message (its length, then its bytes)."""
        view = memoryview(len(data).to_bytes(LENGTH_BYTES, "little") + data)
        while view:
            view = view[os.write(self.wfd, view):]

    def _read_exactly(self, n: int) -> bytes:
        chunks, left = [], n
        while left:
            chunk = os.read(self.rfd, min(left, 2**20))
            if not chunk:
                raise EOFError("the other end closed the pipe")
            chunks.append(chunk)
            left -= len(chunk)
        return b"".join(chunks)

    def recv_bytes(self) -> bytes:
        """Read one message (EOFError when the other end is gone)."""
        return self._read_exactly(int.from_bytes(self._read_exactly(LENGTH_BYTES), "little"))

    def poll(self, timeout: float) -> bool:
        """Whether a message has started to arrive within ``timeout`` seconds."""
        return bool(select.select([self.rfd], [], [], max(timeout, 0.0))[0])


def serve(recipe: tuple[str, str]) -> None:
    """The child's loop on stdin / stdout: build the backend, answer its name and capabilities, then one answer per
    request.  What the backend prints goes to stderr (stdout carries the messages).  Ctrl-C is the parent's to
    handle (ignored here: the parent kills the child)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    out_fd = os.dup(1)
    os.dup2(2, 1)  # a print in the backend must not corrupt the messages
    conn = PipeChannel(0, out_fd)
    from pldr_ref.harness.validate import guarded_case
    from pldr_ref.harness.verdict.output_types import OutputTypeError, checked_outputs

    conn.send_bytes(pack({"status": "ready"}))  # Python and NumPy are up: the backend's construction is timed
    try:
        backend = build_backend(recipe)
        caps = backend.capabilities()
        from pldr_ref.harness.profile_suites import backend_config

        config = backend_config(backend)  # what --own-config reads (an ONNX file's pldr_ref.config)
        conn.send_bytes(pack({"status": "ok", "name": str(getattr(backend, "name", recipe[1])),
                              "capabilities": capabilities_dict(caps),
                              "config": None if config is None else config.to_dict()}))
    except BaseException as exc:  # the construction's failure is the parent's error to report
        conn.send_bytes(_error_message(exc))
        return
    held = None  # the parameters of the last request (the parent sends them only when they change)
    while True:
        try:
            header, arrays = unpack(conn.recv_bytes())
        except EOFError:
            return
        try:
            if header["call"] == "run_case":
                case = unpack_case(header, arrays, held)
                held = case.params
                got = backend.run_case(guarded_case(case), header["dtype"])
                if not isinstance(got, Mapping):
                    raise TypeError(f"run_case returned {type(got).__name__}, expected a dict of arrays")
                got = checked_outputs(case.outputs, got)
            else:
                req = unpack_stage(header, arrays, held)
                held = req.params
                got = backend.run_stage(req)
                if not isinstance(got, Mapping):
                    raise TypeError(f"run_stage returned {type(got).__name__}, expected a dict of arrays")
            sent = {k: np.asarray(v) for k, v in got.items() if v is not None}
            bad = [k for k, v in sent.items() if v.dtype.kind == "O"]
            if bad:
                raise OutputTypeError(f"output(s) {bad[:3]} of dtype object (not an array of numbers)")
            conn.send_bytes(pack({"status": "ok"}, sent))
        except BaseException as exc:  # a crash or exit of the backend is the parent's verdict to give
            conn.send_bytes(_error_message(exc))


# ----------------------------------------------------------------------------- the parent's proxy
class ProcessBackend:
    """The backend of ``recipe`` run in a child process killed at the case's deadline (module docstring)."""

    #: :func:`pldr_ref.harness.validate.time_limit` gives this backend a deadline instead of a SIGALRM.
    enforces_deadline = True

    def __init__(self, recipe: tuple[str, str], *, start_timeout: float | None = None) -> None:
        self.recipe = recipe
        self._proc: Any = None
        self._conn: Any = None
        self._limit = 0.0 if start_timeout is None else float(start_timeout)
        self._started_s = 0.0
        self._held: Any = None  # the Params the running child holds (ProcessBackend._sends)
        header = self._start(time.monotonic() + start_timeout if start_timeout else None)
        self.name = header["name"]
        self._caps = capabilities_from(header["capabilities"])
        #: The child backend's PLDRConfig (an ONNX file's ``pldr_ref.config``; None without one): what
        #: ``validate --own-config`` generates the suite for.
        self.config = None
        if header.get("config") is not None:
            from pldr_ref.config import PLDRConfig

            self.config = PLDRConfig.from_dict(header["config"])

    def capabilities(self) -> Capabilities:
        """The child backend's capabilities (read once, when it was built)."""
        return self._caps

    # -------------------------------------------------------------- process management
    def _start(self, deadline: float | None) -> dict[str, Any]:
        """Start the child and build the backend in it: the interpreter's start (up to
        :data:`START_ALLOWANCE_S`) does not count against ``deadline``; the backend's construction does."""
        t0 = time.monotonic()
        self._proc = subprocess.Popen([sys.executable, "-m", CHILD_MODULE, "--serve", *self.recipe],
                                      stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        self._conn = PipeChannel(self._proc.stdout.fileno(), self._proc.stdin.fileno())
        self._receive(t0 + START_ALLOWANCE_S, "starting the engine process")
        self._started_s = started = time.monotonic() - t0
        header, _ = self._receive(None if deadline is None else deadline + started, "building the backend")
        if header["status"] != "ok":
            self.close()
            raise ValueError(f"backend {self.recipe[1]} cannot be loaded ({header['type']}: {header['message']})")
        return header

    def close(self) -> None:
        """Kill the child (if running) and reap it."""
        if self._proc is not None:
            if self._proc.poll() is None:
                self._proc.kill()
            with contextlib.suppress(subprocess.TimeoutExpired):
                self._proc.wait(REAP_TIMEOUT_S)
            for pipe in (self._proc.stdin, self._proc.stdout):
                with contextlib.suppress(OSError):
                    pipe.close()
            self._proc = None
        self._conn = None

    def __del__(self) -> None:
        with contextlib.suppress(Exception):
            self.close()

    def _receive(self, deadline: float | None, what: str) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
        """The child's answer, waiting until ``deadline``; kills the child on the deadline, on Ctrl-C and on any
        exception raised into the wait (the SIGALRM limit's CaseTimeout)."""
        try:
            while True:
                wait = POLL_INTERVAL_S if deadline is None else min(POLL_INTERVAL_S, deadline - time.monotonic())
                if wait <= 0:
                    raise CaseTimeout(f"ran past the per-case time limit of {self._limit:g} s ({what}; the engine "
                                      "process was killed)")
                if self._conn.poll(wait):
                    return unpack(self._conn.recv_bytes())
                if self._proc.poll() is not None and not self._conn.poll(0):
                    raise EngineCallError(f"the engine process died while {what} (exit code {self._proc.returncode})")
        except (EOFError, BrokenPipeError):
            code = None if self._proc is None else self._proc.wait(REAP_TIMEOUT_S)
            self.close()
            raise EngineCallError(f"the engine process died while {what} (exit code {code})") from None
        except BaseException:
            self.close()
            raise

    def _call(self, message: bytes, what: str) -> dict[str, np.ndarray]:
        limit = current_deadline()
        deadline = None if limit is None else limit[0]
        self._limit = 0.0 if limit is None else limit[1]
        if self._proc is None:  # killed at an earlier limit: a fresh child (its interpreter start is not counted)
            self._start(deadline)
            if deadline is not None:
                deadline += self._started_s
        try:
            self._conn.send_bytes(message)
        except BrokenPipeError:
            code = self._proc.wait(REAP_TIMEOUT_S)
            self.close()
            raise EngineCallError(f"the engine process died before {what} (exit code {code})") from None
        header, arrays = self._receive(deadline, what)
        if header["status"] == "unsupported":
            raise Unsupported(header["message"])
        if header["status"] != "ok":
            raise EngineCallError(f"{header['type']}: {header['message']}")
        return arrays

    # -------------------------------------------------------------- the backend protocol
    def _sends(self, params: Any) -> bool:
        """Whether a request must carry ``params``: not when the running child holds that very object's
        parameters from the previous request (a Params is immutable; it is held here, so its id is not reused)."""
        return params is not None and (self._proc is None or params is not self._held)

    def _hold(self, params: Any, call: Callable[[], dict[str, np.ndarray]]) -> dict[str, np.ndarray]:
        """``call()``, then remember that the child holds ``params`` (forgotten when the call fails: the child
        may have been killed and restarted without them)."""
        self._held = None
        out = call()
        self._held = params
        return out

    def run_case(self, case: Any, dtype: str) -> dict[str, np.ndarray]:
        """``run_case`` in the child (the case's parameters sent only when the child does not hold them)."""
        params = getattr(case, "params", None)
        message = pack_case(case, dtype, with_params=self._sends(params))
        return self._hold(params, lambda: self._call(message, "running the case"))

    def run_stage(self, req: StageRequest) -> dict[str, np.ndarray]:
        """``run_stage`` in the child (parameters as in :meth:`run_case`)."""
        message = pack_stage(req, with_params=self._sends(req.params))
        return self._hold(req.params, lambda: self._call(message, f"running stage {req.stage}"))


def wants_child_process(recipe: tuple[str, str], timeout: float | None) -> bool:
    """Whether ``pldr-ref validate`` runs the backend of ``recipe`` in a child process: with a time limit, for
    ``--onnx`` and the :data:`ENGINE_MODULES` (module docstring)."""
    if not timeout:
        return False
    kind, value = recipe
    return kind == "onnx" or value.split(":", 1)[0] in ENGINE_MODULES


def measure_start_seconds(repeats: int = 3) -> float:
    """Median wall-clock seconds to start a child and build a trivial backend in it (the per-run overhead)."""
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        ProcessBackend(("spec", "pldr_ref.backends.reference:ReferenceBackend")).close()
        times.append(time.perf_counter() - t0)
    return sorted(times)[len(times) // 2]


def main(argv: list[str] | None = None) -> int:
    """``python -m pldr_ref.harness.engine_process --measure``: print the child start overhead."""
    import argparse

    p = argparse.ArgumentParser(prog="python -m pldr_ref.harness.engine_process", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--measure", action="store_true", help="print the median child start time (3 starts)")
    p.add_argument("--serve", nargs=2, metavar=("KIND", "VALUE"), help=argparse.SUPPRESS)  # the child's entry
    args = p.parse_args(argv)
    if args.serve:
        serve((args.serve[0], args.serve[1]))
        return 0
    if args.measure:
        print(f"child start + backend build: {measure_start_seconds():.2f} s (median of 3)")
    return 0


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
