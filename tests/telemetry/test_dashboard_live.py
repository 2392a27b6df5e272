"""The Grafana dashboard the way a user meets it: real traffic (an eval, a rollout against
the model server, a trainer step, the sandbox service with its faults), a real Prometheus
started here on loopback scraping it, and every panel's query reading a finite value at
some point of the run (the in-flight and staleness panels: above zero); and every shipped
scrape config accepted by ``promtool check config``."""

from __future__ import annotations

import asyncio
import json
import math
import re
import shutil
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from codegym.telemetry import serve_metrics
from codegym.testing import await_until, wait_until

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
TOKEN = "t0k-long-enough-token"
PROMETHEUS, PROMTOOL = shutil.which("prometheus"), shutil.which("promtool")
needs_prometheus = pytest.mark.skipif(
    not (PROMETHEUS and PROMTOOL),
    reason="Prometheus is not installed (apt-get install prometheus; the set-up does as root)",
)


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _wait(what: str, check: Any, timeout: float = 60.0) -> Any:
    return wait_until(check, timeout=timeout, what=what)


@needs_prometheus
def test_every_shipped_scrape_config_passes_promtool() -> None:
    assert PROMTOOL is not None
    ok = subprocess.run(
        [PROMTOOL, "check", "config", str(DEPLOY / "prometheus" / "prometheus.yml")],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert ok.returncode == 0, ok.stdout + ok.stderr
    k8s = subprocess.run(
        [PROMTOOL, "check", "config", str(DEPLOY / "prometheus" / "kubernetes.yml")],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    # Debian's build has no Kubernetes discovery: that, and only that, may fail there
    if k8s.returncode != 0:
        out = k8s.stdout + k8s.stderr
        assert "field kubernetes_sd_configs not found" in out, out
        assert len(re.findall(r"not found in type", out)) == 1, out


@pytest.fixture
def service(tmp_path: Path) -> Iterator[str]:
    """``codegym sandbox serve`` (the real command), one worker and a short queue."""
    port = _port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "codegym.cli", "sandbox", "serve", "--port", str(port),
         "--token", TOKEN, "--workers", "1", "--queue", "1", "--log-level", "warning"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    try:
        _wait("the service to start", lambda: _up(url))
        yield url
    finally:
        proc.terminate()
        proc.wait(30)


def _up(url: str) -> bool:
    try:
        return httpx.get(f"{url}/healthz", timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


@pytest.fixture
def prometheus(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    """A Prometheus on loopback; write its targets into the returned file."""
    assert PROMETHEUS is not None
    port = _port()
    targets = tmp_path / "targets.json"
    targets.write_text("[]")
    config = tmp_path / "prometheus.yml"
    config.write_text(
        "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
        "scrape_configs:\n  - job_name: codegym\n    file_sd_configs:\n"
        f"      - files: ['{targets}']\n        refresh_interval: 1s\n"
    )
    proc = subprocess.Popen(
        [PROMETHEUS, f"--config.file={config}", f"--storage.tsdb.path={tmp_path / 'tsdb'}",
         f"--web.listen-address=127.0.0.1:{port}"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    try:
        _wait("Prometheus to start", lambda: _ready(url))
        yield url, targets
    finally:
        proc.terminate()
        proc.wait(30)


def _ready(url: str) -> bool:
    try:
        return httpx.get(f"{url}/-/ready", timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


def _panel_queries() -> list[tuple[str, str]]:
    dash = json.loads((DEPLOY / "grafana" / "codegym.json").read_text())
    out = []
    for panel in dash["panels"]:
        for t in panel.get("targets", []):
            expr = t["expr"].replace("$__rate_interval", f"{RATE_WINDOW_S}s")
            expr = re.sub(r'=~"\$\w+"', '=~".*"', expr)  # every tier, env, suite
            out.append((f"{panel['title']} [{t['refId']}]", expr))
    return out


# What Grafana's $__rate_interval comes to for this test's 1 s scrape interval, with room.
RATE_WINDOW_S = 30
# Panels that must read above zero at some scrape, not only a finite number: the traffic
# holds episodes and eval samples in flight across a scrape, and advances the policy
# version while they are held, so the held episodes finish one version behind.
# (Staleness p50 may stay 0: most episodes, the trainer's among them, are on-policy.)
NONZERO = (
    "Episodes in flight [A]",
    "Eval pass rate and in flight [B]",
    "Policy staleness p50 / p99 (steps) [B]",
)


class _Prom:
    """Questions for the test's Prometheus, asked from sync code or the event loop."""

    def __init__(self, url: str) -> None:
        self.url = url

    def query(self, expr: str) -> list[dict[str, Any]]:
        r = httpx.get(f"{self.url}/api/v1/query", params={"query": expr}, timeout=10).json()
        assert r["status"] == "success", (expr, r)
        return list(r["data"]["result"])

    async def aquery(self, expr: str) -> list[dict[str, Any]]:
        async with httpx.AsyncClient(timeout=10) as http:
            r = (await http.get(f"{self.url}/api/v1/query", params={"query": expr})).json()
        assert r["status"] == "success", (expr, r)
        return list(r["data"]["result"])

    @staticmethod
    def _scraped_expr(since: float) -> str:
        # a successful scrape of both targets that started after ``since``: it read every
        # value the process had by then
        # (timestamp() of a selector is its sample's scrape time; of anything else, "now")
        up = 'up{job="codegym"}'
        return f"count((timestamp({up}) > {since:.3f}) and on(instance) ({up} == 1)) == 2"

    def wait_scraped(self, since: float, timeout: float = 30.0) -> None:
        _wait(f"a scrape of both targets after {since:.3f}",
              lambda: self.query(self._scraped_expr(since)), timeout=timeout)  # fmt: skip

    async def await_scraped(self, since: float, timeout: float = 30.0) -> None:
        await await_until(lambda: self.aquery(self._scraped_expr(since)), timeout=timeout,
                          what=f"a scrape of both targets after {since:.3f}")  # fmt: skip

    def values(self, expr: str, start: float, end: float) -> list[float]:
        """Every point of ``expr`` over [start, end] at 1 s steps, NaN and Inf included."""
        r = httpx.get(
            f"{self.url}/api/v1/query_range",
            params={"query": expr, "start": f"{start:.3f}", "end": f"{end:.3f}", "step": "1"},
            timeout=10,
        ).json()
        assert r["status"] == "success", (expr, r)
        return [float(v) for s in r["data"]["result"] for _, v in s["values"]]


async def _traffic(service_url: str, model_dir: Path, tmp_path: Path, prom: _Prom) -> None:
    """Two rounds of real traffic with a scrape between them, so every counter and
    histogram the panels rate() over grows across at least two scrapes (a series' first
    scrape is its baseline: what happened before it is no increase), with the same label
    sets in both rounds."""
    from codegym.envs import Resources
    from codegym.evals.runner import Runner, RunnerConfig
    from codegym.models import PretrainConfig, ensure_tiny_model
    from codegym.policies import OpenAIPolicy, Retry, SamplingParams
    from codegym.rollout import EnvSpec, LocalExecutor, RolloutConfig, RolloutEngine
    from codegym.sandbox import Sandbox, Session
    from codegym.service import RemoteSandbox
    from codegym.serving import ModelServer
    from codegym.tasks import load_humaneval
    from codegym.tasks.synthetic import generate
    from codegym.testing import FakeOpenAIServer
    from codegym.testing.fake_openai import humaneval_responder
    from codegym.train import Trainer, parse_config

    task = load_humaneval()[0]
    auth = {"authorization": f"Bearer {TOKEN}"}
    # The fake model server answers HumanEval (a pass and a fail per 2 samples) once
    # ``gate`` is open; round 2 holds it shut until Prometheus has seen the waiting eval
    # samples and episodes in flight.
    gate = threading.Event()
    answer = humaneval_responder()

    def gated(prompt: Any, params: Any, index: int) -> Any:
        gate.wait(60)  # blocks the fake's event loop: every request to it waits, as meant
        return answer(prompt, params, index)

    version = [0]  # the policy version the rollout samples from (a trainer's, in training)

    async def eval_and_rollout(sb: Sandbox, fake: FakeOpenAIServer, hold: bool) -> None:
        """An eval (2 samples, scored in ``sb``) and a rollout group of 2 episodes, at
        once; with ``hold``, answered only after both were scraped in flight, and with the
        policy version moved on meanwhile (so the episodes finish a version behind)."""
        async with OpenAIPolicy(fake.base_url, fake.model) as policy:
            runner = Runner(sb, config=RunnerConfig(suite="humaneval"))
            evaluating = asyncio.create_task(
                runner.evaluate([task], policy, SamplingParams(n=2, max_tokens=512))
            )
            ex = LocalExecutor(
                EnvSpec("code", {"style": "continuation"}), policy,
                SamplingParams(max_tokens=512), Resources(sb), prompt="completions",
                version=lambda: version[0],
            )  # fmt: skip
            engine = RolloutEngine(ex, RolloutConfig(group_size=2, retries=0), env="code")

            async def roll() -> list[Any]:
                return [g async for g in engine.run([task])]

            rolling = asyncio.create_task(roll())
            if hold:
                seen: set[str] = set()

                async def both_seen() -> bool:
                    for name, expr in (
                        ("episodes", "sum(codegym_rollout_episodes_in_flight) >= 2"),
                        ("eval", "sum(codegym_eval_samples_in_flight) >= 2"),
                    ):
                        if name not in seen and await prom.aquery(expr):
                            seen.add(name)
                    return len(seen) == 2

                try:
                    await await_until(both_seen, timeout=30, what="Prometheus to see the "
                                      "held episodes and eval samples in flight")  # fmt: skip
                    version[0] += 1  # a trainer step lands while they are held
                finally:
                    gate.set()
            samples = await evaluating
            [group] = await rolling
        assert sorted(r.passed for r in samples) == [False, True], samples
        assert len(group.trajectories) == 2 and not group.excluded, group  # scored, not infra

    async def dead_server_rollout(sb: Sandbox) -> None:
        # a rollout whose model server is gone: policy errors, counted as infra
        async with OpenAIPolicy("http://127.0.0.1:9/v1", "tiny", retry=Retry(1)) as policy:
            ex = LocalExecutor(EnvSpec("code"), policy, SamplingParams(max_tokens=16),
                               Resources(sb))  # fmt: skip
            engine = RolloutEngine(ex, RolloutConfig(group_size=2, retries=0), env="code")
            async for _ in engine.run(generate("infer", 1, 0, 1)):
                pass

    async def service_calls() -> None:
        # the service: a run and a 401
        async with RemoteSandbox(service_url, token=TOKEN) as remote:
            assert (await remote.run_python("print(1)")).ok
        async with httpx.AsyncClient(base_url=service_url, timeout=60) as http:
            assert (await http.post("/v1/run", json={"code": "1"})).status_code == 401

    # ---- round 1 ---------------------------------------------------------------------
    async with Sandbox(workers=1, recycle_after=2) as sb:
        # the sandbox: runs, a scheduled recycle, a replaced zygote, an infra error
        for _ in range(3):
            assert (await sb.run_python("print(1)")).ok
        proc = sb._workers[0].proc
        assert proc is not None
        proc.kill()
        await proc.wait()
        assert (await sb.run_python("print(1)")).ok
        async with Session() as s:
            assert (await s.run(["true"])).ok
            proc = s._workers[0].proc
            assert proc is not None
            proc.kill()
            await proc.wait()
            assert not (await s.run(["true"])).ok  # the session's files are gone: infra
        gate.set()
        with FakeOpenAIServer(responder=gated) as fake:
            await eval_and_rollout(sb, fake, hold=False)
        # a rollout against the model server (its policy versions), and one with none
        with ModelServer(model_dir, model_name="tiny") as srv:
            async with OpenAIPolicy(srv.base_url, "tiny", token_ids=True) as policy:
                ex = LocalExecutor(
                    EnvSpec("code"), policy, SamplingParams(max_tokens=16), Resources(sb)
                )
                engine = RolloutEngine(ex, RolloutConfig(group_size=2, retries=0), env="code")
                async for _ in engine.run(generate("infer", 2, 0, 1)):
                    pass
        await dead_server_rollout(sb)
    # the service: a burst past its queue (429s), a session left open
    await service_calls()
    async with httpx.AsyncClient(base_url=service_url, timeout=60) as http:
        slow = {"code": "import time; time.sleep(1)"}
        codes = await asyncio.gather(*(http.post("/v1/run", json=slow, headers=auth)
                                       for _ in range(6)))  # fmt: skip
        assert 429 in {r.status_code for r in codes}
        assert (await http.post("/v1/sessions", json={}, headers=auth)).status_code in (200, 201)
    # two trainer steps on a tiny model, a scrape between them
    small = PretrainConfig(steps=4, batch_size=2, docs_per_cell=15, difficulties=(1,),
                           vocab_size=300, n_layer=1, n_head=2, n_embd=32, threads=1)  # fmt: skip
    tiny = ensure_tiny_model(tmp_path / "models", small)
    cfg = parse_config({
        "model": {"threads": 1}, "run": {"steps": 2, "seed": 0},
        "grpo": {"group_size": 2, "groups_per_step": 1},
        "sampling": {"max_new_tokens": 8}, "tasks": {"train_tasks": 2},
        "checkpoint": {"dir": str(tmp_path / "train"), "every": 1, "keep": 1},
    })  # fmt: skip

    def after_step(row: dict[str, Any]) -> None:
        if row["step"] == 1:  # blocks the loop on purpose: step 2 waits for the scrape
            prom.wait_scraped(time.time())

    await Trainer(cfg, tiny, on_step=after_step).run()
    await prom.await_scraped(time.time())

    # ---- round 2: the same again, the eval and rollout held in flight ------------------
    gate.clear()
    try:
        async with Sandbox(workers=1) as sb:
            with FakeOpenAIServer(responder=gated) as fake:
                await eval_and_rollout(sb, fake, hold=True)
            await dead_server_rollout(sb)
    finally:
        gate.set()
    await service_calls()


@needs_prometheus
@pytest.mark.slow
def test_every_panel_shows_data_from_real_traffic(
    service: str, prometheus: tuple[str, Path], tmp_path: Path
) -> None:
    """Every panel's query has a finite point (not only NaN or Inf: a rate() or
    histogram_quantile over a window that saw no increase) somewhere in the run, and the
    in-flight and staleness panels read above zero at some scrape."""
    from codegym.serving import build_random_model

    prom_url, targets = prometheus
    prom = _Prom(prom_url)
    mine = serve_metrics(0)
    try:
        began = time.time()
        hostport = [mine.url.split("/")[2], service.split("/")[2]]
        targets.write_text(json.dumps([{"targets": hostport}]))
        model_dir = build_random_model(tmp_path / "random", n_embd=32, n_positions=512)
        prom.wait_scraped(began)  # every series' first scrape comes before its traffic
        asyncio.run(_traffic(service, model_dir, tmp_path, prom))
        prom.wait_scraped(time.time())

        def short() -> dict[str, str]:
            """The panels that still lack data, each with what it showed."""
            out = {}
            now = time.time()
            for where, expr in _panel_queries():
                points = prom.values(expr, began, now)
                finite = [v for v in points if math.isfinite(v)]
                if not finite:
                    out[where] = f"no finite point in {len(points)} ({expr})"
                elif where in NONZERO and max(finite) <= 0:
                    out[where] = f"never above 0 in {len(finite)} points ({expr})"
            return out

        last: list[dict[str, str]] = []

        def all_have_data() -> bool:
            last.append(short())
            return not last[-1]

        try:
            _wait("every panel to have data", all_have_data, timeout=20)
        except TimeoutError:
            raise AssertionError(
                f"panels short of data: {json.dumps(last[-1], indent=1)}"
            ) from None
        # the idle service reads 0 in flight (the scrape is not counted), and the 401 is
        # labelled with the route it was for
        text = httpx.get(f"{service}/metrics", timeout=10).text
        assert "codegym_service_in_flight 0.0" in text
        from prometheus_client.parser import text_string_to_metric_families

        refused = [
            s.labels
            for f in text_string_to_metric_families(text)
            for s in f.samples
            if s.name == "codegym_service_requests_total" and s.labels["status"] == "401"
        ]
        assert {"route": "/v1/run", "method": "POST", "status": "401"} in refused
        assert "codegym_trainer_" not in text  # no trainer there: no flat zero for its panels
    finally:
        mine.close()
