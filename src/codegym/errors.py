"""The root of codegym's errors: every error a codegym API raises on purpose is a
``CodegymError``, so a caller (and the CLI) can catch codegym's failures in one place and
still tell them apart by their own types.

One type per boundary, each keeping the builtin base its callers already catch::

    CodegymError
    ├── UnknownName, RegistrationError, PluginError (_registry)
    ├── SandboxError (sandbox.errors)        ← SandboxInputError, WorkspaceError,
    │                                          SandboxInfraError, HostUnsupported,
    │                                          SandboxClosed, ImageError, ...
    ├── StoreError (store.errors)
    ├── DatasetError, RecordError, TaskError (tasks)
    ├── PolicyError (policies.errors)        ← PolicyConfigError (a bad parameter)
    ├── ModelConfigError (models.errors)
    ├── EnvError, EnvInfraError (envs.env)
    ├── RolloutError, RolloutAborted (rollout.config), EpisodeFailure (rollout.executor)
    ├── RunError, PricesError (evals)
    ├── ConfigError, CheckpointError, WeightsPushError (train)
    ├── TracingConfigError, TrackingError, MetricsServerError (telemetry)
    │                                        ← MetricsPortError
    ├── ServiceConfigError, SessionLimit, UnknownSession, Overloaded, ... (service)
    └── RequestError (serving.engine)

A check of what a caller passed (an option, a config, a record, a parameter) raises the
boundary's type, which keeps the builtin base such checks used to raise (``ValueError``
mostly), so ``except ValueError`` still catches it. Checks of codegym's own invariants
(a bug if they fail) stay plain builtins.

``exit_code`` is what ``codegym`` exits with when the error reaches the command line
(``cli.app.main`` prints the message, which names the input and the fix, without a
traceback): 2 for a user's input or configuration, 3 for a run that failed on the way
(infrastructure past its retries, an aborted rollout).
"""

from __future__ import annotations

from typing import ClassVar

__all__ = ["CodegymError"]


class CodegymError(Exception):
    """Base of every error codegym raises on purpose (see the module docstring)."""

    exit_code: ClassVar[int] = 2
    """The ``codegym`` command's exit status when this error ends it."""
