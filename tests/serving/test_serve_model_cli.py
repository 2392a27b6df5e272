"""``codegym serve-model`` argument checks (serving itself is covered through ModelServer)."""

from __future__ import annotations

from pathlib import Path

import typer
from typer.testing import CliRunner

from codegym.cli.serve_model_cmd import serve_model


def app() -> typer.Typer:
    a = typer.Typer()
    a.command("serve-model")(serve_model)
    a.command("other")(lambda: None)  # two commands, so the name is part of the command line
    return a


def test_a_folder_without_a_model_is_refused_with_the_fix(tmp_path: Path) -> None:
    r = CliRunner().invoke(app(), ["serve-model", "--model", str(tmp_path)])
    assert r.exit_code == 2
    assert "no config.json" in r.output and str(tmp_path) in r.output


def test_bad_options_name_the_option(model_dir: Path) -> None:
    r = CliRunner().invoke(app(), ["serve-model", "--model", str(model_dir), "--port", "70000"])
    assert r.exit_code == 2 and "--port" in r.output
    r = CliRunner().invoke(
        app(), ["serve-model", "--model", str(model_dir), "--logprobs-mode", "weird"]
    )
    assert r.exit_code == 2 and "--logprobs-mode" in r.output
