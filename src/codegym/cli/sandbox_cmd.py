"""``codegym sandbox``: check the host, run a program."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from codegym.cli._common import console, fail
from codegym.sandbox import ExecResult, HostUnsupported, Limits, Sandbox, SandboxInputError
from codegym.sandbox.tiers import TIERS, make_tier, tier_names

if TYPE_CHECKING:
    from codegym.sandbox.images import Image, ImageStore

app = typer.Typer(
    help="Run code in the sandbox; check what this host supports.", no_args_is_help=True
)


@app.command("check")
def check() -> None:
    """Say which sandbox tiers work on this host, and what is missing for the others."""
    ok_any = False
    for name in tier_names():
        try:
            problems = make_tier(name).problems()
        except SandboxInputError as e:  # $CODEGYM_SANDBOX_PYTHON names nothing
            problems = [str(e)]
        if problems:
            console.print(f"[yellow]{name:8}[/] unavailable")
            for p in problems:
                console.print(f"           - {p}", highlight=False)
        else:
            ok_any = True
            console.print(f"[green]{name:8}[/] ok")
    if not ok_any:
        raise typer.Exit(1)


@app.command("run")
def run(
    file: Annotated[Path, typer.Argument(help="Python file to run ('-' for stdin).")],
    tier: Annotated[str, typer.Option(help=f"Sandbox tier: {TIERS.choices()}.")] = "jail",
    cpu_s: Annotated[float, typer.Option(help="CPU seconds.")] = 2.0,
    wall_s: Annotated[float | None, typer.Option(help="Wall-clock backstop.")] = None,
    memory_mb: Annotated[int, typer.Option(help="Memory limit in MB.")] = 512,
    stdin_file: Annotated[Path | None, typer.Option("--stdin", help="File fed to stdin.")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the result as JSON.")] = False,
) -> None:
    """Run one Python program in the sandbox and print its result."""
    try:
        code = typer.get_text_stream("stdin").read() if str(file) == "-" else file.read_bytes()
        stdin = stdin_file.read_bytes() if stdin_file else b""
    except OSError as e:
        fail(f"cannot read {e.filename}: {e.strerror}")
    try:
        limits = Limits(cpu_s=cpu_s, wall_s=wall_s, memory_mb=memory_mb)
        result = asyncio.run(_run_one(tier, code, stdin, limits))
    except (HostUnsupported, SandboxInputError) as e:
        fail(str(e))
    if as_json:
        payload = {
            k: (str(v) if k == "verdict" else v) for k, v in result.__dict__.items() if k != "tests"
        }
        typer.echo(json.dumps(payload))
    else:
        typer.echo(result.stdout, nl=False)
        typer.echo(result.stderr, nl=False, err=True)
        console.print(
            f"[bold]{result.verdict}[/] exit={result.exit_code} "
            f"cpu={result.cpu_s:.3f}s wall={result.wall_s:.3f}s {result.reason}",
            highlight=False,
        )
    raise typer.Exit(0 if result.ok else 1)


async def _run_one(tier: str, code: str | bytes, stdin: bytes, limits: Limits):  # type: ignore[no-untyped-def]
    async with Sandbox(tier=tier, workers=1) as sb:
        return await sb.run_python(code, stdin, limits=limits)


@app.command("exec", context_settings={"allow_extra_args": True, "ignore_unknown_options": True})
def exec_(
    ctx: typer.Context,
    image: Annotated[str, typer.Option(help="Image reference (digest, prefix or name).")],
    copies: Annotated[int, typer.Option(help="Fresh workspaces to run the command in.")] = 1,
    workers: Annotated[
        int | None, typer.Option(help="Jails to run them [default: copies, at most the CPUs].")
    ] = None,
    cache: Annotated[Path | None, typer.Option(help="Image cache folder.")] = None,
    cpu_s: Annotated[float, typer.Option(help="CPU seconds per copy.")] = 60.0,
    wall_s: Annotated[float | None, typer.Option(help="Wall-clock limit per copy.")] = None,
    memory_mb: Annotated[int, typer.Option(help="Memory limit per copy, MB.")] = 2048,
    disk_mb: Annotated[int, typer.Option(help="Writable space per copy, MB.")] = 256,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
) -> None:
    """Run a command (after `--`) in fresh copy-on-write workspaces of an image, at once.

    Each copy starts from the image's state, in its source root, with no network; what it
    writes is gone afterwards. Prints each copy's verdict and time, and the total.
    """
    import os

    from codegym.sandbox.images import ImageError, ImageStore

    argv = list(ctx.args)
    if not argv:
        fail("give the command after `--`, e.g. codegym sandbox exec --image REF -- pytest -q")
    if not 1 <= copies <= 1024:
        fail(f"--copies {copies}: use 1..1024")
    n_workers = workers or min(copies, os.cpu_count() or 1)
    try:
        store = ImageStore(cache)
        img = store.get(image)
        limits = Limits(cpu_s=cpu_s, wall_s=wall_s, memory_mb=memory_mb, disk_mb=disk_mb)
        results, total = asyncio.run(_exec_copies(store, img, argv, copies, n_workers, limits))
    except (HostUnsupported, SandboxInputError, ImageError) as e:
        fail(str(e))
    if as_json:
        out = {
            "image": img.digest,
            "command": argv,
            "copies": [
                {
                    "verdict": r.verdict.value,
                    "exit_code": r.exit_code,
                    "wall_s": r.wall_s,
                    "cpu_s": r.cpu_s,
                    "seconds": t,
                    "reason": r.reason,
                    "stdout": r.stdout,
                    "stderr": r.stderr,
                }
                for r, t in results
            ],
            "total_s": total,
        }
        typer.echo(json.dumps(out))
    else:
        for i, (r, t) in enumerate(results):
            tail = r.stdout.strip().splitlines()[-1:] or r.stderr.strip().splitlines()[-1:]
            typer.echo(
                f"copy {i}: {r.verdict.value} exit={r.exit_code} {t * 1000:.0f} ms"
                f"{'  ' + r.reason if r.reason else ''}{'  | ' + tail[0][:120] if tail else ''}"
            )
        typer.echo(f"total: {copies} copies in {total * 1000:.0f} ms")
    raise typer.Exit(0 if all(r.ok for r, _ in results) else 1)


async def _exec_copies(
    store: ImageStore, img: Image, argv: list[str], copies: int, workers: int, limits: Limits
) -> tuple[list[tuple[ExecResult, float]], float]:
    import time

    async with Sandbox(workers=workers, images=store) as sb:

        async def one() -> tuple[ExecResult, float]:
            t = time.perf_counter()
            r = await sb.run(argv, limits=limits, workspace=img)
            return r, time.perf_counter() - t

        start = time.perf_counter()
        results = await asyncio.gather(*(one() for _ in range(copies)))
        return results, time.perf_counter() - start


def _register_serve() -> None:
    from codegym.service._cli import serve

    app.command("serve")(serve)


_register_serve()
