"""``codegym score --sandbox-url``: the CLI scores through the sandbox service."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from service_support import TOKEN, service_process

from codegym.tasks import load_humaneval

CODEGYM = str(Path(sys.executable).parent / "codegym")


def test_score_through_the_service_matches_in_process(tmp_path: Path) -> None:
    samples = tmp_path / "s.jsonl"
    rows = [
        {"task_id": t.id, "completion": body}
        for t in list(load_humaneval())[:15]
        for body in (t.reference, "    return None\n")
    ]
    samples.write_text("".join(json.dumps(r) + "\n" for r in rows))
    env = {**os.environ, "CODEGYM_TOKEN": TOKEN}
    base = [CODEGYM, "score", str(samples), "--no-store", "--json"]
    with service_process() as svc:
        remote = subprocess.run([*base, "--out", str(tmp_path / "remote.jsonl"),
                                 "--sandbox-url", svc.url],
                                capture_output=True, text=True, env=env, timeout=300)  # fmt: skip
    local = subprocess.run([*base, "--out", str(tmp_path / "local.jsonl")],
                           capture_output=True, text=True, env=env, timeout=300)  # fmt: skip
    assert remote.returncode == 0, remote.stderr
    assert local.returncode == 0, local.stderr
    got = [json.loads(x) for x in (tmp_path / "remote.jsonl").read_text().splitlines()]
    want = [json.loads(x) for x in (tmp_path / "local.jsonl").read_text().splitlines()]
    assert [(r["task_id"], r["outcome"]) for r in got] == [
        (r["task_id"], r["outcome"]) for r in want
    ]
    assert sum(r["passed"] for r in got) == 15
