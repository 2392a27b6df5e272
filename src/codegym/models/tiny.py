"""The tiny code model, built once and cached: ``ensure_tiny_model() -> Path``.

The cache lives in ``$CODEGYM_CACHE_DIR/models`` (default ``~/.cache/codegym/models``),
one folder per ``PretrainConfig.key()``: ``tiny-<key[:16]>``. Any change to the config,
the task generator or the pretraining code's version gives a new key and a rebuild; an old
folder is left in place (delete the cache directory to reclaim it). Nothing is downloaded:
the model is pretrained locally from synthetic tasks (``codegym.models.pretrain``), a few
minutes on 2 CPU cores.

A build of the default config ships with the package (``codegym/models/shipped``, 3.8 MB;
``scripts/pretrain_tiny.py`` reproduces it): when its recorded key equals the requested
config's key it is used as is, so a fresh clone's demo does not spend minutes pretraining.

Concurrent callers are safe: the build holds a file lock and writes into a temporary
folder that is renamed into place only when complete, so a killed build leaves no
half-written model behind.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Final

from codegym.models.pretrain import META_FILE, PretrainConfig, pretrain

CACHE_ENV: Final = "CODEGYM_CACHE_DIR"
REQUIRED_FILES: Final = ("config.json", "model.safetensors", "tokenizer.json", META_FILE)


def default_cache_dir() -> Path:
    """``$CODEGYM_CACHE_DIR/models``, else ``~/.cache/codegym/models``."""
    root = os.environ.get(CACHE_ENV)
    return (Path(root) if root else Path.home() / ".cache" / "codegym") / "models"


def tiny_model_dir(cache_dir: Path | None = None, config: PretrainConfig | None = None) -> Path:
    """Where the model for ``config`` lives (built or not)."""
    cfg = config or PretrainConfig()
    return (cache_dir or default_cache_dir()) / f"tiny-{cfg.key()[:16]}"


SHIPPED_DIR: Final = Path(__file__).parent / "shipped"


def _shipped_matches(cfg: PretrainConfig) -> bool:
    if not _complete(SHIPPED_DIR):
        return False
    try:
        meta = json.loads((SHIPPED_DIR / META_FILE).read_text())
    except (OSError, ValueError):
        return False
    return bool(meta.get("key") == cfg.key())


def _complete(path: Path) -> bool:
    return all((path / name).is_file() for name in REQUIRED_FILES)


def ensure_tiny_model(
    cache_dir: Path | None = None, config: PretrainConfig | None = None, *, log_every: int = 0
) -> Path:
    """The cached tiny model's directory, pretraining it first if it is missing.

    Raises:
        OSError: the cache directory cannot be created or written (set ``CODEGYM_CACHE_DIR``
            to a writable place).
    """
    cfg = config or PretrainConfig()
    if cache_dir is None and _shipped_matches(cfg):
        return SHIPPED_DIR
    target = tiny_model_dir(cache_dir, cfg)
    if _complete(target):
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with open(target.parent / f".{target.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # a second caller waits, then finds it built
        if _complete(target):
            return target
        tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}-", dir=target.parent))
        try:
            pretrain(cfg, tmp, log_every=log_every)
            if target.exists():
                shutil.rmtree(target)  # an incomplete leftover from an older layout
            tmp.rename(target)
        finally:
            if tmp.exists():
                shutil.rmtree(tmp, ignore_errors=True)
    return target
