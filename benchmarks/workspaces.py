"""Repository workspaces: copy-on-write copies of a real package's image, against copying.

    .venv/bin/python benchmarks/workspaces.py                 # all sections, toolz
    .venv/bin/python benchmarks/workspaces.py --only fork8 --reps 30
    .venv/bin/python benchmarks/workspaces.py --spec examples/images/sqlparse.toml

Sections (each prints codegym beside its baseline, measured in the same run):
  fork8    8 isolated, ready-to-run copies of one prepared state (the package's source,
           its environment, a one-line change frozen into a layer): ``Sandbox.fork`` then
           a first command in each, against ``cp -a`` of the same tree 8 times
  episode  open and close a kept workspace, nothing run (p50, p99); a run in a fresh
           workspace against the same run in the plain tmpfs work dir
  pytest   the package's own test suite in a workspace against the same on the host
  disk     every image in the cache: bytes on disk (layers shared once) against each
           image alone, and against a copy of its environment per task
  rss      8 concurrent idle episodes (kept workspaces on 2 workers): memory per episode
Results go to docs/BENCHMARKS.md; ratios hold better than absolute times on this VM.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

from codegym.sandbox import Limits, Sandbox
from codegym.sandbox.images import ImageStore, build_image
from codegym.sandbox.images.layers import size_on_disk

ROWS: list[tuple[str, str, str, str]] = []  # metric, baseline, codegym, target
LIM = Limits(cpu_s=60, wall_s=120, memory_mb=1024, disk_mb=256)
PYTEST = ["python", "-m", "pytest", "-q", "-p", "no:cacheprovider"]


def pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, round(q * (len(xs) - 1)))]


def ms(x: float) -> str:
    return f"{x * 1000:.1f} ms"


def materialise(store: ImageStore, image, dest: Path) -> None:  # type: ignore[no-untyped-def]
    """The image's merged tree as plain files (what copying-based sandboxes start from)."""
    for layer in store.layer_paths(image):
        subprocess.run(["cp", "-a", f"{layer}/.", str(dest)], check=True)


