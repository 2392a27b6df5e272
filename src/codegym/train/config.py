"""The trainer's configuration: one typed file (TOML or YAML) with every knob.

    cfg = load_config("configs/grpo_tiny.toml")     # or TrainConfig(...) in code
    cfg.grpo.clip_eps, cfg.run.mode, cfg.checkpoint.every

Sections: ``model`` (what to train), ``env`` (which environment scores), ``run`` (steps,
mode, staleness, seed), ``optim``, ``grpo`` (loss), ``sampling``, ``tasks`` (a suite split
by task id, or a synthetic family with two seeds), ``sandbox`` (tier, workers, limits),
``checkpoint`` and ``server`` (generate through a model server instead of in-process).
Unknown keys are refused (a typo must not be silently ignored); every field has a default,
so an empty file is a valid run. ``digest()`` hashes everything that changes the trained
weights, and a resumed run refuses a checkpoint made under a different digest.
"""

from __future__ import annotations

import hashlib
import json
import tomllib
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from codegym.errors import CodegymError
from codegym.sandbox import Limits


class ConfigError(CodegymError, ValueError):
    """The config file is missing, unreadable or invalid; the message names the field."""


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ModelSection(_Section):
    path: str | None = None
    """A Hugging Face model directory; None: the cached tiny model (``ensure_tiny_model``)."""
    threads: Annotated[int, Field(ge=1)] = 1
    """torch CPU threads for training and local sampling. 1 by default: on a 2-core box
    shared with sandbox workers, 2 threads made a 64-episode rollout 20x slower under load
    (spinning threads), while 1 thread gave the same tokens."""


class EnvSection(_Section):
    name: str = "code"
    """A registered env (``codegym.envs.ENVS``); ``code`` is ``CodeEnv``."""
    options: dict[str, Any] = Field(default_factory=lambda: {"style": "continuation"})
    """The env's options (``CodeEnv``: ``style``, ``rewards``)."""


class RunSection(_Section):
    steps: Annotated[int, Field(ge=1)] = 20
    """Optimizer steps (one per batch of ``groups_per_step`` groups)."""
    mode: Literal["sync", "async"] = "sync"
    """``sync``: step t's groups come from weights t; ``async``: rollouts for t+1 overlap
    training of t (off-policy by up to ``max_staleness`` versions)."""
    max_staleness: Annotated[int, Field(ge=0)] = 1
    """Groups whose oldest token is more versions behind the trainer are dropped (counted)."""
    seed: Annotated[int, Field(ge=0)] = 0
    """Seeds the optimizer's data order, sampling and task draw; same seed, same run (sync)."""
    metrics_file: str = "metrics.jsonl"
    """Per-step metrics, relative to ``checkpoint.dir``."""


class OptimSection(_Section):
    lr: Annotated[float, Field(gt=0)] = 1e-4
    weight_decay: Annotated[float, Field(ge=0)] = 0.0
    betas: tuple[float, float] = (0.9, 0.99)
    warmup_steps: Annotated[int, Field(ge=0)] = 0
    """Linear warmup, then constant."""
    max_grad_norm: Annotated[float, Field(gt=0)] = 1.0
    epochs_per_batch: Annotated[int, Field(ge=1)] = 1
    """Optimizer passes over each batch (>1 makes the clipped ratio matter)."""
    micro_batch: Annotated[int, Field(ge=1)] = 16
    """Sequences per forward/backward (gradient accumulation over the batch)."""


class GrpoSection(_Section):
    group_size: Annotated[int, Field(ge=2)] = 8
    """Episodes per task; advantages are relative within a group."""
    groups_per_step: Annotated[int, Field(ge=1)] = 8
    clip_eps: Annotated[float, Field(gt=0)] = 0.2
    """PPO clip range for the importance ratio vs the behaviour logprobs."""
    clip_eps_high: float | None = None
    """Upper clip (DAPO's clip-higher); None: same as ``clip_eps``."""
    kl_coef: Annotated[float, Field(ge=0)] = 0.0
    """Weight of the k3 KL estimate to the frozen reference (the starting weights); 0: off."""
    adv_eps: Annotated[float, Field(gt=0)] = 1e-4
    """Added to the group's std before dividing."""
    loss_agg: Literal["token", "sequence"] = "token"
    """``token``: mean over every trained token of the batch; ``sequence``: mean per
    sequence, then over sequences (the original GRPO)."""


