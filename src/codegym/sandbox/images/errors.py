"""Errors about images: each names the spec, package or reference and the fix."""

from __future__ import annotations

from codegym.sandbox.errors import SandboxError, SandboxInputError


class ImageError(SandboxError):
    """Base of the image errors."""


class ImageSpecError(ImageError, SandboxInputError):
    """A spec or lock file that cannot be built as written."""


class ImageBuildError(ImageError):
    """A build step failed (a package that cannot be resolved, a hash that does not
    match, a full disk); nothing of the build is left visible."""


class ImageNotFound(ImageError, SandboxInputError):
    """No image in the cache answers to the reference."""


class ImageOwnerError(ImageError, SandboxInputError):
    """An image's layers belong to a uid this process's workspace workers do not run as
    (another ``CODEGYM_SANDBOX_UID``, or another user), and cannot be given to theirs."""
