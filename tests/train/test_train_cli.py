"""``codegym train CONFIG`` end to end on the toy model, and the held-out read-out."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import typer
import yaml
from train_helpers import small_config
from typer.testing import CliRunner

from codegym.cli.train_cmd import train
from codegym.train import parse_config
from codegym.train.evaluate import heldout_pass_rate

app = typer.Typer()
app.command()(train)


def test_train_command_runs_resumes_and_writes_metrics(toy_model: Path, tmp_path: Path) -> None:
    run = tmp_path / "run"
    cfg_file = tmp_path / "train.yaml"
    cfg_file.write_text(yaml.safe_dump(small_config(str(run), run={"steps": 2})))
    r = CliRunner().invoke(app, [str(cfg_file), "--model", str(toy_model), "--quiet"])
    assert r.exit_code == 0, r.output
    rows = [json.loads(ln) for ln in (run / "metrics.jsonl").read_text().splitlines()]
    assert [m["step"] for m in rows] == [1, 2]
    assert (run / "final" / "config.json").is_file() and (run / "ckpt-000002").is_dir()
    # Same command with more steps continues from the checkpoint instead of starting over.
    r = CliRunner().invoke(
        app, [str(cfg_file), "--model", str(toy_model), "--steps", "3", "--quiet"]
    )
    assert r.exit_code == 0, r.output
    rows = [json.loads(ln) for ln in (run / "metrics.jsonl").read_text().splitlines()]
    assert [m["step"] for m in rows] == [1, 2, 3]


def test_train_command_explains_a_bad_config(tmp_path: Path) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text("[grpo]\ngroup_sise = 4\n")
    r = CliRunner().invoke(app, [str(bad), "--quiet"])
    assert r.exit_code == 2 and "grpo.group_sise" in r.output


async def test_heldout_pass_rate_scores_in_the_sandbox(toy_model: Path, tmp_path: Path) -> None:
    cfg = parse_config(
        {"tasks": {"heldout_tasks": 3}, "sampling": {"max_new_tokens": 8}, "model": {"threads": 1}}
    )
    r = await heldout_pass_rate(toy_model, cfg, samples=2)
    assert r["tasks"] == 3 and len(r["per_task_passes"]) == 3
    assert sum(r["outcomes"].values()) + sum(r["excluded"].values()) == 6
    assert 0.0 <= r["pass1"] <= 1.0


def test_train_logs_its_report_and_checkpoint_to_mlflow(
    toy_model: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from mlflow.tracking import MlflowClient

    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    run, store = tmp_path / "run", tmp_path / "mlruns"
    cfg_file = tmp_path / "train.yaml"
    cfg_file.write_text(yaml.safe_dump(small_config(str(run), run={"steps": 1})))
    args = [str(cfg_file), "--model", str(toy_model), "--quiet", "--mlflow",
            "--mlflow-uri", str(store)]  # fmt: skip
    r = CliRunner().invoke(app, args)
    assert r.exit_code == 0, r.output
    client = MlflowClient(tracking_uri=store.as_uri())
    (exp,) = [e for e in client.search_experiments() if e.name == "codegym"]
    (mrun,) = client.search_runs([exp.experiment_id])
    assert "loss" in mrun.data.metrics
    rid = mrun.info.run_id
    assert [a.path for a in client.list_artifacts(rid, "report")] == ["report/metrics.jsonl"]
    ckpt = {a.path for a in client.list_artifacts(rid, "checkpoint")}
    assert "checkpoint/config.json" in ckpt and any(p.endswith(".safetensors") for p in ckpt)
