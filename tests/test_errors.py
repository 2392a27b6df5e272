"""One error root: every exception class codegym defines is a ``CodegymError`` (a caller
catches codegym's failures in one place), with a documented exit code."""

from __future__ import annotations

import inspect
import json
import os
import pickle
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

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


# --- a user's bad input raises the boundary's CodegymError, keeping the builtin base -------


def _bad_sampling() -> None:
    from codegym.policies import SamplingParams

    SamplingParams(temperature=-1.0)


def _bad_task() -> None:
    from codegym.tasks import Task

    Task(id="", prompt="def f():\n", entry_point="f", test="def check(f): pass")


def _bad_compare_options() -> None:
    from codegym.evals.compare import CompareOptions

    CompareOptions(margin=2.0).check()


def _bad_service_config() -> None:
    from codegym.service.app import ServiceConfig

    ServiceConfig(token="short")


def _taken_registry_name() -> None:
    from codegym._registry import Registry

    reg: Registry[object] = Registry("widget", "register it")
    reg.register("w", "mod:one")
    reg.register("w", "mod:two")


@pytest.mark.parametrize(
    ("make", "error", "match"),
    [
        (_bad_sampling, "codegym.policies.errors.PolicyConfigError", "temperature"),
        (_bad_task, "codegym.tasks.task.TaskError", "non-empty id"),
        (_bad_compare_options, "codegym.evals.runs.RunError", "margin"),
        (_bad_service_config, "codegym.service._control.ServiceConfigError", "16 characters"),
        (_taken_registry_name, "codegym._registry.RegistrationError", "registered already"),
    ],
    ids=["SamplingParams", "Task", "CompareOptions", "ServiceConfig", "Registry.register"],
)
def test_bad_input_raises_a_codegym_error_that_is_still_a_value_error(
    make: Callable[[], None], error: str, match: str
) -> None:
    with pytest.raises(CodegymError, match=match) as info:
        make()
    e = info.value
    assert f"{type(e).__module__}.{type(e).__qualname__}" == error
    assert isinstance(e, ValueError)  # callers that caught ValueError still do
    assert e.exit_code == 2  # the input, not the run


def test_policy_config_error_is_a_config_policy_error() -> None:
    from codegym.policies import PolicyError
    from codegym.policies.errors import PolicyConfigError

    e = PolicyConfigError("bad")
    assert isinstance(e, PolicyError) and e.kind == "config"
    assert pickle.loads(pickle.dumps(e)).args == ("bad",)  # crosses a Ray boundary intact


CODEGYM = str(Path(sys.executable).parent / "codegym")


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        # caught by the command (a PolicyError) and turned into its message
        (["eval", "--suite", "synth:infer?n=2", "--model", "m", "--base-url",
          "http://127.0.0.1:9/v1", "--no-store", "--temperature", "-1"],
         "error: SamplingParams.temperature=-1.0: use a value >= 0"),
        # no command catch any more: the app-level CodegymError handler ends it
        (["rollout", "--env", "code", "--family", "infer", "--difficulty", "99", "--model",
          "m", "--base-url", "http://127.0.0.1:9/v1", "--no-store"],
         "error: difficulty=99: choose an int from 1 to 4"),
        (["sandbox", "serve", "--no-auth", "--port", "0", "--header-timeout", "0"],
         "error: header timeout 0.0: use 0 < seconds <= 3600"),
    ],
    ids=["eval-temperature", "rollout-difficulty", "serve-header-timeout"],
)  # fmt: skip
def test_codegym_exits_2_with_one_line_on_a_bad_option(
    argv: list[str], message: str, tmp_path: Path
) -> None:
    env = {**os.environ, "OPENAI_API_KEY": "test", "CODEGYM_STORE": str(tmp_path / "s.duckdb")}
    r = subprocess.run(
        [CODEGYM, *argv, "--out", str(tmp_path / "out")] if argv[0] != "sandbox" else
        [CODEGYM, *argv],
        capture_output=True, text=True, timeout=120, env=env, cwd=tmp_path,
    )  # fmt: skip
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert "Traceback" not in r.stderr
    assert r.stderr.strip() == message, r.stderr


def test_compare_with_a_bad_option_exits_2(tmp_path: Path) -> None:
    rows = [{"task_id": f"T/{i}", "completion": "", "sample_index": 0, "passed": i % 2 == 0,
             "outcome": "pass" if i % 2 == 0 else "fail"} for i in range(20)]  # fmt: skip
    run = tmp_path / "a.jsonl"
    run.write_text("".join(json.dumps(r) + "\n" for r in rows))
    r = subprocess.run(
        [CODEGYM, "compare", str(run), str(run), "--margin", "2"],
        capture_output=True, text=True, timeout=120, cwd=tmp_path,
    )  # fmt: skip
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert "Traceback" not in r.stderr
    assert r.stderr.strip() == "error: margin must be in [0, 1), got 2.0", r.stderr
