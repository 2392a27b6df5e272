"""Pinned images and the cache that holds them (see ``build``, ``store`` and ``layers``).

from codegym.sandbox.images import ImageStore, build_image
image = build_image("examples/images/toolz.toml")      # prints nothing, returns Image
async with Sandbox(images=ImageStore()) as sb:
    r = await sb.run(["python", "-m", "pytest", "-q"], workspace=image.ref)
"""

from codegym.sandbox.images.build import build_image
from codegym.sandbox.images.errors import (
    ImageBuildError,
    ImageError,
    ImageNotFound,
    ImageSpecError,
)
from codegym.sandbox.images.spec import ImageSpec
from codegym.sandbox.images.store import Image, ImageStore

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
