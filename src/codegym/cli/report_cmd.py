"""``codegym report RUN [RUN...] --out report.html [--baseline RUN] [--prices FILE]``.

One run gives a run report; several give them side by side with quality against cost; with
``--baseline`` each run is also compared against the baseline (verdict, paired difference,
per-task plot). The page is self-contained (no script, no network). Exit codes: 0 written,
2 bad input (unreadable run, no scored samples, too small an overlap, bad prices file).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from codegym.cli._common import console, fail

if TYPE_CHECKING:
    pass


def report(
    runs: Annotated[list[Path], typer.Argument(help="Run folders (or results.jsonl files).")],
    out: Annotated[Path, typer.Option(help="Where to write the HTML file.")] = Path("report.html"),
    baseline: Annotated[
        Path | None, typer.Option(help="Compare every run against this run.")
    ] = None,
    prices: Annotated[
        Path | None,
        typer.Option(help="Prices per model and CPU-hour (TOML/YAML, see docs/reports.md)."),
    ] = None,
    margin: Annotated[float, typer.Option(help="Non-inferiority margin (0.02 = 2 points).")] = 0.0,
    alpha: Annotated[float, typer.Option(help="Two-sided significance level.")] = 0.05,
    k: Annotated[int, typer.Option(help="Compare pass@k (k > 1: paired bootstrap).")] = 1,
    title: Annotated[str | None, typer.Option(help="Page title.")] = None,
) -> None:
    """Write a self-contained HTML report for runs, or compare them against a baseline."""
    from codegym.evals.compare import CompareOptions
    from codegym.evals.report import PricesError, ReportOptions, load_prices, render_report
    from codegym.evals.runs import RunError

    try:
        opts = ReportOptions(
            compare=CompareOptions(margin=margin, alpha=alpha, k=k),
            prices=load_prices(prices) if prices is not None else None,
            title=title,
        )
        html = render_report(runs, baseline, opts)
    except (RunError, PricesError) as e:
        fail(str(e))
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(html, encoding="utf-8")
    except OSError as e:
        fail(f"{out}: cannot write the report: {e}")
    console.print(f"report: {out} ({len(html) / 1024:.0f} KiB)", highlight=False)
