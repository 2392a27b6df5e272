"""``codegym runs PATH [PATH...]``: runs side by side, with where their models came from.

A PATH is an eval or demo run folder (``summary.json``), a training directory
(``ckpt-*/record.json``) or a trained model (``lineage.json``). Each row says what it ran
on (the suite and its digest), its pass@1, and the lineage of the model behind it: the
checkpoint's content id, its parent, the training config's digest and the training tasks'
digest. A model whose parent is a checkpoint of a training directory also given is tied to
that directory and step, so one command answers which data, config and parent produced the
checkpoint behind a verdict. Exit codes: 0 shown, 2 a PATH that is none of these.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer

from codegym.cli._common import console, fail, made_from

_NONE = "-"


def runs(
    paths: Annotated[
        list[Path], typer.Argument(help="Run folders, training directories or trained models.")
    ],
    as_json: Annotated[bool, typer.Option("--json", help="Print the rows as JSON.")] = False,
) -> None:
    """List runs side by side with the checkpoint, config and data behind each."""
    rows = [_row(p) for p in paths]
    checkpoints: dict[str, tuple[str, int]] = {}  # content id -> (training dir, step)
    for row in rows:
        for rec in row.pop("_records", []):
            checkpoints[rec.get("id", "")] = (row["path"], rec.get("step"))
    for row in rows:
        parent = (row.get("lineage") or {}).get("parent")
        if parent in checkpoints:
            where, step = checkpoints[parent]
            row["trained_by"] = f"{where} step {step}"
    if as_json:
        typer.echo(json.dumps(rows, indent=1))
        return
    from rich.table import Table

    table = Table("path", "kind", "tasks", "pass@1", "checkpoint", "parent", "config",
                  "trained on", "trained by")  # fmt: skip
    for row in rows:
        lin = row.get("lineage") or {}
        pass1 = row.get("pass1")
        table.add_row(
            row["path"], row["kind"], f"{row['tasks']} {_short(row.get('tasks_digest'))}",
            _NONE if pass1 is None else f"{pass1:.3f}", _short(lin.get("checkpoint")),
            _short(lin.get("parent")), _short(lin.get("config_digest")),
            _short(lin.get("train_digest")), row.get("trained_by", _NONE),
        )  # fmt: skip
    console.print(table)


def _short(digest: str | None) -> str:
    if not digest:
        return _NONE
    return digest.removeprefix("sha256:")[:12]


def _read(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError) as e:
        fail(f"{path}: unreadable ({e})")


def _row(path: Path) -> dict[str, Any]:
    if (path / "summary.json").is_file():
        summary = _read(path / "summary.json")
        cfg = summary.get("config", {})
        est = summary.get("pass_at_k", {}).get("1", {}).get("estimate")
        return {
            "path": str(path),
            "kind": cfg.get("command", "run"),
            "tasks": cfg.get("suite", "held out"),
            "tasks_digest": cfg.get("suite_digest") or cfg.get("heldout_digest"),
            "pass1": est,
            "lineage": cfg.get("lineage"),
        }
    if (path / "lineage.json").is_file():
        lin = _read(path / "lineage.json")
        return {
            "path": str(path),
            "kind": "model",
            "tasks": lin.get("tasks", {}).get("source", _NONE),
            "tasks_digest": lin.get("tasks", {}).get("heldout_digest"),
            "pass1": None,
            "lineage": made_from(lin),
        }
    records = [_read(p) for p in sorted(path.glob("ckpt-*/record.json"))]
    if records:
        last = records[-1]
        return {
            "path": str(path),
            "kind": "train",
            "checkpoints": len(records),
            "tasks": last.get("tasks", {}).get("source", _NONE),
            "tasks_digest": last.get("tasks", {}).get("heldout_digest"),
            "pass1": None,
            "lineage": made_from(last, last.get("id")),
            "_records": records,
        }
    fail(
        f"{path}: not a run folder (summary.json), a trained model (lineage.json) or a "
        "training directory (ckpt-*/record.json)"
    )
