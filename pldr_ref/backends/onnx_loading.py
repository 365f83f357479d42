"""Reading an ONNX file that may be hostile: checks in order of cost, before anything large is read.

1. :func:`stat_model_file` -- ``os.stat`` only: a regular file (not a FIFO, device or folder), not empty, and its
   estimated load (:data:`ONNX_LOAD_COPIES` x its size) within the memory budget
   (:func:`pldr_ref.memory_budget.check_load_budget`).
2. :func:`scan_model_fields` -- the top-level protobuf fields of the ModelProto, read as tag + length and skipped
   with ``seek``: every field must be a ModelProto field with its wire type, every length inside the file, a
   ``graph`` present.  A file of zeros or of text fails here after a few bytes.
3. The whole file is read and parsed (:func:`read_model`); external data (:func:`inline_external_data`) is
   resolved against the **model's folder** (never the current folder), each location checked to stay inside it
   and to be a regular file holding the declared range, its bytes counted in the budget, then inlined, so ONNX
   Runtime receives a self-contained model and never resolves a path itself.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Any, BinaryIO

from pldr_ref.memory_budget import check_load_budget

#: Copies of an ONNX file's bytes alive at the peak of a load: the bytes read, the parsed ModelProto, ONNX
#: Runtime's session (its initializers) and the baked parameters read back as NumPy arrays.
ONNX_LOAD_COPIES = 4
#: Protobuf wire types: varint and length-delimited (the only ones a ModelProto's fields use).
WIRE_VARINT, WIRE_LEN = 0, 2
#: Longest protobuf varint (bytes).
MAX_VARINT_BYTES = 10
#: Largest protobuf message (protobuf's 2 GiB limit): a ModelProto above it cannot be parsed.
PROTOBUF_LIMIT_BYTES = 2**31 - 1


class ModelFileError(ValueError):
    """An ONNX file refused before (or while) it is loaded; the message names the file and what is wrong."""


def stat_model_file(path: str | os.PathLike[str], budget: int | None = None) -> int:
    """The size of ``path`` in bytes after the checks that need only ``os.stat`` (module docstring, step 1)."""
    p = Path(path)
    try:
        st = os.stat(p)
    except OSError as exc:
        raise ModelFileError(f"{p}: cannot be read ({exc.strerror or exc})") from exc
    if not stat.S_ISREG(st.st_mode):
        raise ModelFileError(f"{p}: not a regular file (a folder, FIFO or device is never read)")
    if st.st_size == 0:
        raise ModelFileError(f"{p}: empty file, not an ONNX model")
    if st.st_size > PROTOBUF_LIMIT_BYTES:
        raise ModelFileError(f"{p}: {st.st_size} bytes, above protobuf's 2 GiB message limit (a larger model keeps "
                             "its weights as external data)")
    check_load_budget(f"ONNX model {p}", ONNX_LOAD_COPIES * st.st_size, budget)
    return st.st_size


def read_varint(fh: BinaryIO) -> int | None:
    """One protobuf varint from ``fh``; None at end of file or on a varint longer than 10 bytes / cut short."""
    value, shift = 0, 0
    for _ in range(MAX_VARINT_BYTES):
        b = fh.read(1)
        if not b:
            return None
        value |= (b[0] & 0x7F) << shift
        if b[0] < 0x80:
            return value
        shift += 7
    return None


def model_field_wire_types() -> dict[int, int]:
    """ModelProto field number -> wire type, from the installed ``onnx`` package's descriptor (scalars are varints,
    strings and messages length-delimited)."""
    import onnx

    return {f.number: WIRE_LEN if f.type in (f.TYPE_STRING, f.TYPE_MESSAGE, f.TYPE_BYTES) else WIRE_VARINT
            for f in onnx.ModelProto.DESCRIPTOR.fields}


def scan_model_fields(fh: BinaryIO, size: int, label: str) -> dict[int, int]:
    """Field number -> count of the top-level fields of the ModelProto in ``fh`` (module docstring, step 2), read
    without loading the file: tags and lengths only, each length-delimited field skipped with ``seek``."""
    wire = model_field_wire_types()
    counts: dict[int, int] = {}
    while fh.tell() < size:
        at = fh.tell()
        tag = read_varint(fh)
        if tag is None:
            raise ModelFileError(f"{label}: not an ONNX model (truncated protobuf field at byte {at})")
        number, kind = tag >> 3, tag & 7
        if number not in wire or wire[number] != kind:
            raise ModelFileError(f"{label}: not an ONNX model (byte {at}: protobuf field {number} of wire type {kind} "
                                 "is not a ModelProto field)")
        value = read_varint(fh)
        if value is None:
            raise ModelFileError(f"{label}: not an ONNX model (field {number} at byte {at} is cut short)")
        if kind == WIRE_LEN:
            if value > size - fh.tell():
                raise ModelFileError(f"{label}: not an ONNX model (field {number} at byte {at} declares {value} "
                                     f"bytes, past the end of the {size}-byte file)")
            fh.seek(value, os.SEEK_CUR)
        counts[number] = counts.get(number, 0) + 1
    graph_field = 7
    if counts.get(graph_field, 0) != 1:
        raise ModelFileError(f"{label}: not an ONNX model (no graph)" if graph_field not in counts else
                             f"{label}: {counts[graph_field]} graph fields, an ONNX model has one")
    return counts


def all_tensors(graph: Any) -> list[Any]:
    """Every TensorProto of ``graph``: initializers, sparse initializers' values and indices, and tensors in node
    attributes, subgraphs (Loop / If / Scan bodies) included."""
    out = list(graph.initializer)
    for sparse in graph.sparse_initializer:
        out += [sparse.values, sparse.indices]
    for node in graph.node:
        for attr in node.attribute:
            if attr.HasField("t"):
                out.append(attr.t)
            out += list(attr.tensors)
            if attr.HasField("g"):
                out += all_tensors(attr.g)
            for sub in attr.graphs:
                out += all_tensors(sub)
    return out


def _external_entries(tensor: Any, label: str) -> tuple[str, int, int | None]:
    """(location, offset, length) of an external tensor; ModelFileError when malformed."""
    info = {e.key: e.value for e in tensor.external_data}
    location = info.get("location", "")
    try:
        offset = int(info.get("offset", "0"))
        length = None if "length" not in info else int(info["length"])
    except ValueError as exc:
        raise ModelFileError(f"{label}: tensor {tensor.name!r} has a malformed external data offset/length") from exc
    if not location or offset < 0 or (length is not None and length < 0):
        raise ModelFileError(f"{label}: tensor {tensor.name!r} has malformed external data "
                             f"(location {location!r}, offset {offset}, length {length})")
    return location, offset, length


def external_data_file(folder: Path, location: str, label: str, tensor: str) -> Path:
    """The file of external-data ``location``, resolved against the model's ``folder`` (never the current
    folder): relative, inside the folder after symlinks are resolved, a regular file."""
    if os.path.isabs(location) or "\x00" in location:
        raise ModelFileError(f"{label}: tensor {tensor!r}: external data location {location!r} must be a path "
                             "relative to the model's folder")
    root = folder.resolve()
    target = (root / location).resolve()
    if target != root and root not in target.parents:
        raise ModelFileError(f"{label}: tensor {tensor!r}: external data location {location!r} leaves the model's "
                             "folder")
    try:
        st = os.stat(target)
    except OSError as exc:
        raise ModelFileError(f"{label}: tensor {tensor!r}: external data file {location!r} not found beside the "
                             f"model ({exc.strerror or exc})") from exc
    if not stat.S_ISREG(st.st_mode):
        raise ModelFileError(f"{label}: tensor {tensor!r}: external data {location!r} is not a regular file")
    return target


def inline_external_data(proto: Any, folder: Path | None, label: str, budget: int | None = None) -> bool:
    """Read every external tensor of ``proto`` from its file beside the model (module docstring, step 3) into the
    tensor itself; True when there was any.  ``folder`` None (a model given as bytes) refuses external data."""
    import onnx

    external = [t for t in all_tensors(proto.graph) if t.data_location == onnx.TensorProto.EXTERNAL]
    if not external:
        return False
    if folder is None:
        raise ModelFileError(f"{label}: the model refers to external data but was not given as a file")
    plan = []
    total = 0
    for t in external:
        location, offset, length = _external_entries(t, label)
        path = external_data_file(folder, location, label, t.name)
        size = path.stat().st_size
        end = size if length is None else offset + length
        if offset > size or end > size:
            raise ModelFileError(f"{label}: tensor {t.name!r}: external data {location!r} holds {size} bytes, the "
                                 f"tensor declares bytes {offset}..{end}")
        total += end - offset
        plan.append((t, path, offset, end - offset))
    check_load_budget(f"the external data of {label}", ONNX_LOAD_COPIES * total, budget)
    for t, path, offset, length in plan:
        with open(path, "rb") as fh:
            fh.seek(offset)
            raw = fh.read(length)
        if len(raw) != length:
            raise ModelFileError(f"{label}: tensor {t.name!r}: external data changed while it was read")
        t.raw_data = raw
        del t.external_data[:]
        t.data_location = onnx.TensorProto.DEFAULT
    return True


def read_model(path: str | os.PathLike[str], budget: int | None = None) -> tuple[bytes, Any]:
    """(self-contained model bytes, ModelProto) of the ONNX file ``path``, every check of the module docstring
    passed in order; ModelFileError (a ValueError) naming the file otherwise."""
    import onnx
    from google.protobuf.message import DecodeError

    p = Path(path)
    label = str(p)
    size = stat_model_file(p, budget)
    with open(p, "rb") as fh:
        scan_model_fields(fh, size, label)
        fh.seek(0)
        data = fh.read(size + 1)
    if len(data) != size:
        raise ModelFileError(f"{label}: the file changed size while it was read")
    try:
        proto = onnx.load_from_string(data)
    except (DecodeError, ValueError, RuntimeError) as exc:
        raise ModelFileError(f"{label}: not a valid ONNX model ({exc})") from exc
    if inline_external_data(proto, p.parent, label, budget):
        data = proto.SerializeToString()
    return data, proto


__all__ = ["ModelFileError", "inline_external_data", "read_model", "scan_model_fields", "stat_model_file"]
