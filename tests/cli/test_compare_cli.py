"""`compare`, `gate` and `plan` through typer, on real results files."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import typer
from typer.testing import CliRunner

from codegym.cli import compare_cmd

app = typer.Typer()
app.command("compare")(compare_cmd.compare)
app.command("gate")(compare_cmd.gate)
app.command("plan")(compare_cmd.plan_cmd)
runner = CliRunner()


def write_run(path: Path, rates: np.ndarray, n: int, seed: int, tokens: int = 100) -> Path:
    rng = np.random.default_rng(seed)
    with path.open("w") as f:
        for i, p in enumerate(rates):
            for j in range(n):
                ok = bool(rng.random() < p)
                f.write(json.dumps({"task_id": f"T/{i}", "completion": "", "sample_index": j,
                                    "passed": ok, "outcome": "pass" if ok else "fail",
                                    "tokens_out": tokens, "cpu_s": 0.01}) + "\n")  # fmt: skip
        f.write(json.dumps({"task_id": "T/0", "outcome": "infra", "passed": False}) + "\n")
    return path


@pytest.fixture
def runs(tmp_path: Path) -> dict[str, Path]:
    p = np.random.default_rng(0).beta(0.5, 0.5, 120)
    return {
        "base": write_run(tmp_path / "base.jsonl", p, 5, 1),
        "same": write_run(tmp_path / "same.jsonl", p, 5, 2, tokens=200),
        "worse": write_run(tmp_path / "worse.jsonl", p * 0.6, 5, 3),
    }


def test_compare_json_has_the_contract_fields(runs: dict[str, Path]) -> None:
    r = runner.invoke(app, ["compare", str(runs["base"]), str(runs["worse"]), "--json"])
    assert r.exit_code == 0, r.output
    out = json.loads(r.stdout)
    for key in ("verdict", "delta", "ci_low", "ci_high", "p_value", "n_tasks", "mde",
                "correlation", "margin", "alpha", "method", "warnings", "excluded"):  # fmt: skip
        assert key in out
    assert out["verdict"] == "regressed" and out["n_tasks"] == 120
    assert out["excluded"]["baseline"] == {"infra": 1}
    assert out["costs"]["tokens_out"]["ratio"] == pytest.approx(1.0)


def test_compare_table_for_people(runs: dict[str, Path]) -> None:
    r = runner.invoke(app, ["compare", str(runs["base"]), str(runs["same"])])
    assert r.exit_code == 0, r.output
    assert "verdict:" in r.stdout and "MDE" in r.stdout and "tokens_out" in r.stdout


def test_gate_exit_codes(runs: dict[str, Path], tmp_path: Path) -> None:
    base, same, worse = (str(runs[k]) for k in ("base", "same", "worse"))
    assert runner.invoke(app, ["gate", base, worse]).exit_code == 1
    assert runner.invoke(app, ["gate", base, same]).exit_code == 0
    r = runner.invoke(app, ["gate", base, same, "--on-inconclusive", "fail"])
    assert r.exit_code == 3, r.output
    # A generous margin shows non-inferiority: passes even when inconclusive fails.
    r = runner.invoke(app, ["gate", base, same, "--margin", "0.2", "--on-inconclusive", "fail"])
    assert r.exit_code == 0, r.output
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    r = runner.invoke(app, ["gate", base, str(empty)])
    assert r.exit_code == 2 and "empty file" in r.output
    r = runner.invoke(app, ["gate", base, same, "--alpha", "2"])
    assert r.exit_code == 2 and "alpha" in r.output


def test_plan_prints_tasks_by_samples(runs: dict[str, Path]) -> None:
    r = runner.invoke(app, ["plan", str(runs["base"]), "--delta", "0.05", "--json"])
    assert r.exit_code == 0, r.output
    out = json.loads(r.stdout)
    assert out["rows"][0]["samples_per_task"] == 1 and out["rows"][0]["tasks_needed"] > 0
    r = runner.invoke(app, ["plan", str(runs["base"]), "--delta", "0.05"])
    assert r.exit_code == 0 and "tasks needed" in r.stdout
    r = runner.invoke(app, ["plan", str(runs["base"]), "--delta", "0"])
    assert r.exit_code == 2 and "delta" in r.output
