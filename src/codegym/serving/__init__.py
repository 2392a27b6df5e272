"""The OpenAI-compatible model server for a local Hugging Face checkpoint.

``ModelServer`` (background thread, for tests and the train-serve loop) and ``serve_model``
(blocking, ``codegym serve-model``) put a ``TransformersPolicy`` behind ``/v1/models``,
``/v1/completions`` and ``/v1/chat/completions`` with logprobs and vLLM-style token ids,
and accept weight updates without a restart (``POST /v1/weights``, ``POST /v1/reload``),
each bumping the ``policy_version`` reported in every response.
"""

from codegym.serving.app import create_model_app
from codegym.serving.engine import RequestError, ServingEngine
from codegym.serving.random_model import build_random_model
from codegym.serving.server import ModelServer, serve_model

__all__ = [
    "ModelServer",
    "RequestError",
    "ServingEngine",
    "build_random_model",
    "create_model_app",
    "serve_model",
]
