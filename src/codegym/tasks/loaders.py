"""Load task sets: JSONL files (hash-checked), named suites, and synthetic families.

``load_suite(spec)`` resolves, in order:

1. a registered suite name (``humaneval``; ``register_suite`` / ``register_manifest`` add more);
2. ``synth:FAMILY?n=200&seed=1&difficulty=2``, a seeded synthetic family: a generator
   registered with ``register_family``, else ``codegym.tasks.synthetic.generate``;
3. a path to a JSONL file (``.jsonl.gz`` too), read by ``load_jsonl``.

``load_jsonl`` hashes the file's bytes first: with ``sha256=`` given a mismatch is a
``DatasetError``; without it the computed digest is recorded on the ``TaskSet`` so results
can cite it. Bad records (malformed JSON, non-UTF-8 bytes, missing fields, duplicate ids)
are reported as ``file:line: what; fix``; ``on_bad_line="stop"`` raises on the first,
``"skip"`` keeps going and lists them in ``TaskSet.skipped``. A file with no usable task is
always an error.
"""

from __future__ import annotations

import dataclasses
import difflib
import gzip
import json
import re
import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, Protocol
from urllib.parse import parse_qsl

from codegym._registry import RegistrationError
from codegym.tasks import environments, synthetic
from codegym.tasks.formats import (
    FORMATS,
    Format,
    RecordError,
    check_format,
    detect_format,
    expected_fields,
    refuse_evalplus,
    refuse_original_layout,
    to_task,
)
from codegym.tasks.manifest import check_sha256, compare_sha256, read_manifest
from codegym.tasks.task import Task, TaskError
from codegym.tasks.taskset import DatasetError, TaskSet

OnBadLine = Literal["skip", "stop"]

_FIX_JSON = "fix the line or pass on_bad_line='skip' (--on-bad-line skip) to skip it"


# --- JSONL ------------------------------------------------------------------------------------


def load_jsonl(
    path: str | Path,
    *,
    format: str | None = None,
    sha256: str | None = None,
    on_bad_line: OnBadLine = "stop",
    name: str | None = None,
) -> TaskSet:
    """Read a JSONL dataset file (gzip when the name ends in ``.gz``).

    Args:
        format: one of ``formats.FORMATS``; None detects it from the first record.
        sha256: the expected digest of the file's bytes as stored; None records it.
        on_bad_line: ``stop`` raises at the first bad record; ``skip`` skips and lists it.
        name: the task set's name (default: the path).

    Raises:
        DatasetError: unreadable or empty file, digest mismatch, a bad record under
            ``stop``, or no usable record at all.
    """
    p = Path(path)
    try:
        raw = p.read_bytes()
    except OSError as e:
        raise DatasetError(f"cannot read dataset file {p}: {e.strerror}") from e
    digest = check_sha256(raw, sha256, f"dataset file {p}")
    if p.suffix == ".gz":
        try:
            raw = gzip.decompress(raw)
        except (OSError, EOFError, zlib.error) as e:
            raise DatasetError(
                f"dataset file {p} is not valid gzip ({e}); decompress it or drop the .gz suffix"
            ) from e
    return parse_jsonl(
        raw,
        source=str(p),
        name=name or str(p),
        format=format,
        on_bad_line=on_bad_line,
        sha256=digest,
    )