class SamplingSection(_Section):
    max_new_tokens: Annotated[int, Field(ge=1)] = 64
    temperature: Annotated[float, Field(gt=0)] = 1.0
    """Sampling temperature; training logprobs use the same temperature."""
    stop: tuple[str, ...] = ("\n\n",)
    """Text that ends a completion (the tokens up to it are kept and trained on)."""
    max_batch: Annotated[int, Field(ge=1)] = 64
    """Requests the local policy batches into one forward (1: strictly per episode)."""


class TasksSection(_Section):
    suite: str | None = None
    """Train on any suite ``eval`` takes (``humaneval``, ``synth:…``, a dataset file), split
    by task id into train and held out (``codegym.train.split``); None: the synthetic
    ``family`` below, with its two seeds."""
    heldout_fraction: Annotated[float, Field(gt=0, lt=1)] = 0.2
    """With ``suite``: the share of task ids held out."""
    split_seed: Annotated[int, Field(ge=0)] = 0
    """With ``suite``: which split (a different seed holds out different tasks)."""
    family: str = "infer"
    """Synthetic family (``codegym.tasks.synthetic.FAMILIES``)."""
    difficulty: Annotated[int, Field(ge=1)] = 1
    train_seed: Annotated[int, Field(ge=0)] = 1
    """Seed of the training task pool (must differ from the held-out seed)."""
    train_tasks: Annotated[int, Field(ge=1)] = 256
    """Size of the training pool (with ``suite``: at most); each step draws
    ``groups_per_step`` tasks from it."""
    heldout_seed: Annotated[int, Field(ge=0)] = 0
    heldout_tasks: Annotated[int, Field(ge=0)] = 100
    """Held-out tasks the final evaluation uses (with ``suite``: at most; 0: none)."""

    @model_validator(mode="after")
    def _split(self) -> TasksSection:
        if self.suite is None and self.train_seed == self.heldout_seed:
            raise ValueError(
                f"train_seed == heldout_seed == {self.train_seed}: training on the held-out "
                "tasks makes the evaluation meaningless; pick different seeds"
            )
        return self


class SandboxSection(_Section):
    tier: str = "jail"
    """A registered sandbox tier (``codegym.sandbox.tiers.TIERS``)."""
    workers: Annotated[int, Field(ge=1)] = 2
    cpu_s: Annotated[float, Field(gt=0)] = 2.0
    memory_mb: Annotated[int, Field(ge=16)] = 512
    env_concurrency: Annotated[int, Field(ge=1)] = 8
    """Env steps (sandbox runs) in flight."""

    def limits(self) -> Limits:
        return Limits(cpu_s=self.cpu_s, memory_mb=self.memory_mb)

    @field_validator("tier")
    @classmethod
    def _known_tier(cls, tier: str) -> str:
        from codegym.sandbox.tiers import TIERS

        if tier not in TIERS:
            raise ValueError(f"unknown sandbox tier {tier!r}; registered: {TIERS.names()}")
        return tier


class CheckpointSection(_Section):
    dir: str = "runs/train"
    """Checkpoints, metrics and the final model go here."""
    every: Annotated[int, Field(ge=1)] = 5
    """Save every this many steps (and always at the end)."""
    keep: Annotated[int, Field(ge=1)] = 2
    """Newest checkpoints kept; older ones are deleted (except the best, below)."""
    heldout_samples: Annotated[int, Field(ge=0)] = 0
    """Score every checkpoint on the held-out tasks with this many samples a task (0: do
    not): its pass@1 goes in the step's metrics and the checkpoint's record, and the best
    checkpoint by it is kept besides the newest ``keep``."""
    remote: str | None = None
    """An fsspec URL (``s3://bucket/prefix``, ``file:///path``, ``memory://name``) every
    complete checkpoint is copied to after it is saved in ``dir``, with the same retention;
    a run whose ``dir`` holds no checkpoint resumes from the newest one there. None: local
    disk only. Checked for writing before training starts."""
    remote_options: dict[str, Any] = Field(default_factory=dict, exclude=True, repr=False)
    """fsspec storage options for ``remote``, e.g. ``{"endpoint_url": "http://host:9000"}``
    for an S3-compatible server. Left out of dumps and reprs (the config is logged as run
    parameters), but keep secrets in the AWS_* environment variables, not in the file."""


