"""Exports of a PLDR-LLM config + parameters for other engines: ONNX (:mod:`pldr_ref.export.onnx_graph`,
``pldr-ref export onnx``, :mod:`pldr_ref.export.cli`).  Importing this package imports no engine."""
