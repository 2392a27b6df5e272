"""Pretrain the tiny code model: corpus, tokenizer, a small GPT-2, saved in HF format.

The corpus is synthetic tasks (``codegym.tasks.synthetic``) drawn only from seeds at or
above ``PRETRAIN_SEED_BASE``, each written as prompt + reference + EOS. RL training and
held-out evaluation use seeds below that base, so no pretraining document is an evaluation
task instance (the op *templates* are shared on purpose: that is the skill).

The model is deliberately imperfect so that RL has headroom: a fraction ``noise`` of the
documents carry a wrong solution (for ``infer`` another task's body, for ``bugfix`` the
unfixed buggy body), and training stops after a few hundred steps.

Reproducibility: the same ``PretrainConfig`` gives the same tokenizer and, on the same
torch build and thread count, the same weights (seeded init, seeded batch order, no
dropout). ``PretrainConfig.key()`` hashes the config with the task generator's version and
``PRETRAIN_VERSION``; the model cache uses it so any change rebuilds.
"""

from __future__ import annotations

import hashlib
import json
import math
import random
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Final

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import GenerationConfig, GPT2Config, GPT2LMHeadModel, PreTrainedTokenizerFast

from codegym.models.errors import ModelConfigError
from codegym.tasks.synthetic import FAMILIES, GENERATOR_VERSION, PRETRAIN_SEED_BASE, generate

PRETRAIN_VERSION: Final = "2"
"""Bumped whenever this module's training semantics change (part of the cache key)."""
EOS: Final = "<|endoftext|>"
PAD: Final = "<|pad|>"
META_FILE: Final = "codegym_pretrain.json"
"""Written next to the weights: the config, its key and the measured training numbers."""


@dataclass(frozen=True)
class PretrainConfig:
    """Every knob of the tiny model's pretraining; all but ``threads`` are in the cache key."""

    seed: int = 0
    """Seeds weights, batch order, noise and the corpus seed (``PRETRAIN_SEED_BASE + seed``)."""
    steps: int = 700
    """Optimizer steps (700: held-out base pass@1 about 5-10% at temperature 1)."""
    batch_size: int = 8
    """Packed rows of ``n_positions`` tokens per step."""
    lr: float = 3e-3
    """Peak AdamW learning rate (linear warmup, cosine decay)."""
    docs_per_cell: int = 1500
    """Corpus documents per (family, difficulty) cell."""
    difficulties: tuple[int, ...] = (1, 2, 3)
    """Difficulties in the corpus."""
    noise: float = 0.2
    """Fraction of documents whose solution is deliberately wrong."""
    vocab_size: int = 1024
    """BPE vocabulary size (byte-level, trained on the corpus)."""
    n_layer: int = 4
    n_head: int = 4
    n_embd: int = 128
    n_positions: int = 256
    """Context length and packed row width; one task (prompt + solution) stays under it."""
    threads: int = 2
    """torch CPU threads while training (not part of the key: it changes speed, not the
    model, beyond float summation order)."""

    def key(self) -> str:
        """sha256 over the config (less ``threads``), generator and ``PRETRAIN_VERSION``."""
        config = asdict(self)
        del config["threads"]
        body = {"config": config, "gen": GENERATOR_VERSION, "pretrain": PRETRAIN_VERSION}
        return hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()

    def __post_init__(self) -> None:
        if self.steps < 1 or self.batch_size < 1 or self.docs_per_cell < 1:
            raise ModelConfigError(f"{self}: steps, batch_size and docs_per_cell must be >= 1")
        if not 0.0 <= self.noise < 1.0:
            raise ModelConfigError(f"noise={self.noise}: choose a fraction in [0, 1)")
        if self.n_embd % self.n_head:
            raise ModelConfigError(
                f"n_embd={self.n_embd} must be divisible by n_head={self.n_head}"
            )


def corpus(cfg: PretrainConfig) -> list[str]:
    """The pretraining documents (without EOS), in a seeded order."""
    rng = random.Random(f"codegym-pretrain-noise/{cfg.seed}")
    docs: list[str] = []
    for family in FAMILIES:
        for d in cfg.difficulties:
            tasks = generate(family, cfg.docs_per_cell, PRETRAIN_SEED_BASE + cfg.seed, d)
            for task in tasks:
                solution = task.reference
                if rng.random() < cfg.noise:
                    if family == "bugfix":
                        solution = task.metadata["buggy"]
                    else:
                        solution = rng.choice(tasks).reference
                docs.append(task.prompt + solution)
    rng.shuffle(docs)
    return docs


def train_tokenizer(docs: list[str], vocab_size: int) -> PreTrainedTokenizerFast:
    """A byte-level BPE tokenizer over ``docs`` with EOS and PAD special tokens."""
    tok = Tokenizer(models.BPE())
    # Newlines are always their own token. Without this BPE merges "\n" with the next
    # line's indent, so a prompt ending in "\n" (as every task prompt does) would end on a
    # token the model never saw in that position, and sampling falls apart.
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split("\n", behavior="isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False),
        ]
    )
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=[EOS, PAD],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(docs, trainer=trainer)
    return PreTrainedTokenizerFast(tokenizer_object=tok, eos_token=EOS, pad_token=PAD)  # type: ignore[no-untyped-call]


