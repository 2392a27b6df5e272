"""``codegym eval`` as a user runs it: a real process against a real server on loopback."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from codegym.policies import SamplingParams
from codegym.policies.policy import Prompt
from codegym.tasks import load_humaneval
from codegym.testing.fake_openai import FakeOpenAIServer

CODEGYM = str(Path(sys.executable).parent / "codegym")
REFS = {t.prompt: t.reference for t in load_humaneval()}


def answer(prompt: Prompt, params: SamplingParams, index: int) -> str:
    """Sample 0: the reference; sample 1: wrong."""
    assert isinstance(prompt, str)
    return REFS[prompt] if index == 0 else "    return None\n"


def tool_agent(prompt: Prompt, params: SamplingParams, index: int) -> str:
    """A chat agent of the tool env: runs a command, then submits (the reference, but a
    wrong function for HumanEval/2)."""
    assert isinstance(prompt, list)
    user = next(m["content"] for m in prompt if m["role"] == "user")
    task = next(t for t in load_humaneval() if t.prompt.strip() in user)
    if not any(m["role"] == "assistant" for m in prompt):
        return "```bash\npython3 -c 'print(6 * 7)'\n```"
    body = task.reference if task.id != "HumanEval/2" else "    return None\n"
    return f"```submit\n{task.prompt}{body}```"


def run_eval(
    base_url: str, out: Path, store: Path, *extra: str
) -> subprocess.CompletedProcess[str]:
    cmd = [CODEGYM, "eval", "--suite", "humaneval", "--model", "fake-model",
           "--base-url", base_url, "-n", "2", "--limit", "20", "--out", str(out),
           "--store", str(store), "--json", *extra]  # fmt: skip
    env = {**os.environ, "OPENAI_API_KEY": "test"}
    return subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=env)


def rows(out: Path) -> list[dict[str, Any]]:
    return [json.loads(x) for x in (out / "results.jsonl").read_text().splitlines()]


def test_eval_writes_a_run_folder_and_reruns_for_free(tmp_path: Path) -> None:
    with FakeOpenAIServer(responder=answer) as srv:
        first = run_eval(srv.base_url, tmp_path / "run", tmp_path / "s.duckdb")
        assert first.returncode == 0, first.stderr
        seen = srv.requests
        again = run_eval(srv.base_url, tmp_path / "run2", tmp_path / "s.duckdb")
        assert again.returncode == 0, again.stderr
        assert srv.requests == seen  # the second run asked the model nothing
    summary = json.loads(first.stdout)
    assert summary["requested"] == 40 and summary["scored"] == 40
    assert summary["pass_at_k"]["1"]["estimate"] == 0.5
    assert summary["pass_at_k"]["2"]["estimate"] == 1.0
    assert summary["cost"]["tokens_in"] > 0 and summary["config"]["model"] == "fake-model"
    got = rows(tmp_path / "run")
    assert {r["outcome"] for r in got if r["sample_index"] == 0} == {"pass"}
    assert {r["outcome"] for r in got if r["sample_index"] == 1} <= {"fail", "error"}
    assert all({"task_id", "completion", "passed", "outcome", "model_s"} <= r.keys() for r in got)
    assert json.loads(again.stdout)["cached"] == 40
    assert rows(tmp_path / "run2") == got


def test_unreachable_server_is_infra_not_failure(tmp_path: Path) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # nothing listens here once closed
    r = run_eval(f"http://127.0.0.1:{port}/v1", tmp_path / "run", tmp_path / "s.duckdb",
                 "--no-ground-truth")  # fmt: skip
    assert r.returncode == 3, r.stderr
    summary = json.loads(r.stdout)
    assert summary["scored"] == 0 and summary["excluded_by_reason"] == {"policy_error": 40}
    assert (
        "policy_error" in r.stderr and "127.0.0.1" in (tmp_path / "run/results.jsonl").read_text()
    )


def test_bad_options_get_clear_errors(tmp_path: Path) -> None:
    r = run_eval("http://127.0.0.1:9/v1", tmp_path / "run", tmp_path / "s.duckdb",
                 "--mode", "banana")  # fmt: skip
    assert r.returncode == 2 and "--mode" in r.stderr


def test_eval_exports_the_run_to_parquet(tmp_path: Path) -> None:
    import pyarrow.parquet as pq

    target = tmp_path / "exports" / "run.parquet"
    with FakeOpenAIServer(responder=answer) as srv:
        r = run_eval(srv.base_url, tmp_path / "run", tmp_path / "s.duckdb",
                     "--no-ground-truth", "--export", str(target))  # fmt: skip
    assert r.returncode == 0, r.stderr
    table = pq.read_table(target)
    assert table.num_rows == 40
    got = table.to_pylist()
    assert {row["outcome"] for row in got if row["sample_index"] == 0} == {"pass"}
    assert all(row["completion"] for row in got)


def test_eval_tracks_its_run_in_mlflow(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from mlflow.tracking import MlflowClient

    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")  # as the Tracker does for file stores
    store = tmp_path / "mlruns"
    with FakeOpenAIServer(responder=answer) as srv:
        r = run_eval(srv.base_url, tmp_path / "run", tmp_path / "s.duckdb",
                     "--no-ground-truth", "--mlflow", "--mlflow-uri", str(store))  # fmt: skip
    assert r.returncode == 0, r.stderr
    client = MlflowClient(tracking_uri=store.as_uri())
    (exp,) = [e for e in client.search_experiments() if e.name == "codegym"]
    (run,) = client.search_runs([exp.experiment_id])
    assert run.data.params["model"] == "fake-model"
    assert run.data.metrics["pass_at_1"] == 0.5
    names = {a.path for a in client.list_artifacts(run.info.run_id)}
    assert {"summary.json", "results.jsonl"} <= names


def test_eval_runs_through_the_sandbox_service(tmp_path: Path) -> None:
    """Everything ``eval`` does with a local sandbox (its default ground-truth check
    included) works through ``--sandbox-url``."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    token = "a-service-token-for-tests"
    service = subprocess.Popen(
        [CODEGYM, "sandbox", "serve", "--port", str(port), "--token", token, "--workers", "2",
         "--log-level", "warning"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        env={**os.environ, "CODEGYM_TOKEN": token},
    )  # fmt: skip
    try:
        import httpx

        from codegym.testing import wait_until

        def up() -> bool:
            try:
                return httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=2).status_code == 200
            except httpx.HTTPError:
                return False

        wait_until(up, timeout=60, what="the sandbox service to start")
        with FakeOpenAIServer(responder=answer) as srv:
            env = {**os.environ, "OPENAI_API_KEY": "test", "CODEGYM_TOKEN": token}
            cmd = [CODEGYM, "eval", "--suite", "humaneval", "--model", "fake-model",
                   "--base-url", srv.base_url, "-n", "2", "--limit", "6", "--out",
                   str(tmp_path / "run"), "--no-store", "--json",
                   "--sandbox-url", f"http://127.0.0.1:{port}"]  # fmt: skip
            done = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=env)
        assert done.returncode == 0, done.stderr
        summary = json.loads(done.stdout)
        assert summary["scored"] == 12 and summary["pass_at_k"]["1"]["estimate"] == 0.5
        # an agent's episodes too: its tools act in a session on the service
        with FakeOpenAIServer(responder=tool_agent) as srv:
            run = tmp_path / "agents"
            cmd = [CODEGYM, "eval", "--suite", "humaneval", "--model", "fake-model",
                   "--base-url", srv.base_url, "-n", "2", "--limit", "3", "--out", str(run),
                   "--no-store", "--json", "--env", "tool", "--mode", "chat",
                   "--max-tokens", "4096",
                   "--sandbox-url", f"http://127.0.0.1:{port}"]  # fmt: skip
            done = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=env)
        assert done.returncode == 0, done.stderr
        summary = json.loads(done.stdout)
        assert summary["scored"] == 6 and summary["pass_at_k"]["1"]["estimate"] == 2 / 3, summary
        episodes = [json.loads(x) for x in (run / "trajectories.jsonl").read_text().splitlines()]
        assert all(e["tool_io"][0]["output"].strip() == "42" for e in episodes), episodes[0]
        metrics = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=5).text
        opened = [ln for ln in metrics.splitlines() if 'route="/v1/sessions"' in ln]
        assert any('status="201"' in ln and not ln.endswith(" 0.0") for ln in opened), opened
    finally:
        service.terminate()
        service.wait(30)


