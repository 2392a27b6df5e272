"""vLLM's weight-transfer routes: the trainer broadcasts over gloo, serve-model receives."""

from __future__ import annotations

import asyncio
import datetime
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import torch
import torch.distributed as dist
from transformers import AutoModelForCausalLM

from codegym.policies.weight_wire import buckets, gloo_group, pack, unpack
from codegym.serving.server import ModelServer
from codegym.train.weights_collective import CollectiveWeightsHook
from codegym.train.weights_http import WeightsPushError


@pytest.fixture(scope="module")
def server(toy_model: Path) -> Iterator[ModelServer]:
    with ModelServer(toy_model, weight_transfer=True) as srv:
        yield srv


def _shifted(model_dir: Path, by: float) -> dict[str, torch.Tensor]:
    model = AutoModelForCausalLM.from_pretrained(model_dir)
    return {k: v + by for k, v in model.state_dict().items()}


def _served_equals(srv: ModelServer, state: dict[str, torch.Tensor]) -> bool:
    served = srv.policy.model.state_dict()
    return all(torch.equal(served[k], v) for k, v in state.items())


@pytest.mark.parametrize(
    ("packed", "bucket_bytes"), [(True, 64 << 20), (True, 4096), (False, 64 << 20)]
)
def test_a_push_installs_the_exact_weights_and_bumps_the_version(
    server: ModelServer, toy_model: Path, packed: bool, bucket_bytes: int
) -> None:
    hook = CollectiveWeightsHook(server.base_url, packed=packed, bucket_bytes=bucket_bytes)
    try:
        for by in (0.01, 0.02):  # the second push reuses the group
            state = _shifted(toy_model, by)
            v0 = server.policy.policy_version
            assert hook.load_weights(state) == v0 + 1 == hook.current_version()
            assert _served_equals(server, state)
    finally:
        hook.close()


def test_packed_tensors_of_mixed_dtypes_come_back_exactly() -> None:
    # A bf16 tensor of odd length puts the next fp32 one at an offset 4 does not divide.
    parts = [torch.randn(3).to(torch.bfloat16), torch.randn(2, 2), torch.randn(5).half()]
    flat = pack(parts)
    got = list(unpack(flat, [t.dtype for t in parts], [t.shape for t in parts]))
    assert all(torch.equal(a, b) and a.dtype == b.dtype for a, b in zip(parts, got, strict=True))


def test_buckets_keep_order_and_the_limit() -> None:
    assert buckets([4, 4, 4, 10, 1], 8) == [[0, 1], [2], [3], [4]]
    assert buckets([], 8) == []
    assert buckets([3], 1) == [[0]]  # a tensor bigger than a bucket travels alone


@pytest.mark.parametrize(
    "spoil",
    ["shape", "name", "missing", "dtype", "nan"],
)
def test_weights_that_do_not_fit_are_refused_at_once_and_nothing_changes(
    server: ModelServer, toy_model: Path, spoil: str
) -> None:
    good = _shifted(toy_model, 0.03)
    bad = dict(good)
    first = next(k for k in bad if ".h.0." in k)  # tied to nothing
    if spoil == "shape":
        bad[first] = torch.zeros(3)
    elif spoil == "name":
        bad["no.such.weight"] = torch.zeros(2)
    elif spoil == "nan":
        bad[first] = torch.full_like(good[first], float("nan"))
    elif spoil == "dtype":
        bad[first] = good[first].to(torch.int64)  # gloo could not carry some; none is a weight
    else:
        del bad[first]
    hook = CollectiveWeightsHook(server.base_url, timeout_s=60)
    try:
        hook.load_weights(good)
        v = server.policy.policy_version
        t0 = time.monotonic()
        with pytest.raises(WeightsPushError) as e:
            hook.load_weights(bad)
        assert e.value.reachable  # refused, not away: training stops instead of waiting
        assert time.monotonic() - t0 < 30  # never the broadcast's 60 s timeout
        assert ("no.such.weight" if spoil == "name" else first) in str(e.value)
        assert server.policy.policy_version == v and _served_equals(server, good)
        assert hook.staged is not None and torch.equal(hook.staged[first], good[first])
        assert hook.load_weights(good) == v + 1  # the next push joins a new group
    finally:
        hook.close()


def test_a_server_that_lost_its_group_is_joined_again(server: ModelServer, toy_model: Path) -> None:
    hook = CollectiveWeightsHook(server.base_url)
    try:
        hook.load_weights(_shifted(toy_model, 0.04))
        assert server.receiver is not None
        server.receiver.close()  # what a restarted server looks like: no group
        state = _shifted(toy_model, 0.05)
        hook.load_weights(state)  # not_initialized: it joins again and pushes
        assert _served_equals(server, state)
    finally:
        hook.close()


