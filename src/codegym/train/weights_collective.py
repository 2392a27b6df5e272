"""``CollectiveWeightsHook``: push trained weights over vLLM's weight-transfer routes.

The trainer's end of ``codegym.serving.weight_transfer`` (read that for the protocol): it
hosts a gloo group (rank 0, a ``TCPStore`` on ``address``, an ephemeral port), asks the
server to join it, and each push is ``/pause``, ``/start_weight_update``,
``/update_weights`` (answered once the broadcast below has arrived), the broadcast itself,
``/finish_weight_update`` (the server's new ``policy_version``) and ``/resume``. No file is
written: the server need not see the trainer's disk.

The same interface as ``HttpWeightsHook``, so ``ServerPolicy`` takes either: ``staged`` is
a CPU copy of the newest weights, which ``repush`` sends again to a server that restarted
(joining a new group first: a server's group dies with it). A push that fails for want of
an answer (the server died, hung, or restarted and lost the group) raises
``WeightsPushError(reachable=False)`` and drops the group; one the server refused raises
with its message and ``reachable=True``.
"""

from __future__ import annotations

import datetime
import threading
from collections.abc import Mapping
from typing import Any

import httpx
import torch

from codegym.policies.weight_wire import (
    DEFAULT_BUCKET_BYTES,
    GROUP_HEADER,
    JOIN_TIMEOUT_S,
    Group,
    buckets,
    gloo_group,
    new_store,
    pack,
)
from codegym.train.weights_http import WeightsPushError

__all__ = ["CollectiveWeightsHook"]


