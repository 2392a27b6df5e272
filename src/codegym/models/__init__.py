"""Local models: the tiny code model the RL demo trains, and seeded sampling from it.

from codegym.models import ensure_tiny_model, sample
path = ensure_tiny_model()                  # builds once (minutes), then cached
completions = sample(path, [task.prompt], n=8, temperature=1.0, seed=0)
"""

from codegym.models.pretrain import PretrainConfig, pretrain
from codegym.models.sampling import load, sample
from codegym.models.tiny import default_cache_dir, ensure_tiny_model, tiny_model_dir

__all__ = [
    "PretrainConfig",
    "default_cache_dir",
    "ensure_tiny_model",
    "load",
    "pretrain",
    "sample",
    "tiny_model_dir",
]
