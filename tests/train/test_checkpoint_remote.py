"""Checkpoints mirrored to an fsspec URL, against a real S3-compatible server on loopback.

moto's server mode runs in a thread on 127.0.0.1 (a free port) for this module; s3fs talks
to it over HTTP like it would to AWS or MinIO. Each test gets its own bucket.
"""

from __future__ import annotations

import json
import socket
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import s3fs
import torch
from moto.server import ThreadedMotoServer
from safetensors.torch import load_file
from train_helpers import small_config

from codegym.train import Trainer, parse_config
from codegym.train.checkpoint import (
    WEIGHTS,
    CheckpointError,
    check_remote,
    content_id,
    fetch_latest,
    latest_checkpoint,
    load_checkpoint,
    mirror_checkpoint,
    prune_remote,
    save_checkpoint,
)

DIGEST = "test-digest"


@pytest.fixture(scope="module")
def s3_options() -> Iterator[dict[str, Any]]:
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    try:
        yield {"endpoint_url": f"http://{host}:{port}", "key": "testing", "secret": "testing"}
    finally:
        server.stop()


@pytest.fixture
def s3(s3_options: dict[str, Any]) -> s3fs.S3FileSystem:
    return s3fs.S3FileSystem(skip_instance_cache=True, **s3_options)


@pytest.fixture
def remote(s3: s3fs.S3FileSystem) -> str:
    bucket = f"ckpt-{uuid.uuid4().hex[:12]}"
    s3.mkdir(bucket)
    return f"s3://{bucket}/runs/a"


def _save(run_dir: Path, step: int, score: float | None = None, keep: int = 2) -> Path:
    torch.manual_seed(step)
    model = torch.nn.Linear(4, 3)
    state = {"step": step, "config_digest": DIGEST}
    return save_checkpoint(run_dir, step, model, state, keep, {"heldout_pass1": score})


def _remote_names(s3: s3fs.S3FileSystem, remote: str) -> dict[str, set[str]]:
    s3.invalidate_cache()
    root = remote.removeprefix("s3://")
    out: dict[str, set[str]] = {}
    for f in s3.find(root):
        parts = f.removeprefix(root + "/").split("/")
        if len(parts) == 2 and parts[0].startswith("ckpt-"):  # not metrics.jsonl, final/
            out.setdefault(parts[0], set()).add(parts[1])
    return out


def test_mirror_keeps_what_local_retention_keeps(
    s3: s3fs.S3FileSystem, remote: str, s3_options: dict[str, Any], tmp_path: Path
) -> None:
    check_remote(remote, s3_options)
    run = tmp_path / "run"
    # Step 2 scores best, so it outlives keep=2 in both places.
    for step, score in [(1, 0.1), (2, 0.9), (3, 0.2), (4, 0.3), (5, None)]:
        path = _save(run, step, score)
        assert mirror_checkpoint(path, remote, s3_options) == f"{remote}/{path.name}"
        prune_remote(remote, s3_options, keep=2)
        local = {p.name for p in run.glob("ckpt-*")}
        remote_now = _remote_names(s3, remote)
        assert set(remote_now) == local
        assert all("COMPLETE" in names for names in remote_now.values())
    assert set(remote_now) == {"ckpt-000002", "ckpt-000004", "ckpt-000005"}
    root = remote.removeprefix("s3://")
    for name in remote_now:
        got = s3.cat_file(f"{root}/{name}/model.safetensors")
        assert got == (run / name / "model.safetensors").read_bytes()


def test_a_fresh_directory_resumes_from_the_remote(
    remote: str, s3_options: dict[str, Any], tmp_path: Path
) -> None:
    run = tmp_path / "machine-a"
    for step in (1, 2):
        mirror_checkpoint(_save(run, step), remote, s3_options)
    fresh = tmp_path / "machine-b" / "run"
    got = fetch_latest(remote, s3_options, fresh)
    assert got == fresh / "ckpt-000002" == latest_checkpoint(fresh)
    model = torch.nn.Linear(4, 3)
    state = load_checkpoint(got, model, DIGEST)
    assert state["step"] == 2
    want = load_file(run / "ckpt-000002" / "model.safetensors")
    assert all(torch.equal(model.state_dict()[k], want[k]) for k in want)
    assert content_id(got / "model.safetensors") == content_id(
        run / "ckpt-000002" / "model.safetensors"
    )
    assert not list(fresh.glob(".ckpt-tmp-*"))


