"""The Grafana dashboard the way a user meets it: real traffic (an eval, a rollout against
the model server, a trainer step, the sandbox service with its faults), a real Prometheus
started here on loopback scraping it, and every panel's query returning data; and every
shipped scrape config accepted by ``promtool check config``."""

from __future__ import annotations

import asyncio
import json
import re
import shutil
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from codegym.telemetry import serve_metrics
from codegym.testing import wait_until

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
            expr = t["expr"].replace("$__rate_interval", "30s")
            expr = re.sub(r'=~"\$\w+"', '=~".*"', expr)  # every tier, env, suite
            out.append((f"{panel['title']} [{t['refId']}]", expr))
    return out


async def _traffic(service_url: str, model_dir: Path, tmp_path: Path) -> None:
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
    from codegym.train import Trainer, parse_config

    tasks = load_humaneval()[:2]
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
        # an eval: samples from a fake model server, scored here
        with FakeOpenAIServer() as fake:
            async with OpenAIPolicy(fake.base_url, fake.model) as policy:
                runner = Runner(sb, config=RunnerConfig(suite="humaneval"))
                await runner.evaluate(tasks, policy, SamplingParams(n=2, max_tokens=32))
        # a rollout against the model server (policy versions: staleness), and one whose
        # model server is gone (policy errors: infra)
        with ModelServer(model_dir, model_name="tiny") as srv:
            synth = generate("infer", 2, 0, 1)
            for url, retry in ((srv.base_url, None), ("http://127.0.0.1:9/v1", Retry(1))):
                async with OpenAIPolicy(url, "tiny", retry=retry, token_ids=True) as policy:
                    ex = LocalExecutor(
                        EnvSpec("code"), policy, SamplingParams(max_tokens=16), Resources(sb)
                    )
                    engine = RolloutEngine(ex, RolloutConfig(group_size=2, retries=0), env="code")
                    async for _ in engine.run(synth):
                        pass
    # the service: runs, a 401, a burst past its queue (429s), a session left open
    async with RemoteSandbox(service_url, token=TOKEN) as remote:
        assert (await remote.run_python("print(1)")).ok
    async with httpx.AsyncClient(base_url=service_url, timeout=60) as http:
        assert (await http.post("/v1/run", json={"code": "1"})).status_code == 401
        auth = {"authorization": f"Bearer {TOKEN}"}
        slow = {"code": "import time; time.sleep(1)"}
        codes = await asyncio.gather(*(http.post("/v1/run", json=slow, headers=auth)
                                       for _ in range(6)))  # fmt: skip
        assert 429 in {r.status_code for r in codes}
        assert (await http.post("/v1/sessions", json={}, headers=auth)).status_code in (200, 201)
    # a trainer step on a tiny model
    small = PretrainConfig(steps=4, batch_size=2, docs_per_cell=15, difficulties=(1,),
                           vocab_size=300, n_layer=1, n_head=2, n_embd=32, threads=1)  # fmt: skip
    tiny = ensure_tiny_model(tmp_path / "models", small)
    cfg = parse_config({
        "model": {"threads": 1}, "run": {"steps": 1, "seed": 0},
        "grpo": {"group_size": 2, "groups_per_step": 1},
        "sampling": {"max_new_tokens": 8}, "tasks": {"train_tasks": 2},
        "checkpoint": {"dir": str(tmp_path / "train"), "every": 1, "keep": 1},
    })  # fmt: skip
    await Trainer(cfg, tiny).run()


@needs_prometheus
@pytest.mark.slow
def test_every_panel_shows_data_from_real_traffic(
    service: str, prometheus: tuple[str, Path], tmp_path: Path
) -> None:
    from codegym.serving import build_random_model

    prom, targets = prometheus
    mine = serve_metrics(0)
    try:
        hostport = [mine.url.split("/")[2], service.split("/")[2]]
        targets.write_text(json.dumps([{"targets": hostport}]))
        model_dir = build_random_model(tmp_path / "random", n_embd=32, n_positions=512)
        asyncio.run(_traffic(service, model_dir, tmp_path))

        def empty() -> list[str]:
            out = []
            for where, expr in _panel_queries():
                r = httpx.get(f"{prom}/api/v1/query", params={"query": expr}, timeout=10).json()
                assert r["status"] == "success", (where, r)
                if not r["data"]["result"]:
                    out.append(where)
            return out

        last: list[list[str]] = []

        def all_have_data() -> bool:
            last.append(empty())
            return not last[-1]

        try:
            _wait("every panel to have data", all_have_data, timeout=90)
        except TimeoutError:
            raise AssertionError(f"panels with no data: {last[-1]}") from None
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
