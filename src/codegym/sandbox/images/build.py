"""Build an image from a spec: a stack of normalised, content-addressed layers.

The stack, bottom to top (each layer a tree rooted at the workspace root, ``/work``):

1. ``debian`` (only when the spec lists packages): their files under ``.debian/``;
2. ``env``: a virtual environment at ``.venv/`` with the lock's packages, bytecode
   compiled (checked-hash pycs: no timestamps, and an edited file is never run stale);
3. ``source``: the project's files, from an sdist, a folder or a git commit;
4. ``link``: one ``.pth`` file that puts the source on the environment's ``sys.path``.

The environment is built inside bubblewrap with the staging folder mounted at ``/work/.venv``
(the path it will have in every workspace, so scripts' shebangs and ``pyvenv.cfg`` are
right) and the network shared: packages are fetched here, at build time, never when the
image runs. Each layer is built in ``tmp/`` and renamed into place, so a failed or killed
build leaves nothing visible; the env layer is shared by every image with the same
Python and lock. The host's ``/usr`` is the system layer, as for the ``jail`` tier: an
image's digest pins everything above it, not the host's interpreter build or libraries.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import re
import shutil
import subprocess
import tarfile
import time
import zipfile
from collections.abc import Callable
from pathlib import Path

from codegym.sandbox.images import layers as _layers
from codegym.sandbox.images.errors import ImageBuildError, ImageSpecError
from codegym.sandbox.images.spec import ImageSpec, read_lock
from codegym.sandbox.images.store import (
    DEBIAN,
    ROOT,
    VENV,
    Image,
    ImageStore,
    image_digest,
)

Log = Callable[[str], None]
PIP_TIMEOUT_S = 1800
INDEX = "https://pypi.org/simple"


def build_image(
    spec_path: str | os.PathLike[str], store: ImageStore | None = None, log: Log | None = None
) -> Image:
    """Build the image ``spec_path`` describes (or find it built) and return it.

    Two processes building the same spec build it once: the second waits and reuses.

    Raises:
        ImageSpecError: the spec, its lock or its Python cannot be used as written.
        ImageBuildError: a package cannot be resolved, a hash does not match, the disk
            is full, a tool is missing; nothing half-built is left visible.
    """
    store = store or ImageStore()
    say = log or (lambda _m: None)
    spec = ImageSpec.load(Path(spec_path))
    python = _interpreter(spec.python)
    version = subprocess.run(
        [python, "-c", "import sys; print('%d.%d.%d' % sys.version_info[:3])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    lock = read_lock(spec.resolve(spec.environment.lock)) if spec.environment.lock else []
    try:
        source = _source_layer(spec, store, say) if spec.source else None
        key = _key(
            "image",
            version,
            lock,
            spec.environment.debian,
            source,
            spec.name,
            spec.source.import_path if spec.source else None,
        )
        with store.lock(key):
            done = store.built(key)
            if done is not None:
                say(f"{spec.name}: already built")
                return done
            stack = []
            if spec.environment.debian:
                stack.append(_debian_layer(spec.environment.debian, store, say))
            stack.append(_env_layer(python, version, lock, store, say))
            env = {"PATH": f"{VENV}/bin:/usr/local/bin:/usr/bin:/bin", "VIRTUAL_ENV": VENV}
            if spec.environment.debian:
                env["PATH"] = f"{VENV}/bin:{DEBIAN}/usr/bin:{DEBIAN}/bin:/usr/bin:/bin"
                env["LD_LIBRARY_PATH"] = f"{DEBIAN}/usr/lib/x86_64-linux-gnu:{DEBIAN}/usr/lib"
            if source is not None:
                stack.append(source)
                assert spec.source is not None
                if spec.source.import_path:
                    stack.append(_link_layer(version, spec.source.import_path, store))
            image = Image(
                digest=image_digest(version, stack, env),
                name=spec.name,
                python=version,
                layers=tuple(stack),
                env=env,
                created=time.time(),
                spec=json.loads(spec.model_dump_json(exclude={"base"})),
            )
            say(f"{spec.name}: {len(stack)} layers, image {image.digest}")
            return store.add(image, key)
    except OSError as e:
        if e.errno in (errno.ENOSPC, errno.EDQUOT):
            raise ImageBuildError(
                f"the disk under {store.root} filled while building {spec.name}: free space "
                "(`codegym image gc` removes unused layers) and build again"
            ) from None
        raise


def _key(*parts: object) -> str:
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()


def _interpreter(version: str) -> str:
    cand = Path(f"/usr/bin/python{version}")
    if cand.exists():
        return str(cand)
    have = sorted(
        p.name for p in Path("/usr/bin").glob("python3.*") if re.fullmatch(r"python3\.\d+", p.name)
    )
    raise ImageSpecError(
        f"python = {version!r}: this host has no /usr/bin/python{version} "
        f"(it has {', '.join(have) or 'none'}); images use the host's interpreters"
    )


# ---------------------------------------------------------------- layers


def _env_layer(python: str, version: str, lock: list[str], store: ImageStore, say: Log) -> str:
    key = "env-" + _key("env", version, lock, python)
    with store.lock(key):
        hit = store.root / "builds" / key
        if hit.is_file() and _layers.layer_path(store.layers_dir, hit.read_text()).is_dir():
            return hit.read_text().strip()
        say(f"environment: Python {version}, {len(lock)} locked packages")
        tree = store.scratch("env")
        venv = tree / VENV.removeprefix(f"{ROOT}/")
        venv.mkdir()
        (tree.parent / f"{tree.name}.lock").write_text("\n".join(lock) + "\n")
        script = (
            f"set -e; {python} -m venv {VENV}; "
            + (
                f"{VENV}/bin/python -m pip install -q --no-deps --require-hashes --no-compile "
                f"--disable-pip-version-check --no-input -r /tmp/lock.txt; "
                if lock
                else ""
            )
            + f"{VENV}/bin/python -m compileall -q -j1 --invalidation-mode checked-hash "
            f"{VENV}/lib >/dev/null"
        )
        argv = [
            *_build_jail(store),
            "--bind", str(venv), VENV,
            "--ro-bind", str(tree.parent / f"{tree.name}.lock"), "/tmp/lock.txt",
            "/bin/sh", "-c", script,
        ]  # fmt: skip
        try:
            r = subprocess.run(argv, capture_output=True, text=True, timeout=PIP_TIMEOUT_S)
            if r.returncode != 0:
                if _disk_full(store.root):  # pip and ensurepip rarely say ENOSPC plainly
                    raise OSError(errno.ENOSPC, "no space left", str(store.root))
                raise ImageBuildError(_pip_failure(r.stderr + r.stdout, lock))
            d = _layers.publish(tree, store.layers_dir)
        except BaseException:
            _layers.remove_tree(tree)
            raise
        finally:
            (tree.parent / f"{tree.name}.lock").unlink(missing_ok=True)
        store._atomic_write(hit, d)
        return d


def _build_jail(store: ImageStore) -> list[str]:
    bwrap = shutil.which("bwrap")
    if not bwrap:
        raise ImageBuildError("building an image needs bubblewrap (apt-get install bubblewrap)")
    argv = [bwrap, "--die-with-parent", "--unshare-pid", "--unshare-ipc"]
    if os.geteuid() != 0:
        argv.append("--unshare-user")
    argv += ["--ro-bind", "/usr", "/usr", "--ro-bind", "/etc", "/etc"]
    for link in ("bin", "sbin", "lib", "lib32", "lib64", "libx32"):
        target = Path("/") / link
        if target.is_symlink():
            argv += ["--symlink", os.readlink(target), f"/{link}"]
        elif target.is_dir():
            argv += ["--ro-bind", str(target), f"/{link}"]
    argv += ["--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp", "--dir", ROOT]
    argv += ["--bind", str(store.root / "pip-cache"), "/tmp/pip-cache"]
    # the host's pip settings (extra indexes, constraints, find-links) are not the spec's:
    # only an index the caller names explicitly carries over (a mirror; hashes still pin)
    argv += ["--clearenv", "--setenv", "PATH", "/usr/bin:/bin", "--setenv", "LANG", "C.UTF-8"]
    argv += ["--setenv", "PIP_CONFIG_FILE", "/dev/null", "--setenv", "PIP_NO_INPUT", "1"]
    for name in ("PIP_INDEX_URL", "https_proxy", "HTTPS_PROXY", "SSL_CERT_FILE"):
        if os.environ.get(name):
            argv += ["--setenv", name, os.environ[name]]
    argv += ["--setenv", "HOME", "/tmp", "--setenv", "PIP_CACHE_DIR", "/tmp/pip-cache"]
    argv += ["--setenv", "PYTHONHASHSEED", "0", "--setenv", "SOURCE_DATE_EPOCH", "315532800"]
    argv += ["--chdir", "/tmp"]
    return argv


def _disk_full(path: Path) -> bool:
    """Whether the disk under ``path`` is (nearly) full: under 1 MiB or 0.1% left."""
    st = os.statvfs(path)
    free = st.f_bavail * st.f_frsize
    return free < max(1 << 20, st.f_blocks * st.f_frsize // 1000) or st.f_favail < 64


def _pip_failure(output: str, lock: list[str]) -> str:
    names = {line.split("==")[0].lower(): line.split()[0] for line in lock}
    what = []
    for m in re.finditer(
        r"(?:No matching distribution found for|Could not find a version "
        r"that satisfies the requirement) (\S+)",
        output,
    ):
        what.append(f"{m.group(1)} cannot be resolved from the package index")
    if "DO NOT MATCH THE HASHES" in output:
        for line in output.splitlines():
            bad = re.match(r"\s+(\S+?)==\S+ from ", line)
            if bad:
                name = names.get(bad.group(1).lower(), bad.group(1))
                what.append(f"{name}: its hash does not match the lock")
    tail = "\n".join(output.strip().splitlines()[-12:])
    head = "; ".join(dict.fromkeys(what)) or "a step failed (below)"
    return f"building the environment failed: {head}\n{tail}"


def _source_layer(spec: ImageSpec, store: ImageStore, say: Log) -> str:
    src = spec.source
    assert src is not None
    tree = store.scratch("source")
    try:
        if src.pypi:
            name, version = src.pypi.split("==")
            assert src.sha256
            _unpack(_fetch_sdist(name, version, src.sha256, store, say), tree)
        elif src.sdist:
            archive = spec.resolve(src.sdist)
            if not archive.is_file():
                raise ImageSpecError(f"[source] sdist {src.sdist!r}: no such file")
            got = _layers.file_sha256(archive)
            if got != src.sha256:
                raise ImageBuildError(
                    f"sdist {archive.name}: sha256 is {got}, the spec says {src.sha256}"
                )
            _unpack(archive, tree)
        elif src.path:
            folder = spec.resolve(src.path)
            if not folder.is_dir():
                raise ImageSpecError(f"[source] path {src.path!r}: no such folder")
            shutil.copytree(
                folder, tree, symlinks=True, dirs_exist_ok=True,
                ignore=shutil.ignore_patterns(".git", "__pycache__", ".venv"),
            )  # fmt: skip
        else:
            _git_export(str(src.git), str(src.commit), spec, tree)
        for junk in list(tree.rglob("__pycache__")):
            _layers.remove_tree(junk)
        for name in (".venv", ".debian"):
            if (tree / name).exists():
                raise ImageBuildError(f"the source has a top-level {name!r}: the image's own")
        _compile(tree, _interpreter(spec.python), store)
        return _layers.publish(tree, store.layers_dir)
    except BaseException:
        _layers.remove_tree(tree)
        raise


def _compile(tree: Path, python: str, store: ImageStore) -> None:
    """Compile the source's bytecode as it will be seen (under ``/work``), checked-hash."""
    argv = [
        *_build_jail(store),
        "--unshare-net", "--bind", str(tree), ROOT,
        python, "-m", "compileall", "-q", "-j1",
        "--invalidation-mode", "checked-hash", ROOT,
    ]  # fmt: skip
    r = subprocess.run(argv, capture_output=True, text=True, timeout=600)
    if r.returncode != 0 and r.stderr.startswith("bwrap:"):  # else: a file that does not
        raise ImageBuildError(f"compiling the source failed: {r.stderr.strip()}")  # compile