def test_an_empty_remote_gives_nothing_to_resume(
    remote: str, s3_options: dict[str, Any], tmp_path: Path
) -> None:
    assert fetch_latest(remote, s3_options, tmp_path / "run") is None


def test_a_half_uploaded_checkpoint_is_ignored_then_pruned(
    s3: s3fs.S3FileSystem, remote: str, s3_options: dict[str, Any], tmp_path: Path
) -> None:
    run = tmp_path / "run"
    mirror_checkpoint(_save(run, 1), remote, s3_options)
    # An upload killed before its marker: every file of ckpt-2 but COMPLETE.
    two = _save(run, 2)
    root = remote.removeprefix("s3://")
    for f in two.iterdir():
        if f.name != "COMPLETE":
            s3.put_file(str(f), f"{root}/{two.name}/{f.name}")
    got = fetch_latest(remote, s3_options, tmp_path / "fresh")
    assert got is not None and got.name == "ckpt-000001"
    mirror_checkpoint(_save(run, 3), remote, s3_options)
    assert prune_remote(remote, s3_options, keep=2) == ["ckpt-000002"]
    assert set(_remote_names(s3, remote)) == {"ckpt-000001", "ckpt-000003"}


def test_saving_a_step_again_replaces_its_remote_copy(
    s3: s3fs.S3FileSystem, remote: str, s3_options: dict[str, Any], tmp_path: Path
) -> None:
    first = _save(tmp_path / "a", 1)
    mirror_checkpoint(first, remote, s3_options)
    (first / "stale.txt").write_text("left by an older layout")
    mirror_checkpoint(first, remote, s3_options)
    torch.manual_seed(99)
    again = save_checkpoint(
        tmp_path / "b", 1, torch.nn.Linear(4, 3), {"step": 1, "config_digest": DIGEST}
    )
    mirror_checkpoint(again, remote, s3_options)
    assert _remote_names(s3, remote)["ckpt-000001"] == {
        "COMPLETE", "model.safetensors", "record.json", "trainer_state.pt",
    }  # fmt: skip
    got = fetch_latest(remote, s3_options, tmp_path / "fresh")
    assert got is not None
    assert content_id(got / "model.safetensors") == content_id(again / "model.safetensors")


def test_a_damaged_remote_copy_is_refused(
    s3: s3fs.S3FileSystem, remote: str, s3_options: dict[str, Any], tmp_path: Path
) -> None:
    path = _save(tmp_path / "run", 1)
    mirror_checkpoint(path, remote, s3_options)
    s3.pipe_file(f"{remote.removeprefix('s3://')}/{path.name}/model.safetensors", b"junk")
    fresh = tmp_path / "fresh"
    with pytest.raises(CheckpointError, match="do not match the content id"):
        fetch_latest(remote, s3_options, fresh)
    assert latest_checkpoint(fresh) is None


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
    return port  # nothing listens there now: connections are refused


def test_an_unreachable_remote_is_a_clear_error(tmp_path: Path) -> None:
    options = {"endpoint_url": f"http://127.0.0.1:{_closed_port()}", "key": "k", "secret": "s"}
    with pytest.raises(CheckpointError) as e:
        check_remote("s3://somewhere/runs", options)
    msg = str(e.value)
    assert "s3://somewhere/runs" in msg and "checkpoint.remote_options" in msg
    assert "EndpointConnectionError" in msg
    once = {**options, "config_kwargs": {"retries": {"max_attempts": 1}}}  # fail fast
    with pytest.raises(CheckpointError, match="uploading ckpt-000001"):
        mirror_checkpoint(_save(tmp_path / "run", 1), "s3://somewhere/runs", once)