def pack(encoded: list[list[int]], width: int, pad_id: int) -> torch.Tensor:
    """Greedily pack whole documents into rows of ``width`` tokens, padding each row's tail.

    Packing instead of one document per row: the documents are ~80 tokens but up to ~180,
    so per-document padding would waste about half of every step on 2 CPU cores. Each row
    starts at a document boundary, as a prompt does at sampling time.
    """
    rows: list[list[int]] = []
    row: list[int] = []
    for seq in encoded:
        if len(row) + len(seq) > width:
            rows.append(row)
            row = []
        row = row + seq
    if row:
        rows.append(row)
    out = torch.full((len(rows), width), pad_id, dtype=torch.long)
    for i, r in enumerate(rows):
        out[i, : len(r)] = torch.tensor(r)
    return out


def pretrain(cfg: PretrainConfig, out: Path, log_every: int = 50) -> dict[str, object]:
    """Build the corpus and tokenizer, train the model, save everything in HF format to ``out``.

    Returns the metadata also written to ``out / META_FILE`` (params, wall time, losses).

    Raises:
        ModelConfigError: a document does not fit ``n_positions`` (raise it, or shorten tasks).
    """
    started = time.perf_counter()
    threads = torch.get_num_threads()
    torch.set_num_threads(cfg.threads)
    try:
        docs = corpus(cfg)
        tokenizer = train_tokenizer(docs, cfg.vocab_size)
        eos_id = tokenizer.convert_tokens_to_ids(EOS)
        pad_id = tokenizer.convert_tokens_to_ids(PAD)
        assert isinstance(eos_id, int) and isinstance(pad_id, int)
        encoded = [[*ids, eos_id] for ids in tokenizer(docs)["input_ids"]]
        longest = max(len(e) for e in encoded)
        if longest > cfg.n_positions:
            raise ModelConfigError(
                f"a corpus document has {longest} tokens > n_positions={cfg.n_positions}: "
                "raise n_positions or lower the difficulties"
            )
        torch.manual_seed(cfg.seed)
        config = GPT2Config(
            vocab_size=len(tokenizer),
            n_positions=cfg.n_positions,
            n_embd=cfg.n_embd,
            n_layer=cfg.n_layer,
            n_head=cfg.n_head,
            resid_pdrop=0.0,
            embd_pdrop=0.0,
            attn_pdrop=0.0,
            bos_token_id=eos_id,
            eos_token_id=eos_id,
            pad_token_id=pad_id,
        )
        model = GPT2LMHeadModel(config)
        params = sum(p.numel() for p in model.parameters())
        opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=0.01)
        warmup = max(1, cfg.steps // 10)

        def schedule(step: int) -> float:
            if step < warmup:
                return (step + 1) / warmup
            return 0.5 * (1 + math.cos(math.pi * (step - warmup) / max(1, cfg.steps - warmup)))

        sched = torch.optim.lr_scheduler.LambdaLR(opt, schedule)
        rows = pack(encoded, cfg.n_positions, pad_id)
        order = torch.Generator().manual_seed(cfg.seed)
        perm: list[int] = []
        losses: list[float] = []
        model.train()
        for step in range(cfg.steps):
            if len(perm) < cfg.batch_size:
                perm += torch.randperm(len(rows), generator=order).tolist()
            idx, perm = perm[: cfg.batch_size], perm[cfg.batch_size :]
            ids = rows[idx]
            mask = (ids != pad_id).long()
            labels = ids.masked_fill(mask == 0, -100)
            loss = model(input_ids=ids, attention_mask=mask, labels=labels).loss
            opt.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            sched.step()
            losses.append(loss.item())
            if log_every and (step + 1) % log_every == 0:
                elapsed = time.perf_counter() - started
                print(f"step {step + 1}/{cfg.steps} loss {loss:.3f} {elapsed:.0f}s", flush=True)
        model.eval()  # type: ignore[no-untyped-call]
        out.mkdir(parents=True, exist_ok=True)
        model.save_pretrained(out, safe_serialization=True)
        GenerationConfig(  # type: ignore[no-untyped-call]
            eos_token_id=eos_id, pad_token_id=pad_id, bos_token_id=eos_id
        ).save_pretrained(out)
        tokenizer.save_pretrained(out)
        meta: dict[str, object] = {
            "config": asdict(cfg),
            "key": cfg.key(),
            "params": params,
            "corpus_docs": len(docs),
            "corpus_tokens": sum(len(e) for e in encoded),
            "tokens_seen": cfg.steps * cfg.batch_size * cfg.n_positions,
            "longest_doc_tokens": longest,
            "wall_s": round(time.perf_counter() - started, 2),
            "first_loss": losses[0],
            "final_loss": sum(losses[-20:]) / len(losses[-20:]),
        }
        (out / META_FILE).write_text(json.dumps(meta, indent=2) + "\n")
        return meta
    finally:
        torch.set_num_threads(threads)
