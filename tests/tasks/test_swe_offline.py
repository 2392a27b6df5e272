"""The shipped repository tasks (``swe-offline``): pinned, spread over packages, and
gradeable here: a sample of them, one task per package, resolves with its gold patch and
stays unresolved with a patch that applies but fixes nothing.

The set-up (``scripts/setup.sh``) builds their images; these tests use that cache.
"""

from __future__ import annotations

import gzip
import shutil
from collections import Counter
from collections.abc import AsyncIterator

import pytest
import pytest_asyncio

from codegym.sandbox import HostUnsupported, Sandbox
from codegym.sandbox.images import ImageNotFound, ImageStore
from codegym.tasks import DatasetError, load_suite
from codegym.tasks.swe.files import OFFLINE_FILE
from codegym.tasks.swe.grade import grade
from codegym.tasks.swe.task import SweTask, load_tasks, swe_of
from jail import no_jail

in_module_loop = pytest.mark.asyncio(loop_scope="module")


def test_the_shipped_set_is_pinned_and_spread_over_packages() -> None:
    ts = load_suite("swe-offline")
    tasks = [swe_of(t) for t in ts.tasks]
    per_package = Counter(t.repo for t in tasks)
    assert len(tasks) >= 300 and len(per_package) >= 10, per_package
    assert max(per_package.values()) <= 0.15 * len(tasks)  # no package dominates
    assert all(t.image_spec and t.FAIL_TO_PASS and t.PASS_TO_PASS for t in tasks)
    assert {t.group for t in ts.tasks} == set(per_package)  # clustered by package
    # every gold patch is the reverse of the task's bug, and no statement shows the fix
    for t in tasks:
        added = [ln[1:].strip() for ln in t.patch.splitlines() if ln.startswith("+") and
                 not ln.startswith("+++")]  # fmt: skip
        assert not any(a and len(a) > 12 and a in t.problem_statement for a in added), t


def test_a_changed_shipped_file_is_refused(tmp_path, monkeypatch) -> None:
    import codegym.tasks.swe.task as task_module

    changed = tmp_path / OFFLINE_FILE.name
    text = gzip.decompress(OFFLINE_FILE.read_bytes()).decode()
    changed.write_bytes(gzip.compress(text.replace("Some tests", "Many tests", 1).encode()))
    monkeypatch.setattr(task_module, "OFFLINE_FILE", changed)
    with pytest.raises(DatasetError, match="sha256"):
        load_tasks(changed)


def _sample() -> list[SweTask]:
    """The first task of each package, in file order."""
    firsts: dict[str, SweTask] = {}
    for t in load_tasks(OFFLINE_FILE):
        firsts.setdefault(t.repo, t)
    return list(firsts.values())


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def box() -> AsyncIterator[Sandbox]:
    if shutil.which("bwrap") is None:
        no_jail("bubblewrap is missing: the set-up builds no images without it")
    store = ImageStore()
    missing = [t.repo for t in _sample() if not _has(store, t.image)]
    if missing:
        pytest.fail(f"images of {missing} are not in {store.root}: run `make setup`")
    sb = Sandbox(workers=2, images=store)
    try:
        await sb.start()
    except HostUnsupported as e:
        no_jail(e)
    try:
        yield sb
    finally:
        await sb.close()


def _has(store: ImageStore, digest: str) -> bool:
    try:
        store.layer_paths(store.get(digest))
        return True
    except ImageNotFound:
        return False


@in_module_loop
async def test_gold_resolves_and_a_wrong_fix_does_not(box: Sandbox) -> None:
    for t in _sample():
        gold = await grade(box, t, t.patch)
        assert gold.outcome == "resolved", (t.instance_id, gold.detail[-800:])
        # a patch that applies (a new module beside the buggy one) and fixes nothing
        folder = t.patch.split(" b/", 1)[1].split("\n", 1)[0].rpartition("/")[0]
        new = f"{folder}/_unrelated.py".lstrip("/")
        wrong = (f"diff --git a/{new} b/{new}\nnew file mode 100644\n--- /dev/null\n"
                 f"+++ b/{new}\n@@ -0,0 +1 @@\n+VALUE = 1\n")  # fmt: skip
        graded = await grade(box, t, wrong)
        assert graded.outcome == "unresolved", (t.instance_id, graded)
