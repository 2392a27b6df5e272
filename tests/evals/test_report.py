"""HTML reports: content from generated runs with known per-task rates, and real rendering in
headless Chromium (it renders, the plots are there, no console errors)."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from codegym.cli.report_cmd import report
from codegym.evals.compare import CompareOptions
from codegym.evals.report import (
    Prices,
    PricesError,
    ReportOptions,
    load_prices,
    render_comparison_report,
    render_multi_report,
    render_report,
    render_run_report,
    reward_curve_section,
)
from codegym.evals.runs import RunError

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


def make_run(
    root: Path,
    name: str,
    passes: list[int],
    n: int,
    *,
    model: str = "m",
    tokens: tuple[int, int] = (100, 50),
    cpu_s: float = 0.1,
    infra: int = 0,
    flaky_task: str | None = None,
    suites: bool = False,
) -> Path:
    """A run folder: task i has exactly passes[i] of n samples passing (known rates)."""
    rows: list[dict[str, Any]] = []
    for i, c in enumerate(passes):
        tid = f"task/{i}"
        for s in range(n):
            ok = s < c
            rows.append(
                {
                    "task_id": tid,
                    "completion": "",
                    "sample_index": s,
                    "passed": ok,
                    "outcome": "pass" if ok else ("fail" if s % 2 else "error"),
                    "detail": "",
                    "cluster": tid,
                    "cpu_s": cpu_s * (1 + i),
                    "wall_s": 2 * cpu_s * (1 + i),
                    "tokens_in": tokens[0],
                    "tokens_out": tokens[1],
                    "model_s": tokens[1] / 100,
                    **({"suite": "easy" if i % 2 else "hard"} if suites else {}),
                }
            )
    if flaky_task is not None:
        rows.append(
            {
                "task_id": flaky_task,
                "completion": "",
                "sample_index": n,
                "passed": True,
                "outcome": "pass",
                "flaky": True,
                **({"suite": "hard"} if suites else {}),
            }
        )
    for j in range(infra):
        rows.append(
            {
                "task_id": "task/0",
                "completion": "",
                "sample_index": n + 1 + j,
                "passed": False,
                "outcome": "infra" if j % 2 else "policy_error",
            }
        )
    d = root / name
    d.mkdir()
    (d / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (d / "summary.json").write_text(json.dumps({"config": {"model": model, "suite": "toy"}}))
    return d


N_TASKS = 40
BASE = [i % 6 for i in range(N_TASKS)]  # 0..5 passes of 5 samples: rates 0%..100%
BETTER = [min(5, c + 2) for c in BASE]  # clearly better on most tasks
WORSE = [max(0, c - 3) for c in BASE]


def svg_count(html: str) -> int:
    return len(re.findall(r"<svg\b", html))


@pytest.fixture
def runs(tmp_path: Path) -> dict[str, Path]:
    return {
        "base": make_run(tmp_path, "base", BASE, 5, model="small", infra=3, flaky_task="task/7"),
        "better": make_run(tmp_path, "better", BETTER, 5, model="big", tokens=(100, 150)),
        "worse": make_run(tmp_path, "worse", WORSE, 5, model="small", cpu_s=0.3),
    }


def test_run_report_shows_passk_outcomes_slowest_and_flaky(runs: dict[str, Path]) -> None:
    html = render_run_report(runs["base"])
    mean = sum(BASE) / (5 * N_TASKS)
    assert f"{mean * 100:.1f}%" in html  # pass@1 of the known rates
    assert "pass@k against sample budget" in html  # k = 1, 2, 5 from 5 samples per task
    assert "policy_error" in html and "infra (excluded)" in html
    # slowest task first: task 39 has the largest cpu/wall times
    slow = html[html.index('class="slowest"') :]
    assert slow.index("task/39") < slow.index("task/38")
    flaky = html[html.index('class="flaky"') :]
    assert "task/7" in flaky
    assert "<script" not in html and "http://" not in html.replace("http://www.w3.org", "")
    assert svg_count(html) == 2  # pass@k curve + outcome bar


@pytest.mark.parametrize(
    ("cand", "verdict"), [("better", "improved"), ("worse", "regressed"), ("base", "inconclusive")]
)
def test_comparison_report_verdict_banner(runs: dict[str, Path], cand: str, verdict: str) -> None:
    html = render_comparison_report(runs["base"], runs[cand])
    assert f'data-verdict="{verdict}"' in html
    assert 'data-plot="difference"' in html and 'data-plot="ab-scatter"' in html
    assert "MDE" in html and "p-value" in html


def test_comparison_margin_turns_small_loss_non_inferior(tmp_path: Path) -> None:
    slightly = [c - 1 if i % 10 == 0 and c > 0 else c for i, c in enumerate(BASE)]
    a = make_run(tmp_path, "a", BASE, 5)
    b = make_run(tmp_path, "b", slightly, 5)
    html = render_comparison_report(a, b, ReportOptions(compare=CompareOptions(margin=0.05)))
    assert 'data-verdict="inconclusive"' in html
    assert "shown to lose at most the margin" in html


def test_multi_report_with_prices_plots_quality_against_cost(
    runs: dict[str, Path], tmp_path: Path
) -> None:
    prices_file = tmp_path / "prices.toml"
    prices_file.write_text(
        'currency = "EUR"\ncpu_hour = 3.6\n[models.small]\ninput_per_m = 1.0\noutput_per_m = 2.0\n'
    )
    prices = load_prices(prices_file)
    html = render_multi_report(
        [runs["base"], runs["better"], runs["worse"]], ReportOptions(prices=prices)
    )
    assert 'data-plot="quality-vs-cost"' in html and 'data-plot="passk-budget"' in html
    assert "cost per sample (EUR)" in html
    # base: 100 in, 50 out tokens, mean cpu 0.1*(1..40 mean 20.5) -> 1e-4 + 1e-4 + 2.05e-3
    expected = 100 * 1.0 / 1e6 + 50 * 2.0 / 1e6 + 0.1 * 20.5 * 3.6 / 3600
    assert f"{expected:.4g}" in html
    assert "unknown" in html  # 'big' has no price and there is no default: never priced as 0


def test_prices_yaml_and_bad_files(tmp_path: Path) -> None:
    y = tmp_path / "p.yaml"
    y.write_text("models:\n  default: {input_per_m: 2, output_per_m: 4}\n")
    p = load_prices(y)
    assert p.per_sample("anything", {"tokens_in": 1e6, "tokens_out": 0.0}) == pytest.approx(2.0)
    assert Prices().per_sample("x", {"cpu_s": 10.0}) is None  # nothing priced: unknown
    bad = tmp_path / "bad.toml"
    bad.write_text("[models.x]\ninput_per_m = 1\noutput_pr_m = 2\n")
    with pytest.raises(PricesError, match=r"bad\.toml.*output_pr_m"):
        load_prices(bad)
    with pytest.raises(PricesError, match="must end in"):
        load_prices(tmp_path / "p.json")


def test_bad_runs_give_clear_errors(tmp_path: Path) -> None:
    with pytest.raises(RunError, match="no such file"):
        render_run_report(tmp_path / "missing.jsonl")
    all_infra = make_run(tmp_path, "infra", [], 1, infra=4)
    with pytest.raises(RunError, match="no scored samples"):
        render_run_report(all_infra)
    few = make_run(tmp_path, "few", BASE[:3], 5)
    with pytest.raises(RunError, match="share 3 usable task"):
        render_comparison_report(make_run(tmp_path, "b", BASE, 5), few)


def test_suites_and_reward_curve_section(tmp_path: Path) -> None:
    a = make_run(tmp_path, "a", BASE, 5, suites=True)
    b = make_run(tmp_path, "b", BETTER, 5, suites=True)
    curve = reward_curve_section([(s, 0.1 * s, min(1.0, 0.05 * s)) for s in range(10)])
    html = render_comparison_report(a, b, extra=[curve])
    assert "Per suite (Holm-corrected)" in html and ">easy<" in html and ">hard<" in html
    assert "Training curve" in html and "training step" in html
    with pytest.raises(ValueError, match="at least one"):
        reward_curve_section([])


def test_cli_writes_report_and_reports_bad_input(runs: dict[str, Path], tmp_path: Path) -> None:
    import typer

    app = typer.Typer()
    app.command()(report)
    out = tmp_path / "r.html"
    res = CliRunner().invoke(
        app, [str(runs["better"]), "--baseline", str(runs["base"]), "--out", str(out)]
    )
    assert res.exit_code == 0, res.output
    assert 'data-verdict="improved"' in out.read_text()
    res = CliRunner().invoke(app, [str(tmp_path / "nope"), "--out", str(out)])
    assert res.exit_code == 2 and "nope" in res.output


@pytest.mark.skipif(CHROMIUM is None, reason="needs Debian's `chromium` (apt-get install chromium)")
def test_renders_in_headless_chromium(runs: dict[str, Path], tmp_path: Path) -> None:
    assert CHROMIUM is not None
    html = render_report([runs["better"], runs["worse"]], baseline=runs["base"])
    page = tmp_path / "report.html"
    page.write_text(html)
    shot = tmp_path / "shot.png"
    common = [
        CHROMIUM,
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--no-first-run",
        f"--user-data-dir={tmp_path / 'profile'}",
        "--enable-logging=stderr",
        "--v=0",
    ]
    dom = subprocess.run(
        [*common, "--dump-dom", page.as_uri()],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    # The browser's DOM, not our string: the plots and verdicts survived parsing.
    assert len(re.findall(r"<svg\b", dom.stdout)) == svg_count(html) >= 10
    assert 'data-verdict="improved"' in dom.stdout and 'data-verdict="regressed"' in dom.stdout
    res = subprocess.run(
        [*common, f"--screenshot={shot}", "--window-size=1280,4000", page.as_uri()],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert res.returncode == 0, res.stderr[-2000:]
    assert shot.stat().st_size > 50_000  # a blank page is a few KB
    for log in (dom.stderr, res.stderr):
        bad = [ln for ln in log.splitlines() if "Uncaught" in ln or "CONSOLE" in ln]
        assert not bad, bad
