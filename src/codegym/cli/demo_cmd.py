"""``codegym demo``: the whole RL loop on one machine, then the regression gate.

1. Load the tiny code model (shipped; rebuilt into the cache if its config changed).
2. Train it with GRPO on synthetic tasks: rollouts through the engine, rewards from the
   sandbox, weights pushed back to the sampling policy after every step.
3. Sample base and trained on held-out tasks (seeds the training never saw), score them
   with the eval runner, and write both run folders.
4. Compare them with the paired statistics and write ``report.html`` (reward curve and the
   comparison) and ``summary.json`` (``base_pass1``, ``trained_pass1``, ``verdict``...).

An ``inconclusive`` or ``regressed`` verdict is reported as it is: the demo does not retry
or tune until it looks good.

With ``--mlflow`` (``--mlflow-uri``, default ``./mlruns``) the demo is one MLflow run: the
training config as params, the training metrics per step (step = training step), the
held-out pass@1 of both models with their CIs and the gate's delta, CI, p-value and MDE as
metrics (the keys of ``summary.json``), the verdict and the trained checkpoint's lineage as
tags (``verdict``, ``lineage.checkpoint``...), and as artifacts the report, both eval run
folders, ``lineage.json`` and the trained checkpoint. ``--register-model NAME`` (which implies
``--mlflow``) registers that checkpoint as a new version of the model NAME when the verdict
is ``improved``, with the lineage and verdict as the version's tags; otherwise it says that
nothing was registered. mlflow is imported only then.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from codegym.cli._common import console, fail, made_from, mlflow_run

if TYPE_CHECKING:
    from codegym.telemetry.tracking import Tracker

DEMO_CONFIG: dict[str, Any] = {
    "model": {"threads": 1},  # 1 thread: faster than 2 for this tiny model on 2 cores
    "env": {"name": "code", "options": {"style": "continuation"}},
    "run": {"steps": 30, "mode": "sync", "max_staleness": 1, "seed": 0},
    "optim": {"lr": 2e-4, "max_grad_norm": 1.0, "micro_batch": 16},
    "grpo": {"group_size": 8, "groups_per_step": 8, "clip_eps": 0.2, "kl_coef": 0.0},
    "sampling": {"max_new_tokens": 64, "temperature": 1.0, "stop": ["\n\n"], "max_batch": 64},
    "tasks": {
        "family": "infer",
        "difficulty": 1,
        "train_seed": 1,
        "train_tasks": 256,
        "heldout_seed": 0,
        "heldout_tasks": 200,
    },
    "sandbox": {"tier": "jail", "workers": 2, "cpu_s": 2.0, "memory_mb": 512},
    "checkpoint": {"every": 8, "keep": 1},
}
"""The demo's training config (every other knob: ``codegym.train.config`` defaults)."""


