"""Self-contained HTML reports: a run, a comparison, several runs; see docs/reports.md."""

from codegym.evals.report.builder import (
    ReportOptions,
    Section,
    render_comparison_report,
    render_multi_report,
    render_report,
    render_run_report,
    reward_curve_section,
)
from codegym.evals.report.prices import ModelPrice, Prices, PricesError, load_prices

__all__ = [
    "ModelPrice",
    "Prices",
    "PricesError",
    "ReportOptions",
    "Section",
    "load_prices",
    "render_comparison_report",
    "render_multi_report",
    "render_report",
    "render_run_report",
    "reward_curve_section",
]
