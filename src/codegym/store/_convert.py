"""Conversions between the store's records and Arrow batches / result rows."""

from __future__ import annotations

import dataclasses
import json
import sys
from array import array
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import TYPE_CHECKING, Any, TypeVar

from codegym.store._schema import Columns
from codegym.store.errors import StoreInputError
from codegym.store.records import GenerationRecord, RunItem, ScoreRecord, TrajectoryRecord

if TYPE_CHECKING:
    import pyarrow as pa

R = TypeVar("R", GenerationRecord, ScoreRecord, TrajectoryRecord)


def iterable(items: Iterable[Any]) -> Iterable[Any]:
    if isinstance(items, (str, bytes, Mapping)) or not isinstance(items, Iterable):
        raise StoreInputError(
            f"expected an iterable of records or keys, got a {type(items).__name__}; "
            "wrap a single one in a list"
        )
    return items


def unique(items: Iterable[R], kind: type[R], what: str) -> list[R]:
    """Type-check and de-duplicate by key, first wins (as ON CONFLICT DO NOTHING does)."""
    seen: dict[str, R] = {}
    for it in iterable(items):
        if not isinstance(it, kind):
            raise StoreInputError(
                f"{what} takes {kind.__name__} records, got {type(it).__name__} {it!r:.80}"
            )
        seen.setdefault(it.key, it)
    return list(seen.values())


def table(rows: list[Any], columns: Columns, row: Callable[[Any], tuple[Any, ...]]) -> pa.Table:
    """An Arrow batch of ``rows`` (pyarrow is imported here, on the first write)."""
    import pyarrow as pa

    types = {
        "string": pa.string(),
        "int64": pa.int64(),
        "float64": pa.float64(),
        "bool_": pa.bool_(),
        "binary": pa.binary(),
    }
    values = list(zip(*map(row, rows), strict=True)) if rows else [()] * len(columns)
    try:
        return pa.Table.from_arrays(
            [pa.array(v, type=types[t]) for v, (_, t) in zip(values, columns, strict=True)],
            names=[n for n, _ in columns],
        )
    except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError) as e:
        raise StoreInputError(f"a record has a value the store cannot hold: {e}") from e


def gen_row(g: GenerationRecord) -> tuple[Any, ...]:
    return (
        g.key,
        storable(g.text),
        g.finish_reason,
        pack("q", g.token_ids),
        pack("d", g.logprobs),
        g.tokens_in,
        g.tokens_out,
        g.model_s,
        g.created,
    )


def score_row(s: ScoreRecord) -> tuple[Any, ...]:
    detail = storable(s.detail)
    return (s.key, s.passed, s.outcome, detail, s.cpu_s, s.wall_s, s.flaky, s.created, s.parts)


def to_json(value: Any, what: str) -> str:
    try:
        text = json.dumps(value, ensure_ascii=False, sort_keys=True)
    except (TypeError, ValueError) as e:
        raise StoreInputError(
            f"{what} is not JSON-serializable ({e}); convert it to dicts, lists, str and numbers"
        ) from e
    if _has_surrogates(text):  # lone surrogates (a model wrote them): escaped, not lost
        text = json.dumps(value, ensure_ascii=True, sort_keys=True)
    return text


def _has_surrogates(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


def storable(text: str) -> str:
    """A plain string column's value: lone surrogates (which no UTF-8 column can hold) are
    replaced by U+FFFD. Used for text that has a lossless twin elsewhere (a generation's
    token ids) or that the store only describes (a score's detail)."""
    if not _has_surrogates(text):
        return text
    return text.encode("utf-8", "surrogatepass").decode("utf-8", "replace")


def traj_row(t: TrajectoryRecord) -> tuple[Any, ...]:
    data = to_json(dict(t.data), f"TrajectoryRecord {t.key[:12]}… data")
    return (t.key, t.run_id, t.task_id, t.reward, t.outcome, data, t.created)


def item_row(run_id: str, it: RunItem) -> tuple[Any, ...]:
    sample = None if it.sample is None else to_json(dict(it.sample), f"RunItem {it.ordinal} sample")
    return (
        run_id,
        it.ordinal,
        it.task_id,
        it.sample_index,
        it.cluster,
        it.generation_key,
        it.score_key,
        sample,
    )


def rows(cols: Mapping[str, list[Any]]) -> Iterator[dict[str, Any]]:
    names = list(cols)
    for values in zip(*cols.values(), strict=True):
        yield dict(zip(names, values, strict=True))


def trajectories(cols: Mapping[str, list[Any]]) -> list[TrajectoryRecord]:
    return [TrajectoryRecord(**{**r, "data": json.loads(r["data"])}) for r in rows(cols)]


def pack(code: str, values: tuple[Any, ...] | None) -> bytes | None:
    """Little-endian int64 (``q``) or float64 (``d``) bytes, None kept as None."""
    if values is None:
        return None
    try:
        arr = array(code, values)
    except (OverflowError, TypeError) as e:
        raise StoreInputError(
            f"a record has a value the store cannot hold: {e} (token ids are int64, "
            "logprobs float64)"
        ) from e
    if sys.byteorder == "big":
        arr.byteswap()
    return arr.tobytes()


def unpack(code: str, blob: bytes | None) -> tuple[Any, ...] | None:
    if blob is None:
        return None
    arr = array(code)
    arr.frombytes(blob)
    if sys.byteorder == "big":
        arr.byteswap()
    return tuple(arr.tolist())


def loaded(kind: type[R], row: dict[str, Any]) -> R:
    """A record read back from the store, built without re-validating it.

    Every stored record was validated when it was made; skipping ``__post_init__`` here
    makes reading 100k records several times faster.
    """
    obj = object.__new__(kind)
    obj.__dict__.update(row)
    assert set(row) == {f.name for f in dataclasses.fields(kind)}, row.keys()
    return obj


def generation(row: dict[str, Any]) -> GenerationRecord:
    row["token_ids"] = unpack("q", row["token_ids"])
    row["logprobs"] = unpack("d", row["logprobs"])
    return loaded(GenerationRecord, row)
