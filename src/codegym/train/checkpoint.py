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

Remote copies (``checkpoint.remote``, any fsspec URL: ``s3://bucket/prefix``,
``file:///...``, ``memory://...``): the local run directory stays the working copy, and
each complete checkpoint is mirrored to ``<remote>/ckpt-NNNNNN/`` after it is saved, the
``COMPLETE`` marker uploaded last, so a half-uploaded checkpoint is never taken for a whole
one. The remote keeps what the local rule keeps (the newest ``keep`` and the best by
held-out pass@1, judged over the remote's own checkpoints). A run started where the local
directory has no complete checkpoint downloads the newest complete remote one first, so a
trainer on a fresh machine resumes from the bucket. ``check_remote`` runs once before
training: a remote that cannot be reached or written is a ``CheckpointError`` then, and a
failed upload later is one too, never a skipped copy.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import tempfile
import uuid
from collections.abc import Mapping
from functools import cache
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_model, save_model

from codegym.errors import CodegymError

__all__ = [
    "CheckpointError",
    "check_remote",
    "code_version",
    "content_id",
    "fetch_file",
    "fetch_latest",
    "latest_checkpoint",
    "load_checkpoint",
    "mirror_checkpoint",
    "mirror_path",
    "prune_remote",
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
        final = _publish(tmp, run_dir / _name(step))
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    done = _complete(run_dir)
    kept = _retained([read_record(p).get("heldout_pass1") for p in done], keep)
    for i, old in enumerate(done):
        if i not in kept:
            shutil.rmtree(old, ignore_errors=True)
    return final


def _publish(tmp: Path, final: Path) -> Path:
    """Make the finished folder ``tmp`` visible as ``final`` in one rename."""
    for f in tmp.iterdir():  # durable before the rename makes it visible
        with open(f, "rb") as fh:
            os.fsync(fh.fileno())
    if final.exists():
        shutil.rmtree(final)
    tmp.rename(final)
    return final


def _retained(scores: list[float | None], keep: int) -> set[int]:
    """Indexes (oldest first) that retention keeps: the newest ``keep``, and the one with
    the highest held-out pass@1 (the newer on a tie) when any was scored. One rule for the
    local directory and the remote, so both keep the same checkpoints."""
    kept = set(range(len(scores))) - set(range(len(scores))[:-keep])
    scored = [(s, i) for i, s in enumerate(scores) if s is not None]
    if scored:
        kept.add(max(scored)[1])
    return kept


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


# -- remote copies (any fsspec URL) ---------------------------------------------------------
_CKPT = re.compile(r"ckpt-(\d+)")
# Object stores have no folders to make or remove, and fsspec's makedirs there creates a
# missing bucket: a typo in the bucket name must fail, not make a new bucket.
_OBJECT_STORES = frozenset({"s3", "s3a", "gs", "gcs", "abfs", "az", "adl"})
_FIX = (
    "Check the URL (an S3 bucket must already exist), checkpoint.remote_options "
    "(endpoint_url; key and secret, or the AWS_* environment variables) and that the server "
    "is reachable; or unset checkpoint.remote to keep checkpoints on local disk only"
)


def _shown(url: str) -> str:
    """``url`` without any ``user:password@`` part, for messages."""
    return re.sub(r"//[^/@]*@", "//***@", url)


def _remote_error(
    remote: str, doing: str, e: BaseException, label: str = "checkpoint.remote"
) -> CheckpointError:
    return CheckpointError(
        f"{label} {_shown(remote)}: {doing} failed ({type(e).__name__}: {e}). {_FIX}"
    )


def _remote_fs(
    remote: str, options: Mapping[str, Any] | None, label: str = "checkpoint.remote"
) -> tuple[Any, str]:
    """The fsspec file system for ``remote`` and the root path on it (no trailing slash);
    errors name the setting ``label``."""
    import fsspec  # loaded only when a remote is configured

    try:
        fs, root = fsspec.core.url_to_fs(remote, **dict(options or {}))
    except ImportError as e:  # fsspec's message names the package, e.g. "install s3fs"
        raise CheckpointError(f"{label} {_shown(remote)}: {e}") from e
    except (ValueError, TypeError) as e:
        raise CheckpointError(
            f"{label} {_shown(remote)}: not a usable fsspec URL or options ({e}). "
            "Give a URL such as s3://bucket/prefix, file:///path or memory://name"
        ) from e
    return fs, str(root).rstrip("/")


def _is_object_store(fs: Any) -> bool:
    p = fs.protocol
    return bool(_OBJECT_STORES & ({p} if isinstance(p, str) else set(p)))


def _make_folder(fs: Any, path: str) -> None:
    if not _is_object_store(fs):
        fs.makedirs(path, exist_ok=True)


def _remote_listing(fs: Any, root: str) -> dict[int, set[str]]:
    """Step -> the file names in ``<root>/ckpt-NNNNNN/``, as the remote holds them now."""
    fs.invalidate_cache(root)  # fsspec caches listings; another machine may have written
    try:
        files = fs.find(root)
    except FileNotFoundError:  # nothing written under the prefix yet
        return {}
    found: dict[int, set[str]] = {}
    for f in files:
        rel = str(f).removeprefix(root + "/").split("/")
        if len(rel) == 2 and (m := _CKPT.fullmatch(rel[0])):
            found.setdefault(int(m[1]), set()).add(rel[1])
    return found


def check_remote(
    remote: str, options: Mapping[str, Any] | None = None, *, label: str = "checkpoint.remote"
) -> None:
    """Write, read back, delete and list a probe file under ``remote``: run once before
    training, so a wrong URL or missing credentials stop the run at its start instead of
    at its first checkpoint.

    Raises:
        CheckpointError: the URL is not understood, its backend is not installed, or the
            remote cannot be reached, written or listed (the message names the URL and
            what to check).
    """
    fs, root = _remote_fs(remote, options, label)
    probe = f"{root}/.codegym-write-check-{uuid.uuid4().hex}"
    body = b"codegym checks that it can write checkpoints here\n"
    try:
        _make_folder(fs, root)
        fs.pipe_file(probe, body)
        if fs.cat_file(probe) != body:
            raise OSError("the probe file read back differs from what was written")
        fs.rm_file(probe)
        _remote_listing(fs, root)
    # Backends raise their own types (botocore, aiohttp, OSError); each becomes one error.
    except Exception as e:
        raise _remote_error(remote, "writing a probe file", e, label) from e


def mirror_checkpoint(path: Path, remote: str, options: Mapping[str, Any] | None = None) -> str:
    """Copy the complete local checkpoint ``path`` to ``<remote>/<path.name>/``, its
    ``COMPLETE`` marker last, and return that URL. A copy already there (the same step
    saved again after a resume) loses its marker first, so it never reads as complete
    while its files are being replaced.

    Raises:
        CheckpointError: ``path`` is not a complete checkpoint, or an upload failed (the
            local checkpoint is intact; the message names the URL).
    """
    if not (path / _DONE).is_file():
        raise CheckpointError(f"{path}: not a complete checkpoint (no {_DONE}); not mirrored")
    fs, root = _remote_fs(remote, options)
    dest = f"{root}/{path.name}"
    files = sorted(p for p in path.iterdir() if p.is_file() and p.name != _DONE)
    try:
        old = set(_remote_listing(fs, root).get(int(path.name.split("-")[1]), set()))
        if _DONE in old:
            fs.rm_file(f"{dest}/{_DONE}")
        stale = old - {_DONE} - {f.name for f in files}
        if stale:
            fs.rm([f"{dest}/{n}" for n in sorted(stale)])
        _make_folder(fs, dest)
        for f in files:
            fs.put_file(str(f), f"{dest}/{f.name}")
        fs.put_file(str(path / _DONE), f"{dest}/{_DONE}")
    except Exception as e:  # any backend's failure, see check_remote
        raise _remote_error(remote, f"uploading {path.name}", e) from e
    return f"{remote.rstrip('/')}/{path.name}"


def mirror_path(
    path: Path,
    remote: str,
    options: Mapping[str, Any] | None = None,
    *,
    label: str = "checkpoint.remote",
) -> str:
    """Copy a run file or folder (``metrics.jsonl``, ``final/``, an eval's run folder) to
    ``<remote>/<path.name>``, replacing what is there; return that URL.

    Raises:
        CheckpointError: ``path`` is missing, or an upload failed (naming ``label``).
    """
    if not path.exists():
        raise CheckpointError(f"{path}: does not exist; nothing to mirror")
    fs, root = _remote_fs(remote, options, label)
    dest = f"{root}/{path.name}"
    try:
        if path.is_dir():
            _make_folder(fs, dest)
            for f in sorted(p for p in path.rglob("*") if p.is_file()):
                rel = f.relative_to(path).as_posix()
                if "/" in rel:
                    _make_folder(fs, f"{dest}/{rel.rsplit('/', 1)[0]}")
                fs.put_file(str(f), f"{dest}/{rel}")
        else:
            fs.put_file(str(path), dest)
    except Exception as e:  # any backend's failure, see check_remote
        raise _remote_error(remote, f"uploading {path.name}", e, label) from e
    return f"{remote.rstrip('/')}/{path.name}"


def fetch_file(remote: str, options: Mapping[str, Any] | None, name: str, dest: Path) -> bool:
    """Download ``<remote>/<name>`` to ``dest`` (via a temporary name); False when the
    remote has no such file.

    Raises:
        CheckpointError: the remote cannot be read.
    """
    fs, root = _remote_fs(remote, options)
    tmp = dest.with_name(f".{dest.name}.part")
    try:
        fs.invalidate_cache(root)
        if not fs.exists(f"{root}/{name}"):
            return False
        fs.get_file(f"{root}/{name}", str(tmp))
        tmp.replace(dest)
    except Exception as e:  # any backend's failure, see check_remote
        tmp.unlink(missing_ok=True)
        raise _remote_error(remote, f"downloading {name}", e) from e
    return True


def prune_remote(remote: str, options: Mapping[str, Any] | None = None, keep: int = 2) -> list[str]:
    """Delete the remote checkpoints that retention drops (the rule ``save_checkpoint``
    applies locally, over the remote's complete checkpoints), and half-uploaded folders
    older than the newest complete one (an upload killed midway); return the deleted
    names. A marker goes before the files, so a folder being deleted never reads as
    complete.

    Raises:
        CheckpointError: the remote cannot be listed, read or deleted from.
    """
    fs, root = _remote_fs(remote, options)
    try:
        found = _remote_listing(fs, root)
        done = sorted(s for s, names in found.items() if _DONE in names)
        scores = [_remote_record(fs, f"{root}/{_name(s)}").get("heldout_pass1") for s in done]
        kept = _retained(scores, keep)
        doomed = [s for i, s in enumerate(done) if i not in kept]
        if done:
            doomed += [s for s in found if _DONE not in found[s] and s < done[-1]]
        for s in sorted(doomed):
            folder = f"{root}/{_name(s)}"
            if _DONE in found[s]:
                fs.rm_file(f"{folder}/{_DONE}")
            rest = [f"{folder}/{n}" for n in sorted(found[s] - {_DONE})]
            if rest:
                fs.rm(rest)
            if not _is_object_store(fs):  # the emptied folder itself
                fs.rm(folder, recursive=True)
    except Exception as e:  # any backend's failure, see check_remote
        raise _remote_error(remote, "pruning old checkpoints", e) from e
    return [_name(s) for s in sorted(doomed)]


def _remote_record(fs: Any, folder: str) -> dict[str, Any]:
    try:
        raw = fs.cat_file(f"{folder}/{RECORD}")
    except FileNotFoundError:  # made before records
        return {}
    record: dict[str, Any] = json.loads(raw)
    return record


def fetch_latest(remote: str, options: Mapping[str, Any] | None, run_dir: Path) -> Path | None:
    """Download the newest complete remote checkpoint into ``run_dir`` and return its
    local path, or None when the remote holds none. Folders without ``COMPLETE`` are
    ignored. The download lands in a temporary folder, its weights are checked against
    the content id in its record, and it is renamed into place with its marker last, so
    ``latest_checkpoint`` then finds it like one saved here.

    Raises:
        CheckpointError: the remote cannot be read, or the newest checkpoint's weights do
            not match its record (delete that checkpoint remotely to resume from the one
            before; it is not skipped silently).
    """
    fs, root = _remote_fs(remote, options)
    try:
        found = _remote_listing(fs, root)
        done = [s for s, names in found.items() if _DONE in names]
        if not done:
            return None
        step = max(done)
        src = f"{root}/{_name(step)}"
        run_dir.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=".ckpt-tmp-", dir=run_dir))
        try:
            for n in sorted(found[step] - {_DONE}):
                fs.get_file(f"{src}/{n}", str(tmp / n))
            want = read_record(tmp).get("id")
            if want is not None and content_id(tmp / WEIGHTS) != want:
                raise CheckpointError(
                    f"{_shown(remote)}/{_name(step)}: its weights do not match the content "
                    f"id in its record ({want}); the copy is damaged. Delete it from the "
                    "remote to resume from the checkpoint before it"
                )
            fs.get_file(f"{src}/{_DONE}", str(tmp / _DONE))
            return _publish(tmp, run_dir / _name(step))
        finally:
            if tmp.exists():
                shutil.rmtree(tmp, ignore_errors=True)
    except CheckpointError:
        raise
    except Exception as e:  # any backend's failure, see check_remote
        raise _remote_error(remote, "downloading the newest checkpoint", e) from e
