"""A tiny randomly initialised GPT-2 in Hugging Face format, built in a second.

For tests and serving benchmarks that need a real model folder without pretraining (the
trained tiny model is ``codegym.models.ensure_tiny_model``). The tokenizer is a byte-level
BPE trained with ``tokenizers`` on a few lines of Python, with ``<|endoftext|>`` (EOS/BOS)
and ``<|pad|>``; the weights come from ``torch.manual_seed(seed)``, so the same arguments
give the same model.
"""

from __future__ import annotations

from pathlib import Path

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import GPT2Config, GPT2LMHeadModel, PreTrainedTokenizerFast

_CORPUS = [
    "def add(a, b):\n    return a + b\n",
    "def first(xs):\n    return xs[0] if xs else None\n",
    "def total(xs):\n    return sum(x for x in xs)\n",
    "for i in range(10):\n    print(i * i)\n",
    "class Box:\n    def __init__(self, v):\n        self.v = v\n",
    "The quick brown fox jumps over the lazy dog.\n",
]


def build_random_model(
    out: str | Path,
    *,
    n_layer: int = 2,
    n_embd: int = 64,
    n_head: int = 4,
    n_positions: int = 256,
    vocab_size: int = 320,
    seed: int = 0,
    chat_template: str | None = None,
) -> Path:
    """Write a random GPT-2 and its tokenizer to ``out`` (created) and return the path."""
    path = Path(out)
    path.mkdir(parents=True, exist_ok=True)
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=["<|endoftext|>", "<|pad|>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(_CORPUS, trainer)
    fast = PreTrainedTokenizerFast(  # type: ignore[no-untyped-call]
        tokenizer_object=tok,
        eos_token="<|endoftext|>",
        bos_token="<|endoftext|>",
        pad_token="<|pad|>",
    )
    if chat_template is not None:
        fast.chat_template = chat_template
    eos = fast.convert_tokens_to_ids("<|endoftext|>")
    pad = fast.convert_tokens_to_ids("<|pad|>")
    assert isinstance(eos, int) and isinstance(pad, int)
    config = GPT2Config(
        vocab_size=len(fast),
        n_positions=n_positions,
        n_embd=n_embd,
        n_layer=n_layer,
        n_head=n_head,
        bos_token_id=eos,
        eos_token_id=eos,
        pad_token_id=pad,
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = GPT2LMHeadModel(config)
    model.save_pretrained(path)
    fast.save_pretrained(path)
    return path