def parse_jsonl(
    raw: bytes,
    *,
    source: str,
    name: str,
    format: str | None = None,
    on_bad_line: OnBadLine = "stop",
    sha256: str | None = None,
) -> TaskSet:
    """Parse JSONL bytes into a task set (``load_jsonl`` without the file and digest).

    Raises:
        DatasetError: as ``load_jsonl``.
    """
    if on_bad_line not in ("skip", "stop"):
        raise TaskError(f"on_bad_line={on_bad_line!r}: use 'skip' or 'stop'")
    try:
        fmt: Format | None = check_format(format) if format is not None else None
    except RecordError as e:
        raise DatasetError(f"{source}: {e}") from None
    tasks: list[Task] = []
    first_line: dict[str, int] = {}
    skipped: list[str] = []
    seen_any = False
    if raw.startswith(b"\xef\xbb\xbf"):  # a UTF-8 BOM, as some editors write
        raw = raw[3:]
    # Split on \n only, so line numbers match what editors and `sed -n Np` show.
    for lineno, line in enumerate(raw.split(b"\n"), 1):
        if not line.strip():
            continue
        seen_any = True
        where = f"{source}:{lineno}"
        try:
            row = _decode(line)
            if fmt is None:
                fmt = detect_format(row)
                if fmt is None:
                    refuse_evalplus(row)  # MBPP+ matches no format: say why, not just that
                    raise RecordError(
                        f"cannot tell the format from fields {sorted(row)[:8]}; expected "
                        f"one of {expected_fields()}; or pass format="
                    )
            if format is None and fmt in ("humaneval", "mbpp"):
                refuse_original_layout(row)  # named, it runs as published
            task = _with_image(to_task(row, fmt, f"{Path(source).stem}/{lineno}"), row, source)
            if task.id in first_line:
                raise RecordError(
                    f"duplicate task id {task.id!r} (first on line {first_line[task.id]}); "
                    "give every task a unique id"
                )
        except (RecordError, ValueError) as e:
            # TaskError (a ValueError) covers Task's own shape checks (e.g. no tests at all).
            message = f"{where}: {e}"
            if on_bad_line == "stop":
                raise DatasetError(f"{message}  ({_FIX_JSON})") from None
            skipped.append(message)
            continue
        first_line[task.id] = lineno
        tasks.append(task)
    if not seen_any:
        raise DatasetError(f"dataset file {source} is empty: expected one JSON object per line")
    if not tasks:
        raise DatasetError(
            f"dataset file {source} has no usable task ({len(skipped)} bad lines; first: "
            f"{skipped[0]})"
        )
    return TaskSet(name, tuple(tasks), sha256=sha256, source=source, skipped=tuple(skipped))


def _with_image(task: Task, row: dict[str, Any], source: str) -> Task:
    """``task`` in the environment its record names (``image``: a shipped name or a spec
    path, relative to the dataset file), checked here so a bad one names its line.

    Raises:
        RecordError: ``image`` is not a string.
        TaskEnvironmentError: it names no shipped environment and no readable spec.
    """
    ref = row.get("image", task.image or None)
    if ref is None:
        return task
    if not isinstance(ref, str):
        raise RecordError(f"field 'image' must be a string, got {type(ref).__name__}")
    resolved = environments.resolve(ref, Path(source).parent)
    environments.spec_key(resolved)  # a spec that cannot be read fails here, by line
    return dataclasses.replace(task, image=resolved)


def _decode(line: bytes) -> dict[str, Any]:
    try:
        text = line.decode("utf-8")
    except UnicodeDecodeError as e:
        raise RecordError(
            f"not UTF-8 (byte 0x{line[e.start]:02x} at column {e.start + 1}); "
            "re-save the file as UTF-8"
        ) from None
    try:
        row = json.loads(text)
    except json.JSONDecodeError as e:
        raise RecordError(f"malformed JSON at column {e.colno}: {e.msg}") from None
    if not isinstance(row, dict):
        raise RecordError(f"expected a JSON object, got {type(row).__name__}")
    return row


# --- synthetic families -----------------------------------------------------------------------


class FamilyGenerator(Protocol):
    """Generates ``n`` tasks of one family; the same arguments give the same tasks."""

    def __call__(self, *, n: int, seed: int, difficulty: int) -> Sequence[Task]: ...


@dataclass(frozen=True)
class SynthSpec:
    """A parsed ``synth:FAMILY?n=N&seed=S&difficulty=D`` spec."""

    family: str
    n: int = 100
    seed: int = 0
    difficulty: int = 1

    def __str__(self) -> str:
        """The canonical spec (the task set's name): every parameter, fixed order."""
        return f"synth:{self.family}?n={self.n}&seed={self.seed}&difficulty={self.difficulty}"


_SYNTH = "synth:"
_FAMILY_RE = re.compile(r"^[A-Za-z_][\w.-]*$")
_FAMILIES: dict[str, FamilyGenerator] = {}


