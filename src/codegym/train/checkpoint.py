"""Checkpoints: safetensors weights + the trainer state needed to resume exactly.

Layout under the run directory::

    ckpt-000010/model.safetensors     the trained weights (tied tensors handled)
    ckpt-000010/trainer_state.pt      step, optimizer, scheduler, torch RNG, config digest
    ckpt-000010/record.json           lineage: content id, parent, step, config and task
                                      digests, the step's metrics, the code version
    ckpt-000010/COMPLETE              written last: a folder without it is ignored

A checkpoint's content id is ``sha256:`` of its weights file, so two checkpoints with the
same id hold the same weights wherever they are; ``parent`` is the id of the checkpoint (or
base model) the run trained from, so the chain of records says where any weights came from.

A checkpoint is written into a temporary folder and renamed into place, so ``kill -9`` at
any moment leaves either the previous checkpoint or the new one, never half of one.
Resuming from step k with the same config continues exactly as the uninterrupted run
would have (same weights, optimizer moments, schedule and RNG).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import tempfile
from functools import cache
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_model, save_model

from codegym.errors import CodegymError

__all__ = [
    "CheckpointError",
    "code_version",
    "content_id",
    "latest_checkpoint",
    "load_checkpoint",
    "read_record",
    "save_checkpoint",
]

_DONE = "COMPLETE"
RECORD = "record.json"
WEIGHTS = "model.safetensors"


class CheckpointError(CodegymError, RuntimeError):
    """A checkpoint cannot be used (different config, unreadable); the message says why."""


def _name(step: int) -> str:
    return f"ckpt-{step:06d}"


def content_id(weights: Path) -> str:
    """``sha256:<hex>`` of a weights file (read in 1 MiB blocks)."""
    h = hashlib.sha256()
    with open(weights, "rb") as f:
        while block := f.read(1 << 20):
            h.update(block)
    return f"sha256:{h.hexdigest()}"


@cache
def code_version() -> str:
    """codegym's version, with the git commit when it runs from a checkout."""
    from codegym import __version__

    try:
        head = subprocess.run(
            ["git", "-C", str(Path(__file__).parent), "rev-parse", "--short=12", "HEAD"],
            capture_output=True, text=True, timeout=10,
        )  # fmt: skip
    except (OSError, subprocess.TimeoutExpired):
        return __version__
    return f"{__version__}+g{head.stdout.strip()}" if head.returncode == 0 else __version__


def save_checkpoint(
    run_dir: Path,
    step: int,
    model: torch.nn.Module,
    state: dict[str, Any],
    keep: int = 2,
    record: dict[str, Any] | None = None,
) -> Path:
    """Write checkpoint ``step`` atomically; delete all but the newest ``keep`` and the best
    by held-out pass@1 (``heldout_pass1`` in the records). ``record`` (lineage) is written
    beside the weights with their content id as ``id``."""
    run_dir.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".ckpt-tmp-", dir=run_dir))
    try:
        save_model(model, str(tmp / WEIGHTS))
        body = {"id": content_id(tmp / WEIGHTS), "step": step, **(record or {})}
        (tmp / RECORD).write_text(json.dumps(body, indent=1) + "\n")
        torch.save(state, tmp / "trainer_state.pt")
        (tmp / _DONE).write_text(str(step))
        for f in tmp.iterdir():  # durable before the rename makes it visible
            with open(f, "rb") as fh:
                os.fsync(fh.fileno())
        final = run_dir / _name(step)
        if final.exists():
            shutil.rmtree(final)
        tmp.rename(final)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    done = _complete(run_dir)
    best = _best(done)
    for old in done[:-keep]:
        if old != best:
            shutil.rmtree(old, ignore_errors=True)
    return final


def _best(done: list[Path]) -> Path | None:
    """The checkpoint with the highest held-out pass@1 in its record (the newer on a tie),
    or None when none was scored."""
    scored = [(rec["heldout_pass1"], i) for i, p in enumerate(done)
              if (rec := read_record(p)).get("heldout_pass1") is not None]  # fmt: skip
    return done[max(scored)[1]] if scored else None


def _complete(run_dir: Path) -> list[Path]:
    if not run_dir.is_dir():
        return []
    found = [p for p in run_dir.glob("ckpt-*") if (p / _DONE).is_file()]
    return sorted(found, key=lambda p: int(p.name.split("-")[1]))


def latest_checkpoint(run_dir: Path) -> Path | None:
    """The newest complete checkpoint, or None."""
    done = _complete(run_dir)
    return done[-1] if done else None


def read_record(path: Path) -> dict[str, Any]:
    """A checkpoint's lineage record (an empty one for checkpoints made before records)."""
    f = path / RECORD
    if not f.is_file():
        return {}
    record: dict[str, Any] = json.loads(f.read_text())
    return record


def load_checkpoint(path: Path, model: torch.nn.Module, config_digest: str) -> dict[str, Any]:
    """Load weights into ``model`` and return the trainer state.

    Raises:
        CheckpointError: the checkpoint was made with a different config (delete the
            run directory or point ``checkpoint.dir`` elsewhere to start fresh).
    """
    state: dict[str, Any] = torch.load(path / "trainer_state.pt", weights_only=False)
    if state.get("config_digest") != config_digest:
        raise CheckpointError(
            f"{path}: made with a different training config; resuming would mix two runs. "
            "Use a new checkpoint.dir, or delete this one to start over"
        )
    missing, unexpected = load_model(model, str(path / WEIGHTS), strict=True)
    if missing or unexpected:  # strict raises first; kept for a clear message if not
        raise CheckpointError(f"{path}: weights do not fit the model ({missing}, {unexpected})")
    return state
