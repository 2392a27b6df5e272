"""Images and kept workspaces over HTTP: the service's routes and ``RemoteSandbox``.

A real service on loopback with a real image cache (``workspace_kit``'s tiny image): a run
in a fresh workspace, a kept workspace's files, diff and freeze, a fork of the frozen
state, and the errors a caller gets for an unknown image or a service with no cache.
"""

from __future__ import annotations

import pytest
from service_support import TOKEN, Serve

from codegym.sandbox import SandboxError, Verdict
from codegym.sandbox.images import Image, ImageStore
from codegym.service import RemoteSandbox


async def test_workspaces_through_the_service(
    serve: Serve, tiny_image: tuple[ImageStore, Image]
) -> None:
    store, image = tiny_image
    async with serve(image_cache=str(store.root)) as svc:
        listed = (await svc.http.get("/v1/images")).json()
        assert image.digest in [i["digest"] for i in listed]
        r = await svc.http.post(
            "/v1/run",
            json={"command": ["sh", "-c", "ls; cat calc/__init__.py"], "workspace": "tiny"},
        )
        assert r.status_code == 200 and "test_calc.py" in r.json()["stdout"], r.text
        async with RemoteSandbox(svc.url, token=TOKEN) as sb:
            r2 = await sb.run_python("import calc; print(calc.add(1, 2))", workspace=image.digest)
            assert (r2.verdict, r2.stdout) == (Verdict.OK, "3\n"), r2
            async with await sb.workspace("tiny", disk_mb=32) as ws:
                await ws.write_file("notes.txt", "kept\n")
                r3 = await ws.run(
                    ["sh", "-c", "sed -i 's/a + b/b + a/' calc/__init__.py; cat notes.txt"]
                )
                assert r3.stdout == "kept\n"
                patch = await ws.diff()
                assert "+    return b + a" in patch and "b/notes.txt" in patch
                frozen = await ws.freeze()
            assert frozen != image.digest
            copies = await sb.fork(frozen, 3)
            try:
                outs = [await c.read_file("notes.txt") for c in copies]
                assert outs == [b"kept\n"] * 3
                await copies[0].write_file("notes.txt", "mine\n")
                assert await copies[1].read_file("notes.txt") == b"kept\n"
            finally:
                for c in copies:
                    await c.close()
            health = (await svc.http.get("/healthz")).json()
            assert health["workspaces"] == 0
            with pytest.raises(SandboxError, match="no image 'nope'"):
                await sb.workspace("nope")
        bad = await svc.http.post("/v1/run", json={"code": "print(1)", "workspace": "nope"})
        assert bad.status_code == 400 and "codegym image build" in bad.json()["detail"]
        gone = await svc.http.post("/v1/workspaces/none/exec", json={"code": "print(1)"})
        assert gone.status_code == 404


async def test_a_service_without_an_image_cache_says_how_to_get_one(serve: Serve) -> None:
    async with serve() as svc:
        r = await svc.http.post("/v1/workspaces", json={"image": "tiny"})
        assert r.status_code == 400 and "--image-cache" in r.json()["detail"], r.text
        r = await svc.http.post("/v1/run", json={"code": "print(1)", "workspace": "tiny"})
        assert r.status_code == 400 and "images=" in r.json()["detail"], r.text
