"""Checkpoints: safetensors weights + the trainer state needed to resume exactly.

Layout under the run directory::

    ckpt-000010/model.safetensors     the trained weights (tied tensors handled)
    ckpt-000010/trainer_state.pt      step, optimizer, scheduler, torch RNG, config digest
    ckpt-000010/COMPLETE              written last: a folder without it is ignored

A checkpoint is written into a temporary folder and renamed into place, so ``kill -9`` at
any moment leaves either the previous checkpoint or the new one, never half of one.
Resuming from step k with the same config continues exactly as the uninterrupted run
would have (same weights, optimizer moments, schedule and RNG).
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_model, save_model

from codegym.errors import CodegymError

__all__ = ["CheckpointError", "latest_checkpoint", "load_checkpoint", "save_checkpoint"]

_DONE = "COMPLETE"


class CheckpointError(CodegymError, RuntimeError):
    """A checkpoint cannot be used (different config, unreadable); the message says why."""


def _name(step: int) -> str:
    return f"ckpt-{step:06d}"


def save_checkpoint(
    run_dir: Path, step: int, model: torch.nn.Module, state: dict[str, Any], keep: int = 2
) -> Path:
    """Write checkpoint ``step`` atomically; delete all but the newest ``keep``."""
    run_dir.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".ckpt-tmp-", dir=run_dir))
    try:
        save_model(model, str(tmp / "model.safetensors"))
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
    for old in _complete(run_dir)[:-keep]:
        shutil.rmtree(old, ignore_errors=True)
    return final


def _complete(run_dir: Path) -> list[Path]:
    if not run_dir.is_dir():
        return []
    found = [p for p in run_dir.glob("ckpt-*") if (p / _DONE).is_file()]
    return sorted(found, key=lambda p: int(p.name.split("-")[1]))


def latest_checkpoint(run_dir: Path) -> Path | None:
    """The newest complete checkpoint, or None."""
    done = _complete(run_dir)
    return done[-1] if done else None


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
    missing, unexpected = load_model(model, str(path / "model.safetensors"), strict=True)
    if missing or unexpected:  # strict raises first; kept for a clear message if not
        raise CheckpointError(f"{path}: weights do not fit the model ({missing}, {unexpected})")
    return state
