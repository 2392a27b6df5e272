"""The top-level command line imports only the command it runs.

``codegym --help`` lists every command from ``cli.app.COMMANDS`` (no command module
imported); the one-line helps there must be each command's own.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from codegym.cli.app import COMMANDS, load


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_the_listed_help_is_the_commands_own(name: str) -> None:
    cmd = load(name)
    assert cmd.name == name
    own = (cmd.help or "").split("\n\n")[0].strip()
    assert own == COMMANDS[name][2], f"update COMMANDS[{name!r}] in codegym/cli/app.py"


def test_help_imports_no_command_module() -> None:
    probe = (
        "import sys\n"
        "from codegym.cli.app import app\n"
        "try:\n"
        "    app(['--help'])\n"
        "except SystemExit:\n"
        "    pass\n"
        "heavy = ('duckdb', 'torch', 'fastapi', 'codegym.sandbox', 'codegym.store', 'pydantic')\n"
        "print(sorted(m for m in sys.modules if m.endswith('_cmd') or m.startswith(heavy)))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=60
    )
    assert "score" in out.stdout and "tasks" in out.stdout  # the listing itself
    assert out.stdout.strip().splitlines()[-1] == "[]"


def test_scoring_a_plain_suite_imports_no_pydantic(tmp_path: Path) -> None:
    """pydantic costs about 0.2 s to import, a third of the wait before ``score``'s first
    sandbox run (issue 19): the options' parsing and the suite's loading must not need it.
    (typer 0.29 validates every option with pydantic; pyproject.toml keeps it below.)"""
    probe = (
        "import sys\n"
        "from codegym.cli.app import app\n"
        "try:\n"
        f"    app(['score', {str(tmp_path / 'absent.jsonl')!r}, '--out', 'r.jsonl'])\n"
        "except SystemExit:\n"
        "    pass\n"
        "print(sorted(m for m in sys.modules if m.startswith('pydantic')))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, cwd=tmp_path
    )
    assert "cannot read samples file" in out.stdout + out.stderr  # it got past the parsing
    assert out.stdout.strip().splitlines()[-1] == "[]"


def test_a_command_runs_and_a_typo_is_named() -> None:
    ok = subprocess.run(
        [sys.executable, "-m", "codegym.cli", "sandbox", "--help"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert ok.returncode == 0 and "serve" in ok.stdout and "exec" in ok.stdout
    typo = subprocess.run(
        [sys.executable, "-m", "codegym.cli", "scroe"], capture_output=True, text=True, timeout=60
    )
    assert typo.returncode == 2 and "Did you mean 'score'" in typo.stderr


def _raises_a_codegym_error() -> None:
    """A command whose library call fails on the user's input."""
    from codegym.evals.runs import RunError

    raise RunError("runs/x: not a run folder; pass a folder with results.jsonl")


def _raises_an_aborted_rollout() -> None:
    """A command whose run fails on the way."""
    from codegym.rollout import RolloutAborted

    raise RolloutAborted("the policy server kept failing")


@pytest.mark.parametrize(
    ("target", "code", "text"),
    [("_raises_a_codegym_error", 2, "not a run folder"),
     ("_raises_an_aborted_rollout", 3, "kept failing")],
)  # fmt: skip
def test_a_codegym_error_ends_the_command_with_its_message_and_code(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], target: str,
    code: int, text: str,
) -> None:  # fmt: skip
    import importlib

    cli = importlib.import_module(
        "codegym.cli.app"
    )  # the module (the package's `app` is the Typer)
    monkeypatch.setitem(cli.COMMANDS, "boom", (__name__, target, "Fail."))
    monkeypatch.setattr(sys, "argv", ["codegym", "boom"])
    with pytest.raises(SystemExit) as done:
        cli.main()
    assert done.value.code == code
    err = capsys.readouterr().err
    assert text in err and "Traceback" not in err
