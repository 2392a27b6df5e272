"""``codegym train CONFIG``: GRPO-train a model with the settings of one config file.

Shows live progress (reward, pass rate, KL, staleness, tokens/s, time split) and writes
``<checkpoint.dir>/metrics.jsonl`` (one JSON object per step), checkpoints and, at the
end, the trained model in Hugging Face format under ``<checkpoint.dir>/final``. Rerunning
the same command after an interruption resumes from the newest checkpoint.

Exit codes: 0 done, 2 bad config or model directory, 3 the rollout's circuit breaker stopped
the run (too many infrastructure failures in a row; the diagnosis is printed). The newest
checkpoint is kept, so rerunning after the fix resumes.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path
from typing import Annotated, Any

import typer

from codegym.cli._common import (
    MetricsPortOption,
    TraceFileOption,
    console,
    fail,
    mlflow_run,
    start_telemetry,
)
from codegym.cli._progress import stats_bar


def _line(m: dict[str, Any]) -> str:
    return (
        f"reward {m['reward_mean']:.3f}  pass {m['pass_rate']:.1%}  loss {m['loss']:+.4f}  "
        f"kl {m['kl']:.4f}  stale {m['staleness_max']:.0f}/{m['groups_stale']:.0f}  "
        f"{m['tokens_per_s']:.0f} tok/s  gen {m['generate_s']:.1f}s "
        f"train {m['train_s']:.1f}s"
    )


def _torchrun(nproc: int, args: list[str]) -> int:
    """``codegym train ARGS`` in ``nproc`` processes under torchrun; its exit code."""
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone",
           "--nproc-per-node", str(nproc), "-m", "codegym.cli", "train", *args]  # fmt: skip
    return subprocess.run(cmd, check=False).returncode


def train(
    config: Annotated[Path, typer.Argument(help="TOML or YAML training config")],
    model: Annotated[
        Path | None, typer.Option(help="model directory (overrides model.path)")
    ] = None,
    steps: Annotated[int | None, typer.Option(help="override run.steps")] = None,
    suite: Annotated[
        str | None,
        typer.Option(
            help="Train on this suite (humaneval, synth:..., a dataset file), split by task id "
            "into train and held out; overrides tasks.suite."
        ),
    ] = None,
    server: Annotated[
        str | None,
        typer.Option(
            help="Generate through this model server (codegym serve-model, e.g. "
            "http://127.0.0.1:8000/v1), pushing the weights to it after every step; "
            "overrides server.url.",
            show_default=False,
        ),
    ] = None,
    nproc_per_node: Annotated[
        int,
        typer.Option(
            help="Train data-parallel in this many processes (DDP over gloo; launched with "
            "torchrun; each runs its share of every step's tasks)."
        ),
    ] = 1,
    quiet: Annotated[bool, typer.Option(help="no progress bar")] = False,
    metrics_port: MetricsPortOption = None,
    mlflow: Annotated[bool, typer.Option(help="Track the run in MLflow.")] = False,
    mlflow_uri: Annotated[
        str | None, typer.Option(help="MLflow tracking URI (default ./mlruns).")
    ] = None,
    trace_file: TraceFileOption = None,
) -> None:
    """GRPO-train a model on synthetic tasks or any suite with the settings in CONFIG."""
    if nproc_per_node < 1:
        fail(f"--nproc-per-node {nproc_per_node}: use 1 or more")
    if nproc_per_node > 1 and "WORLD_SIZE" not in os.environ:
        if metrics_port is not None or trace_file is not None:
            fail(
                "--metrics-port and --trace-file with --nproc-per-node: every process would "
                "use the same port or file; run torchrun yourself and give each its own"
            )
        given = {"--model": model, "--steps": steps, "--suite": suite, "--server": server,
                 "--mlflow-uri": mlflow_uri}  # fmt: skip
        args = [str(config)] + [a for k, v in given.items() if v is not None for a in (k, str(v))]
        args += ["--quiet"] * quiet + ["--mlflow"] * mlflow
        raise typer.Exit(_torchrun(nproc_per_node, args))
    if int(os.environ.get("RANK", "0")) > 0:  # rank 0 shows progress and tracks the run
        quiet, mlflow = True, False
    start_telemetry(metrics_port, trace_file)
    from codegym.models import ensure_tiny_model
    from codegym.policies.errors import PolicyError
    from codegym.rollout import RolloutAborted
    from codegym.train import ConfigError, Trainer, load_config
    from codegym.train.checkpoint import CheckpointError
    from codegym.train.weights_http import WeightsPushError

    try:
        cfg = load_config(config)
    except ConfigError as e:
        fail(str(e))
    if steps is not None:
        cfg = cfg.model_copy(update={"run": cfg.run.model_copy(update={"steps": steps})})
    if suite is not None:
        cfg = cfg.model_copy(update={"tasks": cfg.tasks.model_copy(update={"suite": suite})})
    if server is not None:
        if not server.startswith(("http://", "https://")):
            fail(f"--server {server!r}: give an http(s) URL such as http://127.0.0.1:8000/v1")
        cfg = cfg.model_copy(update={"server": cfg.server.model_copy(update={"url": server})})
    model_dir = model or (Path(cfg.model.path) if cfg.model.path else None)
    if model_dir is None:
        console.print("building or loading the tiny model (cached after the first time)")
        model_dir = ensure_tiny_model(log_every=50)
    if not (model_dir / "config.json").is_file():
        fail(f"{model_dir}: not a Hugging Face model directory (no config.json)")
    with (
        mlflow_run(mlflow, mlflow_uri, f"train-{config.stem}", cfg.model_dump(mode="json")) as mf,
        stats_bar("train", quiet) as bar,
    ):
        job = bar.add_task("train", total=cfg.run.steps, stats="")

        def on_step(m: dict[str, Any]) -> None:
            bar.update(job, completed=m["step"], stats=_line(m))
            if mf is not None:
                nums = {k: float(v) for k, v in m.items() if isinstance(v, (int, float))}
                mf.log_metrics(nums, step=int(m["step"]))

        try:
            trainer = Trainer(cfg, model_dir, on_step=on_step)
        except (CheckpointError, ConfigError, PolicyError, WeightsPushError) as e:
            fail(str(e))
        bar.update(job, completed=trainer.step)
        try:
            asyncio.run(trainer.run())
        except RolloutAborted as e:
            fail(f"training stopped at step {trainer.step}: {e.diagnosis}", code=3)
        except WeightsPushError as e:  # the model server stayed away or refused them
            fail(f"training stopped at step {trainer.step}: {e}", code=3)
        except PolicyError as e:  # the in-process sampler refused the weights (NaN)
            fail(f"training stopped at step {trainer.step}: {e}", code=3)
        final = trainer.save_final()
        trainer.close()
        if not trainer.world.leader:
            return
        if mf is not None:  # the run's report (its metrics, step by step) and the model
            mf.log_artifact(Path(cfg.checkpoint.dir) / cfg.run.metrics_file, "report")
            mf.log_artifact(final, "checkpoint")
    console.print(
        f"trained model: {final}\nmetrics: {Path(cfg.checkpoint.dir) / cfg.run.metrics_file}"
    )