def demo(
    out: Annotated[Path, typer.Option(help="Run folder.")] = Path("runs/demo"),
    steps: Annotated[int | None, typer.Option(help="GRPO steps (default: the demo's).")] = None,
    samples: Annotated[int, typer.Option(help="Held-out samples per task, each model.")] = 8,
    family: Annotated[str, typer.Option(help="Synthetic task family.")] = "infer",
    mode: Annotated[str, typer.Option(help="sync or async training.")] = "sync",
    tier: Annotated[str, typer.Option(help="Sandbox tier.")] = "jail",
    mlflow: Annotated[bool, typer.Option(help="Track the demo in MLflow.")] = False,
    mlflow_uri: Annotated[
        str | None, typer.Option(help="MLflow tracking URI (default ./mlruns).")
    ] = None,
    register_model: Annotated[
        str | None,
        typer.Option(
            help="When the gate says improved, register the trained checkpoint as a new "
            "version of this MLflow model (implies --mlflow).",
            show_default=False,
        ),
    ] = None,
) -> None:
    """The main job: train a tiny code model with GRPO, then gate trained against base."""
    from codegym.train.config import ConfigError, parse_config

    cfg_dict = json.loads(json.dumps(DEMO_CONFIG))
    cfg_dict["tasks"]["family"] = family
    cfg_dict["run"]["mode"] = mode
    cfg_dict["sandbox"]["tier"] = tier
    cfg_dict["checkpoint"]["dir"] = str(out / "train")
    if steps is not None:
        cfg_dict["run"]["steps"] = steps
    try:
        config = parse_config(cfg_dict, "codegym demo")
    except ConfigError as e:
        fail(str(e))
    if samples < 1:
        fail("--samples must be at least 1")
    if register_model is not None and not register_model.strip():
        fail("--register-model: give the MLflow model a name")
    out.mkdir(parents=True, exist_ok=True)
    params = config.model_dump(mode="json") | {"demo": {"samples": samples}}
    with mlflow_run(mlflow or register_model is not None, mlflow_uri, "demo", params) as mf:
        started = time.perf_counter()
        summary = asyncio.run(_demo(config, out, samples, mf))
        summary["seconds"] = round(time.perf_counter() - started, 1)
        (out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
        _print_summary(summary)
        if mf is not None:
            _track_results(mf, config, out, summary, register_model)
    console.print(f"wrote {out / 'summary.json'} and {out / 'report.html'}")


def _print_summary(summary: dict[str, Any]) -> None:
    b, t = summary["base_pass1"], summary["trained_pass1"]
    console.print(
        f"\n[bold]held-out pass@1[/]: base {b['estimate']:.3f} "
        f"[{b['ci_low']:.3f}, {b['ci_high']:.3f}] → trained {t['estimate']:.3f} "
        f"[{t['ci_low']:.3f}, {t['ci_high']:.3f}]",
        highlight=False,
    )
    console.print(
        f"gate: [bold]{summary['verdict']}[/]  delta {summary['delta']:+.3f} "
        f"(95% CI {summary['ci_low']:+.3f} … {summary['ci_high']:+.3f}, "
        f"p = {summary['p_value']:.2g}) in {summary['seconds']:.0f} s",
        highlight=False,
    )
    if summary["verdict"] != "improved":
        console.print(
            "[yellow]GRPO did not measurably improve the model in this run; "
            "the verdict above is the honest result.[/]"
        )


async def _demo(config: Any, out: Path, samples: int, tracker: Tracker | None) -> dict[str, Any]:
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
    from transformers.utils import logging as hf_logging

    from codegym.models import ensure_tiny_model
    from codegym.train.trainer import Trainer

    hf_logging.disable_progress_bar()  # type: ignore[no-untyped-call]  # bars drown our progress

    console.print("[bold]1/3[/] tiny code model …", highlight=False)
    base_dir = await asyncio.to_thread(ensure_tiny_model)
    console.print(f"    {base_dir}", highlight=False)
    curve: list[tuple[int, float, float]] = []
    with Progress(
        TextColumn("[bold]2/3[/] GRPO"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.fields[stats]}"),
        TimeElapsedColumn(),
        console=console,
    ) as bar:
        job = bar.add_task("train", total=config.run.steps, stats="")

        def on_step(m: dict[str, Any]) -> None:
            curve.append((int(m["step"]), float(m["reward_mean"]), float(m["pass_rate"])))
            if tracker is not None:
                tracker.log_metrics(_numbers(m), step=int(m["step"]))
            bar.update(
                job,
                completed=m["step"],
                stats=f"reward {m['reward_mean']:.3f}  pass {m['pass_rate']:.1%}  "
                f"stale {m.get('staleness_mean', 0.0):.1f}  {m['tokens_per_s']:.0f} tok/s",
            )

        trainer = Trainer(config, base_dir, on_step=on_step)
        bar.update(job, completed=trainer.step)
        t0 = time.perf_counter()
        await trainer.run()
        train_s = time.perf_counter() - t0
    trained_dir = await asyncio.to_thread(trainer.save_final, out / "trained")
    await asyncio.to_thread(trainer.close)
    logged = {step for step, _, _ in curve}
    metrics_file = out / "train" / config.run.metrics_file
    rows = [json.loads(ln) for ln in metrics_file.read_text().splitlines()]
    if not curve:  # resumed a finished run: read its curve back
        curve.extend((int(m["step"]), float(m["reward_mean"]), float(m["pass_rate"])) for m in rows)
    if tracker is not None:  # and a resumed run's steps from before the resume
        for m in rows:
            if int(m["step"]) not in logged:
                tracker.log_metrics(_numbers(m), step=int(m["step"]))
    console.print("[bold]3/3[/] held-out eval: base vs trained", highlight=False)
    base = await _heldout(base_dir, config, samples, out / "base")
    trained = await _heldout(trained_dir, config, samples, out / "trained_eval")
    return _verdict(config, out, base, trained, curve, train_s)


async def _heldout(model_dir: Path, config: Any, n: int, run_dir: Path) -> dict[str, Any]:
    """Sample ``n`` episodes per held-out task through the env, policy and tokenizer the
    trainer used (so base and trained are judged exactly as training saw them), and write
    a standard run folder."""
    from codegym.evals.rundir import build_summary, write_run
    from codegym.evals.runner import SampleResult
    from codegym.rollout import RolloutConfig, RolloutEngine
    from codegym.sandbox import Sandbox
    from codegym.tasks.outcomes import PASSING_OUTCOMES
    from codegym.train.policy import local_policy
    from codegym.train.split import check_heldout, read_lineage, split_tasks
    from codegym.train.trainer import training_executor

    heldout = split_tasks(config.tasks).heldout
    lineage = read_lineage(model_dir)
    check_heldout(heldout, lineage, str(model_dir))
    tasks = list(heldout)
    policy = local_policy(model_dir, max_batch=config.sampling.max_batch, seed=12345)
    results: list[SampleResult] = []
    start = time.perf_counter()
    async with Sandbox(tier=config.sandbox.tier, workers=config.sandbox.workers) as sb:
        engine = RolloutEngine(
            training_executor(config, policy, sb),
            RolloutConfig(group_size=n, env_concurrency=config.sandbox.env_concurrency, seed=1),
            env=config.env.name,
        )
        async for g in engine.run(tasks):
            for tr in g.trajectories:
                text = tr.turns[-1].text if tr.turns else ""
                results.append(
                    SampleResult(
                        g.task.id,
                        tr.index,
                        text,
                        tr.outcome in PASSING_OUTCOMES,
                        tr.outcome,
                        tr.detail,
                        g.task.group,
                        tokens_out=len(tr.token_ids),
                    )
                )
            for ex in g.excluded:
                results.append(
                    SampleResult(g.task.id, ex.index, "", False, "infra", ex.reason, g.task.group)
                )
    results.sort(key=lambda r: (r.task_id, r.sample_index))
    summary = build_summary(
        results,
        seconds=time.perf_counter() - start,
        config={
            "command": "demo",
            "model": str(model_dir),
            "tasks": len(tasks),
            "heldout_digest": heldout.digest,
            "lineage": made_from(lineage) if lineage is not None else None,
            "n": n,
        },
        ks=(1, n),
    )
    write_run(run_dir, results, summary)
    return summary


def _verdict(
    config: Any,
    out: Path,
    base: dict[str, Any],
    trained: dict[str, Any],
    curve: list[tuple[int, float, float]],
    train_s: float,
) -> dict[str, Any]:
    from codegym.evals.compare import CompareOptions, compare_runs
    from codegym.evals.report import ReportOptions, render_comparison_report, reward_curve_section
    from codegym.evals.runs import load_run

    opts = CompareOptions(margin=0.0, alpha=0.05)
    result = compare_runs(load_run(out / "base"), load_run(out / "trained_eval"), opts)
    html = render_comparison_report(
        out / "base",
        out / "trained_eval",
        ReportOptions(compare=opts, title="codegym demo: GRPO on the tiny code model"),
        extra=[reward_curve_section(curve, title="GRPO training curve")],
    )
    (out / "report.html").write_text(html)

    def p1(s: dict[str, Any]) -> dict[str, float]:
        e = s["pass_at_k"]["1"]
        return {k: round(e[k], 4) for k in ("estimate", "ci_low", "ci_high")}

    return {
        "base_pass1": p1(base),
        "trained_pass1": p1(trained),
        "verdict": result.verdict,
        "delta": result.delta,
        "ci_low": result.ci_low,
        "ci_high": result.ci_high,
        "p_value": result.p_value,
        "mde": result.mde,
        "heldout": {
            "tasks": config.tasks.heldout_tasks,
            "samples_per_task": base["requested"] // max(1, config.tasks.heldout_tasks),
            "family": config.tasks.family,
            "digest": base["config"]["heldout_digest"],
        },
        "train": {
            "steps": config.run.steps,
            "mode": config.run.mode,
            "seconds": round(train_s, 1),
            "reward_first": curve[0][1] if curve else None,
            "reward_last": curve[-1][1] if curve else None,
        },
        "cpus": os.cpu_count(),
    }


def _numbers(m: dict[str, Any]) -> dict[str, float]:
    """A step's metrics that MLflow can chart (its numbers)."""
    return {k: float(v) for k, v in m.items() if isinstance(v, (int, float))}


def _track_results(
    tracker: Tracker,
    config: Any,
    out: Path,
    summary: dict[str, Any],
    register_model: str | None,
) -> None:
    """Log the demo's outcome to its MLflow run and, when asked and the gate says improved,
    register the trained checkpoint as a model version."""
    from codegym.telemetry.tracking import TrackingError
    from codegym.train.split import LINEAGE_FILE, read_lineage

    trained = out / "trained"
    record = read_lineage(trained)
    origin = made_from(record) if record is not None else {}
    metrics = {
        f"{side}{suffix}": summary[side][key]
        for side in ("base_pass1", "trained_pass1")
        for key, suffix in (("estimate", ""), ("ci_low", "_ci_low"), ("ci_high", "_ci_high"))
    } | {k: summary[k] for k in ("delta", "ci_low", "ci_high", "p_value", "mde", "seconds")}
    lineage_tags = {f"lineage.{k}": str(v) for k, v in origin.items()}
    try:
        tracker.log_metrics({k: v for k, v in metrics.items() if v is not None})
        tracker.set_tags(
            {"verdict": summary["verdict"], "heldout.digest": summary["heldout"]["digest"]}
            | lineage_tags
        )
        for path in (
            out / "summary.json",
            out / "report.html",
            out / "train" / config.run.metrics_file,
        ):
            tracker.log_artifact(path, "report")
        tracker.log_artifact(out / "base", "eval/base")
        tracker.log_artifact(out / "trained_eval", "eval/trained")
        tracker.log_artifact(trained / LINEAGE_FILE, "lineage")
        tracker.log_artifact(trained, "checkpoint")
        if register_model is None:
            return
        if summary["verdict"] != "improved":
            console.print(
                f"{register_model}: not registered (the gate's verdict is "
                f"{summary['verdict']}, not improved)",
                highlight=False,
            )
            return
        tags = {k: str(v) for k, v in origin.items()} | {"verdict": summary["verdict"]}
        version = tracker.register_model(register_model, "checkpoint", tags)
    except TrackingError as e:
        fail(str(e))
    console.print(f"registered {register_model} version {version}", highlight=False)
