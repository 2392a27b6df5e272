"""``codegym compare``, ``codegym gate`` and ``codegym plan``: trustworthy comparisons.

``gate`` exit codes (stable; CI scripts depend on them):

- 0: not worse: improved, shown non-inferior, or inconclusive with ``--on-inconclusive pass``
- 1: regressed (the candidate is worse than the baseline by more than ``--margin``)
- 2: bad input (unreadable run, no scored samples, too few shared tasks, bad option)
- 3: inconclusive and not shown non-inferior, with ``--on-inconclusive fail``

The statistics live in ``codegym.evals.compare`` and ``codegym.evals.power``; see
docs/statistics.md.
"""

from __future__ import annotations

import json
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console
from rich.table import Table

from codegym.cli._common import console, fail

if TYPE_CHECKING:
    from codegym.evals.compare import CompareOptions, CompareResult
    from codegym.evals.power import PowerPlan
    from codegym.evals.runs import Run

out = Console(highlight=False)

EXIT_OK, EXIT_REGRESSED, EXIT_BAD_INPUT, EXIT_INCONCLUSIVE = 0, 1, 2, 3


class OnInconclusive(StrEnum):
    passes = "pass"
    fails = "fail"


Baseline = Annotated[Path, typer.Argument(help="Baseline results.jsonl or run folder.")]
Candidate = Annotated[Path, typer.Argument(help="Candidate results.jsonl or run folder.")]
Margin = Annotated[
    float, typer.Option(help="Tolerated loss in pass rate (0.02 = 2 points) before 'regressed'.")
]
Alpha = Annotated[float, typer.Option(help="Two-sided significance level.")]
MinTasks = Annotated[int, typer.Option(help="Refuse to compare fewer shared tasks.")]
MinOverlap = Annotated[float, typer.Option(help="Refuse below this shared fraction of tasks.")]


def _load(path: Path) -> Run:
    from codegym.evals.runs import RunError, load_run

    try:
        return load_run(path)
    except RunError as e:
        fail(str(e))


def _compare(baseline: Path, candidate: Path, opts: CompareOptions) -> CompareResult:
    from codegym.evals.compare import compare_runs
    from codegym.evals.runs import RunError

    a, b = _load(baseline), _load(candidate)
    try:
        return compare_runs(a, b, opts)
    except RunError as e:
        fail(str(e))


def compare(
    baseline: Baseline,
    candidate: Candidate,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
    margin: Margin = 0.0,
    alpha: Alpha = 0.05,
    k: Annotated[int, typer.Option(help="Compare pass@k (k > 1: paired bootstrap).")] = 1,
    seed: Annotated[int, typer.Option(help="Bootstrap seed.")] = 0,
    min_tasks: MinTasks = 10,
    min_overlap: MinOverlap = 0.5,
) -> None:
    """Paired comparison of two runs: delta, its CI, p-value and a three-state verdict."""
    from codegym.evals.compare import CompareOptions

    opts = CompareOptions(
        margin=margin, alpha=alpha, k=k, seed=seed, min_tasks=min_tasks, min_overlap=min_overlap
    )
    result = _compare(baseline, candidate, opts)
    if as_json:
        typer.echo(json.dumps(result.model_dump()))
    else:
        print_result(result)


