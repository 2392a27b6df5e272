"""Resource limits for one execution."""

from __future__ import annotations

from dataclasses import dataclass

from codegym.sandbox.errors import SandboxInputError

MAX_CODE_BYTES = 8 << 20
MAX_INPUT_BYTES = 64 << 20


@dataclass(frozen=True)
class Limits:
    """Limits for one execution (one program, or one test case of a batch).

    Time is judged on CPU time; ``wall_s`` is a backstop for programs that sleep or
    block, so a slow or busy host does not turn correct programs into timeouts.
    """

    cpu_s: float = 2.0
    """CPU seconds for the whole process tree (all threads and children)."""
    wall_s: float | None = None
    """Wall-clock backstop; default ``max(3 × cpu_s, cpu_s + 2)``."""
    memory_mb: int = 512
    """Memory for the process tree (cgroup), including files written to the work dir."""
    output_bytes: int = 1 << 20
    """stdout + stderr captured; the program is killed when it writes more."""
    max_processes: int = 64
    """Processes and threads alive at once (pids cgroup)."""
    disk_mb: int = 64
    """Size of the private work dir and /tmp, and the largest file one may write."""
    open_files: int = 256
    """Open file descriptors per process."""

    def __post_init__(self) -> None:
        checks = {
            "cpu_s": (self.cpu_s, 0.01, 3600.0),
            "memory_mb": (self.memory_mb, 16, 1 << 20),
            "output_bytes": (self.output_bytes, 0, 1 << 30),
            "max_processes": (self.max_processes, 1, 4096),
            "disk_mb": (self.disk_mb, 1, 1 << 16),
            "open_files": (self.open_files, 16, 1 << 16),
        }
        for name, (value, lo, hi) in checks.items():
            kind = (int, float) if name == "cpu_s" else (int,)
            if isinstance(value, bool) or not isinstance(value, kind):
                what = "a number" if name == "cpu_s" else "an integer"
                raise SandboxInputError(f"Limits.{name} must be {what}, got {value!r}")
            if not lo <= value <= hi:
                raise SandboxInputError(
                    f"Limits.{name}={value!r} is out of range; use a value in [{lo}, {hi}]"
                )
        if self.wall_s is not None and (
            isinstance(self.wall_s, bool)
            or not isinstance(self.wall_s, (int, float))
            or not 0.01 <= self.wall_s <= 7200
        ):
            raise SandboxInputError(
                f"Limits.wall_s={self.wall_s!r} is out of range; use 0.01..7200 or None"
            )

    @property
    def wall(self) -> float:
        """The effective wall-clock limit in seconds."""
        if self.wall_s is not None:
            return float(self.wall_s)
        return max(3 * self.cpu_s, self.cpu_s + 2)

    def to_wire(self) -> dict[str, float | int]:
        # the fields are plain numbers: a shallow copy does what asdict's deep copy did, at
        # a tenth of its cost on every run
        d: dict[str, float | int] = dict(vars(self))
        d["wall_s"] = self.wall
        return d


def check_path(path: str) -> str:
    """A workspace path: relative, no ``.``/``..``/empty part, no NUL, UTF-8, and within the
    file system's name limits (255 bytes a name, 4095 in all).

    Raises:
        SandboxInputError: the path names the fix.
    """
    if (
        not isinstance(path, str)
        or not path
        or path.startswith("/")
        or "\0" in path
        or any(part in ("..", ".", "") for part in path.split("/"))
    ):
        raise SandboxInputError(
            f"file path {path!r} must be relative, without '..', '.' or empty parts"
        )
    try:
        raw = path.encode("utf-8")
    except UnicodeEncodeError:
        raise SandboxInputError(f"file path {path!r} is not valid UTF-8 text") from None
    if len(raw) > 4095 or any(len(part) > 255 for part in raw.split(b"/")):
        raise SandboxInputError(
            f"file path {path[:80]!r}... is too long: at most 255 bytes per name and 4095 in all"
        )
    return path