def parse_synth_spec(spec: str) -> SynthSpec:
    """Parse ``synth:FAMILY?n=200&seed=1&difficulty=2`` (every parameter optional).

    Raises:
        DatasetError: not a synth spec, a bad family name, or a bad/unknown parameter.
    """
    if not spec.startswith(_SYNTH):
        raise DatasetError(f"{spec!r} is not a synthetic spec: write synth:FAMILY?n=N&seed=S")
    family, _, query = spec[len(_SYNTH) :].partition("?")
    if not _FAMILY_RE.match(family):
        raise DatasetError(
            f"{spec!r}: family name {family!r} must be an identifier, "
            "e.g. synth:infer_fn?n=200&seed=1&difficulty=2"
        )
    try:
        pairs = parse_qsl(query, keep_blank_values=True, strict_parsing=bool(query))
    except ValueError as e:
        raise DatasetError(f"{spec!r}: malformed parameters ({e}); write n=200&seed=1") from None
    params: dict[str, int] = {}
    for key, value in pairs:
        if key not in ("n", "seed", "difficulty"):
            raise DatasetError(f"{spec!r}: unknown parameter {key!r}; use n, seed, difficulty")
        if key in params:
            raise DatasetError(f"{spec!r}: parameter {key!r} is given twice")
        try:
            params[key] = int(value)
        except ValueError:
            raise DatasetError(f"{spec!r}: {key}={value!r} is not an integer") from None
    if params.get("n", 1) < 1 or params.get("difficulty", 1) < 0:
        raise DatasetError(f"{spec!r}: n must be >= 1 and difficulty >= 0")
    return SynthSpec(family, **params)


def register_family(name: str, generator: FamilyGenerator, *, replace: bool = False) -> None:
    """Make ``synth:NAME?...`` load tasks from ``generator``.

    Raises:
        RegistrationError: the name is taken (pass ``replace=True``) or not an identifier.
    """
    if not _FAMILY_RE.match(name):
        raise RegistrationError(f"family name {name!r} must be an identifier")
    if name in _FAMILIES and not replace:
        raise RegistrationError(
            f"synthetic family {name!r} is already registered; pass replace=True"
        )
    _FAMILIES[name] = generator


def unregister_family(name: str) -> None:
    _FAMILIES.pop(name, None)


def load_synthetic(spec: str | SynthSpec) -> TaskSet:
    """Generate the task set a synth spec names.

    Raises:
        DatasetError: a bad spec, an unknown family, or a generator that fails.
    """
    s = spec if isinstance(spec, SynthSpec) else parse_synth_spec(spec)
    generator = _FAMILIES.get(s.family)
    try:
        if generator is not None:
            tasks = generator(n=s.n, seed=s.seed, difficulty=s.difficulty)
        else:
            tasks = _package_generate(s)
    except (ValueError, KeyError) as e:
        raise DatasetError(f"{s}: the {s.family!r} generator refused: {e}") from e
    return TaskSet.of(str(s), tasks, source=str(s))


def _package_generate(s: SynthSpec) -> Sequence[Task]:
    """Fall back to the families shipped in ``codegym.tasks.synthetic``."""
    shipped: Sequence[str] = synthetic.FAMILIES
    if s.family not in shipped:
        known = ", ".join(sorted({*_FAMILIES, *shipped}))
        raise DatasetError(f"{s}: unknown synthetic family {s.family!r}; known: {known}")
    return synthetic.generate(s.family, n=s.n, seed=s.seed, difficulty=s.difficulty)


# --- named suites -----------------------------------------------------------------------------

SuiteLoader = Callable[[], TaskSet]
_SUITES: dict[str, SuiteLoader] = {}


def register_suite(name: str, loader: SuiteLoader, *, replace: bool = False) -> None:
    """Make ``load_suite(name)`` call ``loader``.

    Raises:
        RegistrationError: the name is taken (pass ``replace=True``), or looks like a
            spec/path.
    """
    if not name or name.startswith(_SYNTH) or "/" in name or name.endswith(".jsonl"):
        raise RegistrationError(
            f"suite name {name!r} must be a plain name (no 'synth:', '/', .jsonl)"
        )
    if name in _SUITES and not replace:
        raise RegistrationError(f"suite {name!r} is already registered; pass replace=True")
    _SUITES[name] = loader


