"""The policy layer's one error type.

A policy either returns exactly ``params.n`` generations or raises ``PolicyError``; it
never returns a partial or empty answer. Transient server faults are retried inside the
policy first, so a ``PolicyError`` means the budget is spent (or retrying cannot help)::

    PolicyError(kind=...)
      "http_status"   the server answered with an error status (4xx that retrying cannot
                      fix, or 408/409/429/5xx after every attempt)
      "timeout"       no answer within the per-request timeout, after every attempt
      "connection"    refused, reset or dropped connections, after every attempt
      "bad_response"  an answer that is not the OpenAI shape (garbage JSON, too few choices)
      "config"        the caller's mistake (bad parameters, a replay file without the
                      sample asked for); retrying never helps. Parameter checks raise
                      its subclass ``PolicyConfigError`` (also a ``ValueError``)

Callers turn a ``PolicyError`` into the infra outcome ``policy_error``: the model is not
to blame, so it is excluded, never scored as a failure.
"""

from __future__ import annotations

from typing import Literal, get_args

from codegym.errors import CodegymError

PolicyErrorKind = Literal["http_status", "timeout", "connection", "bad_response", "config"]
POLICY_ERROR_KINDS: frozenset[str] = frozenset(get_args(PolicyErrorKind))


class PolicyError(CodegymError):
    """A policy could not produce the generations asked for.

    The message names the server (or file) and says what to do about it.
    """

    exit_code = 3  # the run failed on the way, not the input

    def __init__(
        self,
        kind: PolicyErrorKind,
        message: str,
        *,
        status: int | None = None,
        attempts: int = 1,
    ) -> None:
        if kind not in POLICY_ERROR_KINDS:
            raise ValueError(
                f"unknown PolicyError kind {kind!r}; use one of {sorted(POLICY_ERROR_KINDS)}"
            )
        super().__init__(message)
        self.kind: PolicyErrorKind = kind
        self.status = status
        """The HTTP status of the last answer, when there was one."""
        self.attempts = attempts
        """How many requests were made before giving up."""


class PolicyConfigError(PolicyError, ValueError):
    """A caller's bad parameter (``SamplingParams``, ``Retry``, ``Hedge``, weights that do
    not fit the model): ``kind="config"``, a ``ValueError`` too, and exit code 2."""

    exit_code = 2  # the input, not the run

    def __init__(self, message: str) -> None:
        super().__init__("config", message)
