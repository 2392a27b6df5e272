"""Prices that turn a run's tokens and sandbox seconds into money, read from a small file.

The file is TOML (``.toml``) or YAML (``.yaml`` / ``.yml``)::

    currency = "USD"          # shown next to every amount
    cpu_hour = 0.05           # per sandbox CPU-hour (cpu_s of each sample)

    [models."gpt-4o-mini"]    # the run's model, as in summary.json config.model
    input_per_m = 0.15        # per 1M input (prompt) tokens
    output_per_m = 0.60       # per 1M output (completion) tokens

    [models.default]          # optional: any model not listed above
    input_per_m = 1.0
    output_per_m = 3.0

Contract: every key is optional except the per-model pair; unknown keys are refused (a typo
must not silently price a run at zero). Without a prices file a report shows raw tokens and
seconds; with one, a run whose model has no entry (and no ``default``) shows its token cost as
unknown, never as zero.
"""

from __future__ import annotations

import tomllib
from collections.abc import Mapping
from pathlib import Path

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from codegym.errors import CodegymError


class PricesError(CodegymError, ValueError):
    """The prices file cannot be used: the message names the file and the fix."""


class ModelPrice(BaseModel):
    """What one model costs per million tokens."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    input_per_m: float = Field(ge=0, description="price per 1M input tokens")
    output_per_m: float = Field(ge=0, description="price per 1M output tokens")


class Prices(BaseModel):
    """Prices per model and per sandbox CPU-hour."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    currency: str = "USD"
    """Label shown next to amounts (no conversion happens)."""
    cpu_hour: float | None = Field(default=None, ge=0)
    """Price of one sandbox CPU-hour; None leaves sandbox CPU unpriced."""
    models: dict[str, ModelPrice] = Field(default_factory=dict)
    """Model name -> token prices; the key ``default`` prices unlisted models."""

    def for_model(self, model: str | None) -> ModelPrice | None:
        """Token prices of ``model``, else the ``default`` entry, else None."""
        if model is not None and model in self.models:
            return self.models[model]
        return self.models.get("default")

    def per_sample(self, model: str | None, costs: Mapping[str, float]) -> float | None:
        """Money per scored sample from a run's mean ``tokens_in``/``tokens_out``/``cpu_s``.

        None when a needed price or field is missing: an unknown cost is not a zero cost.
        """
        total = 0.0
        priced = False
        mp = self.for_model(model)
        if "tokens_in" in costs or "tokens_out" in costs:
            if mp is None:
                return None
            total += costs.get("tokens_in", 0.0) * mp.input_per_m / 1e6
            total += costs.get("tokens_out", 0.0) * mp.output_per_m / 1e6
            priced = True
        if "cpu_s" in costs and self.cpu_hour is not None:
            total += costs["cpu_s"] * self.cpu_hour / 3600
            priced = True
        return total if priced else None


def load_prices(path: str | Path) -> Prices:
    """Read a prices file (TOML or YAML by suffix).

    Raises:
        PricesError: missing file, unknown suffix, a parse error or a bad/unknown key.
    """
    p = Path(path)
    suffix = p.suffix.lower()
    if suffix not in (".toml", ".yaml", ".yml"):
        raise PricesError(f"{p}: prices file must end in .toml, .yaml or .yml")
    try:
        text = p.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise PricesError(f"{p}: no such prices file; see docs/reports.md for the format") from None
    except (OSError, UnicodeDecodeError) as e:
        raise PricesError(f"{p}: cannot read: {e}") from None
    try:
        if suffix == ".toml":
            data: object = tomllib.loads(text)
        else:
            data = yaml.safe_load(text) or {}
    except (tomllib.TOMLDecodeError, yaml.YAMLError) as e:
        raise PricesError(f"{p}: not valid {suffix[1:].upper()}: {e}") from None
    if not isinstance(data, dict):
        raise PricesError(f"{p}: expected a table/mapping at the top level")
    try:
        return Prices.model_validate(data)
    except ValidationError as e:
        errs = "; ".join(
            f"{'.'.join(str(x) for x in err['loc'])}: {err['msg']}" for err in e.errors()
        )
        raise PricesError(f"{p}: {errs} (see docs/reports.md for the format)") from None
