"""Copy-on-write workspaces of images: fresh per run, kept, diffed, frozen and forked.

Every test uses the real jail, a real image built from a folder (``workspace_kit``) and
the kernel's overlayfs; the hostile and adversarial suites also run in workspaces (their
``sb`` fixtures). Here: what a workspace is, what it keeps, and what it never lets a
program do (write the image, see a neighbour, leave state for the next copy).
"""

from __future__ import annotations

import ast
import asyncio
import contextlib
import dataclasses
import shutil
import subprocess
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import pytest_asyncio

from codegym.sandbox import (
    AssertTest,
    HostUnsupported,
    IOTest,
    Limits,
    Sandbox,
    SandboxClosed,
    SandboxInfraError,
    SandboxInputError,
    Verdict,
    WorkspaceError,
)
from codegym.sandbox.images import Image, ImageNotFound, ImageStore
from codegym.sandbox.images.layers import digest
from jail import no_jail
from workspace_kit import CALC

LIM = Limits(cpu_s=5, wall_s=20, memory_mb=256, disk_mb=32)


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def sb(tiny_image: tuple[ImageStore, Image]) -> AsyncIterator[Sandbox]:
    async with _pool(tiny_image[0], workers=2) as box:
        yield box


@contextlib.asynccontextmanager
async def _pool(store: ImageStore, workers: int = 1) -> AsyncIterator[Sandbox]:
    """A started jail pool with ``store`` (the test skips where the jail cannot run)."""
    box = Sandbox(tier="jail", workers=workers, images=store)
    try:
        await box.start()
    except HostUnsupported as e:
        no_jail(e)
    try:
        yield box
    finally:
        await box.close()


@pytest.fixture
def image(tiny_image: tuple[ImageStore, Image]) -> Image:
    return tiny_image[1]


def _layer_digests(store: ImageStore, img: Image) -> list[str]:
    return [digest(p) for p in store.layer_paths(img)]


pytestmark = pytest.mark.asyncio(loop_scope="module")


async def test_a_run_sees_the_image_in_its_root_with_its_environment(sb: Sandbox, image: Image):
    r = await sb.run(
        "pwd; ls; echo $VIRTUAL_ENV; "
        "python -c 'import calc, sys; print(calc.add(2, 3), sys.prefix)'",
        workspace=image.ref,
        limits=LIM,
    )
    assert r.verdict is Verdict.OK, (r.stderr, r.reason)
    assert r.stdout.split("\n")[:3] == ["/work", "__pycache__", "calc"], r.stdout
    assert "test_calc.py" in r.stdout and "5 /work/.venv" in r.stdout
    r = await sb.run_python("import calc; print(calc.sub(5, 3))", workspace=image, limits=LIM)
    assert (r.verdict, r.stdout) == (Verdict.OK, "2\n"), r.stderr


async def test_fresh_runs_share_nothing_and_never_touch_the_image(sb: Sandbox, image: Image):
    store = sb.images
    assert store is not None
    before = _layer_digests(store, image)
    wreck = (
        "chmod -R 777 . ; echo evil > calc/__init__.py; rm -rf data test_calc.py .venv/bin; "
        "echo left > /tmp/left; echo left > left.txt; touch -d 2000-01-01 calc; ls -a"
    )
    r = await sb.run(wreck, workspace=image, limits=LIM)
    assert r.verdict is Verdict.OK, r.stderr
    r = await sb.run(
        "cat calc/__init__.py; ls; ls /tmp; ls .venv/bin | head -1", workspace=image, limits=LIM
    )
    assert r.verdict is Verdict.OK, r.stderr
    assert r.stdout.startswith(CALC) and "left" not in r.stdout and "data" in r.stdout
    assert _layer_digests(store, image) == before


