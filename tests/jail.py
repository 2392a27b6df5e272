"""What a test does when the jail tier cannot run on this host.

Locally it skips, naming what is missing. In CI (``CODEGYM_REQUIRE_JAIL=1``, set by
``.ci/run``) it fails: a CI host that cannot run the jail would otherwise skip the whole
hostile suite and pass.
"""

from __future__ import annotations

import os
from typing import NoReturn

import pytest


def no_jail(why: BaseException | str) -> NoReturn:
    if os.environ.get("CODEGYM_REQUIRE_JAIL"):
        pytest.fail(f"the jail tier cannot run here, and CODEGYM_REQUIRE_JAIL is set: {why}")
    pytest.skip(str(why))
