"""``ServerPolicy``: the trainer's policy when generation runs in a separate model server.

    policy = ServerPolicy("http://127.0.0.1:8000/v1", model_dir, stage_dir)
    trainer = Trainer(config, model_dir, policy)      # or set ``[server] url`` in the config

It samples through ``OpenAIPolicy`` in token mode (prompt ids in; the sampled ids and their
logprobs out, exactly) and pushes each step's weights with ``HttpWeightsHook`` (staged as a
``.safetensors`` file the server reads, then ``POST /v1/weights``). ``codegym serve-model``
speaks both; a vLLM deployment needs the weight route of ``docs/serving.md``.

Versions. The trainer counts its own versions (1 for the first push, then one a step); the
server numbers its loads itself and restarts from 0. Every server version this policy was
answered with on a push is mapped to the trainer's, and every generation is tagged with the
trainer's version of the weights that produced it. A server that reports no version (vLLM)
gets the version that was current when the request went out.

The server dying. A request that gets no answer (refused or reset connection, a 5xx, a
timeout) waits until ``GET /health`` answers again, for at most ``wait_s``; if the server
came back without the trainer's newest weights (a restart loads the base model) they are
pushed again, and the request is sent again. A generation answered by weights this policy
never pushed (a restart it had not noticed) is handled the same way and never reaches the
trainer. Only when the server stays away past ``wait_s`` does a request fail, with a
``PolicyError``, which the rollout engine counts as infra (excluded, never reward 0). A
push that finds the server down waits the same way.

Several training processes (DDP). Every process generates its share through the server;
only the leading one (``pusher``) pushes each step's weights, and the trainer holds the
others at a barrier until it has. Each server version a push is answered with goes into
``SharedVersions``, the process group's store, so every process tags its generations from
the same map. Every process keeps the newest weights (``stage``): the first one to find
the server restarted pushes them again and publishes the new version, and the others read
it there instead of pushing too. Within one step, a restarted server's version numbers
can equal the dead one's: an answer that arrives between a re-push and its publication is
tagged with the dead server's (older) version, which over-counts its staleness, never
under-counts it.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any, Literal

import httpx
import torch
from transformers import AutoTokenizer

from codegym.policies import OpenAIPolicy
from codegym.policies.errors import PolicyError
from codegym.policies.policy import Generation, SamplingParams
from codegym.policies.retry import Retry
from codegym.train.weights_collective import CollectiveWeightsHook
from codegym.train.weights_http import HttpWeightsHook, WeightsPushError

__all__ = ["ServerPolicy", "SharedVersions"]

_RECOVERIES = 3
"""Times one request may wait for the server to come back before it fails."""


class ServerPolicy:
    """``TrainablePolicy`` over an OpenAI-compatible model server (see the module doc)."""

    def __init__(
        self,
        base_url: str,
        model_dir: str | Path,
        stage_dir: str | Path,
        *,
        model: str | None = None,
        token: str | None = None,
        concurrency: int = 64,
        wait_s: float = 600.0,
        request_timeout_s: float = 300.0,
        temperature: float = 1.0,
        weight_transfer: Literal["file", "gloo"] = "file",
        transfer_address: str = "127.0.0.1",
        shared: SharedVersions | None = None,
        pusher: bool = True,
    ) -> None:
        """
        Args:
            base_url: the server's API root, e.g. ``http://127.0.0.1:8000/v1``.
            model_dir: the model being trained (its tokenizer renders the prompts).
            stage_dir: a folder the server can read, where each step's weights are written.
            model: the served model name; None asks the server (its first model).
            token: bearer token for generation and the weight routes.
            concurrency: most requests in flight.
            wait_s: how long a request or push waits for a server that stopped answering.
            request_timeout_s: bound on one request (connect to last byte).
            temperature: the trainer's sampling temperature; other than 1 it needs a server
                that reports tempered logprobs (``serve-model --logprobs-mode tempered``).
            weight_transfer: ``file`` (``HttpWeightsHook``: a file in ``stage_dir``) or
                ``gloo`` (``CollectiveWeightsHook``: vLLM's weight-transfer routes, the
                tensors broadcast over a gloo group hosted at ``transfer_address``).
            shared: with several training processes, the version map they share (every
                process generates; see "Several training processes" in the module doc).
            pusher: whether ``load_weights`` pushes (the leading process) or only keeps
                the weights for a re-push after a restart (the others).

        Raises:
            PolicyError(kind="config"): the server cannot be reached or does not serve a
                model that fits (the message says what to fix).
        """
        self.base_url = base_url.rstrip("/")
        self.wait_s = float(wait_s)
        self.tokenizer = AutoTokenizer.from_pretrained(model_dir)
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self._http = httpx.Client(headers=headers, timeout=10.0)
        self.name = model or self._served_model(temperature)
        self.client = OpenAIPolicy(
            self.base_url,
            self.name,
            api_key=token or "EMPTY",
            concurrency=concurrency,
            # Few quick retries: a server that stays down is waited for in _recover instead.
            retry=Retry(attempts=2, base_s=0.2, max_s=1.0),
            hedge=None,  # a second copy of a request would only load the same server twice
            timeout_s=request_timeout_s,
            logprobs=True,
            token_ids=True,
        )
        self.hook: HttpWeightsHook | CollectiveWeightsHook
        if weight_transfer == "gloo":
            self.hook = CollectiveWeightsHook(
                self.base_url, address=transfer_address, token=token, keep_group=pusher
            )
        else:
            self.hook = HttpWeightsHook(self.base_url, stage_dir, token=token)
        self._version = 0
        self._versions: dict[int, int] = {}
        """Server version -> trainer version, for the weights this policy pushed."""
        self.shared = shared
        self.pusher = pusher
        self._lock = threading.Lock()
        """Held by a push and by recovery: one of them talks to the weight route at a time."""
        self._outage_deadline: float | None = None
        """When the current outage's waiting ends (None: the server answers)."""
        self.recoveries = 0
        """Times the server was found away and waited for (or re-pushed)."""
        self.tokens_generated = 0
        self.generate_s = 0.0
        """Wall seconds with at least one request at the server."""
        self._in_flight = 0
        self._busy_since = 0.0

    # -- PolicyHook --------------------------------------------------------------------
    def current_version(self) -> int:
        return self._version

    def load_weights(self, weights: Mapping[str, torch.Tensor]) -> int:
        """Stage and push ``weights``; waits for a server that is down (up to ``wait_s``).

        Raises:
            WeightsPushError: the server refused them, or stayed away past ``wait_s``.
        """
        with self._lock:
            version = self._version + 1
            if not self.pusher:
                self.hook.stage(weights)
                self._version = version
                return version
            try:
                served: int | None = self.hook.load_weights(weights)
            except WeightsPushError as e:
                if e.reachable:
                    raise
                served = None
            if served is None or (self._versions and served <= max(self._versions)):
                # Down, or answered by a server that restarted unnoticed (its versions
                # went back): what the old one gave out means nothing to this one.
                try:
                    served = self._push_when_back()
                except PolicyError as e:  # away past wait_s
                    raise WeightsPushError(str(e), reachable=False) from e
                self._versions = {}
            self._version = version
            self._mapped(served, version)
            return version

    def _mapped(self, served: int, version: int) -> None:
        self._versions[served] = version
        if self.shared is not None:
            self.shared.publish(served, version)

    def _trainer_version(self, served: int | None) -> int | None:
        """The trainer version whose weights server version ``served`` holds (None: not
        weights any training process pushed)."""
        if served is None:
            return None
        if self.shared is not None:
            return self.shared.lookup(served)
        return self._versions.get(served)

    # -- TokenPolicy -------------------------------------------------------------------
    async def generate_tokens(
        self, prompt_ids: Sequence[int], params: SamplingParams
    ) -> list[Generation]:
        for attempt in range(_RECOVERIES + 1):
            sent_under = self._version
            try:
                gens = await self._timed(prompt_ids, params)
            except PolicyError as e:
                if attempt == _RECOVERIES or not _server_away(e):
                    raise
                await self._recover_async()
                continue
            versions = [
                await self._tag(g.policy_version) if g.policy_version is not None
                else sent_under
                for g in gens
            ]  # fmt: skip
            if any(g.logprobs is None for g in gens):
                raise PolicyError(
                    "bad_response",
                    f"{self.base_url}: the server returned token ids without logprobs; GRPO's "
                    "ratio needs the behaviour logprobs (a server that ignores `logprobs` "
                    "cannot be trained against)",
                )
            if all(v is not None for v in versions):
                self.tokens_generated += sum(len(g.token_ids or ()) for g in gens)
                return [replace(g, policy_version=v) for g, v in zip(gens, versions, strict=True)]
            if attempt == _RECOVERIES:
                break
            await self._recover_async()  # answered by weights we never pushed
        raise PolicyError(
            "bad_response",
            f"{self.base_url}: the server kept answering with weights this trainer did not "
            f"push (its policy_version is not one it was given) after {_RECOVERIES} "
            "re-pushes; is another trainer pushing to the same server?",
        )

    async def _tag(self, served: int) -> int | None:
        found = self._trainer_version(served)
        if found is None and self.shared is not None:
            # Another process may have pushed these weights and not yet published them.
            for _ in range(40):
                await asyncio.sleep(0.05)
                if (found := self._trainer_version(served)) is not None:
                    break
        return found

    async def _recover_async(self) -> None:
        try:
            await asyncio.to_thread(self._recover)
        except WeightsPushError as e:  # the episode fails as infra, like any policy error
            raise PolicyError("connection", str(e)) from e

    async def _timed(self, prompt_ids: Sequence[int], params: SamplingParams) -> list[Generation]:
        if self._in_flight == 0:
            self._busy_since = time.perf_counter()
        self._in_flight += 1
        try:
            return await self.client.generate_tokens(prompt_ids, params)
        finally:
            self._in_flight -= 1
            if self._in_flight == 0:
                self.generate_s += time.perf_counter() - self._busy_since

    async def aclose(self) -> None:
        await self.client.aclose()

    def close(self) -> None:
        self.hook.close()
        self._http.close()

    # -- the server going away -----------------------------------------------------------
    def _recover(self) -> None:
        """Wait for the server; give it the newest weights again if it lost them."""
        with self._lock:
            served = self._wait_for_server()
            if self.hook.staged is None:
                return  # nothing pushed yet: there is nothing to give back
            if self._trainer_version(served) == self._version:
                return  # back with the newest weights
            # A lower or unknown version (vLLM reports none): push the newest again.
            self.recoveries += 1
            again = self._push_when_back()
            # Versions the dead server gave out mean nothing to the new one.
            self._versions = {}
            self._mapped(again, self._version)

    def _push_when_back(self) -> int:
        """Push the newest staged weights once the server answers (it may die again
        between its /health and the push: wait again). A server whose /health answers but
        whose pushes keep failing (5xx, a broken transfer group) is given ``wait_s`` too.
        """
        deadline = time.monotonic() + self.wait_s
        pause = 0.25
        while True:
            self._wait_for_server()
            try:
                return self.hook.repush()
            except WeightsPushError as e:
                if e.reachable or time.monotonic() >= deadline:
                    raise
            time.sleep(pause)
            pause = min(5.0, pause * 2)  # a server failing pushes at once is not hammered

    def _wait_for_server(self) -> int | None:
        """Poll ``/health`` until it answers; the version it reports (None: none).

        One outage has one deadline, ``wait_s`` after it was first seen, shared by every
        request waiting on it: a server that never returns fails them all then, instead
        of each queued request waiting ``wait_s`` more. After the deadline a request
        checks once and fails at once, until the server answers again.
        """
        root = self.base_url.removesuffix("/v1")
        while True:
            try:
                r = self._http.get(f"{root}/health")
                if r.status_code == 200:
                    self._outage_deadline = None
                    return _reported_version(r)
            except httpx.HTTPError:
                pass
            now = time.monotonic()
            if self._outage_deadline is None:
                self._outage_deadline = now + self.wait_s
            if now >= self._outage_deadline:
                raise PolicyError(
                    "connection",
                    f"{self.base_url}: the model server did not answer /health for "
                    f"{self.wait_s:g} s; restart it (the trainer pushes its weights again "
                    "when it is back) or raise server.wait_s",
                )
            time.sleep(0.25)

    def _served_model(self, temperature: float) -> str:
        try:
            r = self._http.get(f"{self.base_url}/models")
            r.raise_for_status()
            models: list[dict[str, Any]] = r.json()["data"]
        except (httpx.HTTPError, ValueError, KeyError, TypeError) as e:
            raise PolicyError(
                "config",
                f"{self.base_url}/models: {type(e).__name__}: {e}; start the model server "
                "(codegym serve-model) first, or fix server.url (it usually ends in /v1)",
            ) from e
        if not models:
            raise PolicyError("config", f"{self.base_url}/models lists no model")
        first = models[0]
        mode = first.get("logprobs_mode")
        if temperature != 1.0 and mode == "raw":
            raise PolicyError(
                "config",
                f"{self.base_url} reports raw logprobs, but training samples at temperature "
                f"{temperature:g}, so its logprobs are not the behaviour policy's; start "
                "serve-model with --logprobs-mode tempered (vLLM: --logprobs-mode "
                "processed_logprobs) or sample at temperature 1",
            )
        return str(first["id"])


class SharedVersions:
    """Server version -> trainer version, shared by every training process through the
    process group's key-value store (``World.store``): read and written at any time, with
    no collective call, so a process that re-pushed after a restart tells the others."""

    def __init__(self, store: Any) -> None:
        self._store = store

    def publish(self, served: int, version: int) -> None:
        # A restarted server counts from 0 again: its versions overwrite the dead one's.
        self._store.set(f"codegym/served/{served}", str(version))

    def lookup(self, served: int) -> int | None:
        key = f"codegym/served/{served}"
        if not self._store.check([key]):
            return None
        return int(self._store.get(key))


def _reported_version(r: httpx.Response) -> int | None:
    """The ``policy_version`` of a ``/health`` answer; None when it has none (vLLM answers
    an empty 200)."""
    try:
        body = r.json()
    except ValueError:
        return None
    version = body.get("policy_version") if isinstance(body, dict) else None
    return version if isinstance(version, int) and not isinstance(version, bool) else None


def _server_away(e: PolicyError) -> bool:
    """No answer, or one that says the server itself is failing."""
    if e.kind in ("connection", "timeout"):
        return True
    return e.kind == "http_status" and e.status is not None and e.status >= 500
