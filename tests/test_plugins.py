"""Plug-ins by name: a sandbox tier, a dataset format, an eval metric and a policy are each
one definition and one registration, reachable from the API and the command line, and an
unknown name is refused naming what is registered."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from codegym._registry import Registry, UnknownName
from codegym.evals.metrics import METRICS
from codegym.policies.registry import POLICIES, make_policy
from codegym.sandbox import Sandbox, SandboxInputError
from codegym.sandbox.tiers import TIERS, make_tier
from codegym.sandbox.tiers.process import ProcessTier
from codegym.tasks import DatasetError, Task, load_humaneval
from codegym.tasks.formats import DATASET_FORMATS, DatasetFormat, RecordError
from codegym.tasks.loaders import load_jsonl
from codegym.tasks.task import IOCase

CODEGYM = str(Path(sys.executable).parent / "codegym")


def test_a_registry_imports_on_first_use_and_names_what_it_has() -> None:
    reg: Registry[Any] = Registry("widget", "add one with reg.register")
    reg.register("json", "json:dumps")
    assert reg.get("json")({"a": 1}) == '{"a": 1}'
    with pytest.raises(UnknownName, match=r"unknown widget 'x'; registered: json \(add one"):
        reg.get("x")
    with pytest.raises(ValueError, match="registered already"):
        reg.register("json", "json:loads")


class QuietProcessTier(ProcessTier):
    """A tier of one's own: the process tier without its warning."""

    name = "quiet-process"

    @property
    def warning(self) -> str | None:
        return None


async def test_a_tier_of_ones_own_runs_programs() -> None:
    if "quiet-process" not in TIERS:
        TIERS.register("quiet-process", QuietProcessTier)
    assert make_tier("quiet-process").warning is None
    async with Sandbox(tier="quiet-process", workers=1) as sb:
        r = await sb.run_python("print(6 * 7)")
    assert r.ok and r.stdout == "42\n"
    with pytest.raises(SandboxInputError, match="choose one of jail, gvisor, process"):
        Sandbox(tier="nope")


def _qa(row: dict[str, Any], fallback_id: str) -> Task:
    if not isinstance(row.get("question"), str) or not isinstance(row.get("answer"), str):
        raise RecordError("fields 'question' and 'answer' must be strings")
    case = IOCase(stdin="", expected=row["answer"] + "\n")
    return Task(id=str(row.get("id", fallback_id)), prompt=row["question"], io_cases=(case,))


def test_a_dataset_format_of_ones_own_is_detected_and_named(tmp_path: Path) -> None:
    if "qa" not in DATASET_FORMATS:
        DATASET_FORMATS.register(
            "qa", DatasetFormat(lambda r: {"question", "answer"} <= r.keys(), _qa, "QA (question)")
        )
    data = tmp_path / "qa.jsonl"
    data.write_text(json.dumps({"id": "q1", "question": "Print 42.", "answer": "42"}) + "\n")
    (task,) = list(load_jsonl(data))
    assert task.id == "q1" and task.io_cases[0].expected == "42\n"
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"nothing": 1}) + "\n")
    with pytest.raises(DatasetError, match=r"QA \(question\)"):  # every format expected
        load_jsonl(bad)


def test_metrics_and_policies_are_looked_up_by_name() -> None:
    assert {"latency", "tokens"} <= set(METRICS.names())
    assert {"openai", "replay", "transformers"} <= set(POLICIES.names())
    with pytest.raises(UnknownName, match="registered: openai, replay, transformers"):
        make_policy("nope", model="m", base_url=None, mode="chat", concurrency=1, api_key=None,
                    tools=None)  # fmt: skip


def test_eval_takes_a_policy_and_a_metric_by_name(tmp_path: Path) -> None:
    """``--policy replay`` answers from a samples file (no server); ``--metric latency``
    adds its block to summary.json; unknown names are refused before any work."""
    tasks = load_humaneval()[:3]
    samples = tmp_path / "samples.jsonl"
    samples.write_text("".join(
        json.dumps({"task_id": t.id, "prompt": t.prompt, "completion": t.reference}) + "\n"
        for t in tasks
    ))  # fmt: skip
    env = {**os.environ, "OPENAI_API_KEY": "unused"}
    cmd = [CODEGYM, "eval", "--suite", "humaneval", "--model", "replayed", "--limit", "3",
           "--policy", "replay", "--policy-options", json.dumps({"path": str(samples)}),
           "--metric", "latency", "--no-store", "--json",
           "--out", str(tmp_path / "run")]  # fmt: skip
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=env)
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout)
    assert summary["pass_at_k"]["1"]["estimate"] == 1.0 and summary["scored"] == 3
    assert set(summary["metrics"]["latency"]) == {"model_s", "sandbox_wall_s", "sandbox_cpu_s"}
    for option, value, named in (("--policy", "nope", "registered: openai"),
                                 ("--metric", "nope", "registered: latency, tokens")):  # fmt: skip
        bad = [*cmd]
        bad[bad.index(option) + 1] = value
        refused = subprocess.run(bad, capture_output=True, text=True, timeout=120, env=env)
        assert refused.returncode == 2 and named in refused.stderr, refused.stderr


