"""``codegym serve-model``: an OpenAI-compatible server for a local Hugging Face checkpoint.

See ``codegym.serving`` for the routes, the response fields and weight updates.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Annotated, NoReturn

import typer


def _fail(message: str, code: int = 2) -> NoReturn:
    typer.echo(f"error: {message}", err=True)
    raise typer.Exit(code)


def serve_model(
    model: Annotated[
        Path | None,
        typer.Option(
            help="Hugging Face model folder (config.json, weights, tokenizer). "
            "Default: the tiny codegym model (built once, cached).",
            show_default=False,
        ),
    ] = None,
    host: Annotated[
        str, typer.Option(help="Address to bind; 0.0.0.0 exposes it to the network.")
    ] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="TCP port.")] = 8000,
    served_model_name: Annotated[
        str | None,
        typer.Option(
            help="Model name clients send (default: the folder's name).", show_default=False
        ),
    ] = None,
    device: Annotated[str, typer.Option(help="torch device: cpu, cuda, cuda:1, ...")] = "cpu",
    batch_size: Annotated[int, typer.Option(help="Most sample rows per forward pass.")] = 32,
    seed: Annotated[int, typer.Option(help="Seeds unseeded requests (reproducible runs).")] = 0,
    logprobs_mode: Annotated[
        str,
        typer.Option(help="raw: untempered model logprobs; tempered: log_softmax(logits / T)."),
    ] = "raw",
    api_key: Annotated[
        str | None,
        typer.Option(
            envvar="CODEGYM_MODEL_API_KEY",
            help="Bearer token for every /v1 route (or set CODEGYM_MODEL_API_KEY).",
            show_default=False,
        ),
    ] = None,
    weights_token: Annotated[
        str | None,
        typer.Option(
            envvar="CODEGYM_WEIGHTS_TOKEN",
            help="Bearer token for /v1/weights and /v1/reload (default: --api-key).",
            show_default=False,
        ),
    ] = None,
    threads: Annotated[
        int,
        typer.Option(help="torch CPU threads; 1 suits small models on few shared cores."),
    ] = 1,
    weight_transfer: Annotated[
        bool,
        typer.Option(
            help="Serve vLLM's weight-transfer routes (/init_weight_transfer_engine, "
            "/update_weights, ...) over a gloo group: the trainer connects, the tensors "
            "move without a file. Like vLLM's dev mode: off unless asked.",
        ),
    ] = False,
    log_level: Annotated[str, typer.Option(help="debug, info, warning, error.")] = "info",
) -> None:
    """Serve a local model over the OpenAI API, with logprobs, token ids and weight updates."""
    from codegym.policies.errors import PolicyError
    from codegym.serving.server import serve_model as serve

    if not 0 <= port <= 65535:
        _fail(f"--port {port}: use 0..65535")
    if batch_size < 1:
        _fail(f"--batch-size {batch_size}: use 1 or more")
    if threads < 1:
        _fail(f"--threads {threads}: use 1 or more")
    if logprobs_mode not in ("raw", "tempered"):
        _fail(f"--logprobs-mode {logprobs_mode!r}: use raw or tempered")
    if host not in ("127.0.0.1", "localhost", "::1") and not (api_key or weights_token):
        typer.echo(
            f"warning: serving on {host} without --weights-token: anyone who reaches the port "
            "can load weights from this machine's disk"
            + (" or send it new ones" if weight_transfer else ""),
            err=True,
        )
    if model is None:
        from codegym.models import ensure_tiny_model

        typer.echo(
            "no --model: using the tiny codegym model (building it once if needed)", err=True
        )
        model = ensure_tiny_model()
    if not (model / "config.json").is_file():
        _fail(f"--model {model}: not a Hugging Face model folder (no config.json)")
    logging.basicConfig(level=log_level.upper(), format="%(asctime)s %(name)s %(message)s")
    try:
        serve(
            model,
            host=host,
            port=port,
            model_name=served_model_name,
            device=device,
            batch_size=batch_size,
            seed=seed,
            logprobs_mode="tempered" if logprobs_mode == "tempered" else "raw",
            api_key=api_key,
            weights_token=weights_token,
            log_level=log_level.lower(),
            torch_threads=threads,
            weight_transfer=weight_transfer,
        )
    except PolicyError as e:
        _fail(str(e))
