"""``codegym demo --mlflow``: the demo as one MLflow run, read back from a real local store."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

CODEGYM = [str(Path(sys.executable).parent / "codegym")]
SHORT = ["--steps", "2", "--samples", "2"]  # as the plain demo test: every stage, quickly


@pytest.fixture(scope="module")
def tracked_demo(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, str]:
    """A short demo tracked in a fresh local store, asked to register its checkpoint."""
    tmp = tmp_path_factory.mktemp("tracked")
    out, store = tmp / "demo", tmp / "mlruns"
    r = subprocess.run(
        [*CODEGYM, "demo", "--out", str(out), *SHORT, "--mlflow", "--mlflow-uri", str(store),
         "--register-model", "demo-model"],
        capture_output=True, text=True, timeout=900,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    return out, store, " ".join(r.stderr.split())  # rich wraps long lines


def _client(store: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    from mlflow.tracking import MlflowClient

    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")  # as codegym's Tracker sets it
    return MlflowClient(tracking_uri=store.as_uri(), registry_uri=store.as_uri())


@pytest.mark.slow
def test_demo_logs_config_steps_gate_lineage_and_checkpoint_to_mlflow(
    tracked_demo: tuple[Path, Path, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    out, store, said = tracked_demo
    summary = json.loads((out / "summary.json").read_text())
    lineage = json.loads((out / "trained" / "lineage.json").read_text())
    client = _client(store, monkeypatch)
    (exp,) = [e for e in client.search_experiments() if e.name == "codegym"]
    (mrun,) = client.search_runs([exp.experiment_id])
    assert mrun.info.status == "FINISHED" and mrun.info.run_name == "demo"
    params = mrun.data.params
    assert params["run.steps"] == "2" and params["tasks.family"] == "infer"
    assert params["grpo.group_size"] == "8" and params["demo.samples"] == "2"
    rid = mrun.info.run_id
    # per-step training metrics, stepped by the training step
    assert [m.step for m in client.get_metric_history(rid, "reward_mean")] == [1, 2]
    assert len(client.get_metric_history(rid, "loss")) == 2
    # the held-out numbers and the gate's
    metrics = mrun.data.metrics
    for side in ("base_pass1", "trained_pass1"):
        est = summary[side]
        assert metrics[side] == pytest.approx(est["estimate"])
        assert metrics[f"{side}_ci_low"] == pytest.approx(est["ci_low"])
        assert metrics[f"{side}_ci_high"] == pytest.approx(est["ci_high"])
    for key in ("delta", "ci_low", "ci_high", "p_value"):
        if summary[key] is not None:
            assert metrics[key] == pytest.approx(summary[key])
    tags = mrun.data.tags
    assert tags["verdict"] == summary["verdict"]
    assert tags["heldout.digest"] == summary["heldout"]["digest"]
    assert tags["lineage.checkpoint"] == lineage["checkpoint"]
    assert tags["lineage.step"] == "2"
    assert tags["lineage.train_digest"] == lineage["tasks"]["train_digest"]

    # the artifacts: report, both eval runs, the lineage record and the checkpoint
    def listed(folder: str) -> set[str]:
        return {a.path for a in client.list_artifacts(rid, folder)}

    assert listed("report") == {"report/summary.json", "report/report.html",
                                "report/metrics.jsonl"}  # fmt: skip
    assert "eval/base/results.jsonl" in listed("eval/base")
    assert "eval/trained/summary.json" in listed("eval/trained")
    assert listed("lineage") == {"lineage/lineage.json"}
    ckpt = listed("checkpoint")
    assert {"checkpoint/config.json", "checkpoint/lineage.json",
            "checkpoint/model.safetensors"} <= ckpt  # fmt: skip
    # registered exactly when the gate said improved (which two steps seldom earn)
    versions = client.search_model_versions("name='demo-model'")
    if summary["verdict"] == "improved":
        assert "registered demo-model version 1" in said, said
        assert [v.run_id for v in versions] == [rid]
    else:
        assert f"demo-model: not registered (the gate's verdict is {summary['verdict']}" in said
        assert versions == []


@pytest.mark.slow
def test_an_improved_demo_registers_its_checkpoint_with_its_lineage(
    tracked_demo: tuple[Path, Path, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The registration step on the demo's real output, under each verdict (the verdict
    itself is the paired statistics', tested with them)."""
    from codegym.cli.demo_cmd import _track_results
    from codegym.telemetry.tracking import Tracker
    from codegym.train.config import parse_config

    out = tracked_demo[0]
    store = tmp_path / "mlruns"
    summary = json.loads((out / "summary.json").read_text())
    config = parse_config({}, "test")
    lineage = json.loads((out / "trained" / "lineage.json").read_text())
    for verdict in ("regressed", "inconclusive", "improved"):
        with Tracker(f"demo-{verdict}", tracking_uri=str(store)) as tracker:
            _track_results(tracker, config, out, summary | {"verdict": verdict}, "demo-model")
    client = _client(store, monkeypatch)
    (version,) = client.search_model_versions("name='demo-model'")
    assert client.get_run(version.run_id).info.run_name == "demo-improved"
    assert version.tags["verdict"] == "improved"
    assert version.tags["checkpoint"] == lineage["checkpoint"]
    assert version.tags["train_digest"] == lineage["tasks"]["train_digest"]
    assert version.tags["step"] == "2"
    files = {f.path for f in client.list_artifacts(version.run_id, "checkpoint")}
    assert "checkpoint/lineage.json" in files and "checkpoint/model.safetensors" in files


