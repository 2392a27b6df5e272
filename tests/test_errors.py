"""One error root: every exception class codegym defines is a ``CodegymError`` (a caller
catches codegym's failures in one place), with a documented exit code."""

from __future__ import annotations

import inspect

import pytest

from codegym.errors import CodegymError
from test_exported_members import MODULES

# raised and caught inside one module, never reaching a caller (internal control flow)
INTERNAL = {
    "codegym.policies.openai_policy._Attempt",  # one try's outcome inside the retry loop
    "codegym.testing.fake_openai._DropFault",  # the test server's injected connection drop
}


def _defined_errors() -> list[type[BaseException]]:
    found = []
    for module in MODULES:
        for _, obj in inspect.getmembers(module, inspect.isclass):
            if obj.__module__ == module.__name__ and issubclass(obj, BaseException):
                found.append(obj)
    return found


ERRORS = _defined_errors()


def test_errors_are_found() -> None:
    assert len(ERRORS) >= 20  # the walk sees the packages' errors at all


@pytest.mark.parametrize("error", ERRORS, ids=lambda e: f"{e.__module__}.{e.__qualname__}")
def test_every_error_has_the_one_root(error: type[BaseException]) -> None:
    if f"{error.__module__}.{error.__qualname__}" in INTERNAL:
        pytest.skip("internal control flow")
    assert issubclass(error, CodegymError), error.__mro__
    assert error.exit_code in (2, 3)
