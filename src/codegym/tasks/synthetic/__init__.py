"""Seeded synthetic code tasks with a difficulty knob (the RL demo's curriculum).

    from codegym.tasks.synthetic import generate
    tasks = generate("infer", n=100, seed=HELDOUT_SEED, difficulty=1)

See ``families.py`` for the families, the determinism contract and the seed split.
"""

from codegym.tasks.synthetic.families import (
    FAMILIES,
    GENERATOR_VERSION,
    HELDOUT_SEED,
    MAX_DIFFICULTY,
    PRETRAIN_SEED_BASE,
    generate,
)

__all__ = [
    "FAMILIES",
    "GENERATOR_VERSION",
    "HELDOUT_SEED",
    "MAX_DIFFICULTY",
    "PRETRAIN_SEED_BASE",
    "generate",
]
