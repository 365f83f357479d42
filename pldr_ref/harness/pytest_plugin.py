"""pytest plugin: ``pytest --pldr-backend MODULE:ATTR`` turns every golden case into a test.

Registered under the ``pytest11`` entry point (``pldr_ref = pldr_ref.harness.pytest_plugin``), so it
is active wherever pldr-ref is installed; without ``--pldr-backend`` it adds nothing.

Options: ``--pldr-backend MODULE:ATTR``; ``--pldr-dtype DTYPE`` (repeatable or comma-separated;
default: every dtype the backend declares); ``--pldr-suite default|DIR``; ``--pldr-select REGEX``
(load only matching cases); ``--pldr-no-isolation``.
One test per case x dtype, named ``<group>.<case>[<dtype>]`` and marked ``pldr_ref`` (select only
them with ``-m pldr_ref``).  A failing case fails with the harness's diagnosis (first failing stage,
worst tensors); an unsupported or not-applicable case is skipped with its reason (see ``-rs``).
"""

from __future__ import annotations

from typing import Any

import pytest

_BACKEND_KEY = "_pldr_ref_backend"


def pytest_addoption(parser: Any) -> None:
    """Register the ``--pldr-*`` options."""
    group = parser.getgroup("pldr-ref", "pldr-ref backend validation")
    group.addoption("--pldr-backend", action="store", default=None, metavar="MODULE:ATTR",
                    help="validate this backend against the pldr-ref golden fixtures (one test per case)")
    group.addoption("--pldr-dtype", action="append", default=None, metavar="DTYPE",
                    help="dtype(s) to validate (default: every dtype the backend declares)")
    group.addoption("--pldr-suite", action="store", default="default", metavar="DIR",
                    help="golden suite folder ('default': the committed golden/ of pldr-ref)")
    group.addoption("--pldr-select", action="store", default=None, metavar="REGEX",
                    help="load only the golden cases whose name matches REGEX (faster than -k on a large suite)")
    group.addoption("--pldr-no-isolation", action="store_true", default=False,
                    help="compare end to end only (no stage isolation)")


def pytest_configure(config: Any) -> None:
    """Declare the ``pldr_ref`` marker (only when the plugin is in use)."""
    if config.getoption("--pldr-backend", default=None):
        config.addinivalue_line("markers", "pldr_ref: a golden case run on the --pldr-backend backend")


class PldrCaseItem(pytest.Item):
    """One golden case in one dtype."""

    def __init__(self, *, case: Any, dtype: str, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.case = case
        self.dtype = dtype
        self.add_marker("pldr_ref")
        self.result: Any = None

    def runtest(self) -> None:
        from pldr_ref.harness.validate import validate_case

        backend = getattr(self.config, _BACKEND_KEY)
        isolate = not self.config.getoption("--pldr-no-isolation")
        self.result = validate_case(backend, self.case, self.dtype, isolate=isolate)
        if self.result.status in ("unsupported", "not_applicable", "not_judgeable"):  # not judgeable: not covered,
            pytest.skip(f"{self.result.status}: {self.result.reason}")  # never a pass
        if self.result.status in ("fail", "error"):
            raise PldrCaseError(self.result)

    def repr_failure(self, excinfo: Any, style: Any = None) -> str:
        if isinstance(excinfo.value, PldrCaseError):
            return excinfo.value.describe()
        return super().repr_failure(excinfo)

    def reportinfo(self) -> tuple[str, int, str]:
        return f"golden/{self.case.name}", 0, f"{self.case.name} [{self.dtype}]"


class PldrCaseError(Exception):
    """A case failed or errored; carries the harness result."""

    def __init__(self, result: Any) -> None:
        super().__init__(result.reason)
        self.result = result

    def describe(self) -> str:
        from pldr_ref.harness.report import _failure_text

        r = self.result
        head = f"{r.case} [{r.dtype}]: {r.status}: {r.reason}"
        return head + ("\n" + _failure_text(r) if r.status == "fail" else "")


class PldrSuite(pytest.Collector):
    """The golden suite as a collector of :class:`PldrCaseItem`."""

    def __init__(self, *, cases: list[Any], dtypes: list[str], **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.cases = cases
        self.dtypes = dtypes

    def collect(self) -> list[PldrCaseItem]:
        return [PldrCaseItem.from_parent(self, name=f"{c.name.replace('/', '.')}[{d}]", case=c, dtype=d)
                for d in self.dtypes for c in self.cases]


def pytest_collection_modifyitems(session: Any, config: Any, items: list[Any]) -> None:
    """Append one item per golden case x dtype when ``--pldr-backend`` is given; otherwise do nothing."""
    spec = config.getoption("--pldr-backend", default=None)
    if not spec:
        return
    from pldr_ref.harness.cli import parse_dtypes
    from pldr_ref.harness.protocol import load_backend
    from pldr_ref.harness.suite_loading import load_suite, suite_root

    try:
        backend = load_backend(spec)
        dtypes = parse_dtypes(config.getoption("--pldr-dtype"), backend.capabilities().dtypes)
        cases = load_suite(suite_root(config.getoption("--pldr-suite")), None, config.getoption("--pldr-select"))
    except ValueError as exc:
        raise pytest.UsageError(f"--pldr-backend: {exc}") from exc
    setattr(config, _BACKEND_KEY, backend)
    suite = PldrSuite.from_parent(session, name="pldr-ref-golden", cases=cases, dtypes=dtypes)
    items.extend(suite.collect())
