"""Pinned images and the cache that holds them (see ``build``, ``store`` and ``layers``).

    from codegym.sandbox.images import ImageStore, build_image
    image = build_image("examples/images/toolz.toml")
    async with Sandbox(images=ImageStore()) as sb:
        r = await sb.run(["python", "-m", "pytest", "-q"], workspace=image)

The names load on first use: a pool that runs no image pays for none of the builder.
"""

from typing import TYPE_CHECKING

from codegym._lazy import lazy_exports

if TYPE_CHECKING:
    from codegym.sandbox.images.build import build_image
    from codegym.sandbox.images.errors import (
        ImageBuildError,
        ImageError,
        ImageNotFound,
        ImageSpecError,
    )
    from codegym.sandbox.images.spec import ImageSpec
    from codegym.sandbox.images.store import Image, ImageStore

_WHERE = {
    "build_image": "codegym.sandbox.images.build",
    "ImageBuildError": "codegym.sandbox.images.errors",
    "ImageError": "codegym.sandbox.images.errors",
    "ImageNotFound": "codegym.sandbox.images.errors",
    "ImageSpecError": "codegym.sandbox.images.errors",
    "ImageSpec": "codegym.sandbox.images.spec",
    "Image": "codegym.sandbox.images.store",
    "ImageStore": "codegym.sandbox.images.store",
}
__all__ = [
    "Image",
    "ImageBuildError",
    "ImageError",
    "ImageNotFound",
    "ImageSpec",
    "ImageSpecError",
    "ImageStore",
    "build_image",
]
__getattr__ = lazy_exports(__name__, _WHERE)
