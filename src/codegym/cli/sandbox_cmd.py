"""``codegym sandbox``: check the host, run a program."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Annotated

import typer

from codegym.cli._common import console, fail
from codegym.sandbox import HostUnsupported, Limits, Sandbox, SandboxInputError
from codegym.sandbox.tiers import TIER_NAMES, make_tier

app = typer.Typer(
    help="Run code in the sandbox; check what this host supports.", no_args_is_help=True
)


@app.command("check")
def check() -> None:
    """Say which sandbox tiers work on this host, and what is missing for the others."""
    ok_any = False
    for name in TIER_NAMES:
        problems = make_tier(name).problems()
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
    tier: Annotated[str, typer.Option(help="jail, gvisor or process.")] = "jail",
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
