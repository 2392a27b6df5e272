"""Each example env runs end to end on its own (fake server, real sandbox)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


@pytest.mark.parametrize(
    ("name", "mean_reward"),
    [("reverse_text.py", None), ("fix_until_pass.py", 0.5), ("shaped_code.py", None)],
)
def test_example_runs(name: str, mean_reward: float | None) -> None:
    r = subprocess.run(
        [sys.executable, str(EXAMPLES / name), "--group-size", "2"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 0, r.stderr[-2000:]
    summary = json.loads(r.stdout[r.stdout.index("{") :])
    assert summary["requested"] == summary["scored"] == 8
    if mean_reward is not None:  # the scripted model passes on its second attempt
        assert summary["mean_reward"] == mean_reward