def test_two_trainers_pushing_in_turn_never_wait_on_each_other(
    server: ModelServer, toy_model: Path
) -> None:
    """Each join replaces the other's group; the header makes the server say so at once
    (group_changed) instead of waiting on a broadcast the other trainer will not send."""
    a = CollectiveWeightsHook(server.base_url, timeout_s=60)
    b = CollectiveWeightsHook(server.base_url, timeout_s=60)
    try:
        t0 = time.monotonic()
        for i in range(3):
            for hook, by in ((a, 0.1 + i), (b, 0.2 + i)):
                state = _shifted(toy_model, by)
                hook.load_weights(state)
                assert _served_equals(server, state)
        assert time.monotonic() - t0 < 50  # no push waited out a 60 s timeout
    finally:
        a.close()
        b.close()


def test_a_trainer_that_dies_mid_broadcast_leaves_the_server_serving(
    server: ModelServer, toy_model: Path
) -> None:
    root = server.base_url.removesuffix("/v1")
    store = dist.TCPStore(
        "127.0.0.1", 0, 2, is_master=True, timeout=datetime.timedelta(seconds=30),
        wait_for_workers=False,
    )  # fmt: skip
    info = {"master_address": "127.0.0.1", "master_port": store.port, "world_size": 2}
    joined: list[httpx.Response] = []
    asking = threading.Thread(
        target=lambda: joined.append(
            httpx.post(f"{root}/init_weight_transfer_engine", json={"init_info": info}, timeout=60)
        )
    )
    asking.start()
    group = gloo_group(store, 0, 2, "127.0.0.1", 30)
    asking.join()
    assert joined[0].status_code == 200, joined[0].text
    assert httpx.post(f"{root}/start_weight_update", json={}, timeout=10).status_code == 200
    state = _shifted(toy_model, 0.06)
    update = {
        "names": list(state),
        "dtype_names": ["float32"] * len(state),
        "shapes": [list(t.shape) for t in state.values()],
    }
    assert httpx.post(f"{root}/pause", timeout=10).json()["is_paused"] is True
    answers: list[httpx.Response] = []
    receiving = threading.Thread(
        target=lambda: answers.append(
            httpx.post(f"{root}/update_weights", json={"update_info": update}, timeout=60)
        )
    )
    receiving.start()
    first = next(iter(state.values()))
    group.broadcast(first, 0).wait()  # one tensor of many, then the trainer "dies"
    time.sleep(0.2)
    del group, store
    receiving.join(timeout=60)
    assert answers and answers[0].status_code == 502, answers[0].text if answers else None
    assert "init_weight_transfer_engine" in answers[0].json()["error"]["message"]
    # The trainer paused the server and died: the dropped transfer resumed it.
    assert httpx.get(f"{root}/is_paused", timeout=10).json() == {"is_paused": False}
    v = server.policy.policy_version
    assert httpx.post(f"{root}/finish_weight_update", json={}, timeout=10).status_code == 400
    assert server.policy.policy_version == v  # nothing half-received was loaded
    hook = CollectiveWeightsHook(server.base_url)
    try:
        assert hook.load_weights(state) == v + 1 and _served_equals(server, state)
    finally:
        hook.close()


def test_routes_out_of_order_or_malformed_are_clear_400s(server: ModelServer) -> None:
    root = server.base_url.removesuffix("/v1")
    assert server.receiver is not None
    server.receiver.close()
    r = httpx.post(f"{root}/start_weight_update", json={}, timeout=10)
    assert r.status_code == 400 and r.json()["error"]["code"] == "not_initialized"
    r = httpx.post(f"{root}/finish_weight_update", json={}, timeout=10)
    assert r.status_code == 400 and r.json()["error"]["code"] == "not_initialized"
    bad_rank = {"master_address": "127.0.0.1", "master_port": 1, "rank_offset": 2, "world_size": 2}
    r = httpx.post(f"{root}/init_weight_transfer_engine", json={"init_info": bad_rank}, timeout=10)
    assert r.status_code == 400 and "rank_offset" in r.json()["error"]["message"]
    uneven = {"names": ["a", "b"], "dtype_names": ["float32"], "shapes": [[1], [1]]}
    r = httpx.post(f"{root}/update_weights", json={"update_info": uneven}, timeout=10)
    assert r.status_code == 400 and "one entry per tensor" in r.json()["error"]["message"]
    r = httpx.post(f"{root}/start_weight_update", json={"is_checkpoint_format": False}, timeout=10)
    assert r.status_code == 400 and "checkpoint" in r.json()["error"]["message"]
    assert httpx.get(f"{root}/get_world_size", timeout=10).json() == {"world_size": 1}


