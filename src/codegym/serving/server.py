"""Run the model server: ``serve_model`` (blocking, for the CLI) and ``ModelServer`` (a thread).

``ModelServer`` starts uvicorn in a background thread on 127.0.0.1 (an ephemeral port by
default) for tests, benchmarks and the demo's train-serve loop::

    with ModelServer(model_dir) as srv:
        policy = OpenAIPolicy(srv.base_url, srv.model_name, token_ids=True, logprobs=True)
        ...
        srv.policy.load_weights(new_dir)        # or POST {base_url}/weights
"""

from __future__ import annotations

import socket
import threading
from pathlib import Path

import uvicorn

from codegym.policies.transformers_policy import LogprobsMode, TransformersPolicy
from codegym.serving.app import create_model_app
from codegym.serving.engine import ServingEngine
from codegym.serving.weight_transfer import WeightReceiver


class ModelServer:
    """The OpenAI-compatible model server in a background thread (module doc)."""

    def __init__(
        self,
        model_dir: str | Path,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        model_name: str | None = None,
        device: str = "cpu",
        batch_size: int = 32,
        seed: int = 0,
        logprobs_mode: LogprobsMode = "raw",
        api_key: str | None = None,
        weights_token: str | None = None,
        torch_threads: int | None = None,
        weight_transfer: bool = False,
    ) -> None:
        self.policy = TransformersPolicy(
            model_dir,
            device=device,
            batch_size=batch_size,
            seed=seed,
            logprobs_mode=logprobs_mode,
            torch_threads=torch_threads,
        )
        self.engine = ServingEngine(self.policy, model_name)
        self.receiver = WeightReceiver(self.policy) if weight_transfer else None
        self.app = create_model_app(
            self.engine, api_key=api_key, weights_token=weights_token, receiver=self.receiver
        )
        self._host, self._port = host, port
        self._server: uvicorn.Server | None = None
        self._thread: threading.Thread | None = None

    @property
    def model_name(self) -> str:
        return self.engine.model_name

    @property
    def base_url(self) -> str:
        """``http://HOST:PORT/v1``."""
        if self._server is None:
            raise RuntimeError("ModelServer is not running; use it as a context manager")
        return f"http://{self._host}:{self._port}/v1"

    def __enter__(self) -> ModelServer:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> None:
        """Bind, start serving, and return once requests are accepted.

        Raises:
            OSError: the address cannot be bound.
            RuntimeError: uvicorn did not start within 30 s.
        """
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((self._host, self._port))
        self._port = sock.getsockname()[1]
        config = uvicorn.Config(
            self.app, log_level="warning", access_log=False, lifespan="off", timeout_keep_alive=30
        )
        server = uvicorn.Server(config)
        self._server = server
        self._thread = threading.Thread(
            target=server.run, kwargs={"sockets": [sock]}, name="model-server", daemon=True
        )
        self._thread.start()
        ready = threading.Event()
        for _ in range(3000):
            if server.started:
                return
            if not self._thread.is_alive():
                break
            ready.wait(0.01)
        self.stop()
        raise RuntimeError(f"ModelServer did not start on {self._host}:{self._port}")

    def stop(self) -> None:
        """Stop serving and the policy's worker (idempotent)."""
        server, thread = self._server, self._thread
        if server is not None and thread is not None:
            server.should_exit = True
            thread.join(timeout=30)
        self._server = self._thread = None
        if self.receiver is not None:
            self.receiver.close()
        self.policy.close()


def serve_model(
    model_dir: str | Path,
    *,
    host: str = "127.0.0.1",
    port: int = 8000,
    model_name: str | None = None,
    device: str = "cpu",
    batch_size: int = 32,
    seed: int = 0,
    logprobs_mode: LogprobsMode = "raw",
    api_key: str | None = None,
    weights_token: str | None = None,
    log_level: str = "info",
    torch_threads: int | None = None,
    weight_transfer: bool = False,
) -> None:
    """Serve until interrupted (SIGINT/SIGTERM: uvicorn drains open requests first);
    ``weight_transfer`` adds vLLM's weight-transfer routes (``serving.weight_transfer``)."""
    policy = TransformersPolicy(
        model_dir,
        device=device,
        batch_size=batch_size,
        seed=seed,
        logprobs_mode=logprobs_mode,
        torch_threads=torch_threads,
    )
    engine = ServingEngine(policy, model_name)
    receiver = WeightReceiver(policy) if weight_transfer else None
    app = create_model_app(engine, api_key=api_key, weights_token=weights_token, receiver=receiver)
    try:
        uvicorn.run(app, host=host, port=port, log_level=log_level, access_log=False)
    finally:
        if receiver is not None:
            receiver.close()
        policy.close()
