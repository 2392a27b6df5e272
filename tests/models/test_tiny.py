"""The tiny model: HF format, reproducible pretraining, the cache, seeded sampling."""

from __future__ import annotations

import asyncio
import dataclasses
import json
from pathlib import Path

import pytest
from safetensors.torch import load_file
from transformers import AutoModelForCausalLM, AutoTokenizer

from codegym.models import PretrainConfig, ensure_tiny_model, load, pretrain, sample, tiny_model_dir
from codegym.models.pretrain import corpus
from codegym.sandbox import Sandbox
from codegym.tasks import score
from codegym.tasks.synthetic import FAMILIES, HELDOUT_SEED, generate

# A toy configuration: seconds to build, same code path as the real model.
SMALL = PretrainConfig(
    steps=4,
    batch_size=2,
    docs_per_cell=15,
    difficulties=(1,),
    vocab_size=300,
    n_layer=1,
    n_head=2,
    n_embd=32,
    threads=1,
)


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return ensure_tiny_model(tmp_path_factory.mktemp("cache"), SMALL)


def test_model_is_in_standard_hf_format(built: Path) -> None:
    for name in ("config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"):
        assert (built / name).is_file(), name
    tok = AutoTokenizer.from_pretrained(built)
    assert tok.eos_token == "<|endoftext|>" and tok.pad_token == "<|pad|>"
    assert tok.eos_token_id != tok.pad_token_id
    model = AutoModelForCausalLM.from_pretrained(built)
    assert model.config.eos_token_id == tok.eos_token_id
    assert model.config.pad_token_id == tok.pad_token_id
    for task in generate("infer", 5, 0, 2) + generate("bugfix", 5, 0, 2):
        whole = task.prompt + task.reference
        assert tok.decode(tok(whole)["input_ids"]) == whole  # byte-level BPE round-trips code
        # The prompt's tokens are a prefix of the document's: sampling starts where
        # training saw a token boundary (a "\n" merged with the next indent would not).
        prompt_ids = tok(task.prompt)["input_ids"]
        assert tok(whole)["input_ids"][: len(prompt_ids)] == prompt_ids
    meta = json.loads((built / "codegym_pretrain.json").read_text())
    assert meta["key"] == SMALL.key() and meta["params"] == model.num_parameters()


def test_cache_reuses_and_config_changes_rebuild(built: Path) -> None:
    stamp = (built / "model.safetensors").stat().st_mtime_ns
    again = ensure_tiny_model(built.parent, SMALL)
    assert again == built and (built / "model.safetensors").stat().st_mtime_ns == stamp
    other = dataclasses.replace(SMALL, seed=1)
    assert tiny_model_dir(built.parent, other) != built
    assert other.key() != SMALL.key()
    # Threads change speed, not the model: they are not part of the key.
    assert dataclasses.replace(SMALL, threads=2).key() == SMALL.key()
    assert not list(built.parent.glob(".tiny-*-*"))  # no temporary build folder left over


def test_pretraining_is_reproducible(built: Path, tmp_path: Path) -> None:
    pretrain(SMALL, tmp_path, log_every=0)
    a, b = load_file(built / "model.safetensors"), load_file(tmp_path / "model.safetensors")
    assert a.keys() == b.keys()
    assert all(a[k].equal(b[k]) for k in a)
    assert (built / "tokenizer.json").read_text() == (tmp_path / "tokenizer.json").read_text()


def test_corpus_never_holds_a_heldout_task() -> None:
    docs = corpus(dataclasses.replace(SMALL, docs_per_cell=200, noise=0.0))
    heldout = [t for f in FAMILIES for t in generate(f, 200, HELDOUT_SEED, 1)]
    assert not any(doc.startswith(t.prompt) for doc in docs for t in heldout)
    assert len(docs) == 200 * len(FAMILIES)


def test_noise_plants_wrong_solutions() -> None:
    clean = corpus(dataclasses.replace(SMALL, noise=0.0))
    noisy = corpus(dataclasses.replace(SMALL, noise=0.5))
    assert sorted(clean) != sorted(noisy)
    assert len(set(clean) - set(noisy)) >= 5


def test_sample_is_seeded_and_shaped(built: Path) -> None:
    prompts = [t.prompt for t in generate("bugfix", 3, 0, 1)]
    a = sample(built, prompts, n=4, temperature=1.0, max_new_tokens=12, seed=3)
    assert len(a) == 3 and all(len(g) == 4 for g in a)
    assert sample(built, prompts, n=4, temperature=1.0, max_new_tokens=12, seed=3) == a
    assert sample(built, prompts, n=4, temperature=1.0, max_new_tokens=12, seed=4) != a
    greedy = sample(built, prompts, n=2, temperature=0, max_new_tokens=12)
    assert all(g[0] == g[1] for g in greedy)
    cut = sample(built, prompts, n=4, temperature=1.0, max_new_tokens=12, seed=3, stop=("x",))
    assert all("x" not in c for g in cut for c in g)


def test_bad_sampling_arguments_are_refused(built: Path, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="n=0"):
        sample(built, ["def f(x):\n"], n=0)
    with pytest.raises(FileNotFoundError, match="ensure_tiny_model"):
        load(tmp_path)


def test_bad_config_is_refused() -> None:
    with pytest.raises(ValueError, match=r"noise=1\.5"):
        PretrainConfig(noise=1.5)
    with pytest.raises(ValueError, match="divisible"):
        PretrainConfig(n_embd=30, n_head=4)


@pytest.mark.slow
async def test_default_model_solves_some_heldout_tasks(sandbox: Sandbox) -> None:
    # Builds the real cached model on first use (minutes on 2 cores), then reuses it.
    # RL needs a base rate that is neither zero (no reward signal) nor high (no headroom).
    path = ensure_tiny_model()
    tasks = [t for f in FAMILIES for t in generate(f, 30, HELDOUT_SEED, 1)]
    groups = sample(path, [t.prompt for t in tasks], n=4, temperature=0.8, max_new_tokens=64)
    pairs = [(t, c) for t, g in zip(tasks, groups, strict=True) for c in g]
    scores = await asyncio.gather(*(score(sandbox, t, c) for t, c in pairs))
    rate = sum(s.passed for s in scores) / len(scores)
    assert 0.0 < rate < 0.6, rate
