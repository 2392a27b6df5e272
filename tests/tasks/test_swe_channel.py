"""The grader's report channel on suites whose shape it must not misread, run with the
real plugin and pytest (no sandbox: the channel's own contract)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from textwrap import dedent

import pytest

from codegym.tasks.swe.channel import Channel, verify
from codegym.tasks.swe.coverage import junit_id

# markupsafe's shape: an autouse session fixture parametrized over two implementations,
# one skipped where it is unavailable; every test (a canary too) runs once per param
CONFTEST = dedent("""
    import pytest

    @pytest.fixture(scope="session", autouse=True, params=(
        "native", pytest.param("speedups", marks=pytest.mark.skipif(%s, reason="none")),
    ))
    def _mod(request):
        return request.param
""")
PARAMS = ("native", "speedups")
TESTS = "def test_one():\n    assert 1 + 1 == 2\n"


def _grade(root: Path, test_file: str) -> tuple[Channel, str]:
    channel = Channel.new(test_file, (root / test_file).read_text())
    for path, content in channel.files.items():
        (root / path).write_text(content if isinstance(content, str) else content.decode())
    script = channel.script(str(root / "junit.xml"))
    argv = [
        "sh",
        "-c",
        script,
        "sh",
        sys.executable,
        "-m",
        "pytest",
        "-q",
        "-p",
        "no:cacheprovider",
    ]
    r = subprocess.run(argv, input=channel.stdin, capture_output=True, cwd=root, timeout=120)
    return channel, r.stdout.decode()


@pytest.mark.parametrize("skipped", [True, False], ids=["one-param-skipped", "both-params-run"])
def test_canaries_under_a_parametrized_autouse_fixture(tmp_path: Path, skipped: bool) -> None:
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "__init__.py").write_text("")
    (tmp_path / "tests" / "conftest.py").write_text(CONFTEST % skipped)
    (tmp_path / "tests" / "test_m.py").write_text(TESTS)
    ids = [junit_id(f"tests/test_m.py::test_one[{p}]", "tests/test_m.py") for p in PARAMS]
    channel, out = _grade(tmp_path, "tests/test_m.py")
    account = verify(channel, out, set(ids))
    assert account.statuses is not None, account.tampered
    assert not account.tampered
    native, speedups = (account.statuses[i] for i in ids)
    assert native == "passed" and speedups == ("skipped" if skipped else "passed")
    # the canaries are not the task's tests
    assert not any(channel.fail in t or channel.pass_ in t for t in account.statuses)


def test_a_canary_that_is_skipped_everywhere_is_tampering(tmp_path: Path) -> None:
    """Skipping proves nothing: a canary must come out as written at least once."""
    (tmp_path / "test_m.py").write_text(
        "import pytest\n\n@pytest.fixture(autouse=True)\ndef _skip_all():\n"
        "    pytest.skip('everything')\n\n" + TESTS
    )
    channel, out = _grade(tmp_path, "test_m.py")
    account = verify(channel, out, {junit_id("test_m.py::test_one", "test_m.py")})
    assert account.statuses is None and "canaries" in account.tampered
