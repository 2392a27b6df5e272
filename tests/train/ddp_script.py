"""Run under ``torchrun`` (or alone) by ``test_distributed.py``: one rank's part of a test.

    ddp_script.py step CONFIG_JSON MODEL_DIR OUT_DIR   # one train_step on a fixed batch
    ddp_script.py train CONFIG_JSON MODEL_DIR OUT_DIR  # a whole (short) training run

Each rank writes its final weights to ``OUT_DIR/rank<r>.safetensors`` (``step`` also its
gradients, ``grads<r>``); ``step`` trains on
the rank's ``world.shard`` of the same seeded batch, so 2 ranks together see what 1 sees.
"""

from __future__ import annotations

import asyncio
import json
import random
import sys
from pathlib import Path

import train_helpers  # noqa: F401  (registers the test env)
from safetensors.torch import save_file

from codegym.train import Trainer, parse_config
from codegym.train.trainer import Sample


def fixed_batch(n: int, vocab: int, seed: int = 11) -> list[Sample]:
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        length = rng.randint(5, 20)
        prompt = rng.randint(1, length - 2)
        ids = tuple(rng.randrange(vocab) for _ in range(length))
        mask = (0,) * prompt + (1,) * (length - prompt)
        old = tuple(-rng.uniform(4.0, 7.0) if m else 0.0 for m in mask)
        out.append(Sample(ids, mask, old, rng.gauss(0.0, 1.0)))
    return out


def main() -> None:
    mode, cfg_json, model, out = sys.argv[1:5]
    trainer = Trainer(parse_config(json.loads(cfg_json)), model)
    w = trainer.world
    if mode == "step":
        batch = fixed_batch(int(sys.argv[5]), int(trainer.model.config.vocab_size))
        trainer.train_step(w.shard(batch))
    else:
        asyncio.run(trainer.run())
    state = {k: v.detach().clone().contiguous() for k, v in trainer.model.state_dict().items()}
    save_file(state, str(Path(out) / f"rank{w.rank}.safetensors"))
    if mode == "step":  # the last pass's gradients: Adam's update hides their scale
        grads = {n: p.grad.detach().clone() for n, p in trainer.model.named_parameters()
                 if p.grad is not None}  # fmt: skip
        save_file(grads, str(Path(out) / f"grads{w.rank}.safetensors"))


if __name__ == "__main__":
    main()