def test_rollout_tracks_its_run_in_mlflow(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from mlflow.tracking import MlflowClient

    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    store = tmp_path / "mlruns"
    with FakeOpenAIServer() as srv:
        cmd = [CODEGYM, "rollout", "--env", "code", "--model", srv.model, "--base-url",
               srv.base_url, "--groups", "2", "--group-size", "2", "--out", str(tmp_path / "r"),
               "--no-store", "--mlflow", "--mlflow-uri", str(store)]  # fmt: skip
        env = {**os.environ, "OPENAI_API_KEY": "test", "MLFLOW_ALLOW_FILE_STORE": "true"}
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=env)
    assert r.returncode == 0, r.stderr
    client = MlflowClient(tracking_uri=store.as_uri())
    (exp,) = [e for e in client.search_experiments() if e.name == "codegym"]
    (run,) = client.search_runs([exp.experiment_id])
    assert run.data.params["env"] == "code" and run.data.metrics["requested"] == 4
    assert {a.path for a in client.list_artifacts(run.info.run_id)} == {"summary.json"}


def test_eval_and_rollout_mirror_their_run_folders_to_s3(tmp_path: Path) -> None:
    """--mirror against a real S3-compatible server (moto) on loopback, found through the
    AWS_* variables the way a user's MinIO or S3 would be."""
    import s3fs
    from moto.server import ThreadedMotoServer

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    moto = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    moto.start()
    aws = {"AWS_ACCESS_KEY_ID": "test", "AWS_SECRET_ACCESS_KEY": "test",
           "AWS_DEFAULT_REGION": "us-east-1",
           "AWS_ENDPOINT_URL": f"http://127.0.0.1:{port}"}  # fmt: skip
    try:
        s3 = s3fs.S3FileSystem(
            key="test",
            secret="test",
            endpoint_url=aws["AWS_ENDPOINT_URL"],
            skip_instance_cache=True,
        )
        s3.mkdir("runs")
        env = {**os.environ, "OPENAI_API_KEY": "test", **aws}
        with FakeOpenAIServer(responder=answer) as srv:
            cmd = [CODEGYM, "eval", "--suite", "humaneval", "--model", "fake-model",
                   "--base-url", srv.base_url, "-n", "1", "--limit", "3", "--out",
                   str(tmp_path / "ev"), "--no-store", "--no-ground-truth", "--json",
                   "--mirror", "s3://runs/evals"]  # fmt: skip
            r = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=env)
            assert r.returncode == 0, r.stderr
            cmd = [CODEGYM, "rollout", "--env", "code", "--model", srv.model, "--base-url",
                   srv.base_url, "--groups", "1", "--group-size", "2", "--out",
                   str(tmp_path / "ro"), "--no-store",
                   "--mirror", "s3://runs/rollouts"]  # fmt: skip
            r = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=env)
            assert r.returncode == 0, r.stderr
        s3.invalidate_cache()
        for remote, local in (
            ("runs/evals/ev", tmp_path / "ev"),
            ("runs/rollouts/ro", tmp_path / "ro"),
        ):
            names = {f.name for f in local.iterdir() if f.is_file()}
            assert names and {p.rsplit("/", 1)[1] for p in s3.find(remote)} == names
            for name in names:
                assert s3.cat_file(f"{remote}/{name}") == (local / name).read_bytes()
    finally:
        moto.stop()


def test_an_unwritable_mirror_fails_before_the_run(tmp_path: Path) -> None:
    blocked = tmp_path / "file"
    blocked.write_text("a file, not a folder")
    with FakeOpenAIServer(responder=answer) as srv:
        r = run_eval(srv.base_url, tmp_path / "run", tmp_path / "s.duckdb",
                     "--mirror", f"file://{blocked}/runs")  # fmt: skip
        assert r.returncode == 2, r.stderr
        assert "--mirror" in r.stderr and srv.requests == 0
    assert not (tmp_path / "run").exists()