def test_a_missing_bucket_is_an_error_not_a_new_bucket(
    s3: s3fs.S3FileSystem, s3_options: dict[str, Any]
) -> None:
    bucket = f"typo-{uuid.uuid4().hex[:12]}"
    with pytest.raises(CheckpointError, match="bucket does not exist"):
        check_remote(f"s3://{bucket}/runs", s3_options)
    s3.invalidate_cache()
    assert not s3.exists(bucket)


def test_an_unknown_scheme_or_missing_backend_says_so() -> None:
    with pytest.raises(CheckpointError, match="not a usable fsspec URL"):
        check_remote("nosuchscheme://x/y")


def test_credentials_come_from_the_aws_environment(
    remote: str, s3_options: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "from-env")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "from-env")
    check_remote(remote, {"endpoint_url": s3_options["endpoint_url"]})


@pytest.mark.parametrize("scheme", ["file", "memory"])
def test_other_fsspec_urls_work_the_same(scheme: str, tmp_path: Path) -> None:
    remote = f"file://{tmp_path}/remote/run" if scheme == "file" else f"memory://{tmp_path.name}"
    check_remote(remote)
    run = tmp_path / "run"
    for step in (1, 2, 3):
        mirror_checkpoint(_save(run, step), remote)
        prune_remote(remote, keep=2)
    if scheme == "file":  # pruned folders go entirely, not just their files
        assert sorted(p.name for p in (tmp_path / "remote" / "run").iterdir()) == [
            "ckpt-000002", "ckpt-000003",
        ]  # fmt: skip
    got = fetch_latest(remote, None, tmp_path / "fresh")
    assert got is not None and got.name == "ckpt-000003"
    assert content_id(got / "model.safetensors") == content_id(run / got.name / "model.safetensors")


def test_remote_options_stay_out_of_dumps(tmp_path: Path) -> None:
    cfg = parse_config(
        {"checkpoint": {"remote": "s3://b/p", "remote_options": {"secret": "hunter2"}}}
    )
    assert cfg.checkpoint.remote_options == {"secret": "hunter2"}
    assert "hunter2" not in repr(cfg) and "hunter2" not in str(cfg.model_dump())


async def test_the_trainer_on_a_fresh_machine_resumes_from_s3(
    s3: s3fs.S3FileSystem,
    toy_model: Path,
    remote: str,
    s3_options: dict[str, Any],
    tmp_path: Path,
) -> None:
    over = {"remote": remote, "remote_options": s3_options, "keep": 1}
    first = Trainer(
        parse_config(small_config(str(tmp_path / "a"), checkpoint=over, run={"steps": 2})),
        toy_model,
    )
    await first.run()  # saves every step (off the event loop, as in real runs)
    first.save_final()
    assert set(_remote_names(s3, remote)) == {"ckpt-000002"}
    root = remote.removeprefix("s3://")
    assert s3.exists(f"{root}/metrics.jsonl") and s3.exists(f"{root}/final/config.json")
    fresh = tmp_path / "b"  # another machine: nothing local
    cfg = small_config(str(fresh), checkpoint=over, run={"steps": 3})
    second = Trainer(parse_config(cfg), toy_model)
    assert second.step == 2
    assert latest_checkpoint(fresh) == fresh / "ckpt-000002"
    want = first.model.state_dict()
    got = second.model.state_dict()
    assert all(torch.equal(got[k], want[k]) for k in want)
    assert not all(torch.equal(got[k], v) for k, v in load_file(toy_model / WEIGHTS).items())
    await second.run()  # the metrics file came with the checkpoint: every step once
    lines = (fresh / "metrics.jsonl").read_text().splitlines()
    assert [json.loads(ln)["step"] for ln in lines] == [1, 2, 3]


def test_the_trainer_refuses_an_unwritable_remote_at_start(
    toy_model: Path, s3_options: dict[str, Any], tmp_path: Path
) -> None:
    missing = f"s3://typo-{uuid.uuid4().hex[:12]}/runs"
    over = {"remote": missing, "remote_options": s3_options}
    with pytest.raises(CheckpointError, match=missing):
        Trainer(parse_config(small_config(str(tmp_path / "a"), checkpoint=over)), toy_model)