@pytest.mark.slow
def test_a_resumed_demo_logs_the_steps_it_did_not_redo(
    tracked_demo: tuple[Path, Path, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Rerun on a finished demo's folder: training resumes with nothing left to do, and the
    run still charts every step, read back from the training's metrics file."""
    import shutil

    out, store = tmp_path / "demo", tmp_path / "mlruns"
    shutil.copytree(tracked_demo[0], out)
    r = subprocess.run([*CODEGYM, "demo", "--out", str(out), *SHORT, "--mlflow",
                        "--mlflow-uri", str(store)],
                       capture_output=True, text=True, timeout=900)  # fmt: skip
    assert r.returncode == 0, r.stderr
    client = _client(store, monkeypatch)
    (exp,) = [e for e in client.search_experiments() if e.name == "codegym"]
    (mrun,) = client.search_runs([exp.experiment_id])
    history = client.get_metric_history(mrun.info.run_id, "reward_mean")
    rows = [json.loads(ln) for ln in (out / "train" / "metrics.jsonl").read_text().splitlines()]
    assert [(m.step, m.value) for m in history] == [
        (row["step"], pytest.approx(row["reward_mean"])) for row in rows
    ]
    assert [row["step"] for row in rows] == [1, 2]


def test_an_unusable_store_fails_the_demo_before_any_work(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    out = tmp_path / "demo"
    r = subprocess.run([*CODEGYM, "demo", "--out", str(out), *SHORT, "--mlflow",
                        "--mlflow-uri", str(blocker / "mlruns")],
                       capture_output=True, text=True, timeout=120)  # fmt: skip
    assert r.returncode == 2 and "not writable" in " ".join(r.stderr.split()), r.stderr
    assert not (out / "train").exists()


PROBE = """
import sys
import typer
from codegym.cli import demo_cmd

async def stop(*args):  # the demo's work starts here: what has been imported by now?
    print(sorted(m for m in sys.modules if m.split(".")[0] == "mlflow") != [])
    raise SystemExit(0)

demo_cmd._demo = stop
app = typer.Typer()
app.command()(demo_cmd.demo)
app(sys.argv[1:])
"""


@pytest.mark.parametrize(("more", "imported"), [([], "False"), (["--mlflow"], "True")])
def test_the_demo_imports_mlflow_only_when_asked(
    tmp_path: Path, more: list[str], imported: str
) -> None:
    args = ["--out", str(tmp_path / "demo"), "--mlflow-uri", str(tmp_path / "mlruns"), *more]
    r = subprocess.run([sys.executable, "-c", PROBE, *args], capture_output=True, text=True,
                       timeout=120)  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == imported
