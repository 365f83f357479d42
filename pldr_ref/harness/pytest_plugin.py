"""pytest plugin: ``pytest --pldr-backend MODULE:ATTR`` turns every golden case into a test.

Registered under the ``pytest11`` entry point; without ``--pldr-backend`` it adds nothing.
"""

from __future__ import annotations


def pytest_addoption(parser) -> None:  # type: ignore[no-untyped-def]
    group = parser.getgroup("pldr-ref")
    group.addoption("--pldr-backend", action="store", default=None, metavar="MODULE:ATTR",
                    help="validate this backend against the pldr-ref golden fixtures (one test per case)")
