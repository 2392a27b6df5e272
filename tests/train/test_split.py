"""Training on any suite: a split by task id, its digests in every checkpoint and beside the
trained model, and held-out numbers refused on tasks the model was trained on."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from train_helpers import small_config
from typer.testing import CliRunner

from codegym.tasks import DatasetError
from codegym.train import CheckpointError, HeldoutError, Trainer, parse_config, split_tasks
from codegym.train.checkpoint import content_id, read_record
from codegym.train.config import TasksSection
from codegym.train.evaluate import heldout_pass_rate
from codegym.train.split import is_heldout, read_lineage


def _records(n: int) -> list[dict[str, str]]:
    """HumanEval-format records: f_i returns i."""
    return [
        {
            "task_id": f"Mine/{i}",
            "prompt": f"def f_{i}():\n",
            "entry_point": f"f_{i}",
            "canonical_solution": f"    return {i}\n",
            "test": f"def check(candidate):\n    assert candidate() == {i}\n",
        }
        for i in range(n)
    ]


def _write(path: Path, records: list[dict[str, str]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def test_a_suite_is_split_by_id_whatever_the_order_of_its_file(tmp_path: Path) -> None:
    rows = _records(60)
    forward = _write(tmp_path / "forward.jsonl", rows)
    backward = _write(tmp_path / "backward.jsonl", rows[::-1])
    a = split_tasks(TasksSection(suite=str(forward)))
    b = split_tasks(TasksSection(suite=str(backward)))
    ids = {t.id for t in a.train}, {t.id for t in a.heldout}
    assert ids == ({t.id for t in b.train}, {t.id for t in b.heldout})
    assert not ids[0] & ids[1] and len(ids[0]) + len(ids[1]) == 60
    assert 4 <= len(ids[1]) <= 24  # about a fifth held out (binomial, 60 draws)
    assert all(is_heldout(i, 0.2) for i in ids[1])
    # a task added to the file moves no other; another seed holds out other tasks
    grown = split_tasks(TasksSection(suite=str(_write(tmp_path / "g.jsonl", _records(80)))))
    assert ids[1] <= {t.id for t in grown.heldout}
    other = split_tasks(TasksSection(suite=str(forward), split_seed=1))
    assert {t.id for t in other.heldout} != ids[1]
    # a cap takes the first tasks of each side in dataset order
    capped = split_tasks(TasksSection(suite=str(forward), train_tasks=5, heldout_tasks=2))
    assert [t.id for t in capped.train] == [t.id for t in a.train][:5]
    assert len(capped.heldout) == 2


def test_bad_splits_are_refused_by_name(tmp_path: Path) -> None:
    with pytest.raises(DatasetError, match=r"nope\.jsonl"):
        split_tasks(TasksSection(suite=str(tmp_path / "nope.jsonl")))
    one = _write(tmp_path / "one.jsonl", _records(1))
    with pytest.raises(HeldoutError, match="a side is empty"):
        split_tasks(TasksSection(suite=str(one)))
    with pytest.raises(ValueError, match="heldout_fraction"):
        parse_config({"tasks": {"suite": str(one), "heldout_fraction": 1.0}})


def test_the_config_digest_names_the_suite_and_keeps_older_configs_resumable() -> None:
    plain = parse_config({})
    # the suite's knobs do nothing without a suite, and are not in the digest then
    assert parse_config({"tasks": {"split_seed": 7}}).digest() == plain.digest()
    with_suite = parse_config({"tasks": {"suite": "humaneval"}})
    assert with_suite.digest() != plain.digest()
    reseeded = parse_config({"tasks": {"suite": "humaneval", "split_seed": 1}})
    assert reseeded.digest() != with_suite.digest()
    # the humaneval split: every task on one side
    split = split_tasks(with_suite.tasks)
    assert len(split.train) + len(split.heldout) == 164
    assert not {t.id for t in split.train} & {t.id for t in split.heldout}


async def test_training_on_a_suite_records_lineage_and_guards_the_heldout_number(
    toy_model: Path, tmp_path: Path
) -> None:
    suite = _write(tmp_path / "mine.jsonl", _records(30))
    raw = small_config(
        str(tmp_path / "run"),
        run={"steps": 2},
        tasks={"suite": str(suite), "heldout_fraction": 0.3, "heldout_tasks": 4},
    )
    cfg = parse_config(raw)
    trainer = Trainer(cfg, toy_model)
    split = split_tasks(cfg.tasks)
    assert [t.id for t in trainer.pool] == [t.id for t in split.train]
    await trainer.run()
    run = tmp_path / "run"
    state = torch.load(run / "ckpt-000001" / "trainer_state.pt", weights_only=False)
    assert state["tasks"]["heldout_digest"] == split.heldout.digest
    assert state["tasks"]["train_ids"] == sorted(t.id for t in split.train)
    # each checkpoint's record: its weights' content id, and the chain back to the base
    first, second = (read_record(run / f"ckpt-00000{i}") for i in (1, 2))
    assert first["id"] == content_id(run / "ckpt-000001" / "model.safetensors")
    assert first["parent"] == content_id(toy_model / "model.safetensors")
    assert second["parent"] == first["id"] and second["step"] == 2
    assert second["metrics"]["step"] == 2 and second["config_digest"] == cfg.digest()
    assert second["tasks"]["train_digest"] == split.train.digest and second["code_version"]
    final = trainer.save_final()
    lineage = read_lineage(final)
    assert lineage is not None and lineage["step"] == 2 and lineage["parent"] == second["id"]
    assert lineage["checkpoint"] == content_id(final / "model.safetensors")
    assert lineage["config_digest"] == cfg.digest()
    assert lineage["tasks"]["train_digest"] == split.train.digest
    # the held-out side of the same split is reported, with its digest
    r = await heldout_pass_rate(final, cfg, samples=2)
    assert r["tasks"] == 4 and r["heldout_digest"] == split.heldout.digest
    # another split holds out tasks this model trained on: refused, naming the model
    reseeded = parse_config({**raw, "tasks": {**raw["tasks"], "split_seed": 5}})
    with pytest.raises(HeldoutError, match=r"were trained on \(e\.g\. Mine/"):
        await heldout_pass_rate(final, reseeded, samples=2)
    # the suite's file changed under the run: resuming on other tasks is refused
    kept = [r for r in _records(30) if r["task_id"] != split.train.tasks[0].id]
    _write(suite, kept)
    with pytest.raises(CheckpointError, match="trained on other tasks"):
        Trainer(cfg, toy_model)


def test_train_command_takes_a_suite(toy_model: Path, tmp_path: Path) -> None:
    import typer
    import yaml

    from codegym.cli.train_cmd import train

    app = typer.Typer()
    app.command()(train)
    suite = _write(tmp_path / "mine.jsonl", _records(20))
    cfg_file = tmp_path / "train.yaml"
    cfg_file.write_text(yaml.safe_dump(small_config(str(tmp_path / "run"), run={"steps": 1})))
    args = [str(cfg_file), "--model", str(toy_model), "--suite", str(suite), "--quiet"]
    r = CliRunner().invoke(app, args)
    assert r.exit_code == 0, r.output
    lineage = read_lineage(tmp_path / "run" / "final")
    assert lineage is not None and lineage["tasks"]["source"] == str(suite)
    assert set(lineage["tasks"]["train_ids"]) <= {f"Mine/{i}" for i in range(20)}


def test_eval_of_a_trained_model_refuses_its_training_tasks(
    toy_model: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``codegym eval --policy transformers`` on a codegym-trained model: its training tasks
    are refused (or, with --trained-tasks-ok, counted); the run records the lineage, a
    passing gate registers the model in MLflow, and ``codegym runs`` ties it all together."""
    import asyncio
    import subprocess
    import sys

    rows = _records(20)
    suite = _write(tmp_path / "mine.jsonl", rows)
    cfg = parse_config(small_config(str(tmp_path / "run"), run={"steps": 1},
                                    tasks={"suite": str(suite)}))  # fmt: skip
    trainer = Trainer(cfg, toy_model)
    asyncio.run(trainer.run())
    final = trainer.save_final()
    split = split_tasks(cfg.tasks)
    held = {t.id for t in split.heldout}
    heldout_file = _write(tmp_path / "held.jsonl", [r for r in rows if r["task_id"] in held])

    def run(file: Path, *more: str) -> subprocess.CompletedProcess[str]:
        cmd = [str(Path(sys.executable).parent / "codegym"), "eval", "--suite", str(file),
               "--model", "toy", "--policy", "transformers",
               "--policy-options", json.dumps({"model_dir": str(final)}),
               "--max-tokens", "8", "--no-store", "--json", "--out", str(tmp_path / "ev"),
               *more]  # fmt: skip
        return subprocess.run(cmd, capture_output=True, text=True, timeout=600)

    refused = run(suite)
    said = " ".join(refused.stderr.split())  # rich wraps long lines
    assert refused.returncode == 2 and "were trained on" in said, said
    assert "--trained-tasks-ok" in said
    ok = run(heldout_file)
    assert ok.returncode == 0, ok.stderr
    lineage = json.loads(ok.stdout)["config"]["lineage"]
    assert lineage["train_digest"] == split.train.digest and lineage["step"] == 1
    assert lineage["tasks_trained_on"] == 0
    # a gate that passes registers the checkpoint behind the candidate in MLflow; one that
    # does not, or a candidate without a trained model, registers nothing
    codegym = str(Path(sys.executable).parent / "codegym")
    mlruns = tmp_path / "mlruns"
    gate = [codegym, "gate", str(tmp_path / "ev"), str(tmp_path / "ev"), "--min-tasks", "1",
            "--register-model", "toy", "--mlflow-uri", str(mlruns)]  # fmt: skip
    held_back = subprocess.run([*gate, "--on-inconclusive", "fail"], capture_output=True,
                               text=True, timeout=300)  # fmt: skip
    assert held_back.returncode == 3 and "not registered" in held_back.stderr, held_back.stderr
    passed = subprocess.run(gate, capture_output=True, text=True, timeout=300)
    assert passed.returncode == 0 and "registered toy version 1" in passed.stderr, passed.stderr
    from mlflow.tracking import MlflowClient

    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")  # as codegym's Tracker sets it
    client = MlflowClient(tracking_uri=mlruns.as_uri(), registry_uri=mlruns.as_uri())
    (version,) = client.search_model_versions("name='toy'")
    assert version.tags["checkpoint"] == lineage["checkpoint"]
    assert version.tags["train_digest"] == split.train.digest
    files = {f.path for f in client.list_artifacts(version.run_id, "checkpoint")}
    assert "checkpoint/lineage.json" in files and "checkpoint/model.safetensors" in files
    (tmp_path / "plain").mkdir()
    (tmp_path / "plain" / "summary.json").write_text(json.dumps({"config": {"model": "x"}}))
    no_model = subprocess.run([*gate[:3], str(tmp_path / "plain"), *gate[4:]],
                              capture_output=True, text=True, timeout=300)  # fmt: skip
    assert no_model.returncode == 2 and "no checkpoint to register" in " ".join(
        no_model.stderr.split()
    )
    # runs side by side: the eval's model is tied to the training directory's checkpoint
    shown = subprocess.run(
        [str(Path(sys.executable).parent / "codegym"), "runs", str(tmp_path / "ev"),
         str(tmp_path / "run"), str(final), "--json"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert shown.returncode == 0, shown.stderr
    ev, train_dir, model = json.loads(shown.stdout)
    assert ev["kind"] == "eval" and ev["trained_by"] == f"{tmp_path / 'run'} step 1"
    assert ev["lineage"]["checkpoint"] == model["lineage"]["checkpoint"]
    assert train_dir["lineage"]["train_digest"] == ev["lineage"]["train_digest"]
    assert (train_dir["kind"], train_dir["checkpoints"]) == ("train", 1) and model[
        "kind"
    ] == "model"
    nothing = subprocess.run(
        [str(Path(sys.executable).parent / "codegym"), "runs", str(tmp_path)],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert nothing.returncode == 2 and "not a run folder" in " ".join(nothing.stderr.split())
    anyway = run(suite, "--trained-tasks-ok")
    assert anyway.returncode == 0, anyway.stderr
    assert json.loads(anyway.stdout)["config"]["lineage"]["tasks_trained_on"] == len(split.train)


async def test_retention_keeps_the_newest_and_the_best_by_heldout_score(
    toy_model: Path, tmp_path: Path
) -> None:
    run = tmp_path / "run"
    cfg = parse_config(small_config(
        str(run), run={"steps": 4}, tasks={"heldout_tasks": 3},
        checkpoint={"every": 1, "keep": 1, "heldout_samples": 4},
    ))  # fmt: skip
    await Trainer(cfg, toy_model).run()
    rows = [json.loads(ln) for ln in (run / "metrics.jsonl").read_text().splitlines()]
    scores = [r["heldout_pass1"] for r in rows]
    assert len(scores) == 4 and all(0.0 <= x <= 1.0 for x in scores)
    best = max(range(4), key=lambda i: (scores[i], i)) + 1  # the newer on a tie
    kept = sorted(int(p.name.split("-")[1]) for p in run.glob("ckpt-*"))
    assert kept == sorted({best, 4})
    for step in kept:
        assert read_record(run / f"ckpt-{step:06d}")["heldout_pass1"] == scores[step - 1]
    with pytest.raises(ValueError, match="heldout_tasks is 0"):
        parse_config({"tasks": {"heldout_tasks": 0}, "checkpoint": {"heldout_samples": 2}})
