"""Export a run to Parquet / JSONL, locally and through fsspec (memory:// stands in for s3://)."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import fsspec
import pyarrow.parquet as pq
import pytest

from codegym.store import (
    GenerationRecord,
    RunItem,
    ScoreRecord,
    Store,
    StoreError,
    StoreInputError,
    content_key,
)


@pytest.fixture
def store(tmp_path: Path) -> Store:
    """A finished run of 3 items: scored with a generation, scored from a sample, unscored."""
    with Store(tmp_path / "s.duckdb") as s:
        g = GenerationRecord(content_key("generation", i=0), "return 1", "stop", token_ids=[7, 8],
                       logprobs=[-0.5, -0.25], tokens_in=10, tokens_out=2, model_s=0.3)  # fmt: skip
        sc = [ScoreRecord(content_key("score", i=i), i == 0, "pass" if i == 0 else "fail",
                          "boom" * i, cpu_s=0.01, wall_s=0.02) for i in range(2)]  # fmt: skip
        s.put_generations([g])
        s.put_scores(sc)
        s.begin_run("run-1", "eval", {"suite": "humaneval", "n": 2})
        s.add_run_items(
            "run-1",
            [
                RunItem(0, "HumanEval/0", 0, generation_key=g.key, score_key=sc[0].key),
                RunItem(1, "HumanEval/0", 1, cluster="fam", score_key=sc[1].key,
                        sample={"completion": "  pass", "note": "é"}),
                RunItem(2, "HumanEval/1", 0, sample={"completion": "x"}),
            ],
        )  # fmt: skip
        s.finish_run("run-1")
        yield s  # type: ignore[misc]


def test_parquet_to_an_fsspec_url(store: Store) -> None:
    url = f"memory://bucket-{uuid.uuid4().hex}/runs/run-1.parquet"
    assert store.export("run-1", url) == 3
    with fsspec.open(url, "rb") as f:
        table = pq.read_table(f)
    rows = table.to_pylist()
    assert [r["ordinal"] for r in rows] == [0, 1, 2]
    assert rows[0]["completion"] == "return 1" and rows[0]["token_ids"] == [7, 8]
    assert rows[0]["logprobs"] == [-0.5, -0.25] and rows[0]["passed"] is True
    assert rows[1]["completion"] == "  pass" and rows[1]["cluster"] == "fam"
    assert json.loads(rows[1]["sample"]) == {"completion": "  pass", "note": "é"}
    assert rows[2]["passed"] is None and rows[2]["token_ids"] is None
    assert str(table.schema.field("tokens_in").type) == "int64"
    meta = json.loads(table.schema.metadata[b"codegym.run"])
    assert meta == {"run_id": "run-1", "kind": "eval", "status": "finished",
                    "config": {"suite": "humaneval", "n": 2}}  # fmt: skip


def test_jsonl_follows_the_results_contract(store: Store, tmp_path: Path) -> None:
    out = tmp_path / "deep" / "dir" / "results.jsonl"  # parents are created
    assert store.export("run-1", out, format="jsonl") == 3
    rows = [json.loads(line) for line in out.read_text("utf-8").splitlines()]
    need = {"task_id", "completion", "sample_index", "passed", "outcome", "detail", "cluster",
            "cpu_s", "wall_s"}  # fmt: skip
    assert all(need <= set(r) for r in rows)
    assert rows[0]["tokens_in"] == 10 and rows[0]["model_s"] == 0.3
    assert rows[1]["note"] == "é" and rows[1]["outcome"] == "fail" and rows[1]["detail"] == "boom"
    assert [r["sample_index"] for r in rows] == [0, 1, 0]


def test_empty_run_exports_typed_columns(tmp_path: Path) -> None:
    with Store(tmp_path / "s.duckdb") as s:
        s.begin_run("empty", "score", {})
        assert s.export("empty", tmp_path / "e.parquet") == 0
    table = pq.read_table(tmp_path / "e.parquet")
    assert table.num_rows == 0 and "passed" in table.schema.names


def test_export_errors_name_the_input(store: Store, tmp_path: Path) -> None:
    with pytest.raises(StoreInputError, match="'csv'"):
        store.export("run-1", tmp_path / "x.csv", format="csv")  # type: ignore[arg-type]
    with pytest.raises(StoreInputError, match="no run 'nope'"):
        store.export("nope", tmp_path / "x.parquet")
    with pytest.raises(StoreError, match=r"nosuchproto://b/x\.parquet"):
        store.export("run-1", "nosuchproto://b/x.parquet")
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(StoreError, match="cannot export run 'run-1'"):
        store.export("run-1", blocker / "x.parquet")  # a parent that is a file
