"""Image specs: a small TOML file that pins everything an image is built from.

::

    name = "toolz"                 # a tag for `codegym image ls` (the digest is the reference)
    python = "3.11"                # a host interpreter of this version runs the environment

    [source]                       # exactly one of: pypi, sdist, path, git
    pypi = "toolz==1.0.0"          # an sdist from the package index, checked by sha256
    sha256 = "2c86e3d9…"
    import_path = "."              # put on the environment's sys.path ("" for nothing)

    [environment]
    lock = "toolz.lock"            # pip requirements, every one pinned with --hash
    debian = []                    # Debian packages, unpacked into the image

    [tests]                        # optional: how the source's own suite runs
    command = ["python", "-m", "pytest", "-q"]

Relative paths are relative to the spec file. Packages are installed at build time only;
nothing is fetched when the image runs.
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from codegym.sandbox.images.errors import ImageSpecError

_PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==([A-Za-z0-9.!+_-]+)$")
_SHA = re.compile(r"^[0-9a-f]{64}$")


class Source(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    pypi: str | None = None
    """``name==version``: that release's sdist from the package index."""
    sdist: str | None = None
    """A local ``.tar.gz`` sdist."""
    path: str | None = None
    """A local folder, copied as it is (``.git`` left out)."""
    git: str | None = None
    """A git repository (URL or folder), exported at ``commit``."""
    commit: str | None = None
    sha256: str | None = None
    """Required for ``pypi`` and ``sdist``: the archive's sha256."""
    import_path: str = "."

    @model_validator(mode="after")
    def _one_kind(self) -> Source:
        kinds = [k for k in ("pypi", "sdist", "path", "git") if getattr(self, k)]
        if len(kinds) != 1:
            raise ValueError(
                "[source] needs exactly one of pypi, sdist, path or git "
                f"(got {', '.join(kinds) or 'none'})"
            )
        if self.pypi and not _PIN.match(self.pypi):
            raise ValueError(f"[source] pypi={self.pypi!r}: pin one release, e.g. 'toolz==1.0.0'")
        if (self.pypi or self.sdist) and not (self.sha256 and _SHA.match(self.sha256)):
            raise ValueError("[source] a pypi or sdist source needs sha256 = '<64 hex digits>'")
        if self.git and not (self.commit and re.fullmatch(r"[0-9a-f]{7,40}", self.commit)):
            raise ValueError("[source] a git source needs commit = '<hex commit id>'")
        if self.import_path.startswith("/") or ".." in Path(self.import_path).parts:
            raise ValueError(f"[source] import_path={self.import_path!r}: a relative path")
        return self

    @property
    def kind(self) -> str:
        return next(k for k in ("pypi", "sdist", "path", "git") if getattr(self, k))


class Environment(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    lock: str | None = None
    debian: list[str] = Field(default_factory=list)


class Tests(BaseModel):
    """How the source's own test suite runs (repository tasks use it)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    command: list[str] = Field(
        default_factory=lambda: ["python", "-m", "pytest", "-q"], min_length=1
    )
    """The suite, run from the source root; pytest, so results come as JUnit XML."""
    files: list[str] = Field(
        default_factory=lambda: [
            "**/test_*.py",
            "**/*_test.py",
            "**/tests/**",
            "**/testing/**",
            "**/conftest.py",
            "pytest.ini",
            "tox.ini",
            "setup.cfg",
            "pyproject.toml",
        ]
    )
    """Globs of the test files and test configuration, relative to the source root: a
    task's grader restores them, so a patch that edits them gains nothing."""


class ImageSpec(BaseModel):
    """A parsed spec; ``base`` is the folder its relative paths start from."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(pattern=r"^[a-z0-9][a-z0-9._-]{0,63}$")
    python: str = Field(pattern=r"^3\.\d{1,2}$")
    source: Source | None = None
    environment: Environment = Field(default_factory=Environment)
    tests: Tests = Field(default_factory=Tests)
    kind: Literal["codegym-image/1"] = "codegym-image/1"
    base: Path = Path(".")

    def resolve(self, rel: str) -> Path:
        p = Path(rel).expanduser()
        return p if p.is_absolute() else (self.base / p).resolve()

    @classmethod
    def load(cls, path: str | Path) -> ImageSpec:
        """Read and check a spec file.

        Raises:
            ImageSpecError: the file is missing, not TOML, or not a valid spec.
        """
        p = Path(path)
        try:
            data = tomllib.loads(p.read_text())
        except FileNotFoundError:
            raise ImageSpecError(f"no image spec at {p}: pass a TOML file") from None
        except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as e:
            raise ImageSpecError(f"{p} is not a readable TOML file: {e}") from None
        try:
            spec = cls.model_validate({**data, "base": p.resolve().parent})
        except ValidationError as e:
            errs = "; ".join(
                f"{'.'.join(str(x) for x in err['loc']) or 'spec'}: {err['msg']}"
                for err in e.errors()
            )
            raise ImageSpecError(f"{p} is not a valid image spec: {errs}") from None
        for rel in filter(None, [spec.environment.lock]):
            if not spec.resolve(rel).is_file():
                raise ImageSpecError(f"{p}: lock file {rel!r} not found next to the spec")
        return spec


def read_lock(path: Path) -> list[str]:
    """The lock's requirement lines (continuations joined), each pinned and hashed.

    Raises:
        ImageSpecError: a requirement without ``==`` or without ``--hash``.
    """
    text = path.read_text().replace("\\\n", " ")
    reqs = []
    for n, raw in enumerate(text.splitlines(), 1):
        line = " ".join(raw.split("#", 1)[0].split())
        if not line:
            continue
        name = line.split()[0]
        if not _PIN.match(name.split(";")[0]):
            raise ImageSpecError(f"{path}:{n}: {name!r} is not pinned; write 'name==version'")
        if "--hash=sha256:" not in line:
            raise ImageSpecError(
                f"{path}:{n}: {name} has no --hash=sha256:...; every package needs one "
                "(pip hash FILE, or pip-compile --generate-hashes)"
            )
        reqs.append(line)
    return reqs
