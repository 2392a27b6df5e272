"""``HttpWeightsHook``: push trained weights to a model server (``codegym serve-model``).

The trainer's ``PolicyHook`` for a policy that lives in another process: ``load_weights``
writes the state dict as one ``.safetensors`` file under ``stage_dir`` (a folder the server
can read: same machine or a shared volume), then ``POST {base_url}/weights {"path": ...}``;
the server swaps the weights between batches and answers with its new ``policy_version``,
which this hook returns. Only the two newest staged files are kept; ``repush`` sends the
newest again (a server that restarted came back with other weights).

Raises ``WeightsPushError`` (with the server's message) when the server refuses or cannot
be reached, so a training run stops loudly instead of training against stale weights.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import httpx
import torch
from safetensors.torch import save_file

from codegym.errors import CodegymError

__all__ = ["HttpWeightsHook", "WeightsPushError"]


class WeightsPushError(CodegymError, RuntimeError):
    """The model server did not take the new weights; the message says why."""

    def __init__(self, message: str, *, reachable: bool = True) -> None:
        super().__init__(message)
        self.reachable = reachable
        """False: no answer at all (down or restarting), so waiting can help."""


class HttpWeightsHook:
    """``PolicyHook`` over HTTP (see the module docstring)."""

    def __init__(
        self,
        base_url: str,
        stage_dir: str | Path,
        *,
        token: str | None = None,
        timeout_s: float = 120.0,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.stage_dir = Path(stage_dir)
        self.stage_dir.mkdir(parents=True, exist_ok=True)
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self._client = httpx.Client(headers=headers, timeout=timeout_s)
        self._version = 0
        self._pushes = 0
        self.staged: Path | None = None
        """The newest staged weights file (what ``repush`` sends)."""

    def current_version(self) -> int:
        """The version the server reported for the last push (0 before any)."""
        return self._version

    def load_weights(self, weights: Mapping[str, torch.Tensor]) -> int:
        """Stage ``weights`` and make the server load them; return its new version.

        Raises:
            WeightsPushError: the server refused the weights or could not be reached
                (``reachable`` says which; the staged file is kept for ``repush``).
        """
        before = self.staged
        path = self.stage(weights)
        try:
            return self.repush()
        except WeightsPushError as e:
            if e.reachable:  # refused: these weights are no good; the last good ones stay
                path.unlink(missing_ok=True)
                self.staged = before
            raise

    def stage(self, weights: Mapping[str, torch.Tensor]) -> Path:
        """Write ``weights`` as the newest staged file without pushing them (a training
        process that is not the one pushing keeps them for a ``repush``)."""
        self._pushes += 1
        path = self.stage_dir / f"weights-{self._pushes:06d}.safetensors"
        # Tied tensors share storage, which safetensors refuses: save independent copies.
        save_file({k: v.detach().cpu().clone().contiguous() for k, v in weights.items()}, path)
        self.staged = path
        old = self.stage_dir / f"weights-{self._pushes - 2:06d}.safetensors"
        old.unlink(missing_ok=True)
        return path

    def repush(self) -> int:
        """Make the server load the newest staged weights again (after it restarted).

        Raises:
            WeightsPushError: as ``load_weights``; also when nothing was staged yet.
        """
        if self.staged is None:
            raise WeightsPushError("no weights were staged yet; call load_weights first")
        url = f"{self.base_url}/weights"
        try:
            r = self._client.post(url, json={"path": str(self.staged.resolve())})
        except httpx.HTTPError as e:
            raise WeightsPushError(f"{url}: {type(e).__name__}: {e}", reachable=False) from e
        if r.status_code != 200:
            # A 5xx is the server (or a proxy in front of it) failing, not these weights.
            away = r.status_code >= 500
            raise WeightsPushError(
                f"{url}: HTTP {r.status_code}: {r.text[:500]}", reachable=not away
            )
        self._version = int(r.json()["policy_version"])
        return self._version

    def close(self) -> None:
        self._client.close()
