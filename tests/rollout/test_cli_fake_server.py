"""``codegym rollout`` / ``replay`` end to end: a real loopback server with injected faults."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import typer
from typer.testing import CliRunner

from codegym.cli.rollout_cmd import replay, rollout
from codegym.policies import SamplingParams
from codegym.tasks.synthetic import generate
from codegym.testing.fake_openai import FakeOpenAIServer

app = typer.Typer()
app.command("rollout")(rollout)
app.command("replay")(replay)
TASKS = generate("infer", 6, 1, 1)


def responder(prompt: Any, params: SamplingParams, index: int) -> str:
    text = prompt[-1]["content"] if not isinstance(prompt, str) else prompt
    for t in TASKS:
        if t.prompt in text:
            body = t.reference if (params.seed or 0) % 3 else "    return None\n"
            return f"```python\n{t.prompt}{body}```"
    return "no code"


def test_rollout_with_faults_accounts_for_every_episode(tmp_path: Path) -> None:
    with FakeOpenAIServer(responder=responder, latency_s=0.01) as srv:
        srv.fail("server_error", at=[2, 3, 4, 5, 6, 7])  # more than the policy's own retries
        srv.fail("drop", at=[11])
        srv.fail("garbage", at=[13])
        out = tmp_path / "run"
        r = CliRunner().invoke(
            app,
            [
                "rollout",
                "--env",
                "code",
                "--model",
                srv.model,
                "--base-url",
                srv.base_url,
                "--out",
                str(out),
                "--groups",
                "6",
                "--group-size",
                "4",
                "--no-store",
                "--retries",
                "2",
            ],
        )
        assert r.exit_code == 0, r.output
    summary = json.loads((out / "summary.json").read_text())
    assert summary["requested"] == 24
    assert summary["scored"] + summary["excluded_total"] == 24
    lines = (out / "trajectories.jsonl").read_text().splitlines()
    assert len(lines) == summary["scored"] > 0
    outcomes = {json.loads(x)["outcome"] for x in lines}
    assert outcomes <= {"pass", "fail"} and "pass" in outcomes

    r = CliRunner().invoke(app, ["replay", str(out)])
    assert r.exit_code == 0, r.output
    report = json.loads(r.output)
    assert report["replayed"] == summary["scored"] and report["different"] == 0


def test_replay_reports_a_tampered_reward(tmp_path: Path) -> None:
    with FakeOpenAIServer(responder=responder) as srv:
        out = tmp_path / "run"
        r = CliRunner().invoke(
            app,
            [
                "rollout",
                "--env",
                "code",
                "--model",
                srv.model,
                "--base-url",
                srv.base_url,
                "--out",
                str(out),
                "--groups",
                "1",
                "--group-size",
                "2",
                "--no-store",
            ],
        )
        assert r.exit_code == 0, r.output
    path = out / "trajectories.jsonl"
    recs = [json.loads(x) for x in path.read_text().splitlines()]
    recs[0]["reward"] = 0.5
    path.write_text("".join(json.dumps(x) + "\n" for x in recs))
    r = CliRunner().invoke(app, ["replay", str(out)])
    assert r.exit_code == 1
    assert "reward 0.5 -> " in r.output


def test_unknown_env_is_a_clear_error(tmp_path: Path) -> None:
    r = CliRunner().invoke(
        app,
        [
            "rollout",
            "--env",
            "nope",
            "--model",
            "m",
            "--base-url",
            "http://127.0.0.1:1/v1",
            "--out",
            str(tmp_path),
        ],
    )
    assert r.exit_code == 2
    assert "not registered" in r.output


def test_the_rollout_folder_records_the_checkpoint_it_used(tmp_path: Path) -> None:
    model = tmp_path / "trained"  # a codegym-trained model folder, served under its path
    model.mkdir()
    record = {"checkpoint": "sha256:abc", "parent": "sha256:base", "config_digest": "cfg",
              "step": 30, "tasks": {"train_digest": "td", "train_ids": []}}  # fmt: skip
    (model / "lineage.json").write_text(json.dumps(record))
    with FakeOpenAIServer(responder=responder, latency_s=0.0) as srv:
        out = tmp_path / "run"
        args = ["rollout", "--env", "code", "--model", str(model), "--base-url", srv.base_url,
                "--out", str(out), "--groups", "2", "--group-size", "2", "--no-store"]  # fmt: skip
        r = CliRunner().invoke(app, args)
        assert r.exit_code == 0, r.output
    lineage = json.loads((out / "summary.json").read_text())["config"]["lineage"]
    assert lineage == {"model_dir": str(model), "checkpoint": "sha256:abc",
                       "parent": "sha256:base", "config_digest": "cfg", "step": 30,
                       "train_digest": "td"}  # fmt: skip
    (model / "lineage.json").write_text("{not json")
    r = CliRunner().invoke(app, args)
    assert r.exit_code == 2 and "unreadable" in r.output  # rich wraps the long path
