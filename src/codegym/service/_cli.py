"""The ``serve`` command (``codegym sandbox serve``, ``python -m codegym.service``).

It lives here, not in ``codegym.cli``, so ``python -m codegym.service`` starts without
importing every other command; ``codegym.cli.sandbox_cmd`` registers it.
"""

from __future__ import annotations

import logging
from typing import Annotated, NoReturn

import typer

from codegym.sandbox import HostUnsupported, SandboxInputError
from codegym.sandbox.tiers import TIERS


def fail(message: str, code: int = 2) -> NoReturn:
    typer.echo(f"error: {message}", err=True)
    raise typer.Exit(code)


def serve(
    host: Annotated[
        str, typer.Option(help="Address to bind; 0.0.0.0 exposes it to the network.")
    ] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="TCP port.")] = 8080,
    token: Annotated[
        str | None,
        typer.Option(
            envvar="CODEGYM_TOKEN",
            help="Bearer token clients must send (or set CODEGYM_TOKEN).",
            show_default=False,
        ),
    ] = None,
    no_auth: Annotated[
        bool, typer.Option("--no-auth", help="Run without a token (trusted networks only).")
    ] = False,
    tier: Annotated[str, typer.Option(help=f"Sandbox tier: {TIERS.choices()}.")] = "jail",
    workers: Annotated[
        int | None, typer.Option(help="Executions at once (default: CPU count).")
    ] = None,
    queue: Annotated[
        int | None, typer.Option(help="Executions that may wait (default 4 × workers).")
    ] = None,
    max_sessions: Annotated[int, typer.Option(help="Open sessions at most.")] = 32,
    image_cache: Annotated[
        str | None,
        typer.Option(help="Image cache for workspaces (`codegym image build --cache`)."),
    ] = None,
    max_workspaces: Annotated[int, typer.Option(help="Open kept workspaces at most.")] = 256,
    session_ttl: Annotated[
        float, typer.Option(help="Idle seconds before a session closes.")
    ] = 300.0,
    max_body_mb: Annotated[float, typer.Option(help="Largest request body in MB.")] = 32.0,
    max_file_mb: Annotated[float, typer.Option(help="Largest single file in MB.")] = 16.0,
    drain_s: Annotated[
        float, typer.Option(help="On SIGTERM, how long running work may take to finish.")
    ] = 60.0,
    header_timeout: Annotated[
        float, typer.Option(help="Seconds a client may take to send a request's headers.")
    ] = 10.0,
    max_connections: Annotated[
        int | None,
        typer.Option(help="Open connections at most (default: what the fd limit allows)."),
    ] = None,
    log_level: Annotated[str, typer.Option(help="debug, info, warning, error.")] = "info",
) -> None:
    """Serve the sandbox over HTTP: run, batch tests, sessions, workspaces of images,
    /metrics, /openapi.json."""
    from codegym.service.app import ServiceConfig
    from codegym.service.server import serve as run_server

    if no_auth and token:
        fail("pass either --token (or CODEGYM_TOKEN) or --no-auth, not both")
    if not no_auth and not token:
        fail(
            "the sandbox service needs a bearer token: pass --token or set CODEGYM_TOKEN, "
            "or pass --no-auth explicitly to run without one (trusted networks only)"
        )
    if port < 0 or port > 65535:
        fail(f"--port {port}: use 0..65535")
    logging.basicConfig(level=log_level.upper(), format="%(asctime)s %(name)s %(message)s")
    try:
        config = ServiceConfig(
            token=token,
            auth=not no_auth,
            tier=tier,
            workers=workers,
            queue=queue,
            max_sessions=max_sessions,
            image_cache=image_cache,
            max_workspaces=max_workspaces,
            session_ttl_s=session_ttl,
            max_body_bytes=int(max_body_mb * (1 << 20)),
            max_file_bytes=int(max_file_mb * (1 << 20)),
            header_timeout_s=header_timeout,
            max_connections=max_connections,
        )
        run_server(config, host, port, drain_s=drain_s, log_level=log_level.lower())
    except (HostUnsupported, SandboxInputError) as e:
        fail(str(e))
