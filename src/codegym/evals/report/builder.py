"""Build the HTML report: one run, a comparison, or several runs side by side.

Contract:

- The output is one self-contained HTML string: inline CSS, inline SVG plots, no script, no
  network access, so it can be attached to a CI job or mailed and opened offline.
- Numbers come from the statistics library unchanged (``estimate``, ``compare_runs``): the
  report draws them, it never computes a second version of a statistic.
- Sections, each present when it has data: comparisons (verdict banner, paired difference
  with CI against the margin and the MDE, per-task A-vs-B plot, cost side by side), an
  overview over several runs (pass@1 against cost, pass@k against the sample budget k), and
  per run (pass@k with CIs per suite, outcome breakdown model vs infra, slowest and flakiest
  tasks, cost per sample), plus sections the caller adds (:class:`Section`, e.g.
  :func:`reward_curve_section` for an RL training curve).
- Cost is shown raw (tokens, seconds) and, given :class:`Prices`, in money; a missing price
  is shown as unknown, never as zero.

Bad input raises :class:`codegym.evals.runs.RunError` (unreadable or empty run, too small a
task overlap, bad options), naming the input.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from jinja2 import Environment, PackageLoader, StrictUndefined
from markupsafe import Markup

from codegym.evals.compare import CompareOptions, CompareResult, compare_runs
from codegym.evals.report import plots
from codegym.evals.report._data import RunView, load_view, unique_labels
from codegym.evals.report.plots import Interval
from codegym.evals.report.prices import Prices
from codegym.evals.runs import Run, RunError
from codegym.evals.stats import Estimate, estimate
from codegym.tasks.outcomes import INFRA_OUTCOMES

RunPath = str | Path

_COST_LABELS = {
    "tokens_in": "input tokens",
    "tokens_out": "output tokens",
    "model_s": "model seconds",
    "cpu_s": "sandbox CPU seconds",
    "wall_s": "sandbox wall seconds",
}


@dataclass(frozen=True)
class ReportOptions:
    """What a report shows and how comparisons are made."""

    compare: CompareOptions = field(default_factory=CompareOptions)
    """Margin, alpha, k and the rest, exactly as ``codegym compare`` takes them."""
    prices: Prices | None = None
    """Turns tokens and CPU seconds into money; None shows raw amounts only."""
    ks: tuple[int, ...] = (1, 2, 5, 10, 20, 50, 100)
    """Sample budgets for pass@k; each run shows those its sample counts allow."""
    top: int = 10
    """Rows in the slowest-tasks and flakiest-tasks tables."""
    title: str | None = None


@dataclass(frozen=True)
class Section:
    """A block the caller adds to a report; ``html`` is trusted markup (not escaped)."""

    title: str
    html: str


def reward_curve_section(
    points: Sequence[tuple[int, float, float]], title: str = "Training curve"
) -> Section:
    """An RL training curve, (step, reward_mean, pass_rate) per point, as a report section.

    Raises:
        ValueError: no points.
    """
    last = points[-1] if points else None
    note = (
        f"<p class='note'>{len(points)} steps; last: step {last[0]}, mean reward "
        f"{last[1]:.3f}, pass rate {last[2]:.1%}.</p>"
        if last
        else ""
    )
    return Section(title, plots.reward_curve(points) + note)


def render_report(
    runs: Sequence[RunPath],
    baseline: RunPath | None = None,
    options: ReportOptions | None = None,
    extra: Sequence[Section] = (),
) -> str:
    """The report for ``runs``; with ``baseline``, each run is also compared against it.

    Raises:
        RunError: a run cannot be read, has no scored samples, or shares too few tasks with
            the baseline; bad options, or no run given.
    """
    opts = options or ReportOptions()
    opts.compare.check()
    if not runs:
        raise RunError("report: give at least one run folder or results.jsonl")
    paths = [baseline, *runs] if baseline is not None else list(runs)
    views = [load_view(p, lab) for p, lab in zip(paths, unique_labels(paths), strict=True)]
    for v in views:
        if v.run.n_tasks == 0:
            raise RunError(
                f"{v.path}: no scored samples (all {v.run.requested} rows are infra or flaky: "
                f"{dict(v.outcomes)}); fix the infrastructure and re-run before reporting"
            )
    base_view = views[0] if baseline is not None else None
    others = views[1:] if base_view is not None else views
    comparisons = [_comparison(base_view, v, opts) for v in others] if base_view else []
    ctx: dict[str, Any] = {
        "title": opts.title or _title(views, base_view),
        "comparisons": comparisons,
        "overview": _overview(views, opts) if len(views) > 1 else None,
        "runs": [_run_section(v, opts) for v in views],
        "extra": [{"title": s.title, "html": Markup(s.html)} for s in extra],
        "prices": opts.prices,
        "alpha": opts.compare.alpha,
    }
    return _env().get_template("report.html.j2").render(**ctx)


def render_run_report(
    run_dir: RunPath, options: ReportOptions | None = None, extra: Sequence[Section] = ()
) -> str:
    """Report for one run. Raises as :func:`render_report`."""
    return render_report([run_dir], None, options, extra)


def render_comparison_report(
    baseline: RunPath,
    candidate: RunPath,
    options: ReportOptions | None = None,
    extra: Sequence[Section] = (),
) -> str:
    """Report comparing ``candidate`` against ``baseline``. Raises as :func:`render_report`."""
    return render_report([candidate], baseline, options, extra)


def render_multi_report(
    runs: Sequence[RunPath], options: ReportOptions | None = None, extra: Sequence[Section] = ()
) -> str:
    """Report over several runs: quality against cost. Raises as :func:`render_report`."""
    return render_report(runs, None, options, extra)


# --- sections ------------------------------------------------------------------------------


def _title(views: Sequence[RunView], base: RunView | None) -> str:
    if base is not None:
        return f"codegym report: {', '.join(v.label for v in views[1:])} vs {base.label}"
    return f"codegym report: {', '.join(v.label for v in views)}"


def _interval(label: str, e: Estimate) -> Interval:
    return Interval(label, e.mean, e.ci_low, e.ci_high)


def _ks(run: Run, opts: ReportOptions) -> list[int]:
    smallest = int(run.n.min())
    return [k for k in opts.ks if k <= smallest] or [1]


def _passk(run: Run, opts: ReportOptions) -> tuple[list[int], list[Estimate]]:
    ks = _ks(run, opts)
    return ks, [estimate(run, k, opts.compare.alpha) for k in ks]


@dataclass(frozen=True)
class _PassRow:
    suite: str
    k: int
    e: Estimate


@dataclass(frozen=True)
class _RunRow:
    v: RunView
    e: Estimate
    costs: Mapping[str, float]
    money: float | None


def _run_section(v: RunView, opts: ReportOptions) -> dict[str, Any]:
    suites = v.run.by_suite()
    rows: list[_PassRow] = []
    series: list[tuple[str, Sequence[int], Sequence[Interval]]] = []
    for name, sub in suites.items():
        ks, ests = _passk(sub, opts)
        for k, e in zip(ks, ests, strict=True):
            rows.append(_PassRow(name or "all", k, e))
        series.append((name or v.label, ks, [_interval(name, e) for e in ests]))
    infra = frozenset(INFRA_OUTCOMES)
    total = sum(v.outcomes.values())
    outcomes = [
        {"outcome": o, "count": n, "share": n / total, "infra": o in infra}
        for o, n in v.outcomes.items()
    ]
    times = sorted(v.times, key=lambda t: (t.wall_s or 0.0, t.cpu_s or 0.0), reverse=True)
    flaky = sorted(v.flaky, key=lambda f: (f.flaky / f.samples, f.flaky), reverse=True)
    n = v.run.n
    return {
        "v": v,
        "samples_per_task": f"{int(n.min())}" if n.min() == n.max() else f"{n.min()}–{n.max()}",
        "passk_rows": rows,
        "passk_svg": Markup(plots.passk_curve(series))
        if max(len(s[1]) for s in series) > 1
        else None,
        "outcomes": outcomes,
        "model_total": total - v.infra_total,
        "outcome_svg": Markup(plots.outcome_bars([(v.label, dict(v.outcomes), infra)])),
        "slowest": times[: opts.top],
        "flaky": flaky[: opts.top],
        "costs": _cost_rows(v, opts.prices),
        "warnings": sorted({w for r in rows for w in r.e.warnings}),
    }


def _cost_rows(v: RunView, prices: Prices | None) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = [
        {"name": _COST_LABELS[f], "per_sample": x, "total": x * v.run.scored}
        for f, x in v.run.costs.items()
    ]
    if prices is not None:
        money = prices.per_sample(v.model, v.run.costs)
        rows.append(
            {
                "name": f"cost ({prices.currency})",
                "per_sample": money,
                "total": None if money is None else money * v.run.scored,
            }
        )
    return rows


def _verdict_text(r: CompareResult) -> str:
    if r.verdict == "improved":
        return "the candidate is better than the baseline"
    if r.verdict == "regressed" and r.margin == 0:
        return "the candidate is significantly worse than the baseline"
    if r.verdict == "regressed":
        return (
            f"the candidate is worse than the baseline by more than the margin ({_pts(r.margin)})"
        )
    if r.non_inferior:
        return (
            f"no significant improvement, but the candidate is shown to lose at most the "
            f"margin ({_pts(r.margin)})"
        )
    mde = "unknown" if r.mde is None else _pts(r.mde)
    return f"the data cannot tell at this number of tasks (minimum detectable effect {mde})"


def _pts(x: float) -> str:
    return f"{x * 100:.1f} pts"


def _comparison(base: RunView, cand: RunView, opts: ReportOptions) -> dict[str, Any]:
    r = compare_runs(base.run, cand.run, opts.compare)
    rows: list[Interval] = []
    if r.ci_low is not None and r.ci_high is not None and r.delta is not None:
        rows.append(Interval("all tasks", r.delta, r.ci_low, r.ci_high))
    for name, s in sorted((r.suites or {}).items()):
        if s.ci_low is not None and s.ci_high is not None and s.delta is not None:
            rows.append(Interval(name, s.delta, s.ci_low, s.ci_high))
    shared = [t for t in base.run.task_ids if t in set(cand.run.task_ids)]
    a, b = base.run.select(shared), cand.run.select(shared)
    costs = [
        {"name": _COST_LABELS.get(f, f), "base": c.baseline, "cand": c.candidate, "ratio": c.ratio}
        for f, c in r.costs.items()
    ]
    if opts.prices is not None:
        pa = opts.prices.per_sample(base.model, base.run.costs)
        pb = opts.prices.per_sample(cand.model, cand.run.costs)
        costs.append(
            {
                "name": f"cost ({opts.prices.currency})",
                "base": pa,
                "cand": pb,
                "ratio": pb / pa if pa and pb is not None else None,
            }
        )
    return {
        "base": base,
        "cand": cand,
        "r": r,
        "text": _verdict_text(r),
        "diff_svg": Markup(plots.difference_plot(rows, r.margin, r.mde)) if rows else None,
        "scatter_svg": Markup(plots.ab_scatter(a.rates(), b.rates(), (base.label, cand.label))),
        "costs": costs,
        "suites": sorted((r.suites or {}).items()),
    }


def _overview(views: Sequence[RunView], opts: ReportOptions) -> dict[str, Any]:
    rows: list[_RunRow] = []
    for v in views:
        e = estimate(v.run, 1, opts.compare.alpha)
        money = opts.prices.per_sample(v.model, v.run.costs) if opts.prices else None
        rows.append(_RunRow(v, e, v.run.costs, money))
    panels: list[tuple[str, list[tuple[Interval, float]]]] = []
    if opts.prices is not None and any(r.money is not None for r in rows):
        panels.append(
            (
                f"cost per sample ({opts.prices.currency})",
                [(_interval(r.v.label, r.e), r.money) for r in rows if r.money is not None],
            )
        )
    axes = (
        (("tokens_in", "tokens_out"), "tokens per sample (in + out)"),
        (("model_s",), "model seconds per sample"),
        (("cpu_s",), "sandbox CPU seconds per sample"),
    )
    for fields, label in axes:
        pts = [
            (_interval(r.v.label, r.e), sum(r.costs.get(f, 0.0) for f in fields))
            for r in rows
            if any(f in r.costs for f in fields)
        ]
        if pts:
            panels.append((label, pts))
    series = []
    for v in views:
        ks, ests = _passk(v.run, opts)
        series.append((v.label, ks, [_interval(v.label, e) for e in ests]))
    return {
        "rows": rows,
        "cost_svg": Markup(plots.quality_vs_cost(panels)) if panels else None,
        "passk_svg": Markup(plots.passk_curve(series)),
        "outcome_svg": Markup(
            plots.outcome_bars(
                [(v.label, dict(v.outcomes), frozenset(INFRA_OUTCOMES)) for v in views]
            )
        ),
    }


# --- template ------------------------------------------------------------------------------


def _fmt_num(x: float | None, digits: int = 3) -> str:
    if x is None:
        return "—"
    if abs(x) >= 1000:
        return f"{x:,.0f}"
    return f"{x:.{digits}g}"


def _fmt_pct(x: float | None, signed: bool = False) -> str:
    if x is None:
        return "—"
    return f"{x * 100:+.1f}" if signed else f"{x * 100:.1f}%"


def _fmt_pts(x: float | None) -> str:
    return "—" if x is None else _pts(x)


def _fmt_p(p: float | None) -> str:
    if p is None:
        return "—"
    return "< 0.0001" if p < 1e-4 else f"{p:.3g}"


def _fmt_money(x: float | None) -> str:
    if x is None:
        return "unknown"
    return f"{x:.4g}" if x < 1 else f"{x:,.2f}"


def _env() -> Environment:
    env = Environment(
        loader=PackageLoader("codegym.evals.report", "templates"),
        autoescape=True,
        undefined=StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    filters: Mapping[str, Any] = {
        "num": _fmt_num,
        "pct": _fmt_pct,
        "pts": _fmt_pts,
        "pval": _fmt_p,
        "money": _fmt_money,
    }
    env.filters.update(filters)
    return env