def _doc_blocks() -> dict[str, str]:
    """The Python examples of docs/extending.md, by the file name each starts with."""
    text = (Path(__file__).resolve().parents[1] / "docs" / "extending.md").read_text()
    blocks = text.split("```python\n")[1:]
    return {b.split("\n", 1)[0].lstrip("# ").strip(): b.split("```", 1)[0] for b in blocks}


async def test_the_documented_examples_work() -> None:
    """docs/extending.md's four examples, run as written, then used."""
    from codegym.evals.runner import SampleResult
    from codegym.policies import SamplingParams

    blocks = _doc_blocks()
    assert set(blocks) == {"my_tiers.py", "qa_format.py", "my_metrics.py", "echo_policy.py"}
    for name, code in blocks.items():
        if name == "qa_format.py" and "qa" in DATASET_FORMATS:
            continue  # registered by the test above, the same way
        assert len(code.splitlines()) <= 40, name
        exec(compile(code, name, "exec"), {"__name__": name.removesuffix(".py")})
    async with Sandbox(tier="niced", workers=1) as sb:
        assert (await sb.run_python("import os; print(os.nice(0))")).stdout == "19\n"
    failing = [SampleResult("t", i, "", False, "fail", "AssertionError: x", "") for i in range(3)]
    got = METRICS.get("first_error")(failing)
    assert got == {"line": "AssertionError: x", "samples": 3, "distinct": 1}
    echo = make_policy("echo", model="echo", base_url=None, mode="completions", concurrency=1,
                       api_key=None, tools=None, prefix="    return ")  # fmt: skip
    (g,) = await echo.generate("def f():\n    x = 1\n", SamplingParams())
    assert g.text == "    return     x = 1"


def _plugin_env(folder: Path, **extra: str) -> dict[str, str]:
    """The environment of a ``codegym`` run with ``folder`` on PYTHONPATH (no entry point or
    CODEGYM_PLUGINS of the caller's)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("CODEGYM_PLUGINS")}
    path = os.pathsep.join(p for p in (str(folder), os.environ.get("PYTHONPATH", "")) if p)
    return {**env, "PYTHONPATH": path, "OPENAI_API_KEY": "unused", **extra}


def _said(done: subprocess.CompletedProcess[str]) -> str:
    """stderr with the console's line wrapping undone."""
    return " ".join(done.stderr.split())


def test_a_plugin_policy_is_reached_from_the_command_line(tmp_path: Path) -> None:
    """docs/extending.md's echo policy, a module in a folder on PYTHONPATH: ``--plugin``
    brings it to ``eval``, ``$CODEGYM_PLUGINS`` to ``rollout``; both run with it."""
    (tmp_path / "echo_policy.py").write_text(_doc_blocks()["echo_policy.py"])
    echo = ["--model", "echo", "--policy", "echo", "--policy-options",
            json.dumps({"prefix": "    return "}), "--no-store"]  # fmt: skip
    ran = subprocess.run(
        [CODEGYM, "--plugin", "echo_policy", "eval", "--suite", "humaneval", "--limit", "2",
         *echo, "--json", "--out", str(tmp_path / "eval")],
        capture_output=True, text=True, timeout=300, env=_plugin_env(tmp_path),
    )  # fmt: skip
    assert ran.returncode == 0, ran.stderr
    summary = json.loads(ran.stdout)
    assert summary["config"]["policy"] == "echo" and summary["scored"] == 2
    rows = [json.loads(x) for x in (tmp_path / "eval" / "results.jsonl").read_text().splitlines()]
    assert all(r["completion"].startswith("    return ") for r in rows), rows
    rolled = subprocess.run(
        [CODEGYM, "rollout", "--env", "code", "--mode", "completions", "--groups", "1",
         "--group-size", "2", *echo, "--out", str(tmp_path / "rollout")],
        capture_output=True, text=True, timeout=300,
        env=_plugin_env(tmp_path, CODEGYM_PLUGINS="echo_policy"),
    )  # fmt: skip
    assert rolled.returncode == 0, rolled.stderr
    done = json.loads((tmp_path / "rollout" / "summary.json").read_text())
    assert done["config"]["policy"] == "echo" and done["scored"] == 2
    # without the plug-in: refused, naming what is registered
    bare = subprocess.run(
        [CODEGYM, "rollout", "--env", "code", "--mode", "completions", *echo,
         "--out", str(tmp_path / "no")],
        capture_output=True, text=True, timeout=120, env=_plugin_env(tmp_path),
    )  # fmt: skip
    assert bare.returncode == 2 and "unknown policy 'echo'; registered: openai" in _said(bare)


