"""Seeded sampling from a local Hugging Face causal LM with plain ``transformers.generate``.

``sample`` is the reference way to draw completions from the tiny model (the base-rate
measurement uses it; a policy can build on ``load`` and the same settings). Completions
are the new text only, without the prompt and without EOS/PAD; ``stop`` strings cut them.
The global torch RNG is forked, so calling ``sample`` does not disturb the caller's seeds.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import lru_cache
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, PreTrainedModel

from codegym.models.errors import ModelConfigError

__all__ = ["load", "sample"]


@lru_cache(maxsize=4)
def _load_cached(path: str, mtime_ns: int) -> tuple[PreTrainedModel, object]:
    del mtime_ns  # part of the cache key only: a rebuilt model reloads
    model = AutoModelForCausalLM.from_pretrained(path)
    model.eval()  # type: ignore[no-untyped-call]
    tokenizer = AutoTokenizer.from_pretrained(path)
    tokenizer.padding_side = "left"  # generation continues the prompt's last token
    return model, tokenizer


def load(model_dir: Path | str) -> tuple[PreTrainedModel, object]:
    """The model (eval mode) and its tokenizer (left padding), cached per directory.

    Raises:
        FileNotFoundError: ``model_dir`` has no ``config.json`` (build it first, e.g. with
            ``codegym.models.ensure_tiny_model``).
    """
    config = Path(model_dir) / "config.json"
    if not config.is_file():
        raise FileNotFoundError(
            f"{model_dir}: not a Hugging Face model directory (no config.json); "
            "build one with codegym.models.ensure_tiny_model() or scripts/pretrain_tiny.py"
        )
    return _load_cached(str(Path(model_dir).resolve()), config.stat().st_mtime_ns)


def _cut(text: str, stop: Sequence[str]) -> str:
    ends = [i for i in (text.find(s) for s in stop) if i >= 0]
    return text[: min(ends)] if ends else text


def sample(
    model_dir: Path | str,
    prompts: Sequence[str],
    n: int = 1,
    temperature: float = 1.0,
    max_new_tokens: int = 96,
    seed: int = 0,
    *,
    batch_prompts: int = 16,
    stop: Sequence[str] = (),
) -> list[list[str]]:
    """``n`` sampled completions for each prompt: ``result[i][j]`` is prompt i's j-th.

    The same arguments give the same completions (same torch build and thread count).
    ``temperature == 0`` decodes greedily (then the ``n`` completions are identical).

    Raises:
        ModelConfigError: ``n < 1``, ``temperature < 0`` or ``max_new_tokens < 1``.
        FileNotFoundError: see ``load``.
    """
    if n < 1 or temperature < 0 or max_new_tokens < 1 or batch_prompts < 1:
        raise ModelConfigError(
            f"n={n}, temperature={temperature}, max_new_tokens={max_new_tokens}, "
            f"batch_prompts={batch_prompts}: need n >= 1, temperature >= 0, "
            "max_new_tokens >= 1, batch_prompts >= 1"
        )
    model, tokenizer = load(model_dir)
    out: list[list[str]] = []
    with torch.random.fork_rng(devices=[]), torch.inference_mode():
        torch.manual_seed(seed)
        for start in range(0, len(prompts), batch_prompts):
            chunk = list(prompts[start : start + batch_prompts])
            enc = tokenizer(chunk, return_tensors="pt", padding=True)  # type: ignore[operator]
            greedy = temperature == 0
            gen = model.generate(  # type: ignore[operator]
                **enc,
                do_sample=not greedy,
                temperature=None if greedy else temperature,
                top_k=None if greedy else 0,
                top_p=None,
                max_new_tokens=max_new_tokens,
                num_return_sequences=1 if greedy else n,
                pad_token_id=tokenizer.pad_token_id,  # type: ignore[attr-defined]
                eos_token_id=tokenizer.eos_token_id,  # type: ignore[attr-defined]
            )
            new = gen[:, enc["input_ids"].shape[1] :]
            texts = tokenizer.batch_decode(new, skip_special_tokens=True)  # type: ignore[attr-defined]
            per = 1 if greedy else n
            for i in range(len(chunk)):
                group = [_cut(t, stop) for t in texts[i * per : (i + 1) * per]]
                out.append(group * n if greedy else group)
    return out
