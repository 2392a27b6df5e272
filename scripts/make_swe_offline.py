"""Make the shipped repository task set (``swe-offline``) from a ``codegym tasks synth`` run.

    .venv/bin/python scripts/make_swe_offline.py SYNTH.jsonl [--per-package 16]

Takes up to ``--per-package`` tasks of each package, spread evenly over the run's tasks of
that package (sorted by instance id, so the pick depends only on the run), writes them
gzip-compressed with a fixed header (the same bytes for the same pick) to
``src/codegym/tasks/swe/data/swe-offline-v1.jsonl.gz``, and prints the sha256 to pin in
``codegym.tasks.manifest.BUILTIN_PINS["swe-offline"]``.
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import io
from collections import defaultdict
from pathlib import Path

from codegym.tasks.swe.task import OFFLINE_FILE, SweTask, load_tasks


def pick(tasks: list[SweTask], per_package: int) -> list[SweTask]:
    by_package: dict[str, list[SweTask]] = defaultdict(list)
    for t in sorted(tasks, key=lambda t: t.instance_id):
        by_package[t.repo].append(t)
    out: list[SweTask] = []
    for name in sorted(by_package):
        group = by_package[name]
        step = max(1.0, len(group) / per_package)
        out += [group[int(i * step)] for i in range(min(per_package, len(group)))]
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("synth", type=Path)
    ap.add_argument("--per-package", type=int, default=16)
    args = ap.parse_args()
    chosen = pick(load_tasks(args.synth), args.per_package)
    text = "".join(t.model_dump_json() + "\n" for t in chosen).encode()
    buf = io.BytesIO()
    with gzip.GzipFile(fileobj=buf, mode="wb", mtime=0, filename="") as gz:
        gz.write(text)
    OFFLINE_FILE.parent.mkdir(parents=True, exist_ok=True)
    OFFLINE_FILE.write_bytes(buf.getvalue())
    packages = len({t.repo for t in chosen})
    print(f"{len(chosen)} tasks over {packages} packages -> {OFFLINE_FILE}")
    print(f"sha256 {hashlib.sha256(buf.getvalue()).hexdigest()}")


if __name__ == "__main__":
    main()