def test_an_installed_plugin_is_found_by_its_entry_point(tmp_path: Path) -> None:
    """A package's ``codegym.plugins`` entry point (here a bare dist-info on PYTHONPATH,
    as ``pip install`` leaves one) registers docs/extending.md's tier for every command:
    ``sandbox check`` lists it, ``--tier`` runs it and its help names it."""
    (tmp_path / "my_tiers.py").write_text(_doc_blocks()["my_tiers.py"])
    info = tmp_path / "my_tiers-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: my-tiers\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("[codegym.plugins]\nniced = my_tiers\n")
    env = _plugin_env(tmp_path)
    check = subprocess.run([CODEGYM, "sandbox", "check"], capture_output=True, text=True,
                           timeout=120, env=env)  # fmt: skip
    assert "niced    ok" in check.stderr, check.stderr  # the console writes to stderr
    prog = tmp_path / "nice.py"
    prog.write_text("import os; print(os.nice(0))\n")
    ran = subprocess.run([CODEGYM, "sandbox", "run", str(prog), "--tier", "niced"],
                         capture_output=True, text=True, timeout=120, env=env)  # fmt: skip
    assert ran.returncode == 0 and ran.stdout.startswith("19\n"), ran.stdout + ran.stderr
    helped = subprocess.run([CODEGYM, "sandbox", "run", "--help"], capture_output=True,
                            text=True, timeout=60, env=env)  # fmt: skip
    assert "niced" in helped.stdout
    off = {**env, "CODEGYM_DISABLE_PLUGIN_AUTOLOAD": "1"}
    skipped = subprocess.run([CODEGYM, "sandbox", "run", str(prog), "--tier", "niced"],
                             capture_output=True, text=True, timeout=120, env=off)  # fmt: skip
    assert skipped.returncode == 2 and "unknown sandbox tier 'niced'" in _said(skipped)


def test_entry_points_are_read_only_where_a_distribution_may_declare_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The quick look before ``importlib.metadata``: nothing to find in this environment,
    a dist-info or egg-info naming the group, and a zip on the path (not judged: yes)."""
    from codegym._registry import ENTRY_POINT_GROUP, _may_declare

    assert not _may_declare(ENTRY_POINT_GROUP)  # no installed package declares one
    try:  # the backport's finder, in sys.meta_path once mlflow and others import it, reads
        import importlib_metadata  # noqa: F401  (the same folders: CI ran this after those)
    except ImportError:
        pass
    assert not _may_declare(ENTRY_POINT_GROUP)
    for kind in ("dist-info", "egg-info"):
        info = tmp_path / kind / f"pkg-0.1.{kind}"
        info.mkdir(parents=True)
        (info / "entry_points.txt").write_text("[console_scripts]\npkg = pkg:main\n")
        monkeypatch.setattr(sys, "path", [*sys.path, str(info.parent)])
        assert not _may_declare(ENTRY_POINT_GROUP)  # other groups only
        (info / "entry_points.txt").write_text(f"[{ENTRY_POINT_GROUP}]\nmine = pkg\n")
        assert _may_declare(ENTRY_POINT_GROUP)
        monkeypatch.undo()
    wheel = tmp_path / "some.zip"
    wheel.write_bytes(b"PK\x05\x06" + bytes(18))  # an empty zip
    monkeypatch.setattr(sys, "path", [*sys.path, str(wheel)])
    assert _may_declare(ENTRY_POINT_GROUP)


def test_a_plugin_that_fails_to_load_is_named_with_the_fix(tmp_path: Path) -> None:
    """A broken plug-in ends the command with exit 2 and a message naming the module, what
    it raised and where, and how to leave it out; never a traceback. ``codegym --help``
    imports no plug-in."""
    (tmp_path / "broken_plugin.py").write_text("import os\nraise RuntimeError('half done')\n")
    env = _plugin_env(tmp_path)
    cmd = [CODEGYM, "eval", "--suite", "humaneval", "--model", "m", "--out", str(tmp_path / "r")]
    broken = subprocess.run([CODEGYM, "--plugin", "broken_plugin", *cmd[1:]], capture_output=True,
                            text=True, timeout=120, env=env)  # fmt: skip
    said = _said(broken)
    assert broken.returncode == 2 and "Traceback" not in broken.stderr, broken.stderr
    assert "plug-in 'broken_plugin' (--plugin) failed to load: RuntimeError: half done" in said
    assert "broken_plugin.py:2" in said and "drop --plugin broken_plugin" in said
    assert f"{tmp_path}/broken_plugin.py:2;" in broken.stderr  # one line: no path cut mid-name
    missing = subprocess.run(cmd, capture_output=True, text=True, timeout=120,
                             env={**env, "CODEGYM_PLUGINS": "no_such_plugin"})  # fmt: skip
    said = _said(missing)
    assert missing.returncode == 2 and "Traceback" not in missing.stderr, missing.stderr
    assert "plug-in 'no_such_plugin' (CODEGYM_PLUGINS): no module named" in said
    assert "PYTHONPATH" in said and "take it out of $CODEGYM_PLUGINS" in said
    helped = subprocess.run([CODEGYM, "--help"], capture_output=True, text=True, timeout=60,
                            env={**env, "CODEGYM_PLUGINS": "broken_plugin"})  # fmt: skip
    assert helped.returncode == 0 and "--plugin" in helped.stdout