def _link_layer(version: str, import_path: str, store: ImageStore) -> str:
    tree = store.scratch("link")
    major_minor = ".".join(version.split(".")[:2])
    site = tree / ".venv" / "lib" / f"python{major_minor}" / "site-packages"
    site.mkdir(parents=True)
    target = os.path.normpath(f"{ROOT}/{import_path}")
    (site / "_codegym_source.pth").write_text(target + "\n")
    return _layers.publish(tree, store.layers_dir)


def _fetch_sdist(name: str, version: str, sha256: str, store: ImageStore, say: Log) -> Path:
    """The release's sdist, from the download cache or the index, checked by sha256."""
    import httpx

    cached = store.root / "downloads" / sha256
    if cached.is_file() and _layers.file_sha256(cached) == sha256:
        return cached
    index = os.environ.get("PIP_INDEX_URL", INDEX).rstrip("/")
    norm = re.sub(r"[-_.]+", "-", name).lower()
    try:
        with httpx.Client(timeout=60, follow_redirects=True) as client:
            r = client.get(
                f"{index}/{norm}/", headers={"Accept": "application/vnd.pypi.simple.v1+json"}
            )
            if r.status_code == 404:
                raise ImageBuildError(f"{name}: no such project on {index}")
            r.raise_for_status()
            files = [
                f for f in r.json().get("files", [])
                if f.get("hashes", {}).get("sha256") == sha256
            ]  # fmt: skip
            if not files:
                raise ImageBuildError(
                    f"{name}=={version}: no file on {index} has sha256 {sha256}; "
                    "check the [source] sha256 (pip hash FILE)"
                )
            say(f"source: fetching {files[0]['filename']}")
            data = client.get(files[0]["url"]).raise_for_status().content
    except httpx.HTTPError as e:
        raise ImageBuildError(
            f"{name}=={version}: cannot fetch the sdist from {index}: {e}"
        ) from None
    got = hashlib.sha256(data).hexdigest()
    if got != sha256:
        raise ImageBuildError(f"{name}=={version}: the sdist's sha256 is {got}, not {sha256}")
    tmp = cached.with_name(f".{sha256}.{os.getpid()}")
    tmp.write_bytes(data)
    os.replace(tmp, cached)
    return cached