def unregister_suite(name: str) -> None:
    _SUITES.pop(name, None)


def suites() -> list[str]:
    """The registered suite names."""
    return sorted(_SUITES)


def register_manifest(path: str | Path, *, replace: bool = False) -> list[str]:
    """Register every dataset in a manifest file as a suite (see ``codegym.tasks.manifest``).

    Files are read and checked when the suite is loaded, not here.

    Raises:
        DatasetError: the manifest is unreadable or malformed.
        RegistrationError: a name is already registered and ``replace`` is False.
    """
    pins = read_manifest(Path(path))
    for pin in pins.values():

        def loader(pin: Any = pin) -> TaskSet:
            return load_jsonl(pin.path, format=pin.format, sha256=pin.sha256, name=pin.name)

        register_suite(pin.name, loader, replace=replace)
    return list(pins)


def load_suite(
    spec: str,
    *,
    format: str | None = None,
    sha256: str | None = None,
    on_bad_line: OnBadLine = "stop",
    since: str | None = None,
) -> TaskSet:
    """Resolve a suite name, a ``synth:`` spec or a JSONL path (see the module docstring).

    ``format`` and ``on_bad_line`` apply to files; ``sha256`` is checked against any set
    read from a file (registered suites included); ``since`` keeps the tasks released on or
    after that day (``TaskSet.since``).

    Raises:
        DatasetError: unknown spec (with near matches), or any loading error.
    """
    ts = _resolve_suite(spec, format, sha256, on_bad_line)
    return ts if since is None else ts.since(since)


def _resolve_suite(
    spec: str, format: str | None, sha256: str | None, on_bad_line: OnBadLine
) -> TaskSet:
    if spec in _SUITES:
        ts = _SUITES[spec]()
        if sha256 is not None:
            check_sha256_of(ts, sha256)
        return ts
    if spec.startswith(_SYNTH):
        if sha256 is not None:
            raise DatasetError(
                f"{spec}: synthetic sets are generated, there is no file to "
                "check a sha256 against; drop sha256"
            )
        return load_synthetic(spec)
    path = Path(spec)
    if path.is_file():
        from codegym.tasks.swe.files import is_task_file

        if format in (None, "swe") and is_task_file(path):  # repository tasks (SWE-style)
            from codegym.tasks.swe.task import as_taskset

            ts = as_taskset(path)
            if sha256 is not None:
                check_sha256_of(ts, sha256)
            return ts  # type: ignore[no-any-return]
        return load_jsonl(path, format=format, sha256=sha256, on_bad_line=on_bad_line)
    near = difflib.get_close_matches(spec, list(_SUITES), n=3, cutoff=0.6)
    hint = f" Did you mean {', '.join(map(repr, near))}?" if near else ""
    raise DatasetError(
        f"unknown suite {spec!r}: not a registered suite ({', '.join(suites())}), not a "
        f"synth:FAMILY?n=N&seed=S&difficulty=D spec, and no file at that path.{hint}"
    )


def check_sha256_of(ts: TaskSet, expected: str) -> None:
    """Check a loaded set's recorded source digest.

    Raises:
        DatasetError: no digest recorded, or a different one.
    """
    if ts.sha256 is None:
        raise DatasetError(f"{ts.name}: not read from a file, so it has no sha256 to check")
    compare_sha256(ts.sha256, expected, ts.name)


def _load_swe_offline() -> TaskSet:
    from codegym.tasks.swe.files import OFFLINE_FILE
    from codegym.tasks.swe.task import as_taskset

    return as_taskset(OFFLINE_FILE)  # type: ignore[no-any-return]


# ``humaneval`` registers itself in codegym.tasks.humaneval (which imports this module)
register_suite("swe-offline", _load_swe_offline)

__all__ = [
    "FORMATS",
    "FamilyGenerator",
    "OnBadLine",
    "SynthSpec",
    "load_jsonl",
    "load_suite",
    "load_synthetic",
    "parse_jsonl",
    "parse_synth_spec",
    "register_family",
    "register_manifest",
    "register_suite",
    "suites",
]