class ServerSection(_Section):
    url: str | None = None
    """Generate through this OpenAI-compatible model server (``codegym serve-model``, or
    vLLM with a weight route), e.g. ``http://127.0.0.1:8000/v1``; it gets the new weights
    after every step. None: sample in the trainer's own process (``local_policy``)."""
    model: str | None = None
    """The served model name; None: the server's first model."""
    token_env: str = "CODEGYM_SERVER_TOKEN"
    """Environment variable holding the bearer token (unset: no token). Not in the file,
    so configs can be shared."""
    stage_dir: str | None = None
    """A folder the server can read, where each step's weights are written; None:
    ``<checkpoint.dir>/stage`` (fine when the server runs on this machine)."""
    wait_s: Annotated[float, Field(gt=0)] = 600.0
    """How long a step waits for a server that stopped answering before episodes fail."""
    concurrency: Annotated[int, Field(ge=1)] = 64
    """Requests in flight at the server."""
    weight_transfer: Literal["file", "gloo"] = "file"
    """How weights reach the server: ``file`` stages a ``.safetensors`` file in
    ``stage_dir`` and posts its path; ``gloo`` drives vLLM's weight-transfer routes and
    broadcasts the tensors over a gloo group (``serve-model --weight-transfer``; no shared
    disk needed)."""
    transfer_address: str = "127.0.0.1"
    """With ``gloo``: this machine's address the server connects back to."""

    @field_validator("url")
    @classmethod
    def _http(cls, url: str | None) -> str | None:
        if url is not None and not url.startswith(("http://", "https://")):
            raise ValueError(f"{url!r}: give an http(s) URL such as http://127.0.0.1:8000/v1")
        return url


class TrainConfig(_Section):
    """Everything a training run needs (see the module docstring for the sections)."""

    model: ModelSection = ModelSection()
    env: EnvSection = EnvSection()
    run: RunSection = RunSection()
    optim: OptimSection = OptimSection()
    grpo: GrpoSection = GrpoSection()
    sampling: SamplingSection = SamplingSection()
    tasks: TasksSection = TasksSection()
    sandbox: SandboxSection = SandboxSection()
    checkpoint: CheckpointSection = CheckpointSection()
    server: ServerSection = ServerSection()

    @model_validator(mode="after")
    def _heldout_to_score(self) -> TrainConfig:
        if self.checkpoint.heldout_samples and not self.tasks.heldout_tasks:
            raise ValueError(
                "checkpoint.heldout_samples scores checkpoints on the held-out tasks, but "
                "tasks.heldout_tasks is 0: hold some out, or set heldout_samples = 0"
            )
        return self

    def digest(self) -> str:
        """sha256 over the knobs that change the trained weights (not steps, paths, dirs)."""
        body = self.model_dump(mode="json")
        body["run"].pop("steps")
        body["run"].pop("metrics_file")
        body.pop("server")  # where generation runs; a resume may use another server
        body.pop("checkpoint")
        if body["tasks"]["suite"] is None:  # digests of configs from before suites stay
            for k in ("suite", "heldout_fraction", "split_seed"):
                body["tasks"].pop(k)
        body["model"].pop("threads")
        raw = json.dumps(body, sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(raw.encode()).hexdigest()


def parse_config(data: object, source: str = "<config>") -> TrainConfig:
    """Validate a parsed mapping.

    Raises:
        ConfigError: a field is unknown or invalid (the message names it and the file).
    """
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(f"{source}: the top level must be a table/mapping of sections")
    try:
        return TrainConfig.model_validate(data)
    except ValidationError as e:
        lines = [
            f"  {'.'.join(str(p) for p in err['loc']) or '<root>'}: {err['msg']}"
            for err in e.errors()
        ]
        raise ConfigError(f"{source}: invalid training config\n" + "\n".join(lines)) from None


def load_config(path: str | Path) -> TrainConfig:
    """Read a ``.toml``, ``.yaml`` or ``.yml`` file.

    Raises:
        ConfigError: missing file, unknown extension, syntax error or invalid field.
    """
    p = Path(path)
    if not p.is_file():
        raise ConfigError(f"{p}: no such config file (see configs/grpo_tiny.toml for an example)")
    text = p.read_text()
    try:
        if p.suffix == ".toml":
            data: object = tomllib.loads(text)
        elif p.suffix in (".yaml", ".yml"):
            data = yaml.safe_load(text)
        else:
            raise ConfigError(f"{p}: use a .toml, .yaml or .yml file")
    except (tomllib.TOMLDecodeError, yaml.YAMLError) as e:
        raise ConfigError(f"{p}: cannot parse: {e}") from None
    return parse_config(data, str(p))
