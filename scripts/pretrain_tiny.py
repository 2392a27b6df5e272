"""Pretrain the tiny code model: ``python scripts/pretrain_tiny.py --out DIR --seed S --steps N``.

A thin command line over ``codegym.models.pretrain`` (the code ``ensure_tiny_model`` runs);
other knobs keep ``PretrainConfig``'s defaults, which are the cached model's. Prints the
loss as it trains, then the metadata (parameters, wall time, losses) also saved in DIR.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
from pathlib import Path

from codegym.models.pretrain import PretrainConfig, pretrain


def main() -> None:
    defaults = PretrainConfig()
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True, help="output model directory")
    ap.add_argument("--seed", type=int, default=defaults.seed)
    ap.add_argument("--steps", type=int, default=defaults.steps)
    ap.add_argument("--noise", type=float, default=defaults.noise)
    ap.add_argument("--threads", type=int, default=defaults.threads)
    args = ap.parse_args()
    cfg = dataclasses.replace(
        defaults, seed=args.seed, steps=args.steps, noise=args.noise, threads=args.threads
    )
    meta = pretrain(cfg, args.out, log_every=25)
    print(json.dumps(meta, indent=2))


if __name__ == "__main__":
    main()
