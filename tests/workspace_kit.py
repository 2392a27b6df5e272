"""A small real image for tests, and a pool that runs everything in workspaces of it.

``build_tiny_image`` builds an image from a folder written here (a package ``calc`` with a
test file; an environment with no locked packages), so no test needs the network.
``WorkspaceSandbox`` sends every run to a fresh copy-on-write workspace of one image:
with it, the hostile and adversarial suites run unchanged against workspace runs.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from codegym.sandbox import ExecResult, Sandbox
from codegym.sandbox.images import Image, ImageStore, build_image

CALC = "def add(a, b):\n    return a + b\n\n\ndef sub(a, b):\n    return a - b\n"
TEST_CALC = "from calc import add\n\n\ndef test_add():\n    assert add(1, 2) == 3\n"


def build_tiny_image(root: Path, name: str = "tiny") -> tuple[ImageStore, Image]:
    """Build the test image under ``root``, which the sandbox uid must be able to walk to
    (pytest's own temp folders are closed to it when the tests run as root)."""
    src = root / "src"
    (src / "calc").mkdir(parents=True, exist_ok=True)
    (src / "calc" / "__init__.py").write_text(CALC)
    (src / "test_calc.py").write_text(TEST_CALC)
    (src / "data").mkdir(exist_ok=True)
    (src / "data" / "table.txt").write_text("a 1\nb 2\n")
    spec = root / f"{name}.toml"
    spec.write_text(f'name = "{name}"\npython = "3.11"\n[source]\npath = "src"\n')
    store = ImageStore(root / "cache")
    return store, build_image(spec, store)


class WorkspaceSandbox(Sandbox):
    """Every run without a ``workspace`` goes to a fresh workspace of ``image``."""

    def __init__(self, image: Image, images: ImageStore, **kw: Any) -> None:
        super().__init__(images=images, **kw)
        self.image = image

    async def run(self, *a: Any, **kw: Any) -> ExecResult:
        kw.setdefault("workspace", self.image)
        return await super().run(*a, **kw)

    async def run_python(self, *a: Any, **kw: Any) -> ExecResult:
        kw.setdefault("workspace", self.image)
        return await super().run_python(*a, **kw)

    async def run_tests(self, *a: Any, **kw: Any) -> ExecResult:
        kw.setdefault("workspace", self.image)
        return await super().run_tests(*a, **kw)
