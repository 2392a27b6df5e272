"""MLflow tracking against a real local file store, read back with ``MlflowClient``."""

from __future__ import annotations

import socket
import time
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from codegym.telemetry.tracking import Tracker, TrackingError, resolve_tracking_uri


def test_params_metrics_and_artifacts_round_trip(tmp_path: Path) -> None:
    store = tmp_path / "mlruns"
    report = tmp_path / "report.html"
    report.write_text("<html><body>pass@1 0.42</body></html>")
    with Tracker("grpo-tiny", tracking_uri=str(store), experiment="unit", tags={"k": "v"}) as t:
        t.log_params({"lr": 1e-5, "model": "tiny", "group": 8})
        for step in range(3):
            t.log_metrics({"reward_mean": 0.1 * step, "kl": 0.01}, step=step)
        t.log_metric("pass@1", 0.42)
        t.log_artifact(report, "reports")
        run_id = t.run_id

    client = MlflowClient(tracking_uri=store.resolve().as_uri())
    run = client.get_run(run_id)
    assert run.info.run_name == "grpo-tiny" and run.info.status == "FINISHED"
    assert run.data.params == {"lr": "1e-05", "model": "tiny", "group": "8"}
    assert run.data.tags["k"] == "v"
    history = client.get_metric_history(run_id, "reward_mean")
    assert [(h.step, h.value) for h in history] == [(0, 0.0), (1, 0.1), (2, 0.2)]
    assert run.data.metrics["pass_at_1"] == 0.42  # "@" is not allowed in MLflow keys
    (art,) = client.list_artifacts(run_id, "reports")
    assert art.path == "reports/report.html"
    local = client.download_artifacts(run_id, "reports/report.html", str(tmp_path / "dl"))
    assert Path(local).read_text() == report.read_text()
    exp = client.get_experiment_by_name("unit")
    assert exp is not None and run.info.experiment_id == exp.experiment_id


def test_second_run_reuses_the_experiment_and_a_failure_is_marked(tmp_path: Path) -> None:
    store = str(tmp_path / "mlruns")
    with Tracker("first", tracking_uri=store) as a:
        pass
    with pytest.raises(RuntimeError, match="boom"), Tracker("second", tracking_uri=store) as b:
        raise RuntimeError("boom")
    client = MlflowClient(tracking_uri=Path(store).resolve().as_uri())
    ra, rb = client.get_run(a.run_id), client.get_run(b.run_id)
    assert ra.info.experiment_id == rb.info.experiment_id
    assert ra.info.status == "FINISHED" and rb.info.status == "FAILED"


def test_default_store_is_mlruns_in_the_current_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.chdir(tmp_path)
    assert resolve_tracking_uri(None) == (tmp_path / "mlruns").as_uri()
    with Tracker("default") as t:
        t.log_metric("x", 1.0)
    assert (tmp_path / "mlruns").is_dir()
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "http://example.invalid:5000")
    assert resolve_tracking_uri(None) == "http://example.invalid:5000"
    assert resolve_tracking_uri("file:///x") == "file:///x"


def test_unreachable_server_fails_at_start_quickly() -> None:
    with socket.socket() as s:  # a port with nothing listening
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    tracker = Tracker("r", tracking_uri=f"http://127.0.0.1:{port}")
    start = time.monotonic()
    with pytest.raises(TrackingError, match=rf"127.0.0.1:{port} is unreachable.*omit it"):
        tracker.start()
    assert time.monotonic() - start < 10  # no minutes of MLflow retries


def test_unwritable_store_fails_at_start(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(TrackingError, match=r"not writable.*tracking_uri="):
        Tracker("r", tracking_uri=str(blocker / "mlruns")).start()


def test_misuse_is_reported_clearly(tmp_path: Path) -> None:
    t = Tracker("r", tracking_uri=str(tmp_path / "mlruns"))
    with pytest.raises(TrackingError, match="call start"):
        t.log_metric("x", 1.0)
    with pytest.raises(TrackingError, match="non-empty"):
        Tracker("")
    with t:
        with pytest.raises(TrackingError, match=r"'x'=.*not a number"):
            t.log_metrics({"x": "high"})  # type: ignore[dict-item]
        with pytest.raises(TrackingError, match="does not exist"):
            t.log_artifact(tmp_path / "missing.html")
        with pytest.raises(TrackingError, match="as an artifact"):
            t.log_params({"prompt": "x" * 7000})
    with pytest.raises(TrackingError, match="not open"):
        t.log_metric("x", 1.0)


def test_keys_are_made_mlflow_safe() -> None:
    from codegym.telemetry.tracking import mlflow_key

    assert mlflow_key("pass@1") == "pass_at_1"
    assert mlflow_key("eval/pass rate:1.0-x") == "eval/pass rate:1.0-x"  # already valid
    assert mlflow_key("a|b{c}") == "a_b_c_"