async def fork8(store: ImageStore, image, reps: int, scratch: Path) -> None:  # type: ignore[no-untyped-def]
    async with Sandbox(workers=2, images=store) as sb:
        async with await sb.workspace(image) as ws:  # the prepared state: a one-line change
            await ws.run(["sh", "-c", "echo '# changed' >> setup.py; echo x > CHANGED"])
            frozen = await ws.freeze()
        opened, ready = [], []
        for _ in range(reps):
            t0 = time.perf_counter()
            copies = await sb.fork(frozen, 8)
            t1 = time.perf_counter()
            runs = await asyncio.gather(*(c.run(["cat", "CHANGED"]) for c in copies))
            t2 = time.perf_counter()
            assert all(r.stdout == "x\n" for r in runs), runs[0]
            opened.append(t1 - t0)
            ready.append(t2 - t0)
            await asyncio.gather(*(c.close() for c in copies))
    tree = scratch / "tree"
    tree.mkdir()
    materialise(store, frozen, tree)
    size = size_on_disk(tree)
    copied = []
    for _ in range(max(3, reps // 3)):
        t0 = time.perf_counter()
        for i in range(8):
            subprocess.run(["cp", "-a", str(tree), str(scratch / f"copy{i}")], check=True)
        copied.append(time.perf_counter() - t0)
        for i in range(8):
            shutil.rmtree(scratch / f"copy{i}")
    base = statistics.median(copied)
    tag = f"{size[0] / 1e6:.0f} MB, {size[1]} files"
    p50 = ms(statistics.median(opened))
    ROWS.append((f"8 copies of a prepared state ({tag}), opened, p50", ms(base), p50, "≤ 250 ms"))
    both = f"{ms(statistics.median(ready))} ({ms(pct(ready, 0.9))})"
    ROWS.append(
        ("8 copies opened + a first command in each, p50 (p90)", ms(base), both, "≤ 250 ms")
    )


async def episode(store: ImageStore, image, reps: int) -> None:  # type: ignore[no-untyped-def]
    async with Sandbox(workers=2, images=store) as sb:
        cycle = []
        for _ in range(reps):
            t0 = time.perf_counter()
            ws = await sb.workspace(image)
            await ws.close()
            cycle.append(time.perf_counter() - t0)
        plain, fresh = [], []
        for _ in range(reps):
            t0 = time.perf_counter()
            await sb.run(["true"])
            plain.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            await sb.run(["true"], workspace=image)
            fresh.append(time.perf_counter() - t0)
    both = f"{ms(statistics.median(cycle))} / {ms(pct(cycle, 0.99))}"
    ROWS.append(("kept workspace open + close, p50 / p99", "—", both, "≤ 30 / 100 ms"))
    tmpfs, ws = ms(statistics.median(plain)), ms(statistics.median(fresh))
    ROWS.append(("`true` in a fresh workspace (tmpfs work dir as baseline), p50", tmpfs, ws, "—"))


async def pytest_suite(store: ImageStore, image, reps: int, scratch: Path) -> None:  # type: ignore[no-untyped-def]
    tree = scratch / "host"
    tree.mkdir()
    materialise(store, image, tree)
    py = f"python{'.'.join(image.python.split('.')[:2])}"
    site = tree / ".venv" / "lib" / py / "site-packages"
    env = {**os.environ, "PYTHONPATH": f"{tree}:{site}", "PYTHONDONTWRITEBYTECODE": "1"}
    env.pop("VIRTUAL_ENV", None)
    host, inside = [], []
    async with Sandbox(workers=1, images=store) as sb:
        for _ in range(reps):
            t0 = time.perf_counter()
            argv = [f"/usr/bin/{py}", *PYTEST[1:]]
            h = subprocess.run(argv, cwd=tree, env=env, capture_output=True, text=True)
            host.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            r = await sb.run(PYTEST, workspace=image, limits=LIM)
            inside.append(time.perf_counter() - t0)
    last = lambda s: (s.strip().splitlines() or [""])[-1]  # noqa: E731
    print(f"  host:      {last(h.stdout)}\n  workspace: {last(r.stdout)}")
    b, c = statistics.median(host), statistics.median(inside)
    inside = f"{c:.2f} s ({(c / b - 1) * 100:+.0f}%)"
    ROWS.append(
        (f"{image.name} test suite (pytest), median of {reps}", f"{b:.2f} s", inside, "±10%")
    )


def disk(store: ImageStore) -> None:
    images = store.images()
    layers = {d for i in images for d in i.layers}
    shared = sum(size_on_disk(store.layer_paths_of(d))[0] for d in layers)
    alone = sum(store.size(i) for i in images)
    env_copy = sum(size_on_disk(store.layer_paths(i)[0])[0] for i in images)
    base = f"{alone / 1e9:.2f} GB alone; +{env_copy / 1e9:.2f} GB if each task copied its venv"
    what = f"{len(images)} images with environments, on disk"
    ROWS.append((what, base, f"{shared / 1e9:.2f} GB", "≤ 2 GB (20 images)"))


async def rss(store: ImageStore, image) -> None:  # type: ignore[no-untyped-def]
    async with Sandbox(workers=2, images=store) as sb:
        eps = await sb.fork(image, 8)
        for ws in eps:  # each episode has done something: a file, a run
            await ws.run(["sh", "-c", "echo work > notes.txt; python -c 'import pytest'"])
        await asyncio.sleep(0.5)
        pids = []
        for w in sb._workers:
            assert w.proc is not None
            pids += _tree(w.proc.pid)
        pss = sum(_pss_kb(p) for p in pids) / 1024  # the kept files are a few KB each
        per = pss / len(eps)
        for ws in eps:
            await ws.close()
    ROWS.append(
        ("8 idle episodes: PSS of every worker process / 8", "—", f"{per:.1f} MB", "≤ 50 MB")
    )


def _tree(pid: int) -> list[int]:
    out, level = [pid], [pid]
    while level:
        nxt = []
        for p in level:
            try:
                kids = Path(f"/proc/{p}/task/{p}/children").read_text().split()
            except OSError:
                kids = []
            nxt += [int(k) for k in kids]
        out += nxt
        level = nxt
    return out


def _pss_kb(pid: int) -> int:
    try:
        for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
            if line.startswith("Pss:"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


async def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--spec", default="examples/images/toolz.toml")
    ap.add_argument("--cache", default=None, help="image cache (default: the user's)")
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--pytest-args", default="", help="extra pytest arguments (one string)")
    ap.add_argument(
        "--only", action="append", choices=["fork8", "episode", "pytest", "disk", "rss"]
    )
    args = ap.parse_args()
    PYTEST.extend(args.pytest_args.split())
    store = ImageStore(args.cache)
    t0 = time.perf_counter()
    image = build_image(args.spec, store)
    print(f"image {image.name} {image.digest[:19]} ready in {time.perf_counter() - t0:.1f} s")
    want = set(args.only or ["fork8", "episode", "pytest", "disk", "rss"])
    with tempfile.TemporaryDirectory() as d:
        scratch = Path(d)
        if "fork8" in want:
            await fork8(store, image, args.reps, scratch)
        if "episode" in want:
            await episode(store, image, args.reps * 10)
        if "pytest" in want:
            await pytest_suite(store, image, max(3, args.reps // 4), scratch)
    if "disk" in want:
        disk(store)
    if "rss" in want:
        await rss(store, image)
    print(f"\nmachine: {os.cpu_count()} CPUs, load {os.getloadavg()[0]:.1f}\n")
    print("| metric | baseline | codegym | target |\n|---|---|---|---|")
    for row in ROWS:
        print("| " + " | ".join(row) + " |")


if __name__ == "__main__":
    asyncio.run(main())
