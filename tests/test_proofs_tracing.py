"""proofs_check.tracing names the operators it sees without ``co_qualname`` (Python 3.10, which pyproject allows).

Python 3.10 code objects have ``co_name`` but no ``co_qualname``.  These tests hand the tracer stand-ins of the
code objects that a real forward pass runs, with ``co_qualname`` removed, and require the same names that
Python 3.11's ``co_qualname`` gives (closures and lambdas: a name that ``public_called`` leaves out, as 3.11's
``outer.<locals>.inner`` is).
"""

from __future__ import annotations

import sys
from types import CodeType, FrameType
from typing import Any

import numpy as np
import pytest

import pldr_ref
from proofs_check.tracing import Tracer, _module_name, qualified_name


class Py310Code:
    """A code object as Python 3.10 has it: no ``co_qualname``."""

    def __init__(self, code: CodeType) -> None:
        self.co_filename = code.co_filename
        self.co_name = code.co_name
        self.co_firstlineno = code.co_firstlineno


def codes_run_by_a_forward() -> list[CodeType]:
    seen: dict[CodeType, None] = {}

    def hook(frame: FrameType, event: str, arg: Any) -> None:
        if event == "call" and _module_name(frame.f_code.co_filename) is not None:
            seen.setdefault(frame.f_code)

    config = pldr_ref.PLDRConfig.preset("tiny")
    params = pldr_ref.init_params(config, seed=0)
    previous = sys.getprofile()
    sys.setprofile(hook)
    try:
        pldr_ref.forward(params, np.array([[5, 7, 1, 3]])).flat()
        config.replace(num_layers=1).to_dict()
    finally:
        sys.setprofile(previous)
    return list(seen)


@pytest.mark.skipif(sys.version_info < (3, 11), reason="needs co_qualname to state the expected names")
def test_names_without_co_qualname_equal_the_python_311_names() -> None:
    codes = codes_run_by_a_forward()
    assert len(codes) > 20
    methods = 0
    for code in codes:
        module = _module_name(code.co_filename)
        got = qualified_name(Py310Code(code), module)
        if "<" in code.co_qualname:  # a closure / lambda: excluded from public names either way
            assert "<" in got, (code.co_qualname, got)
        else:
            assert got == code.co_qualname, (module, code.co_qualname, got)
            methods += "." in got
    assert methods > 0  # methods and properties were among them


def test_tracer_runs_on_code_objects_without_co_qualname() -> None:
    codes = [c for c in codes_run_by_a_forward() if c.co_name == "forward"]
    tracer = Tracer()
    names = {tracer._name(Py310Code(c)) for c in codes}
    assert "pldr_ref.model.forward" in names


def test_negative_control_a_wrong_line_is_not_matched() -> None:
    """The lookup keys on (name, first line): a stand-in of a different line is not taken for the function."""
    code = pldr_ref.forward.__code__
    stand_in = Py310Code(code)
    stand_in.co_firstlineno += 1
    assert qualified_name(stand_in, "pldr_ref.model").startswith("<")