def gate(
    baseline: Baseline,
    candidate: Candidate,
    margin: Margin = 0.0,
    alpha: Alpha = 0.05,
    k: Annotated[int, typer.Option(help="Gate on pass@k.")] = 1,
    on_inconclusive: Annotated[
        OnInconclusive, typer.Option(help="Exit code when not decided: pass -> 0, fail -> 3.")
    ] = OnInconclusive.passes,
    as_json: Annotated[bool, typer.Option("--json", help="Print the result as JSON.")] = False,
    min_tasks: MinTasks = 10,
    min_overlap: MinOverlap = 0.5,
    register_model: Annotated[
        str | None,
        typer.Option(
            help="When the gate passes, register the candidate's model (a codegym-trained "
            "checkpoint) as a new version of this MLflow model."
        ),
    ] = None,
    mlflow_uri: Annotated[
        str | None, typer.Option(help="MLflow tracking URI (default ./mlruns).")
    ] = None,
) -> None:
    """CI gate: exit 0 when the candidate is not worse, 1 on a regression (2: bad input,
    3: inconclusive with --on-inconclusive fail)."""
    from codegym.evals.compare import CompareOptions

    opts = CompareOptions(
        margin=margin, alpha=alpha, k=k, min_tasks=min_tasks, min_overlap=min_overlap
    )
    lineage = _candidate_lineage(candidate) if register_model else None
    result = _compare(baseline, candidate, opts)
    if as_json:
        typer.echo(json.dumps(result.model_dump()))
    else:
        print_result(result)
    code = gate_exit_code(result, on_inconclusive == OnInconclusive.fails)
    word = {0: "PASS", 1: "FAIL: regressed", 3: "FAIL: inconclusive"}[code]
    console.print(f"[bold]gate:[/] {word} (exit {code})", highlight=False)
    if register_model and lineage is not None:
        if code == EXIT_OK:
            version = _register(register_model, lineage, result, mlflow_uri)
            console.print(f"registered {register_model} version {version}", highlight=False)
        else:
            console.print(f"{register_model}: not registered (the gate did not pass)")
    raise typer.Exit(code)


def _candidate_lineage(candidate: Path) -> dict[str, object]:
    """The lineage of the model behind a candidate run, with its model folder checked."""
    folder = candidate if candidate.is_dir() else candidate.parent
    try:
        config = json.loads((folder / "summary.json").read_text()).get("config", {})
    except (OSError, ValueError) as e:
        fail(f"{folder}: no readable summary.json to find the candidate's model ({e})")
    lineage = config.get("lineage") or {}
    model_dir = Path(str(lineage.get("model_dir") or config.get("model") or ""))
    if not lineage.get("checkpoint") or not (model_dir / "lineage.json").is_file():
        fail(
            f"--register-model: {folder} was not evaluated from a codegym-trained model "
            "folder (eval --policy transformers, or demo); there is no checkpoint to register"
        )
    return {**lineage, "model_dir": str(model_dir)}


def _register(name: str, lineage: dict[str, object], result: CompareResult, uri: str | None) -> str:
    """Log the gated checkpoint to an MLflow run and register it as a version of ``name``."""
    from codegym.cli._common import mlflow_run
    from codegym.telemetry.tracking import TrackingError

    stats = {"delta": result.delta, "ci_low": result.ci_low, "ci_high": result.ci_high}
    with mlflow_run(True, uri, f"gate-{name}", {"lineage": lineage}) as tracker:
        try:
            tracker.log_metrics({k: v for k, v in stats.items() if v is not None})
            tracker.log_artifact(str(lineage["model_dir"]), "checkpoint")
            tags = {k: str(lineage.get(k)) for k in ("checkpoint", "parent", "config_digest",
                                                     "train_digest", "step")}  # fmt: skip
            version: str = tracker.register_model(
                name, "checkpoint", tags | {"verdict": result.verdict}
            )
            return version
        except TrackingError as e:
            fail(str(e))


def gate_exit_code(result: CompareResult, fail_inconclusive: bool) -> int:
    """The gate's decision for a comparison result (see the module docstring)."""
    if result.verdict == "regressed":
        return EXIT_REGRESSED
    if result.verdict == "improved" or result.non_inferior or not fail_inconclusive:
        return EXIT_OK
    return EXIT_INCONCLUSIVE


