"""Pinned images and the cache that holds them (see ``build``, ``store`` and ``layers``).

    from codegym.sandbox.images import ImageStore, build_image
    image = build_image("examples/images/toolz.toml")
    async with Sandbox(images=ImageStore()) as sb:
        r = await sb.run(["python", "-m", "pytest", "-q"], workspace=image)

The names load on first use: a pool that runs no image pays for none of the builder.
"""

from typing import TYPE_CHECKING

from codegym._lazy import lazy_package

if TYPE_CHECKING:  # what type checkers see; held to _LAZY by tests/test_exported_members.py
    from codegym.sandbox.images.build import build_image as build_image
    from codegym.sandbox.images.errors import ImageBuildError as ImageBuildError
    from codegym.sandbox.images.errors import ImageError as ImageError
    from codegym.sandbox.images.errors import ImageNotFound as ImageNotFound
    from codegym.sandbox.images.errors import ImageSpecError as ImageSpecError
    from codegym.sandbox.images.spec import ImageSpec as ImageSpec
    from codegym.sandbox.images.store import Image as Image
    from codegym.sandbox.images.store import ImageStore as ImageStore

_LAZY = {
    "Image": "codegym.sandbox.images.store",
    "ImageBuildError": "codegym.sandbox.images.errors",
    "ImageError": "codegym.sandbox.images.errors",
    "ImageNotFound": "codegym.sandbox.images.errors",
    "ImageSpec": "codegym.sandbox.images.spec",
    "ImageSpecError": "codegym.sandbox.images.errors",
    "ImageStore": "codegym.sandbox.images.store",
    "build_image": "codegym.sandbox.images.build",
}

__getattr__, __dir__, __all__ = lazy_package(__name__, _LAZY)