async def test_a_kept_workspace_keeps_files_not_processes(sb: Sandbox, image: Image):
    async with await sb.workspace(image, disk_mb=16) as ws:
        r = await ws.run(
            "echo kept > notes.txt; (sleep 30; echo late > late.txt) & setsid sleep 30 &",
            limits=LIM,
        )
        assert r.verdict is Verdict.OK
        r = await ws.run("cat notes.txt; ls late.txt; ps -e -o comm= | grep -c sleep", limits=LIM)
        assert r.stdout.split("\n")[0] == "kept" and "No such file" in r.stderr
        assert r.stdout.split("\n")[1] == "0"
        await ws.write_file("sub/dir/new.py", "X = 1\n")
        assert await ws.read_file("sub/dir/new.py") == b"X = 1\n"
        r = await ws.run_python("from sub.dir.new import X; import calc; print(X, calc.add(1, 1))")
        assert r.stdout == "1 2\n", r.stderr
    with pytest.raises(SandboxClosed):
        await ws.run("true")


async def test_workspaces_cannot_see_each_other(sb: Sandbox, image: Image):
    a, b, c = await sb.fork(image, 3, disk_mb=8)
    try:
        await a.write_file("secret.txt", "from a")
        # /usr is the host's, read-only and alike in every workspace; walking its ~140k
        # files takes longer than the limit on a busy box, so the search skips it
        probe = (
            "ls /work; cat /proc/self/mountinfo; ls /.ws 2>&1;"
            " find / -path /usr -prune -o -name secret.txt -print; true"
        )
        mine = await a.run(probe, limits=LIM)
        assert "/work/secret.txt" in mine.stdout, mine.stdout  # the search finds it where it is
        for ws in (b, c):
            r = await ws.run(probe, limits=LIM)
            assert r.verdict is Verdict.OK
            assert "secret.txt" not in r.stdout and "Permission denied" in r.stdout, r.stdout
            # its own upper is named in its overlay's options; no neighbour's is
            assert f"/.ws/keep/{ws.id}/" in r.stdout and f"/{a.id}/" not in r.stdout
    finally:
        for ws in (a, b, c):
            await ws.close()


async def test_diff_is_a_patch_git_applies(sb: Sandbox, image: Image, tmp_path: Path):
    if not shutil.which("git"):
        pytest.skip("git is not installed")
    async with await sb.workspace(image) as ws:
        r = await ws.run(
            "sed -i 's/a + b/a + b + 0/' calc/__init__.py && rm test_calc.py && "
            "mkdir -p new/deep && printf 'x\\ny' > new/deep/no_eol.txt && "
            "mv data/table.txt data/renamed.txt && printf '\\0\\1\\2' > blob.bin && "
            "printf 'q' > \"$(printf 'odd\\nname +++ x')\" && chmod +x calc/__init__.py && "
            "echo env > .venv/ignored",
            limits=LIM,
        )
        assert r.verdict is Verdict.OK, r.stderr
        patch = await ws.diff()
        want = await ws.run("cd / && tar -C /work --exclude=.venv -cf - . | base64 -w0", limits=LIM)
    assert "a/.venv" not in patch and "rename from" not in patch, patch
    src = tmp_path / "src"
    shutil.copytree(Path(sb.images.root).parent / "src", src)  # type: ignore[union-attr]
    subprocess.run(["git", "init", "-q", str(src)], check=True)
    r2 = subprocess.run(
        ["git", "apply", "--whitespace=nowarn", "-"], cwd=src, input=patch.encode(),
        capture_output=True,
    )  # fmt: skip
    assert r2.returncode == 0, (r2.stderr, patch)
    import base64
    import io
    import tarfile

    with tarfile.open(fileobj=io.BytesIO(base64.b64decode(want.stdout))) as t:
        files = {m.name.removeprefix("./"): t.extractfile(m).read() for m in t if m.isfile()}  # type: ignore[union-attr]
    files = {k: v for k, v in files.items() if "__pycache__" not in k}
    mine = {
        str(p.relative_to(src)): p.read_bytes()
        for p in src.rglob("*")
        if p.is_file() and ".git" not in p.parts and "__pycache__" not in p.parts
    }
    assert mine == files
    assert (src / "calc" / "__init__.py").stat().st_mode & 0o111