class CollectiveWeightsHook:
    """``PolicyHook`` over vLLM's weight-transfer routes (see the module docstring)."""

    def __init__(
        self,
        base_url: str,
        *,
        address: str = "127.0.0.1",
        token: str | None = None,
        timeout_s: float = 120.0,
        packed: bool = False,
        bucket_bytes: int = DEFAULT_BUCKET_BYTES,
        keep_group: bool = True,
    ) -> None:
        """
        Args:
            base_url: the server's root or API root (a trailing ``/v1`` is dropped: vLLM
                serves these routes at the root).
            address: this machine's address the server reaches it at (the group's store
                and sockets bind to it).
            token: bearer token for the routes (the server's weights token).
            timeout_s: bound on joining the group and on one broadcast.
            packed: broadcast the tensors' bytes in buckets instead of one by one (fewer
                messages, one more copy each side: faster for a 1M-parameter model here,
                slower for 86M; ``benchmarks/weights_push_bench.py``).
            keep_group: keep the group for the next push; False leaves it after each push
                (a process that pushes only after a restart: the server then fails the
                regular pusher's next push at once, which joins again, instead of waiting
                on this process's idle group).
        """
        self.root = base_url.rstrip("/").removesuffix("/v1")
        self.address = address
        self.timeout_s = timeout_s
        self.packed = packed
        self.bucket_bytes = bucket_bytes
        self.keep_group = keep_group
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self._client = httpx.Client(headers=headers, timeout=timeout_s + 10)
        self._group: Group | None = None
        self._store: Any = None
        self._joined: str | None = None
        self._version = 0
        self._pushes = 0
        self.staged: dict[str, torch.Tensor] | None = None
        """A CPU copy of the newest weights (what ``repush`` sends)."""

    def current_version(self) -> int:
        return self._version

    def load_weights(self, weights: Mapping[str, torch.Tensor]) -> int:
        """Send ``weights`` to the server; return its new version.

        Raises:
            WeightsPushError: refused (``reachable``) or no answer (the copy is kept for
                ``repush``).
        """
        before = self.staged
        self.stage(weights)
        try:
            return self.repush()
        except WeightsPushError as e:
            if e.reachable:
                self.staged = before
            raise

    def stage(self, weights: Mapping[str, torch.Tensor]) -> None:
        """Keep ``weights`` as the newest without sending them (for a later ``repush``)."""
        # A copy: the optimizer changes the trainer's tensors in place after this returns.
        self.staged = {k: v.detach().to("cpu", copy=True).contiguous() for k, v in weights.items()}

    def repush(self) -> int:
        """Send the newest weights again, joining a new group if the old one is gone.

        Raises:
            WeightsPushError: as ``load_weights``; also when nothing was staged yet.
        """
        if self.staged is None:
            raise WeightsPushError("no weights were staged yet; call load_weights first")
        try:
            try:
                body = self._push_once(self.staged)
            except _GroupLost:
                # The server restarted, or another trainer joined it since: join again.
                self._group = None
                body = self._push_once(self.staged)
        except WeightsPushError:
            self._group = self._store = None
            raise
        if not self.keep_group:
            self._group = self._store = None
        self._pushes += 1
        version = body.get("policy_version")
        # vLLM reports no version: count the pushes instead (one a load, like the server).
        if isinstance(version, int) and not isinstance(version, bool):
            self._version = version
        else:
            self._version = self._pushes
        return self._version

    def close(self) -> None:
        self._group = self._store = None
        self._client.close()

    def _push_once(self, state: Mapping[str, torch.Tensor]) -> dict[str, Any]:
        if self._group is None:
            self._group = self._join()
        self._post("/pause", None)
        try:
            self._post("/start_weight_update", {"is_checkpoint_format": True}, group=True)
            self._send(self._group, state)
            return self._post("/finish_weight_update", {}, group=True)
        finally:
            self._resume()

    # -- the group and the broadcast ------------------------------------------------------
    def _join(self) -> Group:
        ranks = self._get("/get_world_size").get("world_size")
        if not isinstance(ranks, int) or isinstance(ranks, bool) or ranks < 1:
            raise WeightsPushError(f"{self.root}/get_world_size: no world_size in {ranks!r}")
        world = ranks + 1
        try:
            wait = min(self.timeout_s, JOIN_TIMEOUT_S)
            store = new_store(self.address, 0, world, master=True, timeout_s=wait)
        except (OSError, RuntimeError) as e:
            raise WeightsPushError(
                f"cannot host the weight-transfer group on {self.address}: {e}; set "
                "server.transfer_address to an address of this machine the server reaches"
            ) from e
        info = {
            "master_address": self.address,
            "master_port": store.port,
            "rank_offset": 1,
            "world_size": world,
        }
        # The group forms once the server joins it, which it does inside the HTTP call: form
        # ours on a thread, so that a server that refuses fails this at once.
        forming = _Call(gloo_group, store, 0, world, self.address, self.timeout_s)
        # If this fails, the forming thread waits for a rank that will not come; it ends
        # with the store's timeout (JOIN_TIMEOUT_S), so failed joins cannot pile up.
        self._post("/init_weight_transfer_engine", {"init_info": info})
        forming.join()
        try:
            group: Group = forming.result()
        except RuntimeError as e:
            raise WeightsPushError(
                f"{self.root}: the weight-transfer group at {self.address}:{store.port} did "
                f"not form: {str(e)[:200]}",
                reachable=False,
            ) from e
        self._store = store  # the group's rendezvous: kept for the group's life
        self._joined = f"{self.address}:{store.port}"
        return group

    def _send(self, group: Group, state: Mapping[str, torch.Tensor]) -> None:
        names = list(state)
        tensors = [state[n] for n in names]
        info = {
            "names": names,
            "dtype_names": [str(t.dtype).removeprefix("torch.") for t in tensors],
            "shapes": [list(t.shape) for t in tensors],
            "packed": self.packed,
            "packed_buffer_size_bytes": self.bucket_bytes,
        }
        asked = _Call(self._post, "/update_weights", {"update_info": info}, True)
        timeout = datetime.timedelta(seconds=self.timeout_s)
        try:
            if self.packed:
                sizes = [t.numel() * t.element_size() for t in tensors]
                for bucket in buckets(sizes, self.bucket_bytes):
                    group.broadcast(pack([tensors[i] for i in bucket]), 0).wait(timeout)
            else:
                for t in tensors:
                    group.broadcast(t, 0).wait(timeout)
        except RuntimeError as e:
            # A refusal (the server then drops the group, which failed the broadcast)
            # comes back at once and says why; a server that is stuck is not waited for.
            asked.join(timeout=10)
            asked.result()
            raise WeightsPushError(
                f"{self.root}: the weight broadcast failed: {str(e)[:200]}", reachable=False
            ) from e
        asked.join()
        asked.result()

    # -- HTTP -----------------------------------------------------------------------------
    def _get(self, path: str) -> dict[str, Any]:
        return self._answer(path, lambda url: self._client.get(url))

    def _post(self, path: str, body: dict[str, Any] | None, group: bool = False) -> dict[str, Any]:
        """POST ``body``; ``group``: name the group joined, so the server refuses the call
        if its group is another's."""
        headers = {GROUP_HEADER: self._joined} if group and self._joined else None
        return self._answer(path, lambda url: self._client.post(url, json=body, headers=headers))

    def _resume(self) -> None:
        try:  # quick: a hung server must not cost a second full timeout
            r = self._client.post(f"{self.root}/resume", timeout=5.0)
            r.raise_for_status()
        except httpx.HTTPError:
            pass  # the push itself reports the server's state; its pause lease ends it

    def _answer(self, path: str, send: Any) -> dict[str, Any]:
        url = f"{self.root}{path}"
        try:
            r = send(url)
        except httpx.HTTPError as e:
            raise WeightsPushError(f"{url}: {type(e).__name__}: {e}", reachable=False) from e
        if r.status_code == 404:
            raise WeightsPushError(
                f"{url}: HTTP 404: the server has no weight-transfer routes; start "
                "serve-model with --weight-transfer (vLLM: VLLM_SERVER_DEV_MODE=1 and "
                '--weight-transfer-config), or use server.weight_transfer = "file"'
            )
        if r.status_code != 200:
            message = f"{url}: HTTP {r.status_code}: {r.text[:500]}"
            if _error_code(r) in ("not_initialized", "group_changed"):
                raise _GroupLost(message, reachable=False)  # joining again helps
            # 5xx: the server (or the group) failing, not these weights.
            raise WeightsPushError(message, reachable=r.status_code < 500)
        try:
            body = r.json() if r.content.strip() else {}
        except ValueError:
            body = {}
        return body if isinstance(body, dict) else {}


class _GroupLost(WeightsPushError):
    """The server has no group, or another trainer's: join again."""


def _error_code(r: httpx.Response) -> str | None:
    try:
        code = r.json()["error"]["code"]
    except (ValueError, KeyError, TypeError):
        return None
    return code if isinstance(code, str) else None


class _Call:
    """A blocking call on a thread (an HTTP request that returns only once the collective
    operation it announces is done)."""

    def __init__(self, fn: Any, *args: Any) -> None:
        self._out: Any = None
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, args=(fn, *args), daemon=True)
        self._thread.start()

    def _run(self, fn: Any, *args: Any) -> None:
        try:
            self._out = fn(*args)
        except BaseException as e:  # noqa: BLE001  # handed to the caller by result()
            self._error = e

    def join(self, timeout: float | None = None) -> None:
        self._thread.join(timeout)

    def result(self) -> Any:
        """What the call returned (raising what it raised); None while it runs."""
        if self._error is not None:
            raise self._error
        return self._out
