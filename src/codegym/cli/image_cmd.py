"""``codegym image``: build, list and remove pinned images (see ``codegym.sandbox.images``)."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Annotated

import typer

from codegym.cli._common import console, fail

app = typer.Typer(
    help="Build pinned images for repository workspaces; list and remove them.",
    no_args_is_help=True,
)
CacheOption = Annotated[
    Path | None,
    typer.Option(
        help="Image cache folder [default: $CODEGYM_IMAGE_CACHE or ~/.cache/codegym/images]."
    ),
]


def _store(cache: Path | None):  # type: ignore[no-untyped-def]
    from codegym.sandbox.images import ImageStore

    try:
        return ImageStore(cache)
    except OSError as e:
        fail(f"cannot use the image cache {cache or '(default)'}: {e}")


@app.command("build")
def build(
    spec: Annotated[Path, typer.Argument(help="The image spec (TOML); see examples/images/.")],
    cache: CacheOption = None,
) -> None:
    """Build an image (or find it built) and print its reference, last."""
    from codegym.sandbox.images import ImageError, build_image

    store = _store(cache)
    start = time.perf_counter()
    try:
        image = build_image(
            spec, store, log=lambda m: console.print(m, highlight=False, soft_wrap=True)
        )
    except ImageError as e:
        fail(str(e))
    size = store.size(image) / 1e6
    console.print(
        f"built {image.name} ({len(image.layers)} layers, {size:.1f} MB) in "
        f"{time.perf_counter() - start:.1f}s",
        highlight=False,
    )
    typer.echo(image.digest)


@app.command("ls")
def ls(
    cache: CacheOption = None,
    as_json: Annotated[bool, typer.Option("--json", help="One JSON object per image.")] = False,
) -> None:
    """List the images in the cache, oldest first."""
    from codegym.sandbox.images import ImageNotFound

    store = _store(cache)
    for img in store.images():
        try:
            size = store.size(img)
        except ImageNotFound:  # a layer is gone (removed by hand): say so, list the rest
            size = -1
        if as_json:
            typer.echo(json.dumps({**img.manifest(), "bytes": size}))
            continue
        when = time.strftime("%Y-%m-%d %H:%M", time.localtime(img.created))
        frozen = f" (frozen from {img.parent[:19]})" if img.parent else ""
        typer.echo(
            f"{img.digest[:19]}  {img.name:24} py{img.python:8} {len(img.layers):2} layers "
            f"{size / 1e6:8.1f} MB  {when}{frozen}"
        )


@app.command("rm")
def rm(
    refs: Annotated[list[str], typer.Argument(help="Image digests (or unique prefixes) or names.")],
    cache: CacheOption = None,
) -> None:
    """Forget images; `codegym image gc` then frees the layers nothing else uses."""
    from codegym.sandbox.images import ImageNotFound

    store = _store(cache)
    for ref in refs:
        try:
            img = store.remove(ref)
        except ImageNotFound as e:
            fail(str(e))
        typer.echo(f"removed {img.digest} ({img.name})")


@app.command("gc")
def gc(cache: CacheOption = None) -> None:
    """Remove layers no image uses and what killed builds left behind."""
    n, freed = _store(cache).gc()
    typer.echo(f"removed {n} layers, {freed / 1e6:.1f} MB")