async def test_freeze_then_fork_copies_a_prepared_state(sb: Sandbox, image: Image):
    async with await sb.workspace(image) as ws:
        await ws.run("sed -i 's/a + b/a * b/' calc/__init__.py && rm -r data", limits=LIM)
        frozen = await ws.freeze()
    assert frozen.parent == image.digest and frozen.layers[:-1] == image.layers
    copies = await sb.fork(frozen, 8)
    # opened at once, spread over the pool's workers (they once all landed on one)
    per_worker = sorted(sum(c.worker is w for c in copies) for w in sb._workers)
    assert per_worker == [8 // len(sb._workers)] * len(sb._workers), per_worker
    try:
        runs = await asyncio.gather(
            *(c.run_python(f"import calc; print(calc.add(3, {i}))") for i, c in enumerate(copies))
        )
        assert [r.stdout for r in runs] == [f"{3 * i}\n" for i in range(8)]
        await copies[0].run("echo mine > own.txt; mkdir data", limits=LIM)
        r = await copies[1].run("ls", limits=LIM)
        assert "own.txt" not in r.stdout and "data" not in r.stdout.split()
        assert await copies[1].diff() == ""
    finally:
        for c in copies:
            await c.close()
    r = await sb.run("ls data", workspace=image, limits=LIM)  # the base image is untouched
    assert r.stdout == "table.txt\n"


async def test_quota_is_the_program_s_verdict_and_inodes_never_break_the_worker(
    sb: Sandbox, image: Image
):
    r = await sb.run(
        "head -c 40M /dev/zero > big; echo $?", workspace=image, limits=LIM
    )  # disk_mb=32
    assert r.verdict is not Verdict.INFRA
    assert "No space left" in r.stderr or "File size limit" in r.stderr, r.stderr
    async with await sb.workspace(image, disk_mb=4) as ws:
        r = await ws.run(
            "i=0; while touch f$i 2>/dev/null; do i=$((i+1)); done; echo $i",
            limits=Limits(cpu_s=20, wall_s=60, memory_mb=256),
        )
        assert r.verdict is Verdict.OK and int(r.stdout) > 1000, (r.stdout, r.stderr)
        r = await ws.run("echo still here; rm -f f*; echo cleaned", limits=LIM)
        assert r.verdict is not Verdict.INFRA, r.reason
        assert "still here" in r.stdout or r.verdict is Verdict.ERROR
        r = await ws.run("echo again", limits=LIM)
        assert (r.verdict, r.stdout) == (Verdict.OK, "again\n"), (r.reason, r.stderr)
    assert sb.infra_count == 0


async def test_exports_refuse_what_cannot_be_carried(sb: Sandbox, image: Image):
    async with await sb.workspace(image) as ws:
        deep = "/".join(["d"] * 1600)
        r = await ws.run(f"mkdir -p {deep} && echo ok", limits=LIM)
        assert r.stdout == "ok\n", r.stderr
        with pytest.raises(WorkspaceError, match="longer than"):
            await ws.diff()
        with pytest.raises(WorkspaceError):
            await ws.freeze()
        r = await ws.run("rm -rf d; ln -s \"$(printf '\\377')\" badlink; echo ok", limits=LIM)
        frozen = await ws.freeze()  # a link target that is not UTF-8 is still a layer
        assert len(frozen.layers) == len(image.layers) + 1
        assert "GIT binary patch" in await ws.diff() or "badlink" in await ws.diff()


async def test_hostile_names_and_links_stay_inside_the_frozen_layer(sb: Sandbox, image: Image):
    async with await sb.workspace(image) as ws:
        r = await ws.run(
            "ln -s /etc escape; ln -s ../../.. up; mkfifo pipe; chmod 000 calc; "
            "touch \"$(printf 'x\\n+++ b/calc/__init__.py')\"; echo ok",
            limits=LIM,
        )
        assert r.stdout.endswith("ok\n"), r.stderr
        frozen = await ws.freeze()
        patch = await ws.diff()
    store = sb.images
    assert store is not None
    top = store.layer_paths(frozen)[-1]
    assert (top / "escape").is_symlink() and not (top / "pipe").exists()
    for line in patch.splitlines():  # the name is quoted, so it cannot start a line
        assert not line.startswith("+++ b/calc"), patch


async def test_bad_workspace_requests_say_what_to_do(tiny_image: tuple[ImageStore, Image]):
    store, image = tiny_image
    async with Sandbox(tier="jail", workers=1) as plain:
        with pytest.raises(SandboxInputError, match="images="):
            await plain.run("true", workspace=image)
    with pytest.raises(SandboxInputError, match="jail"):
        Sandbox(tier="process", images=store)
    async with Sandbox(tier="jail", workers=1, images=store) as box:
        with pytest.raises(ImageNotFound, match="codegym image build"):
            await box.run("true", workspace="no-such-image")
        with pytest.raises(SandboxInputError, match="disk_mb"):
            await box.workspace(image, disk_mb=0)


async def test_a_kept_workspace_whose_worker_dies_reports_infra(tiny_image):  # type: ignore[no-untyped-def]
    store, image = tiny_image
    async with Sandbox(tier="jail", workers=1, images=store) as box:
        ws = await box.workspace(image)
        await ws.write_file("a.txt", "1")
        w = box._workers[0]
        assert w.proc is not None
        w.proc.kill()
        await w.proc.wait()
        r = await ws.run("cat a.txt", limits=LIM)
        assert r.verdict is Verdict.INFRA and "lost" in r.reason
        with pytest.raises(SandboxInfraError):
            await ws.diff()
        await ws.close()
        r = await box.run("cat test_calc.py", workspace=image, limits=LIM)  # the pool goes on
        assert r.verdict is Verdict.OK


async def test_assert_tests_run_in_a_workspace(sb: Sandbox, image: Image):
    code = "from calc import add\n\ndef triple(x):\n    return add(add(x, x), x)\n"
    r = await sb.run_tests(
        code, [AssertTest("assert triple(2) == 6"), AssertTest("assert triple(1) == 4")],
        workspace=image, limits=LIM,
    )  # fmt: skip
    assert [t.passed for t in r.tests] == [True, False], r.tests


async def test_kept_files_never_cost_a_run_its_memory(tiny_image):  # type: ignore[no-untyped-def]
    """Kept files stay charged to the run slot that wrote them: later runs on the same
    worker (of that workspace, another, or none) still get their whole memory limit."""
    store, image = tiny_image
    async with Sandbox(tier="jail", workers=1, images=store) as box:
        a = await box.workspace(image, disk_mb=128)
        b = await box.workspace(image, disk_mb=16)
        big = Limits(cpu_s=10, wall_s=30, memory_mb=256, disk_mb=128)
        r = await a.run("head -c 100M /dev/urandom > blob && echo ok", limits=big)
        assert r.stdout == "ok\n", r.stderr
        eat = "x = bytearray(90 << 20); print(len(x) >> 20)"
        for where in (b, a, image):
            r = await box.run_python(eat, workspace=where, limits=Limits(memory_mb=128))
            assert (r.verdict, r.stdout) == (Verdict.OK, "90\n"), (where, r.reason, r.stderr)
        r = await box.run_python("print(1)", workspace=image, limits=Limits(memory_mb=32))
        assert r.verdict is Verdict.OK, r.reason
        assert box.recycles == 0 and box.infra_count == 0
        assert (await a.run("ls -s blob", limits=LIM)).verdict is Verdict.OK


async def test_link_targets_and_wide_names_count_toward_the_export_cap(
    sb: Sandbox, image: Image, monkeypatch: pytest.MonkeyPatch
):
    import codegym.sandbox.workspace as workspace_module

    monkeypatch.setattr(workspace_module, "EXPORT_MAX_BYTES", 1 << 20)
    async with await sb.workspace(image) as ws:
        make = (
            "t=$(head -c 4000 /dev/zero | tr '\\0' x); for i in $(seq 100); do ln -s $t l$i; done"
        )
        assert (await ws.run(make, limits=LIM)).verdict is Verdict.OK
        with pytest.raises(WorkspaceError, match="more than"):
            await ws.diff()
        wide = "$(printf '\\360\\237\\230\\200%.0s' $(seq 60))"  # 60 four-byte characters
        await ws.run(f'rm l*; n={wide}; for i in $(seq 800); do touch "$n$i"; done', limits=LIM)
        with pytest.raises(WorkspaceError, match="more than"):
            await ws.diff()
        assert (await ws.run("echo alive", limits=LIM)).stdout == "alive\n"
    assert sb.infra_count == 0


async def test_empty_kept_workspaces_do_not_lift_memory_limits(tiny_image):  # type: ignore[no-untyped-def]
    store, image = tiny_image
    async with Sandbox(tier="jail", workers=1, images=store) as box:
        async with await box.workspace(image, disk_mb=4096):
            eat = "x = bytearray(400 << 20); print('got it')"
            r = await box.run_python(eat, workspace=image, limits=Limits(memory_mb=128))
            assert r.verdict is Verdict.MEMORY, (r.verdict, r.stdout)


async def test_diffs_of_type_changes_and_deleted_packages_apply(
    sb: Sandbox, image: Image, tmp_path: Path
):
    if not shutil.which("git"):
        pytest.skip("git is not installed")
    async with await sb.workspace(image) as ws:
        r = await ws.run(
            "rm test_calc.py && ln -s calc/__init__.py test_calc.py && rm -r calc && "
            "echo 'x' > calc",
            limits=LIM,
        )
        assert r.verdict is Verdict.OK, r.stderr
        patch = await ws.diff()
    assert "__pycache__" not in patch
    src = tmp_path / "src"
    assert sb.images is not None
    shutil.copytree(Path(sb.images.root).parent / "src", src)
    subprocess.run(["git", "init", "-q", str(src)], check=True)
    r2 = subprocess.run(["git", "apply", "-"], cwd=src, input=patch.encode(), capture_output=True)
    assert r2.returncode == 0, (r2.stderr, patch)
    assert (src / "test_calc.py").is_symlink() and (src / "calc").read_text() == "x\n"


async def test_a_plain_run_in_a_workspace_pool_sees_no_kept_workspace(sb: Sandbox, image: Image):
    async with await sb.workspace(image) as ws:
        r = await sb.run(["cat", "/proc/self/mountinfo"], limits=LIM)
        assert r.verdict is Verdict.OK and f"/.ws/keep/{ws.id}" not in r.stdout, r.stdout


# A .pth file in the workspace's site-packages, planted by an earlier run of a kept
# workspace: site runs it, so it must run only where the program's own code does, locked
# down (set-up mark, counters, the judge's socket closed) and never in the process that
# supervises a stdio batch, which holds that batch's signing key.
PLANT_PTH = r"""
import glob, os
site = glob.glob("/work/.venv/lib/python3*/site-packages")[0]
spy = (  # the fds it holds, but the .pth file being read and the listing's own
    "import os; fds = [int(f) for f in os.listdir('/proc/self/fd')]; "
    "links = [os.readlink(f'/proc/self/fd/{f}') if os.path.exists(f'/proc/self/fd/{f}') "
    "else '' for f in fds]; "
    "fds = sorted(f for f, t in zip(fds, links) if t and not t.endswith('.pth')); "
    "os.environ['PTH_RAN'] = repr((os.getpid(), fds))\n"
)
open(os.path.join(site, "zz_spy.pth"), "w").write(spy)
"""


async def test_a_planted_pth_runs_only_as_the_program(sb: Sandbox, image: Image):
    async with await sb.workspace(image) as ws:
        assert (await ws.run_python(PLANT_PTH, limits=LIM)).verdict is Verdict.OK
        r = await ws.run_python("import os; print(os.environ.get('PTH_RAN'))", limits=LIM)
        pid, fds = ast.literal_eval(r.stdout)
        assert pid == 1 and set(fds) <= {0, 1, 2, 3}, r.stdout  # the program's process
        probe = "import os; print(os.environ.get('PTH_RAN'))"
        r = await ws.run_tests(probe, [IOTest("", "x")], limits=LIM)
        seen = r.tests[0].detail
        assert "None" not in seen and "(1," not in seen, seen  # ran in the case, not pid 1
        r = await ws.run_tests("print('wrong')", [IOTest("", "x")], limits=LIM)
        assert r.verdict is Verdict.OK and r.tests[0].verdict is Verdict.OK, r.tests
        assert not r.tests[0].passed


# The same .pth, frozen into an image: the judge of an assert test in a copy of it reads
# the image's packages from its layers, but only from those an image build made; had it
# read the frozen one, this .pth would make every test pass.
FORGE_PTH = r"""
import glob, os
site = glob.glob("/work/.venv/lib/python3*/site-packages")[0]
open(os.path.join(site, "zz_forge.pth"), "w").write(
    "import sys; m = sys.modules.get('_judge'); r = m and m.run; "
    "m and setattr(m, 'run', lambda *a, r=r, **k: {**r(*a, **k), 'passed': True, "
    "'verdict': 'ok', 'detail': ''})\n"
)
"""


async def test_a_frozen_layer_never_reaches_the_judge(
    sb: Sandbox, image: Image, tiny_image: tuple[ImageStore, Image]
):
    async with await sb.workspace(image) as ws:
        assert (await ws.run_python(FORGE_PTH, limits=LIM)).verdict is Verdict.OK
        frozen = await ws.freeze()
    assert frozen.built_layers == len(image.layers) == tiny_image[0].get(frozen.digest).built
    wrong = [AssertTest("assert f(1) == 1", program=("f",))]
    r = await sb.run_tests("def f(x):\n    return 0\n", wrong, workspace=frozen, limits=LIM)
    assert not r.tests[0].passed and "AssertionError" in r.tests[0].detail, r.tests
    # a frozen image from a store that did not record its built layers trusts none
    old = dataclasses.replace(frozen, built=None)
    assert old.built_layers == 0 and dataclasses.replace(image, built=None).built_layers > 0


async def test_layers_of_another_span_are_adopted_unless_a_live_pool_uses_it(
    monkeypatch: pytest.MonkeyPatch,
):
    """A cache built under another CODEGYM_SANDBOX_UID (or the default before 2026-12-06)
    has layers the jail shows as nobody's: a program writing an image file got EACCES,
    scored as its own error. They are adopted (copied, checked, swapped in) on first use,
    unless that span is a live pool's (whose runs would then fail the same way): then a
    clear error."""
    import os

    from codegym.sandbox import _uids
    from codegym.sandbox.images.errors import ImageOwnerError
    from codegym.sandbox.images.layers import layer_owner, remove_tree

    store, img, root = _foreign_image(monkeypatch)
    try:
        layers = [store.layer_paths_of(d) for d in img.layers]
        old_owner = layers[0].stat().st_uid
        assert {p.stat().st_uid for p in layers} == {old_owner} != {layer_owner()}
        write = "open('calc/__init__.py', 'a').write('X = 1\\n')\nimport calc; print(calc.X)"
        async with _pool(store) as box:
            r = await box.run_python(write, workspace=img, limits=LIM)
            assert (r.verdict, r.stdout) == (Verdict.OK, "1\n"), r.stderr
        assert {p.stat().st_uid for p in layers} == {layer_owner()}
        assert {p.lstat().st_uid for p in layers[0].rglob("*")} == {layer_owner()}
        assert [digest(p) for p in layers] == list(img.layers)
        for p in layers:  # that span's again, and now a live process's
            for d, names, files in os.walk(p):
                for name in (d, *(os.path.join(d, n) for n in names + files)):
                    os.lchown(name, old_owner, old_owner)
        monkeypatch.setenv("CODEGYM_SANDBOX_UID", "72000")
        _uids.register_span()
        monkeypatch.delenv("CODEGYM_SANDBOX_UID")
        async with _pool(store) as box:
            try:
                with pytest.raises(ImageOwnerError, match="CODEGYM_SANDBOX_UID=72000"):
                    await box.run_python(write, workspace=img, limits=LIM)
            finally:
                os.close(_uids._registered.pop((str(_uids.UID_LOCKS), 72000)))
            r = await box.run_python(write, workspace=img, limits=LIM)
            assert (r.verdict, r.stdout) == (Verdict.OK, "1\n"), r.stderr
    finally:
        remove_tree(root)


async def test_a_changed_layer_is_refused_and_a_hostile_one_never_hangs_the_adoption(
    monkeypatch: pytest.MonkeyPatch,
):
    """The old owner is a uid programs ran as. A review's probes made an in-place chown
    walk give a host file away through a hard link, wait forever on a FIFO and overflow
    the stack on a deep tree: the adoption copies through descriptors, follows nothing,
    opens nothing blocking, loops instead of recursing, and checks the copy's digest."""
    import os

    from codegym.sandbox.images import adopt
    from codegym.sandbox.images.errors import ImageOwnerError
    from codegym.sandbox.images.layers import layer_owner, remove_tree

    store, img, root = _foreign_image(monkeypatch)
    try:
        layers = [store.layer_paths_of(d) for d in img.layers]
        src = next(p for p in layers if (p / "calc").is_dir())
        old_owner = src.stat().st_uid
        os.mkfifo(src / "calc" / "pipe")  # in no layer's digest: left out of the copy
        fd = os.open(src / "data", os.O_RDONLY | os.O_DIRECTORY)
        for _ in range(1200):  # deeper than 3.11's recursive walks go
            os.mkdir("d", dir_fd=fd)
            fd, up = os.open("d", os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd), fd
            os.close(up)
        os.close(fd)
        host = root / "host-secret"
        host.write_text("secret\n")
        os.link(host, src / "data" / "linked")  # what a hard link let a chown walk take
        with pytest.raises(ImageOwnerError, match="no longer matches its digest"):
            adopt.adopt(store, img)
        assert host.stat().st_uid == 0 and src.stat().st_uid == old_owner
        assert not list((store.root / "tmp").iterdir())  # the copy is gone
        (src / "data" / "linked").unlink()
        remove_tree(src / "data" / "d")
        with pytest.raises(ImageOwnerError, match="no longer matches"):
            adopt.adopt(store, img)  # a changed layer stays refused in this process: no copy again
        adopt._failed.clear()  # (as a fresh process would)
        os.chown(store.root / "tmp", 4242, 4242)  # another user could swap root's work folder
        with pytest.raises(ImageOwnerError, match="tmp is not root's alone"):
            adopt.adopt(store, img)
        os.chown(store.root / "tmp", 0, 0)
        squatter_uid = old_owner - 256 + 3
        squatter = subprocess.Popen(  # an older codegym's worker: running, not registered
            ["sleep", "30"], user=squatter_uid, group=squatter_uid
        )
        try:
            with pytest.raises(ImageOwnerError, match=f"live process \\({squatter.pid}, 'sleep'"):
                adopt.adopt(store, img)
            with monkeypatch.context() as m:  # a process of an account's uid is not ours
                m.setattr(adopt, "_is_account", lambda uid: uid == squatter_uid)
                with pytest.raises(ImageOwnerError, match="sparse or many-times-linked"):
                    with open(src / "data" / "sparse", "wb") as f:  # hashing 64 GiB: hours
                        f.truncate(64 << 30)
                    adopt.adopt(store, img)
            os.unlink(src / "data" / "sparse")
            adopt._failed.clear()
        finally:
            squatter.kill()
            squatter.wait()
        adopt.adopt(store, img)  # the FIFO is no layer's: left behind, nothing waited on
        assert {p.stat().st_uid for p in layers} == {layer_owner()}
        assert not (src / "calc" / "pipe").exists()
    finally:
        remove_tree(root)


def _foreign_image(monkeypatch: pytest.MonkeyPatch) -> tuple[ImageStore, Image, Path]:
    """The test image, built as a pool with another CODEGYM_SANDBOX_UID would have."""
    import os
    import tempfile

    from workspace_kit import build_tiny_image

    if os.geteuid() != 0:
        pytest.skip("layers have one owner per user without root")
    root = Path(tempfile.mkdtemp(prefix="codegym-test-owner-"))
    os.chmod(root, 0o755)
    monkeypatch.setenv("CODEGYM_SANDBOX_UID", "72000")
    store, img = build_tiny_image(root)
    monkeypatch.delenv("CODEGYM_SANDBOX_UID")
    return store, img, root