def test_a_server_without_the_routes_names_the_flag(toy_model: Path) -> None:
    with ModelServer(toy_model) as plain:
        hook = CollectiveWeightsHook(plain.base_url)
        try:
            with pytest.raises(WeightsPushError, match="--weight-transfer"):
                hook.load_weights(_shifted(toy_model, 0.0))
        finally:
            hook.close()


def test_weight_routes_need_the_weights_token(toy_model: Path) -> None:
    with ModelServer(toy_model, weight_transfer=True, weights_token="s3cret") as srv:
        root = srv.base_url.removesuffix("/v1")
        assert httpx.get(f"{root}/get_world_size", timeout=10).status_code == 401
        assert httpx.post(f"{root}/pause", timeout=10).status_code == 401
        hook = CollectiveWeightsHook(srv.base_url, token="s3cret")
        try:
            state = _shifted(toy_model, 0.07)
            hook.load_weights(state)
            assert _served_equals(srv, state)
        finally:
            hook.close()


async def test_pause_holds_new_requests_until_resume(server: ModelServer) -> None:
    root = server.base_url.removesuffix("/v1")
    body = {"model": server.model_name, "prompt": "def f", "max_tokens": 2}
    async with httpx.AsyncClient(timeout=60) as client:
        assert (await client.post(f"{root}/pause")).json()["is_paused"] is True
        try:
            sent = asyncio.ensure_future(client.post(f"{server.base_url}/completions", json=body))
            await asyncio.sleep(1.0)
            assert not sent.done()  # held
            assert (await client.get(f"{root}/is_paused")).json() == {"is_paused": True}
        finally:
            await client.post(f"{root}/resume")
        r = await asyncio.wait_for(sent, 60)
        assert r.status_code == 200 and r.json()["choices"][0]["text"] is not None


async def test_a_pause_no_resume_follows_ends_with_its_lease(server: ModelServer) -> None:
    root = server.base_url.removesuffix("/v1")
    assert server.receiver is not None
    lease, server.receiver.timeout_s = server.receiver.timeout_s, 1.0  # the lease is this
    body = {"model": server.model_name, "prompt": "def f", "max_tokens": 2}
    try:
        async with httpx.AsyncClient(timeout=60) as client:
            await client.post(f"{root}/pause")
            assert (await client.get(f"{root}/health")).json()["paused"] is True
            r = await asyncio.wait_for(client.post(f"{server.base_url}/completions", json=body), 30)
            assert r.status_code == 200  # answered once the lease ran out, no /resume sent
            assert "paused" not in (await client.get(f"{root}/health")).json()
    finally:
        server.receiver.timeout_s = lease


def test_a_hung_trainer_does_not_hold_up_the_next_ones_join(
    server: ModelServer, toy_model: Path
) -> None:
    """A trainer announces tensors and never sends them (alive, stuck): another trainer
    joins and pushes at once instead of waiting out the first one's transfer."""
    root = server.base_url.removesuffix("/v1")
    store = dist.TCPStore(
        "127.0.0.1", 0, 2, is_master=True, timeout=datetime.timedelta(seconds=30),
        wait_for_workers=False,
    )  # fmt: skip
    info = {"master_address": "127.0.0.1", "master_port": store.port, "world_size": 2}
    asking = threading.Thread(
        target=httpx.post,
        args=(f"{root}/init_weight_transfer_engine",),
        kwargs={"json": {"init_info": info}, "timeout": 60},
    )
    asking.start()
    group = gloo_group(store, 0, 2, "127.0.0.1", 30)
    asking.join()
    httpx.post(f"{root}/start_weight_update", json={}, timeout=10)
    state = _shifted(toy_model, 0.08)
    update = {
        "names": list(state),
        "dtype_names": ["float32"] * len(state),
        "shapes": [list(t.shape) for t in state.values()],
    }
    stuck = threading.Thread(
        target=httpx.post,
        args=(f"{root}/update_weights",),
        kwargs={"json": {"update_info": update}, "timeout": 60},
        daemon=True,
    )
    stuck.start()
    time.sleep(0.5)  # the server now waits on the stuck trainer's broadcast
    hook = CollectiveWeightsHook(server.base_url, timeout_s=60)
    try:
        t0 = time.monotonic()
        hook.load_weights(state)
        assert time.monotonic() - t0 < 20 and _served_equals(server, state)
    finally:
        hook.close()
        del group, store  # the stuck trainer goes away: the server's wait on it ends
        stuck.join(timeout=60)
