"""``DictCache``: the store seen as key → plain-dict records (the eval runner's view).

The runner keeps its records as dicts (``{"passed": ..., "outcome": ...}``) and only
needs batched get/put by key; this adapter converts at the boundary so the typed records
(and their validation) stay the store's single source of truth. Fields a record type
does not have are refused by name rather than dropped.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from typing import Any, TypeVar

from codegym.store.errors import StoreInputError
from codegym.store.records import GenerationRecord, ScoreRecord
from codegym.store.store import Store

_R = TypeVar("_R", GenerationRecord, ScoreRecord)


class DictCache:
    """Batched key → dict access to a ``Store``'s generations and scores.

    Returned dicts hold the record's fields except ``key`` and ``created``.
    """

    def __init__(self, store: Store) -> None:
        self.store = store

    def get_generations(self, keys: Iterable[str]) -> Mapping[str, dict[str, Any]]:
        return {k: _as_dict(r) for k, r in self.store.get_generations(keys).items()}

    def put_generations(self, items: Iterable[tuple[str, Mapping[str, Any]]]) -> None:
        self.store.put_generations(_build(GenerationRecord, items))

    def get_scores(self, keys: Iterable[str]) -> Mapping[str, dict[str, Any]]:
        return {k: _as_dict(r) for k, r in self.store.get_scores(keys).items()}

    def put_scores(self, items: Iterable[tuple[str, Mapping[str, Any]]]) -> None:
        self.store.put_scores(_build(ScoreRecord, items))


def _as_dict(record: GenerationRecord | ScoreRecord) -> dict[str, Any]:
    # Shallow on purpose: records are frozen and hold only scalars and tuples, and
    # dataclasses.asdict's deep copy dominated a resumed eval's lookup time.
    return {
        f.name: getattr(record, f.name)
        for f in dataclasses.fields(record)
        if f.name not in ("key", "created")
    }


def _build(kind: type[_R], items: Iterable[tuple[str, Mapping[str, Any]]]) -> list[_R]:
    allowed = {f.name for f in dataclasses.fields(kind)} - {"key"}
    out = []
    for pair in items:
        if not (isinstance(pair, tuple) and len(pair) == 2 and isinstance(pair[1], Mapping)):
            raise StoreInputError(
                f"expected (key, dict) pairs for {kind.__name__} records, got {pair!r:.80}"
            )
        key, fields = pair
        extra = set(fields) - allowed
        if extra:
            raise StoreInputError(
                f"{kind.__name__} {key!r:.20}: unknown field(s) {sorted(extra)}; "
                f"the store keeps {sorted(allowed)}"
            )
        try:
            out.append(kind(key=key, **fields))
        except StoreInputError:
            raise
        except TypeError as e:  # a required field is missing
            raise StoreInputError(f"{kind.__name__} {key!r:.20}: {e}") from e
    return out
