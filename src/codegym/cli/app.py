"""Top-level typer application; subcommands live in sibling modules."""

from __future__ import annotations

import typer

from codegym.cli import (
    compare_cmd,
    demo_cmd,
    eval_cmd,
    image_cmd,
    report_cmd,
    rollout_cmd,
    sandbox_cmd,
    score_cmd,
    serve_cmd,
    serve_model_cmd,
    tasks_cmd,
    train_cmd,
)

app = typer.Typer(
    name="codegym",
    help="Train, test and evaluate code models: sandbox, evals, rollouts.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)
sandbox_cmd.app.command("serve")(serve_cmd.serve)
app.add_typer(sandbox_cmd.app, name="sandbox")
app.add_typer(image_cmd.app, name="image")
app.add_typer(tasks_cmd.app, name="tasks")
app.command("score")(score_cmd.score)
app.command("eval")(eval_cmd.eval_)
app.command("compare")(compare_cmd.compare)
app.command("gate")(compare_cmd.gate)
app.command("plan")(compare_cmd.plan_cmd)
app.command("report")(report_cmd.report)
app.command("rollout")(rollout_cmd.rollout)
app.command("replay")(rollout_cmd.replay)
app.command("serve-model")(serve_model_cmd.serve_model)
app.command("train")(train_cmd.train)
app.command("demo")(demo_cmd.demo)


def main() -> None:
    app()