def _unpack(archive: Path, tree: Path) -> None:
    """Unpack an sdist into ``tree``, without its single top-level folder."""
    stage = tree / ".unpack"
    stage.mkdir()
    if zipfile.is_zipfile(archive):
        with zipfile.ZipFile(archive) as z:
            for info in z.infolist():
                p = Path(info.filename)
                if p.is_absolute() or ".." in p.parts:
                    raise ImageBuildError(f"{archive.name}: unsafe path {info.filename!r}")
            z.extractall(stage)
    else:
        try:
            with tarfile.open(archive) as t:
                t.extractall(stage, filter="data")
        except (tarfile.TarError, OSError) as e:
            raise ImageBuildError(f"{archive.name} is not a usable sdist: {e}") from None
    entries = list(stage.iterdir())
    top = entries[0] if len(entries) == 1 and entries[0].is_dir() else stage
    for item in top.iterdir():
        os.rename(item, tree / item.name)
    shutil.rmtree(stage)


def _git_export(url: str, commit: str, spec: ImageSpec, tree: Path) -> None:
    git = shutil.which("git")
    if not git:
        raise ImageBuildError("a git source needs git (apt-get install git)")
    local = spec.resolve(url)
    where = str(local) if local.exists() else url
    clone = tree.with_name(tree.name + ".git")
    try:
        for argv in (
            [git, "clone", "-q", "--no-checkout", where, str(clone)],
            [git, "-C", str(clone), "archive", "--format=tar", "-o", str(clone / "x.tar"), commit],
        ):
            r = subprocess.run(argv, capture_output=True, text=True, timeout=PIP_TIMEOUT_S)
            if r.returncode != 0:
                raise ImageBuildError(f"git source {url} at {commit}: {r.stderr.strip()}")
        with tarfile.open(clone / "x.tar") as t:
            t.extractall(tree, filter="data")
    finally:
        shutil.rmtree(clone, ignore_errors=True)


def _debian_layer(packages: list[str], store: ImageStore, say: Log) -> str:
    for tool in ("apt-get", "dpkg-deb"):
        if not shutil.which(tool):
            raise ImageBuildError(f"Debian packages need {tool} on the building host")
    tree = store.scratch("debian")
    debs = store.scratch("debs")
    try:
        say(f"debian: {', '.join(packages)}")
        r = subprocess.run(
            ["apt-get", "download", "-q", *packages],
            cwd=debs, capture_output=True, text=True, timeout=PIP_TIMEOUT_S,
        )  # fmt: skip
        if r.returncode != 0:
            raise ImageBuildError(f"apt-get download {' '.join(packages)}: {r.stderr.strip()}")
        target = tree / DEBIAN.removeprefix(f"{ROOT}/")
        target.mkdir()
        for deb in sorted(debs.glob("*.deb")):
            subprocess.run(["dpkg-deb", "-x", str(deb), str(target)], check=True)
        return _layers.publish(tree, store.layers_dir)
    except BaseException:
        _layers.remove_tree(tree)
        raise
    finally:
        _layers.remove_tree(debs)
