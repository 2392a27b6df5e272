"""The GRPO training loop: rollout groups in, optimizer steps out, checkpoints between.

    trainer = Trainer(config, model_dir)             # policy: local_policy(model_dir)
    metrics = asyncio.run(trainer.run())             # one dict per step (also metrics.jsonl)

The training pool and the held-out set come from ``codegym.train.split`` (a suite split by
task id, or seeded synthetic pools); every checkpoint, and the ``lineage.json`` beside the
final model, records both sides' digests and the ids trained on, and a resume on other
tasks is refused. Each step draws ``groups_per_step`` tasks from the pool (seeded by run
seed and step), runs them through the rollout engine (``CodeEnv`` in token mode, sandbox-scored),
turns each group's rewards into advantages, trains on the trajectories' own token ids,
loss masks and behaviour logprobs, and pushes the new weights to the policy hook.

Where generation runs: in this process (``local_policy``, the default) or in a model server
(``server.url``: ``ServerPolicy``, which gets the weights after every step and survives the
server's restart; ``codegym.train.server_policy``).

Modes:
- ``sync``: step t's groups are generated entirely by weights t (on-policy; staleness 0).
  With the same config and seed two runs give the same weights (CPU, same thread count).
- ``async``: the rollouts of step t+1 start before step t trains, so generation overlaps
  training; a group whose oldest token is more than ``max_staleness`` versions behind the
  policy when it is consumed is dropped and counted (``groups_stale``). Not bit-for-bit
  reproducible: which version samples a token depends on timing.

Groups: infra-excluded episodes never reach the trainer (the engine excludes them); a
group with fewer than 2 scored episodes or with equal rewards carries no signal and is
skipped (``groups_no_signal``). Checkpoints follow ``checkpoint.every``; a killed run
restarted with the same config resumes from the newest complete checkpoint exactly.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import time
from collections.abc import Callable
from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch.nn.parallel import DistributedDataParallel
from transformers import AutoModelForCausalLM, PreTrainedModel

from codegym.envs.env import Resources
from codegym.envs.trajectory import Trajectory
from codegym.policies.policy import SamplingParams
from codegym.rollout import EnvSpec, Group, LocalExecutor, RolloutConfig, RolloutEngine
from codegym.sandbox import Sandbox
from codegym.tasks import Task, environments
from codegym.tasks.outcomes import PASSING_OUTCOMES
from codegym.telemetry import metrics as _metrics
from codegym.train.checkpoint import (
    WEIGHTS,
    CheckpointError,
    check_remote,
    code_version,
    content_id,
    fetch_file,
    fetch_latest,
    latest_checkpoint,
    load_checkpoint,
    mirror_checkpoint,
    mirror_path,
    prune_remote,
    read_record,
    save_checkpoint,
)
from codegym.train.config import TrainConfig
from codegym.train.distributed import World, current_world
from codegym.train.grpo import group_advantages, grpo_loss, token_logprobs
from codegym.train.policy import PromptTokenizer, TrainablePolicy, local_policy
from codegym.train.server_policy import ServerPolicy, SharedVersions
from codegym.train.split import LINEAGE_FILE, split_tasks

__all__ = ["Sample", "Trainer", "build_batch", "training_policy"]


@dataclass(frozen=True)
class Sample:
    """One trajectory ready for the loss."""

    token_ids: tuple[int, ...]
    loss_mask: tuple[int, ...]
    logprobs: tuple[float, ...]
    """Behaviour logprobs, aligned with ``token_ids`` (0 where the mask is 0)."""
    advantage: float


def build_batch(
    groups: list[Group], current_version: int, max_staleness: int | None, adv_eps: float
) -> tuple[list[Sample], dict[str, float]]:
    """Advantages per group; stale and signal-free groups are left out and counted."""
    samples: list[Sample] = []
    stale = no_signal = 0
    lags: list[int] = []
    for g in groups:
        trajs: list[Trajectory] = [t for t in g.trajectories if t.reward is not None]
        versions = [v for t in trajs for v in t.policy_versions]
        lag = current_version - min(versions) if versions else 0
        if max_staleness is not None and lag > max_staleness:
            stale += 1
            continue
        if len(trajs) < 2:
            no_signal += 1
            continue
        adv = group_advantages([float(t.reward) for t in trajs if t.reward is not None], adv_eps)
        if not any(adv):
            no_signal += 1
            continue
        lags.append(lag)
        for t, a in zip(trajs, adv, strict=True):
            if not t.token_exact or not any(t.loss_mask):
                continue
            samples.append(Sample(t.token_ids, t.loss_mask, t.logprobs, a))
    info = {
        "groups": float(len(groups)),
        "groups_used": float(len(lags)),
        "groups_stale": float(stale),
        "groups_no_signal": float(no_signal),
        "staleness_mean": sum(lags) / len(lags) if lags else 0.0,
        "staleness_max": float(max(lags, default=0)),
    }
    return samples, info


def _collate(batch: list[Sample], pad_id: int) -> tuple[torch.Tensor, ...]:
    width = max(len(s.token_ids) for s in batch)
    ids = torch.full((len(batch), width), pad_id, dtype=torch.long)
    attn = torch.zeros((len(batch), width), dtype=torch.long)
    mask = torch.zeros((len(batch), width))
    old = torch.zeros((len(batch), width))
    for i, s in enumerate(batch):
        n = len(s.token_ids)
        ids[i, :n] = torch.tensor(s.token_ids)
        attn[i, :n] = 1
        mask[i, :n] = torch.tensor(s.loss_mask, dtype=torch.float32)
        old[i, :n] = torch.tensor(s.logprobs)
    adv = torch.tensor([s.advantage for s in batch])
    return ids, attn, mask, old, adv


class Trainer:
    """GRPO on a Hugging Face causal LM (see the module docstring for the contract)."""

    def __init__(
        self,
        config: TrainConfig,
        model_dir: str | Path,
        policy: TrainablePolicy | None = None,
        *,
        on_step: Callable[[dict[str, Any]], None] | None = None,
        world: World | None = None,
    ) -> None:
        self.config = config
        self.world = world or current_world()
        self.model_dir = Path(model_dir)
        self.run_dir = Path(config.checkpoint.dir)
        self.on_step = on_step
        torch.set_num_threads(config.model.threads)
        torch.manual_seed(config.run.seed)
        self.model: PreTrainedModel = AutoModelForCausalLM.from_pretrained(self.model_dir)
        self.ref: PreTrainedModel | None = None
        if config.grpo.kl_coef > 0:
            self.ref = AutoModelForCausalLM.from_pretrained(self.model_dir)
            self.ref.eval()  # type: ignore[no-untyped-call]
            self.ref.requires_grad_(False)
        o = config.optim
        self.opt = torch.optim.AdamW(
            self.model.parameters(), lr=o.lr, betas=o.betas, weight_decay=o.weight_decay
        )
        self.sched = torch.optim.lr_scheduler.LambdaLR(
            self.opt, lambda s: min(1.0, (s + 1) / o.warmup_steps) if o.warmup_steps else 1.0
        )
        self.policy: TrainablePolicy = policy or training_policy(config, self.model_dir, self.world)
        tok = self.policy.tokenizer
        self.pad_id = int(tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id)
        self.step = 0
        self.stepped = False
        """Whether the last ``train_step`` changed the weights (an empty batch does not)."""
        self._version_base = 0
        """Added to the policy's version in the metrics: a resumed run's policy counts from
        1 again, its versions go on from the checkpoint's."""
        self.digest = config.digest()
        self.split = split_tasks(config.tasks)
        self.pool: list[Task] = list(self.split.train)
        base = self.model_dir / WEIGHTS
        self.parent: str | None = content_id(base) if base.is_file() else None
        """The content id of the weights training continues from (lineage's ``parent``)."""
        self.last_metrics: dict[str, Any] = {}
        ck = config.checkpoint
        if ck.remote is not None and self.world.leader:  # only the leader uploads
            check_remote(ck.remote, ck.remote_options)  # fail now, not at the first save
        self._resume()
        self.ddp: DistributedDataParallel | None = (
            DistributedDataParallel(self.model) if self.world.distributed else None
        )
        if self.step == 0 and isinstance(self.policy, ServerPolicy):
            # The server may hold anything (another run's weights): start it from ours.
            self._push()

    def _push(self) -> None:
        """Give the policy the model's weights; with several processes and a server, the
        others wait until the leader's push is done (and its version published)."""
        self.policy.load_weights(self.model.state_dict())
        if isinstance(self.policy, ServerPolicy):
            self.world.barrier()

    @property
    def version(self) -> int:
        """The version of the weights the policy now samples with, counted over the whole
        run (resumes included)."""
        return self._version_base + self.policy.current_version()

    # -- checkpoints -------------------------------------------------------------------
    def _resume(self) -> None:
        ckpt = latest_checkpoint(self.run_dir)
        ck = self.config.checkpoint
        if ckpt is None and ck.remote is not None:  # a fresh machine: resume from the remote
            if self.world.leader and fetch_latest(ck.remote, ck.remote_options, self.run_dir):
                mf = self.run_dir / self.config.run.metrics_file  # the steps before it, too
                fetch_file(ck.remote, ck.remote_options, mf.name, mf)
            self.world.barrier()  # every rank loads what the leader fetched
            ckpt = latest_checkpoint(self.run_dir)
        if ckpt is None:
            return
        state = load_checkpoint(ckpt, self.model, self.digest)
        made_on = state.get("tasks", {}).get("train_digest")
        if made_on is not None and made_on != self.split.train.digest:
            raise CheckpointError(
                f"{ckpt}: trained on other tasks than {self.split.source} gives now (the "
                "suite's file changed?); resuming would mix two task sets. Use a new "
                "checkpoint.dir, or restore the file"
            )
        self.opt.load_state_dict(state["optimizer"])
        self.sched.load_state_dict(state["scheduler"])
        torch.set_rng_state(state["torch_rng"])
        self.step = int(state["step"])
        self.parent = read_record(ckpt).get("id", self.parent)
        self._push()
        saved = state.get("policy_version")  # absent in checkpoints before 2026-12-03
        if isinstance(saved, int):
            self._version_base = saved - self.policy.current_version()
        # Steps logged after the checkpoint by the killed run are redone: drop their lines.
        mf = self.run_dir / self.config.run.metrics_file
        if mf.is_file() and self.world.leader:
            keep = [ln for ln in mf.read_text().splitlines() if json.loads(ln)["step"] <= self.step]
            mf.write_text("".join(ln + "\n" for ln in keep))

    def save(self) -> Path:
        state = {
            "step": self.step,
            "policy_version": self.version,
            "optimizer": self.opt.state_dict(),
            "scheduler": self.sched.state_dict(),
            "torch_rng": torch.get_rng_state(),
            "config_digest": self.digest,
            "tasks": self.split.record(),
        }
        record = {
            "parent": self.parent,
            "config_digest": self.digest,
            "tasks": self.split.record(),
            "metrics": self.last_metrics,
            "heldout_pass1": self.last_metrics.get("heldout_pass1"),
            "code_version": code_version(),
        }
        path = save_checkpoint(
            self.run_dir, self.step, self.model, state, self.config.checkpoint.keep, record
        )
        self.parent = read_record(path)["id"]
        ck = self.config.checkpoint
        if ck.remote is not None:
            mirror_checkpoint(path, ck.remote, ck.remote_options)
            prune_remote(ck.remote, ck.remote_options, ck.keep)
            metrics = self.run_dir / self.config.run.metrics_file
            if metrics.is_file():  # written before the checkpoint: it covers its step
                mirror_path(metrics, ck.remote, ck.remote_options)
        return path

    # -- rollouts ----------------------------------------------------------------------
    def tasks_for(self, step: int) -> list[Task]:
        """The step's tasks: a seeded draw without replacement from the training pool
        (all of them; each rank runs its ``world.shard`` of the list)."""
        rng = random.Random(f"codegym-train/{self.config.run.seed}/{step}")
        k = min(self.config.grpo.groups_per_step, len(self.pool))
        return rng.sample(self.pool, k)

    def _executor(self, sandbox: Sandbox) -> LocalExecutor:
        return training_executor(self.config, self.policy, sandbox)

    async def rollout(
        self, executor: LocalExecutor, step: int
    ) -> tuple[list[Group], dict[str, float]]:
        tasks = self.world.shard(self.tasks_for(step))
        c = self.config
        cfg = RolloutConfig(
            group_size=c.grpo.group_size,
            env_concurrency=c.sandbox.env_concurrency,
            seed=c.run.seed * 1_000_003 + step,
        )
        engine = RolloutEngine(executor, cfg, env=c.env.name)
        gen0, tok0 = self._counters()
        t0 = time.perf_counter()
        groups = [g async for g in engine.run(tasks)]
        order = {t.id: i for i, t in enumerate(tasks)}
        groups.sort(key=lambda g: order[g.task.id])  # completion order is timing; this is not
        trajs = [t for g in groups for t in g.trajectories]
        s = engine.stats.summary()
        return groups, {
            "rollout_s": time.perf_counter() - t0,
            "generate_s": self._counters()[0] - gen0,
            "tokens_generated": self._counters()[1] - tok0,
            "sandbox_s": sum(t.timings.get("sandbox", 0.0) for t in trajs),
            "episodes": float(len(trajs)),
            "excluded": float(s["excluded_total"]),
            "reward_mean": sum(t.reward or 0.0 for t in trajs) / len(trajs) if trajs else 0.0,
            "pass_rate": (
                sum(t.outcome in PASSING_OUTCOMES for t in trajs) / len(trajs) if trajs else 0.0
            ),
        }

    async def heldout_score(self, executor: LocalExecutor) -> float:
        """pass@1 of the current weights on the held-out tasks: the mean over tasks of the
        share of ``checkpoint.heldout_samples`` episodes that pass (infra left out)."""
        c = self.config
        cfg = RolloutConfig(
            group_size=c.checkpoint.heldout_samples,
            env_concurrency=c.sandbox.env_concurrency,
            seed=7_919 * (self.step + 1),
        )
        fracs = []
        mine = self.world.shard(list(self.split.heldout))
        async for g in RolloutEngine(executor, cfg, env=c.env.name).run(mine):
            if g.trajectories:
                passed = sum(t.outcome in PASSING_OUTCOMES for t in g.trajectories)
                fracs.append(passed / len(g.trajectories))
        fracs = [f for part in self.world.gather(fracs) for f in part]
        return sum(fracs) / len(fracs) if fracs else 0.0

    def _counters(self) -> tuple[float, float]:
        p = self.policy
        return float(getattr(p, "generate_s", 0.0)), float(getattr(p, "tokens_generated", 0))

    # -- optimisation ------------------------------------------------------------------
    def train_step(self, batch: list[Sample]) -> dict[str, float]:
        """Optimizer step(s) on ``batch`` (``epochs_per_batch`` passes); returns loss stats.

        Distributed, ``batch`` is this rank's part: each micro-batch's loss is weighted by
        its share of the global batch and scaled by the world size (DDP averages), so the
        gradient is the one-process gradient of the whole batch.
        """
        c = self.config
        w = self.world
        keys = ("loss", "kl", "clip_frac", "ratio_mean", "tokens")
        out = dict.fromkeys(keys, 0.0)
        total_tok, total_seq = w.sum([sum(sum(s.loss_mask) for s in batch), len(batch)])
        self.stepped = bool(total_seq)
        if not total_seq:
            return out
        model = self.ddp or self.model
        mb = c.optim.micro_batch
        # DDP syncs gradients in each rank's last backward, so every rank runs as many.
        n_micro = w.max(-(-len(batch) // mb))
        self.model.train()
        for _ in range(c.optim.epochs_per_batch):
            self.opt.zero_grad(set_to_none=True)
            agg = dict.fromkeys(keys, 0.0)
            for j in range(n_micro):
                micro = batch[j * mb : (j + 1) * mb]
                sync = self.ddp is None or j == n_micro - 1
                with nullcontext() if sync else model.no_sync():  # type: ignore[operator]
                    ids, attn, mask, old, adv = _collate(micro or [self._filler], self.pad_id)
                    logp = token_logprobs(model, ids, attn, c.sampling.temperature)
                    ref = None
                    if self.ref is not None:
                        with torch.no_grad():
                            ref = token_logprobs(self.ref, ids, attn, c.sampling.temperature)
                    loss, st = grpo_loss(
                        logp, old, adv, mask, ref_logp=ref, clip_eps=c.grpo.clip_eps,
                        clip_eps_high=c.grpo.clip_eps_high, kl_coef=c.grpo.kl_coef,
                        agg=c.grpo.loss_agg,
                    )  # fmt: skip
                    # Weighted so the micro-batches' sum is the loss over the global batch.
                    if not micro:
                        wt = 0.0  # a filler: keeps the backward count, adds nothing
                    elif c.grpo.loss_agg == "token":
                        wt = st.tokens / max(1.0, total_tok)
                    else:
                        wt = sum(1 for s in micro if any(s.loss_mask)) / total_seq
                    (loss * (wt * w.size)).backward()  # type: ignore[no-untyped-call]
                if not micro:
                    continue
                agg["loss"] += loss.item() * wt
                tw = st.tokens / max(1.0, total_tok)
                agg["kl"] += st.kl * tw
                agg["clip_frac"] += st.clip_frac * tw
                agg["ratio_mean"] += st.ratio_mean * tw
                agg["tokens"] += st.tokens
            torch.nn.utils.clip_grad_norm_(self.model.parameters(), c.optim.max_grad_norm)
            self.opt.step()
            self.sched.step()
            out = dict(zip(keys, w.sum([agg[k] for k in keys]), strict=True))
        self.model.eval()  # type: ignore[no-untyped-call]
        return out

    @property
    def _filler(self) -> Sample:
        """A two-token sample, weighted 0, for a rank with fewer micro-batches."""
        return Sample((self.pad_id, self.pad_id), (0, 1), (0.0, 0.0), 0.0)

    # -- the loop ----------------------------------------------------------------------
    async def run(self) -> list[dict[str, Any]]:
        """Train from ``self.step`` to ``config.run.steps``; returns the per-step metrics."""
        c = self.config
        self.run_dir.mkdir(parents=True, exist_ok=True)
        metrics: list[dict[str, Any]] = []
        if self.step >= c.run.steps:
            return metrics
        images = environments.store_for([*self.split.train, *self.split.heldout])
        async with Sandbox(tier=c.sandbox.tier, workers=c.sandbox.workers, images=images) as sb:
            ex = self._executor(sb)
            pending = asyncio.create_task(self.rollout(ex, self.step))
            try:
                while self.step < c.run.steps:
                    t_step = time.perf_counter()
                    groups, roll = await pending
                    t_wait = time.perf_counter() - t_step
                    nxt = self.step + 1
                    if c.run.mode == "async" and nxt < c.run.steps:
                        pending = asyncio.create_task(self.rollout(ex, nxt))
                    batch, ginfo = build_batch(
                        groups, self.policy.current_version(), c.run.max_staleness, c.grpo.adv_eps
                    )
                    roll, ginfo = _merge_ranks(self.world.gather((roll, ginfo)))
                    t0 = time.perf_counter()
                    stats = await asyncio.to_thread(self.train_step, batch)
                    train_s = time.perf_counter() - t0
                    if self.stepped:  # unchanged weights are not a new version
                        await asyncio.to_thread(self._push)
                    self.step = nxt
                    if c.run.mode == "sync" and nxt < c.run.steps:
                        pending = asyncio.create_task(self.rollout(ex, nxt))
                    step_s = time.perf_counter() - t_step
                    row: dict[str, Any] = {
                        "step": self.step,
                        "version": self.version,
                        **roll,
                        **ginfo,
                        **stats,
                        "train_s": train_s,
                        "wait_rollout_s": t_wait,
                        "step_s": step_s,
                        "tokens_per_s": roll["tokens_generated"] / step_s if step_s else 0.0,
                        "lr": self.sched.get_last_lr()[0],
                    }
                    saving = self.step % c.checkpoint.every == 0 or self.step == c.run.steps
                    if saving and c.checkpoint.heldout_samples:
                        row["heldout_pass1"] = await self.heldout_score(ex)
                    metrics.append(row)
                    self.last_metrics = row
                    _metrics.record_trainer_step(
                        self.step,
                        step_s,
                        reward_mean=float(row.get("reward_mean", 0.0)),
                        kl=float(row.get("kl", 0.0)),
                        loss=float(row.get("loss", 0.0)),
                    )
                    if self.world.leader:
                        with open(self.run_dir / c.run.metrics_file, "a") as f:
                            f.write(json.dumps(row) + "\n")
                        # The step's line goes out before its checkpoint: a kill between
                        # the two redoes the step on resume (its line is dropped then),
                        # while the other order lost the line of a checkpointed step.
                        if saving:
                            await asyncio.to_thread(self.save)
                        if self.on_step is not None:
                            self.on_step(row)
                    if saving:
                        self.world.barrier()  # no rank runs ahead of a checkpoint
            finally:
                if not pending.done():
                    pending.cancel()
                    await asyncio.gather(pending, return_exceptions=True)
                if isinstance(self.policy, ServerPolicy):
                    await self.policy.aclose()  # its HTTP session belongs to this loop
        return metrics

    def close(self) -> None:
        """Release the policy's worker thread or HTTP clients (after the last ``run``)."""
        close = getattr(self.policy, "close", None)
        if callable(close):
            close()

    def save_final(self, out: Path | None = None) -> Path:
        """The trained model in Hugging Face format (for eval, serving, the gate)."""
        target = out or self.run_dir / "final"
        if not self.world.leader:
            self.world.barrier()
            return target
        self.model.save_pretrained(target, safe_serialization=True)
        self.policy.tokenizer.save_pretrained(target)
        lineage = {
            "checkpoint": content_id(target / WEIGHTS),
            "parent": self.parent,  # the checkpoint (or base model) these weights are
            "config_digest": self.digest,
            "step": self.step,
            "tasks": self.split.record(),
            "code_version": code_version(),
        }
        (target / LINEAGE_FILE).write_text(json.dumps(lineage, indent=1) + "\n")
        ck = self.config.checkpoint
        if ck.remote is not None and out is None:
            mirror_path(target, ck.remote, ck.remote_options)
        self.world.barrier()
        return target


_SUMMED = ("episodes", "excluded", "tokens_generated", "sandbox_s", "groups", "groups_used",
           "groups_stale", "groups_no_signal")  # fmt: skip
_SLOWEST = ("rollout_s", "generate_s", "staleness_max")


def _merge_ranks(
    parts: list[tuple[dict[str, float], dict[str, float]]],
) -> tuple[dict[str, float], dict[str, float]]:
    """One step's rollout and group stats over every rank: counts summed, times the
    slowest rank's, means weighted by what they are means of."""
    if len(parts) == 1:
        return parts[0]
    rolls, infos = [p[0] for p in parts], [p[1] for p in parts]
    merged = []
    for rows in (rolls, infos):
        m = dict(rows[0])
        for k in m:
            if k in _SUMMED:
                m[k] = sum(r[k] for r in rows)
            elif k in _SLOWEST:
                m[k] = max(r[k] for r in rows)
        merged.append(m)
    roll, info = merged
    n = roll["episodes"]
    for k in ("reward_mean", "pass_rate"):
        roll[k] = sum(r[k] * r["episodes"] for r in rolls) / n if n else 0.0
    used = info["groups_used"]
    info["staleness_mean"] = (
        sum(r["staleness_mean"] * r["groups_used"] for r in infos) / used if used else 0.0
    )
    return roll, info


def training_policy(
    config: TrainConfig, model_dir: Path, world: World | None = None
) -> TrainablePolicy:
    """The policy ``config`` asks for: a model server's client (``server.url``), else an
    in-process sampler of ``model_dir``. In a ``world`` of several processes each gets
    its own client; they share one version map and only the leader pushes."""
    s = config.server
    if s.url is None:
        return local_policy(model_dir, max_batch=config.sampling.max_batch, seed=config.run.seed)
    world = world or World()
    stage = Path(s.stage_dir or Path(config.checkpoint.dir) / "stage")
    if world.distributed:
        stage = stage / f"rank-{world.rank}"  # each process keeps its own newest copy
    return ServerPolicy(
        s.url,
        model_dir,
        stage,
        shared=SharedVersions(world.store()) if world.distributed else None,
        pusher=world.leader,
        model=s.model,
        token=os.environ.get(s.token_env) or None,
        concurrency=s.concurrency,
        wait_s=s.wait_s,
        temperature=config.sampling.temperature,
        weight_transfer=s.weight_transfer,
        transfer_address=s.transfer_address,
    )


def training_executor(
    config: TrainConfig, policy: TrainablePolicy, sandbox: Sandbox
) -> LocalExecutor:
    """The rollout executor training uses: its env, sampling, limits and prompt format.

    Evaluations of a trained model build theirs here too, so they see what training saw.
    """
    c = config
    params = SamplingParams(
        temperature=c.sampling.temperature,
        max_tokens=c.sampling.max_new_tokens,
        stop=c.sampling.stop,
    )
    return LocalExecutor(
        EnvSpec(c.env.name, dict(c.env.options)),
        policy,
        params,
        Resources(sandbox, limits=c.sandbox.limits()),
        prompt="completions",
        tokenizer=PromptTokenizer(policy.tokenizer),
        env_concurrency=c.sandbox.env_concurrency,
        version=policy.current_version,
    )
