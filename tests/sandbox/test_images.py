"""Image specs, builds and the cache: clear errors, reproducible digests, one build at a time.

Builds here use folder sources and no locked packages (the environment layer is a bare
virtual environment), so they need no network; the tests that talk to the package index
say so and skip only when it cannot be reached.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from codegym.sandbox.images import (
    ImageBuildError,
    ImageNotFound,
    ImageSpec,
    ImageSpecError,
    ImageStore,
    build_image,
)
from codegym.sandbox.images.layers import digest, remove_tree

CLI = [str(Path(sys.executable).parent / "codegym")]


@pytest.fixture
def root() -> Iterator[Path]:
    d = Path(tempfile.mkdtemp(prefix="codegym-test-images-"))
    os.chmod(d, 0o755)
    try:
        yield d
    finally:
        remove_tree(d)


def _spec(root: Path, body: str, name: str = "s.toml") -> Path:
    p = root / name
    p.write_text(body)
    return p


def _project(root: Path) -> None:
    (root / "proj" / "pkg").mkdir(parents=True, exist_ok=True)
    (root / "proj" / "pkg" / "__init__.py").write_text("VALUE = 42\n")
    (root / "proj" / "run.sh").write_text("#!/bin/sh\necho run\n")
    os.chmod(root / "proj" / "run.sh", 0o700)


@pytest.mark.parametrize(
    ("body", "match"),
    [
        ('name = "x"\npython = "3.11"\n[source]\n', "exactly one of"),
        ('name = "x"\npython = "3.11"\n[source]\npath = "a"\ngit = "b"\n', "exactly one of"),
        (
            'name = "x"\npython = "3.11"\n[source]\npypi = "toolz"\nsha256 = "' + "0" * 64 + '"\n',
            "pin one",
        ),
        ('name = "x"\npython = "3.11"\n[source]\npypi = "toolz==1.0.0"\n', "sha256"),
        ('name = "X Y"\npython = "3.11"\n', "name"),
        ('name = "x"\npython = "3.11"\nextra = 1\n', "extra"),
        ('name = "x"\npython = "3.11"\n[environment]\nlock = "missing.lock"\n', "lock file"),
        ('name = "x"\npython = 3.11\n', "python"),
        ("name = \n", "not a readable TOML"),
    ],
)
def test_a_bad_spec_names_what_is_wrong(root: Path, body: str, match: str) -> None:
    with pytest.raises(ImageSpecError, match=match):
        ImageSpec.load(_spec(root, body))


def test_a_lock_must_pin_and_hash_every_package(root: Path) -> None:
    store = ImageStore(root / "cache")
    for lock, match in (("pytest\n", "not pinned"), ("pytest==8.3.4\n", "no --hash")):
        (root / "l.txt").write_text(lock)
        spec = _spec(root, 'name = "x"\npython = "3.11"\n[environment]\nlock = "l.txt"\n')
        with pytest.raises(ImageSpecError, match=match):
            build_image(spec, store)
    spec = _spec(root, 'name = "x"\npython = "3.99"\n')
    with pytest.raises(ImageSpecError, match=r"no /usr/bin/python3\.99"):
        build_image(spec, store)
    with pytest.raises(ImageSpecError, match="no image spec"):
        build_image(root / "nothing.toml", store)


def test_a_rebuild_gives_the_same_digest_and_normalised_layers(root: Path) -> None:
    _project(root)
    spec = _spec(root, 'name = "proj"\npython = "3.11"\n[source]\npath = "proj"\n')
    store = ImageStore(root / "cache")
    first = build_image(spec, store)
    assert build_image(spec, store) == first  # found built
    layers = {d: digest(p) for d, p in zip(first.layers, store.layer_paths(first), strict=True)}
    assert all(k == v for k, v in layers.items())  # each layer is named by its content
    store.remove(first.digest)
    removed, _ = store.gc()
    assert removed == len(first.layers) and not any(store.layers_dir.iterdir())
    again = build_image(spec, store)
    assert again.digest == first.digest and again.layers == first.layers
    src = store.layer_paths(again)[1]
    assert (src / "run.sh").stat().st_mode & 0o777 == 0o755  # modes normalised
    assert (src / "pkg" / "__init__.py").stat().st_mode & 0o777 == 0o644
    assert (src / "pkg" / "__pycache__").is_dir()  # bytecode compiled (checked-hash)
    assert store.get("proj") == again and store.get(again.digest[:14]) == again
    with pytest.raises(ImageNotFound, match="codegym image build"):
        store.get("nope")


def test_two_concurrent_builds_build_once(root: Path) -> None:
    _project(root)
    spec = _spec(root, 'name = "proj"\npython = "3.11"\n[source]\npath = "proj"\n')
    cache = root / "cache"
    procs = [
        subprocess.Popen(
            [*CLI, "image", "build", str(spec), "--cache", str(cache)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(2)
    ]
    outs = [p.communicate(timeout=300) for p in procs]
    assert all(p.returncode == 0 for p in procs), outs
    refs = {o.strip().splitlines()[-1] for o, _ in outs}
    assert len(refs) == 1 and next(iter(refs)).startswith("sha256:")
    assert sum("environment:" in e for _, e in outs) == 1, outs  # the other waited
    assert not any((cache / "tmp").iterdir())


def test_gc_removes_what_a_killed_build_left(root: Path) -> None:
    store = ImageStore(root / "cache")
    p = subprocess.Popen(["true"])  # a pid that is gone
    p.wait()
    stale = store.root / "tmp" / f"{p.pid}-env-deadbeef"
    stale.mkdir()
    (stale / "f").write_text("x")
    live = store.scratch("env")
    store.gc()
    assert not stale.exists() and live.exists()


def test_cli_lists_removes_and_execs(root: Path) -> None:
    _project(root)
    spec = _spec(root, 'name = "proj"\npython = "3.11"\n[source]\npath = "proj"\n')
    cache = ["--cache", str(root / "cache")]
    out = subprocess.run(
        [*CLI, "image", "build", str(spec), *cache], capture_output=True, text=True
    )
    ref = out.stdout.strip().splitlines()[-1]
    ls = subprocess.run([*CLI, "image", "ls", "--json", *cache], capture_output=True, text=True)
    assert json.loads(ls.stdout)["digest"] == ref
    ex = subprocess.run(
        [*CLI, "sandbox", "exec", "--image", "proj", "--copies", "3", "--json", *cache,
         "--", "python", "-c", "import pkg; print(pkg.VALUE)"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert ex.returncode == 0, ex.stderr
    got = json.loads(ex.stdout)
    assert [c["stdout"] for c in got["copies"]] == ["42\n"] * 3 and got["image"] == ref
    bad = subprocess.run([*CLI, "sandbox", "exec", "--image", "nope", *cache, "--", "true"],
                         capture_output=True, text=True)  # fmt: skip
    assert bad.returncode == 2 and "no image 'nope'" in bad.stderr
    rm = subprocess.run([*CLI, "image", "rm", "proj", *cache], capture_output=True, text=True)
    assert rm.returncode == 0 and ref in rm.stdout
    gc = subprocess.run([*CLI, "image", "gc", *cache], capture_output=True, text=True)
    assert "removed 3 layers" in gc.stdout


def _index_reachable() -> bool:
    try:
        return httpx.get("https://pypi.org/simple/iniconfig/", timeout=10).status_code == 200
    except httpx.HTTPError:
        return False


@pytest.mark.skipif(not _index_reachable(), reason="the package index cannot be reached")
@pytest.mark.parametrize(
    ("lock", "match"),
    [
        (
            "iniconfig==2.3.1 --hash=sha256:" + "0" * 64 + "\n",
            "iniconfig==2.3.1: its hash does not",
        ),
        (
            "codegym-no-such-pkg==1.0 --hash=sha256:" + "0" * 64 + "\n",
            "codegym-no-such-pkg==1.0 cannot be resolved",
        ),
    ],
)
def test_a_package_that_cannot_be_had_is_named_and_nothing_is_left(
    root: Path, lock: str, match: str
) -> None:
    (root / "l.txt").write_text(lock)
    spec = _spec(root, 'name = "x"\npython = "3.11"\n[environment]\nlock = "l.txt"\n')
    store = ImageStore(root / "cache")
    with pytest.raises(ImageBuildError, match=match):
        build_image(spec, store)
    assert not any(store.layers_dir.iterdir()) and not any((store.root / "tmp").iterdir())
    assert store.images() == []


@pytest.mark.skipif(os.geteuid() != 0, reason="mounting a small disk needs root")
def test_a_disk_that_fills_during_a_build_is_a_clear_error_and_the_cache_stays_whole(
    root: Path,
) -> None:
    _project(root)
    small = root / "small"
    small.mkdir()
    os.chmod(small, 0o755)
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=6m", "tmpfs", str(small)], check=True)
    try:
        store = ImageStore(small / "cache")
        spec = _spec(root, 'name = "proj"\npython = "3.11"\n[source]\npath = "proj"\n')
        with pytest.raises(ImageBuildError, match=r"(?i)space|disk"):
            build_image(spec, store)  # the environment (pip and setuptools) needs ~25 MB
        assert store.images() == [] and not any((store.root / "tmp").iterdir())
        # what was published before the disk filled is whole, and a bigger disk goes on
        for layer in store.layers_dir.iterdir():
            assert digest(layer) == "sha256:" + layer.name
    finally:
        subprocess.run(["umount", "-l", str(small)], check=False)


def _apt_can_download() -> bool:
    if not shutil.which("apt-get"):
        return False
    with tempfile.TemporaryDirectory() as d:
        r = subprocess.run(["apt-get", "download", "-q", "jq"], cwd=d, capture_output=True)
        return r.returncode == 0


@pytest.mark.skipif(not _apt_can_download(), reason="apt-get cannot download packages here")
async def test_debian_packages_are_a_layer_of_their_own(root: Path) -> None:
    from codegym.sandbox import Sandbox

    spec = _spec(
        root,
        'name = "deb"\npython = "3.11"\n[environment]\ndebian = ["jq", "libjq1", "libonig5"]\n',
    )
    store = ImageStore(root / "cache")
    image = build_image(spec, store)
    assert len(image.layers) == 2  # debian, env
    async with Sandbox(workers=1, images=store) as sb:
        r = await sb.run(["sh", "-c", "echo '{\"a\": [1, 2]}' | jq -c .a"], workspace=image)
    assert (r.stdout, r.verdict.value) == ("[1,2]\n", "ok"), r.stderr


def test_a_git_source_is_exported_at_its_commit(root: Path) -> None:
    repo = root / "repo"
    repo.mkdir()
    git = ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    (repo / "mod.py").write_text("V = 1\n")
    subprocess.run([*git, "add", "."], check=True)
    subprocess.run([*git, "commit", "-qm", "one"], check=True)
    first = subprocess.run([*git, "rev-parse", "HEAD"], capture_output=True, text=True).stdout
    (repo / "mod.py").write_text("V = 2\n")
    subprocess.run([*git, "commit", "-qam", "two"], check=True)
    store = ImageStore(root / "cache")
    body = f'name = "g"\npython = "3.11"\n[source]\ngit = "repo"\ncommit = "{first.strip()}"\n'
    image = build_image(_spec(root, body), store)
    src = store.layer_paths(image)[1]
    assert (src / "mod.py").read_text() == "V = 1\n" and not (src / ".git").exists()
    bad = body.replace(first.strip(), "0" * 40)
    with pytest.raises(ImageBuildError, match="git source"):
        build_image(_spec(root, bad, "bad.toml"), store)


def test_an_adoption_s_copy_leaves_room_and_reads_what_it_holds(root: Path) -> None:
    """Each entry is charged at least a block and an inode (a review's 11,000 empty folders
    took a file system to 0 bytes free when only file data counted), and files whose sizes
    far pass what the copy wrote (sparse, many-times-linked: hours of hashing) are refused."""
    import errno

    from codegym.sandbox.images.adopt import _Budget

    budget = _Budget(root)
    budget.room, budget.inodes = 3 * budget.block, 10
    for _ in range(3):
        budget.entry(1)  # an empty folder or a 1-byte file: a whole block
    with pytest.raises(OSError) as full:
        budget.entry()
    assert full.value.errno == errno.ENOSPC
    budget.room, budget.inodes = 1 << 40, 0
    with pytest.raises(OSError, match="inodes"):
        budget.entry()
    budget.file(1 << 20, 1 << 20)
    budget.file(16 << 20, 0)  # a hard link to 16 MiB: within the slack
    with pytest.raises(OSError) as sparse:
        budget.file(4 << 20, 0)
    assert sparse.value.errno == errno.EFBIG
