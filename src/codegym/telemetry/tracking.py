"""MLflow tracking of eval and training runs: params, metrics per step, HTML reports.

Contract:
- ``Tracker(run_name, tracking_uri=None, experiment="codegym")``; ``start()`` (or ``with``)
  checks everything that can fail up front: that mlflow imports, that the store is reachable
  and writable, that the experiment exists or can be made. Any of these raises
  ``TrackingError`` there, before the run does work, never halfway through it.
- The store: ``tracking_uri`` when given, else ``MLFLOW_TRACKING_URI``, else the local
  directory ``./mlruns`` (``DEFAULT_STORE``), an MLflow file store. mlflow-skinny ships no SQL
  store, and MLflow 3 refuses file stores unless ``MLFLOW_ALLOW_FILE_STORE`` is set, so
  ``start()`` sets that variable (only when it is unset) for local stores.
- Logging after ``start()`` goes straight to the store; an error then (a disk full, a server
  gone) raises ``TrackingError``: a tracked run never silently stops being tracked.
- Metric and param keys are made MLflow-safe with ``mlflow_key`` (``pass@1`` becomes
  ``pass_at_1``; other characters MLflow refuses become ``_``), so a common name never fails
  a run halfway.
- Leaving the ``with`` block ends the run FINISHED, or FAILED when an exception escaped.
- Uses an explicit ``MlflowClient`` and no mlflow global state, so several trackers (an eval
  inside a training run) can be open in one process.
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Callable, Mapping
from functools import partial
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Final, Literal, TypeVar
from urllib.parse import urlparse

from codegym.errors import CodegymError

if TYPE_CHECKING:
    from mlflow.tracking import MlflowClient

DEFAULT_STORE: Final = "mlruns"
"""The local store, relative to the current directory, when no tracking URI is given."""
PROBE_TIMEOUT_S: Final = 5.0
_MAX_PARAM_CHARS: Final = 6000  # MLflow's limit on a param value
_UNSAFE_KEY: Final = re.compile(r"[^A-Za-z0-9_\-. :/]")  # what MLflow accepts in a key

RunStatus = Literal["FINISHED", "FAILED", "KILLED"]
_T = TypeVar("_T")


class TrackingError(CodegymError, RuntimeError):
    """The tracking store is unavailable, or a log call failed."""


def resolve_tracking_uri(tracking_uri: str | None) -> str:
    """The URI a tracker will use: the argument, ``MLFLOW_TRACKING_URI``, or ./mlruns."""
    uri = tracking_uri or os.environ.get("MLFLOW_TRACKING_URI") or DEFAULT_STORE
    if "://" not in uri and not uri.startswith("file:"):
        return Path(uri).resolve().as_uri()  # a plain directory
    return uri


class Tracker:
    """One MLflow run.

    Args:
        run_name: the run's display name.
        tracking_uri: ``http(s)://`` server, ``file:`` URI or a directory; see the module
            docstring for the default.
        experiment: experiment name, created when missing.
        tags: extra run tags (the harness version, the git commit, ...).
    """

    def __init__(
        self,
        run_name: str,
        *,
        tracking_uri: str | None = None,
        experiment: str = "codegym",
        tags: Mapping[str, str] | None = None,
    ) -> None:
        if not run_name or not isinstance(run_name, str):
            raise TrackingError(f"run_name={run_name!r}: give the run a non-empty name")
        if not experiment or not isinstance(experiment, str):
            raise TrackingError(f"experiment={experiment!r}: give a non-empty name")
        self.run_name = run_name
        self.experiment = experiment
        self.tracking_uri = resolve_tracking_uri(tracking_uri)
        self.tags = dict(tags or {})
        self._client: MlflowClient | None = None
        self._run_id: str | None = None

    # -- lifecycle -----------------------------------------------------------

    def start(self) -> Tracker:
        """Check the store and open the run.

        Raises:
            TrackingError: mlflow is missing, the store is unreachable or not writable.
        """
        if self._run_id is not None:
            return self
        scheme = urlparse(self.tracking_uri).scheme
        if scheme == "file":
            os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")
            self._check_local_store()
        elif scheme in ("http", "https"):
            self._probe_server()
        try:
            from mlflow.exceptions import MlflowException
            from mlflow.tracking import MlflowClient
        except ImportError as e:
            raise TrackingError(
                f"MLflow tracking needs the mlflow-skinny package ({e}); "
                "install it with `pip install mlflow-skinny` or run without tracking"
            ) from e
        try:
            client = MlflowClient(tracking_uri=self.tracking_uri, registry_uri=self.tracking_uri)
            exp = client.get_experiment_by_name(self.experiment)
            exp_id = exp.experiment_id if exp is not None else None
            if exp_id is None:
                exp_id = client.create_experiment(self.experiment)
            run = client.create_run(exp_id, run_name=self.run_name, tags=self.tags)
        except MlflowException as e:
            raise TrackingError(
                f"cannot open an MLflow run at {self.tracking_uri}: {e.message}"
            ) from e
        self._client = client
        self._run_id = run.info.run_id
        return self

    def end(self, status: RunStatus = "FINISHED") -> None:
        """Mark the run ended (idempotent)."""
        if self._client is None or self._run_id is None:
            return
        client, run_id = self._client, self._run_id
        self._client = None
        self._call(lambda: client.set_terminated(run_id, status=status))

    def __enter__(self) -> Tracker:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if exc_type is KeyboardInterrupt:
            self.end("KILLED")
        else:
            self.end("FAILED" if exc_type is not None else "FINISHED")

    # -- logging -------------------------------------------------------------

    @property
    def run_id(self) -> str:
        """The MLflow run id.

        Raises:
            TrackingError: the run was not started.
        """
        if self._run_id is None:
            raise TrackingError("the tracker has no run yet; call start() or use `with`")
        return self._run_id

    def log_params(self, params: Mapping[str, object]) -> None:
        """Log run parameters (values are stringified; MLflow keeps the first value)."""
        from mlflow.entities import Param

        items = [Param(mlflow_key(k), _param_value(str(k), v)) for k, v in params.items()]
        client, run_id = self._live()
        for i in range(0, len(items), 100):  # MLflow's per-batch limit on params
            chunk = items[i : i + 100]
            self._call(partial(client.log_batch, run_id, params=chunk))

    def set_tags(self, tags: Mapping[str, str]) -> None:
        """Tag the run (a verdict, lineage ids: strings to filter runs by)."""
        from mlflow.entities import RunTag

        client, run_id = self._live()
        items = [RunTag(mlflow_key(k), str(v)) for k, v in tags.items()]
        self._call(partial(client.log_batch, run_id, tags=items))

    def log_metrics(self, metrics: Mapping[str, float], step: int | None = None) -> None:
        """Log metric values at ``step`` (default 0).

        Raises:
            TrackingError: a value is not a real number, or the store failed.
        """
        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        batch = []
        for key, value in metrics.items():
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise TrackingError(f"metric {key!r}={value!r} is not a number")
            batch.append(Metric(mlflow_key(key), float(value), now, step or 0))
        client, run_id = self._live()
        for i in range(0, len(batch), 1000):  # MLflow's per-batch limit on metrics
            chunk = batch[i : i + 1000]
            self._call(partial(client.log_batch, run_id, metrics=chunk))

    def log_metric(self, key: str, value: float, step: int | None = None) -> None:
        self.log_metrics({key: value}, step)

    def log_artifact(self, path: str | os.PathLike[str], artifact_path: str | None = None) -> None:
        """Copy a file or directory (an HTML report) into the run's artifacts.

        Raises:
            TrackingError: ``path`` does not exist, or the store failed.
        """
        p = Path(path)
        if not p.exists():
            raise TrackingError(f"artifact {p} does not exist; write the report first")
        client, run_id = self._live()
        if p.is_dir():
            self._call(lambda: client.log_artifacts(run_id, str(p), artifact_path))
        else:
            self._call(lambda: client.log_artifact(run_id, str(p), artifact_path))

    def register_model(
        self, name: str, artifact_path: str, tags: Mapping[str, str] | None = None
    ) -> str:
        """Register this run's artifact folder ``artifact_path`` as a new version of the
        model ``name`` in the registry (the tracking store's), creating the model when it
        is new; returns the version.

        Raises:
            TrackingError: the registry refused it, or the store failed.
        """
        from mlflow.exceptions import MlflowException

        client, run_id = self._live()
        try:
            client.get_registered_model(name)
        except MlflowException:
            self._call(lambda: client.create_registered_model(name))
        version = self._call(
            lambda: client.create_model_version(
                name, f"runs:/{run_id}/{artifact_path}", run_id=run_id, tags=dict(tags or {})
            )
        )
        return str(version.version)

    # -- machinery -----------------------------------------------------------

    def _live(self) -> tuple[MlflowClient, str]:
        if self._client is None or self._run_id is None:
            raise TrackingError(
                f"run {self.run_name!r} is not open; call start() (or use `with`) first"
            )
        return self._client, self._run_id

    def _call(self, fn: Callable[[], _T]) -> _T:
        from mlflow.exceptions import MlflowException

        try:
            return fn()
        except (MlflowException, OSError) as e:
            raise TrackingError(f"MLflow at {self.tracking_uri} failed: {e}") from e

    def _check_local_store(self) -> None:
        from urllib.request import url2pathname

        root = Path(url2pathname(urlparse(self.tracking_uri).path))
        try:
            root.mkdir(parents=True, exist_ok=True)
            probe = root / f".codegym-write-check-{os.getpid()}"
            probe.write_bytes(b"")
            probe.unlink()
        except OSError as e:
            raise TrackingError(
                f"the MLflow store {root} is not writable ({e.strerror or e}); "
                "pass tracking_uri= a writable directory or a server URL"
            ) from e

    def _probe_server(self) -> None:
        # MLflow's own client retries a dead server for minutes; one short probe turns that
        # into an immediate, clear error at start.
        import httpx  # imported here: it costs ~150 ms and only server URIs need it

        url = self.tracking_uri.rstrip("/") + "/health"
        try:
            httpx.get(url, timeout=PROBE_TIMEOUT_S)
        except httpx.HTTPError as e:
            raise TrackingError(
                f"MLflow tracking server {self.tracking_uri} is unreachable ({e}); "
                "start it, fix the URI, or omit it to use the local store ./mlruns"
            ) from e


def mlflow_key(key: str) -> str:
    """``key`` with the characters MLflow refuses replaced (``pass@1`` -> ``pass_at_1``)."""
    return _UNSAFE_KEY.sub("_", str(key).replace("@", "_at_"))


def _param_value(key: str, value: object) -> str:
    text = str(value)
    if len(text) > _MAX_PARAM_CHARS:
        raise TrackingError(
            f"param {key!r} is {len(text)} characters; MLflow keeps at most "
            f"{_MAX_PARAM_CHARS}: log it as an artifact instead"
        )
    return text
