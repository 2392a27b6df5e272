"""Policies by name, for the command line: ``--policy NAME --policy-options JSON``.

A policy is one file (a class with ``name`` and ``generate``: the ``Policy`` protocol) and
one registration of a factory, ``POLICIES.register("mine", "my_package.my_policy:make")``
(imported on first use). A factory takes the command's common settings as keywords,
``model``, ``base_url``, ``mode``, ``concurrency``, ``api_key`` and ``tools``, plus the
``--policy-options`` object, and returns the policy; it ignores the settings it has no
use for and raises ``PolicyError("config", ...)`` for what it cannot take.
docs/extending.md has a whole example.

Built in: ``openai`` (an OpenAI-compatible server: ``OpenAIPolicy``, the default),
``replay`` (a samples file: ``ReplayPolicy``; options ``{"path": FILE}``) and
``transformers`` (a local Hugging Face model in this process: ``TransformersPolicy``;
options ``{"model_dir": DIR}``, default ``--model``).
"""

from __future__ import annotations

from typing import Any, Protocol

from codegym._registry import Registry
from codegym.policies.errors import PolicyError
from codegym.policies.policy import Policy

__all__ = ["POLICIES", "PolicyFactory", "make_policy"]


class PolicyFactory(Protocol):
    def __call__(
        self,
        *,
        model: str,
        base_url: str | None,
        mode: str,
        concurrency: int,
        api_key: str | None,
        tools: list[dict[str, Any]] | None,
        **options: Any,
    ) -> Policy: ...


POLICIES: Registry[PolicyFactory] = Registry(
    "policy", "add one with codegym.policies.registry.POLICIES.register(name, 'module:factory')"
)


@POLICIES.plugin("openai")
def _openai(
    *,
    model: str,
    base_url: str | None,
    mode: str,
    concurrency: int,
    api_key: str | None,
    tools: list[dict[str, Any]] | None,
    **options: Any,
) -> Policy:
    from codegym.policies.openai_policy import OpenAIPolicy

    if not base_url:
        raise PolicyError("config", "--policy openai needs --base-url (the server's .../v1)")
    return OpenAIPolicy(
        base_url,
        model,
        api_key=api_key,
        mode=mode,  # type: ignore[arg-type]
        concurrency=concurrency,
        tools=tools,
        **options,
    )


@POLICIES.plugin("replay")
def _replay(*, model: str, **options: Any) -> Policy:
    from codegym.policies.replay import ReplayPolicy

    path = options.get("path")
    if not isinstance(path, str):
        raise PolicyError("config", "--policy replay needs --policy-options '{\"path\": FILE}'")
    return ReplayPolicy(path, name=model or None)


@POLICIES.plugin("transformers")
def _transformers(*, model: str, **options: Any) -> Policy:
    from codegym.policies.transformers_policy import TransformersPolicy

    model_dir = options.pop("model_dir", model)
    known = {k: options[k] for k in ("device", "batch_size", "seed", "torch_threads")
             if k in options}  # fmt: skip
    return TransformersPolicy(model_dir, name=model, **known)


def make_policy(name: str, **settings: Any) -> Policy:
    """The policy ``name`` built from the command's ``settings`` (see the module doc).

    Raises:
        UnknownName: no policy of that name (the message lists the registered ones).
        PolicyError: the factory refused the settings.
    """
    return POLICIES.get(name)(**settings)