def plan_cmd(
    baseline: Baseline,
    delta: Annotated[float, typer.Option(help="Change in pass rate to detect (0.03 = 3 points).")],
    alpha: Alpha = 0.05,
    power: Annotated[float, typer.Option(help="Wanted probability of detecting delta.")] = 0.8,
    correlation: Annotated[
        float, typer.Option(help="Assumed A/B correlation of true per-task rates.")
    ] = 0.5,
    as_json: Annotated[bool, typer.Option("--json", help="Print the plan as JSON.")] = False,
) -> None:
    """How many tasks x samples per task detect a change of --delta, from a baseline run."""
    from codegym.evals.power import plan
    from codegym.evals.runs import RunError

    run = _load(baseline)
    try:
        result = plan(run, delta, alpha=alpha, power=power, correlation=correlation)
    except RunError as e:
        fail(str(e))
    if as_json:
        typer.echo(json.dumps(result.model_dump()))
    else:
        print_plan(result)


def _pct(x: float | None, signed: bool = False) -> str:
    if x is None:
        return "—"
    return f"{x * 100:+.2f}" if signed else f"{x * 100:.2f}"


def print_result(r: CompareResult) -> None:
    """The table for people."""
    colour = {"improved": "green", "regressed": "red", "inconclusive": "yellow"}[r.verdict]
    table = Table(
        title=f"pass@{r.k}: candidate vs baseline ({r.n_tasks} tasks)", title_justify="left"
    )
    for col in ("", "baseline", "candidate", "delta (pts)", f"{1 - r.alpha:.0%} CI", "p"):
        table.add_column(col, justify="right" if col else "left")
    rows = [("all", r), *sorted((r.suites or {}).items())]
    for name, x in rows:
        table.add_row(
            name,
            _pct(x.baseline_mean),
            _pct(x.candidate_mean),
            _pct(x.delta, signed=True),
            f"[{_pct(x.ci_low, True)}, {_pct(x.ci_high, True)}]",
            "—" if x.p_value is None else f"{x.p_value:.3g}",
        )
    out.print(table)
    out.print(
        f"verdict: [bold {colour}]{r.verdict}[/]"
        + (" (non-inferior)" if r.non_inferior and r.verdict != "improved" else "")
        + f"   margin {_pct(r.margin)} pts, MDE {_pct(r.mde)} pts at power {r.power:.0%}, "
        f"corr {r.correlation if r.correlation is None else round(r.correlation, 2)}, "
        f"method {r.method}"
    )
    if r.costs:
        costs = Table(title="cost per sample", title_justify="left")
        for col in ("field", "baseline", "candidate", "ratio"):
            costs.add_column(col, justify="left" if col == "field" else "right")
        for f, c in r.costs.items():
            costs.add_row(
                f,
                "—" if c.baseline is None else f"{c.baseline:.4g}",
                "—" if c.candidate is None else f"{c.candidate:.4g}",
                "—" if c.ratio is None else f"{c.ratio:.2f}x",
            )
        out.print(costs)
    excluded = {s: sum(v.values()) for s, v in r.excluded.items()}
    if any(excluded.values()) or any(r.flaky.values()):
        out.print(f"excluded (infra): {excluded}; flaky: {r.flaky}")
    for w in r.warnings:
        console.print(f"[yellow]warning:[/] {w}", highlight=False)


def print_plan(p: PowerPlan) -> None:
    c = p.components
    out.print(
        f"baseline: {c.n_tasks} tasks, mean {_pct(c.mean)}%, between-task var {c.between:.4f}, "
        f"within-task var {c.within:.4f}, design effect {c.deff:.2f}"
    )
    table = Table(
        title=f"detect {_pct(p.delta, True)} pts at alpha {p.alpha}, power {p.power:.0%}",
        title_justify="left",
    )
    for col in ("samples/task", "tasks needed", f"power with {c.n_tasks} tasks"):
        table.add_column(col, justify="right")
    for row in p.rows:
        table.add_row(
            str(row.samples_per_task),
            str(row.tasks_needed),
            f"{row.power_at_suite_size:.0%}",
        )
    out.print(table)
    s = p.samples_needed_at_suite_size
    out.print(
        f"with this suite's {c.n_tasks} tasks: "
        + (f"{s} samples per task" if s is not None else "no number of samples is enough")
    )
    for w in p.warnings:
        console.print(f"[yellow]warning:[/] {w}", highlight=False)
