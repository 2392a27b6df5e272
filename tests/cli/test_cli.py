"""The CLI as a user runs it: real processes, real files."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

CODEGYM = [str(Path(sys.executable).parent / "codegym")]


def run(*args: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
    return subprocess.run([*CODEGYM, *args], capture_output=True, text=True, input=stdin,
                          timeout=120)  # fmt: skip


def test_sandbox_check_lists_tiers() -> None:
    r = run("sandbox", "check")
    assert r.returncode == 0 and "jail" in r.stderr and "process" in r.stderr


def test_sandbox_run_json(tmp_path: Path) -> None:
    prog = tmp_path / "p.py"
    prog.write_text("print(6 * 7)")
    r = run("sandbox", "run", str(prog), "--json")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["verdict"] == "ok" and out["stdout"] == "42\n"


def test_score_writes_results_and_reports_bad_lines(tmp_path: Path) -> None:
    samples = tmp_path / "samples.jsonl"
    good = {"task_id": "HumanEval/0", "completion": "    return False\n", "extra": 1}
    lines = [json.dumps(good), "{not json", json.dumps({"task_id": "Nope/1", "completion": ""})]
    samples.write_text("\n".join(lines) + "\n")
    out = tmp_path / "results.jsonl"
    r = run("score", "--suite", "humaneval", str(samples), "--out", str(out), "--json")
    assert r.returncode == 0, r.stderr
    assert "samples.jsonl:2" in r.stderr and "unknown task_id 'Nope/1'" in r.stderr
    rows = [json.loads(x) for x in out.read_text().splitlines()]
    assert len(rows) == 1 and rows[0]["extra"] == 1
    assert rows[0]["passed"] is False and rows[0]["outcome"] == "fail"
    assert json.loads(r.stdout)["scored"] == 1


def test_score_stops_on_bad_line_when_asked(tmp_path: Path) -> None:
    samples = tmp_path / "s.jsonl"
    samples.write_bytes(b'{"task_id": "HumanEval/0", "completion": "\xff"}\n')
    r = run("score", str(samples), "--out", str(tmp_path / "o.jsonl"), "--on-bad-line", "stop")
    assert r.returncode == 2 and "s.jsonl:1" in r.stderr


def test_score_takes_a_suite_file(tmp_path: Path) -> None:
    """``--suite`` takes what ``eval`` takes: here an MBPP-format JSONL file."""
    suite = tmp_path / "mine.jsonl"
    row = {"task_id": 7, "text": "Add two numbers.", "code": "def add(a, b):\n    return a + b",
           "test_list": ["assert add(1, 2) == 3", "assert add(0, 0) == 0"]}  # fmt: skip
    suite.write_text(json.dumps(row) + "\n")
    samples = tmp_path / "s.jsonl"
    right, wrong = "def add(a, b):\n    return a + b\n", "def add(a, b):\n    return a - b\n"
    samples.write_text("".join(
        json.dumps({"task_id": "7", "completion": c}) + "\n" for c in (right, wrong)
    ))  # fmt: skip
    out = tmp_path / "o.jsonl"
    r = run("score", "--suite", str(suite), str(samples), "--out", str(out), "--no-store")
    assert r.returncode == 0, r.stderr
    assert [json.loads(x)["passed"] for x in out.read_text().splitlines()] == [True, False]
    r = run("score", "--suite", str(tmp_path / "none.jsonl"), str(samples), "--out", str(out))
    assert r.returncode == 2 and "none.jsonl" in r.stderr


def test_score_checks_ground_truth_when_asked(tmp_path: Path) -> None:
    """``--ground-truth`` (as ``eval``'s): a task whose reference fails its own tests is
    quarantined, its samples ``broken_ground_truth`` (excluded, never a failure), in the
    samples' order; the others are scored with limits sized from their reference."""
    suite = tmp_path / "mine.jsonl"
    rows = [
        {"task_id": 1, "text": "Add.", "code": "def add(a, b):\n    return a + b",
         "test_list": ["assert add(1, 2) == 3"]},
        {"task_id": 2, "text": "Sub.", "code": "def sub(a, b):\n    return a + b",
         "test_list": ["assert sub(3, 2) == 1"]},  # the reference is wrong
    ]  # fmt: skip
    suite.write_text("".join(json.dumps(r) + "\n" for r in rows))
    samples = tmp_path / "s.jsonl"
    code = ("2", "def sub(a, b):\n    return a - b\n"), ("1", "def add(a, b):\n    return a + b\n")
    samples.write_text("".join(json.dumps({"task_id": t, "completion": c}) + "\n" for t, c in code))
    out = tmp_path / "o.jsonl"
    args = ("score", "--suite", str(suite), str(samples), "--out", str(out), "--no-store")
    r = run(*args, "--ground-truth", "--json")
    # half the samples excluded is past the 5% infra threshold: exit 3, results written
    assert r.returncode == 3 and "broken_ground_truth" in r.stderr, r.stderr
    got = [json.loads(x) for x in out.read_text().splitlines()]
    assert [(g["task_id"], g["outcome"]) for g in got] == [
        ("2", "broken_ground_truth"),
        ("1", "pass"),
    ]
    assert "quarantined 2: fails" in " ".join(r.stderr.split())
    assert json.loads(r.stdout)["excluded_by_reason"] == {"broken_ground_truth": 1}
    r = run(*args)  # without it, the task is scored as any other
    assert r.returncode == 0, r.stderr
    assert [json.loads(x)["outcome"] for x in out.read_text().splitlines()] == ["pass", "pass"]


def test_score_takes_a_format_and_a_release_date(tmp_path: Path) -> None:
    """``--since`` keeps the problems released on or after a day (samples of older ones
    are left out, and said so); ``--format`` names the records' format."""
    suite = tmp_path / "lcb.jsonl"
    rows = [
        {"question_id": qid, "question_content": "Print n + 1.", "contest_date": day,
         "public_test_cases": json.dumps([{"input": "1\n", "output": "2\n"}]),
         "private_test_cases": "", "metadata": "{}"}
        for qid, day in (("old", "2023-01-01T00:00:00"), ("new", "2024-06-01T00:00:00"))
    ]  # fmt: skip
    suite.write_text("".join(json.dumps(r) + "\n" for r in rows))
    samples = tmp_path / "s.jsonl"
    samples.write_text("".join(
        json.dumps({"task_id": t, "completion": "print(int(input()) + 1)"}) + "\n"
        for t in ("old", "new")
    ))  # fmt: skip
    out = tmp_path / "o.jsonl"
    args = ("score", "--suite", str(suite), str(samples), "--out", str(out), "--no-store")
    r = run(*args, "--since", "2024-01-01", "--format", "livecodebench")
    assert r.returncode == 0, r.stderr
    assert [json.loads(x)["task_id"] for x in out.read_text().splitlines()] == ["new"]
    assert "left out 1 samples of tasks released before --since" in r.stderr
    r = run(*args, "--since", "June")
    assert r.returncode == 2 and "--since 'June' is not a date" in r.stderr, r.stderr
    r = run(*args, "--format", "mbpp")
    assert r.returncode == 2 and "missing field 'text' or 'prompt'" in r.stderr, r.stderr


@pytest.mark.slow
def test_demo_runs_the_whole_loop_and_gates(tmp_path: Path) -> None:
    """A short demo (2 GRPO steps, 2 held-out samples per task): every stage runs and
    writes its artifacts; the verdict is whatever the statistics say, not asserted."""
    out = tmp_path / "demo"
    r = subprocess.run([*CODEGYM, "demo", "--out", str(out), "--steps", "2", "--samples", "2"],
                       capture_output=True, text=True, timeout=900)  # fmt: skip
    assert r.returncode == 0, r.stderr
    summary = json.loads((out / "summary.json").read_text())
    assert summary["verdict"] in ("improved", "regressed", "inconclusive")
    for side in ("base_pass1", "trained_pass1"):
        est = summary[side]
        assert 0.0 <= est["ci_low"] <= est["estimate"] <= est["ci_high"] <= 1.0
    assert summary["train"]["steps"] == 2 and summary["heldout"]["samples_per_task"] == 2
    for run_dir in ("base", "trained_eval"):
        rows = (out / run_dir / "results.jsonl").read_text().splitlines()
        assert len(rows) == 2 * summary["heldout"]["tasks"]
    assert (out / "trained" / "model.safetensors").is_file()
    # both evaluations name the held-out set; the trained one, the tasks it was trained on
    configs = [json.loads((out / d / "summary.json").read_text())["config"]
               for d in ("base", "trained_eval")]  # fmt: skip
    assert configs[0]["heldout_digest"] == configs[1]["heldout_digest"]
    assert summary["heldout"]["digest"] == configs[0]["heldout_digest"]
    assert configs[0]["lineage"] is None and configs[1]["lineage"]["step"] == 2
    assert configs[1]["lineage"]["checkpoint"].startswith("sha256:")
    html = (out / "report.html").read_text()
    assert "GRPO training curve" in html and html.count("<svg") >= 3
