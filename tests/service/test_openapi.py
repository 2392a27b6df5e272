"""Schemathesis against the running service's own OpenAPI spec (bounded in time).

Every operation is exercised with generated requests (valid and invalid); each answer must
match the spec (status code documented, body of the declared schema), and no request may
crash the server (5xx).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from service_support import TOKEN, service_process

ST = Path(sys.executable).parent / "schemathesis"


def test_service_conforms_to_its_openapi_spec(tmp_path: Path) -> None:
    # few sessions live long: generated session ids and paths mostly hit 404s, which is fine
    with service_process("--workers", "2", "--session-ttl", "5", "--max-sessions", "8") as svc:
        cmd = [
            str(ST),
            "run",
            f"{svc.url}/openapi.json",
            "--header",
            f"Authorization: Bearer {TOKEN}",
            "--phases",
            "examples,coverage,fuzzing",
            "--max-examples",
            "8",
            "--seed",
            "7",
            "--generation-deterministic",
            "--checks",
            "not_a_server_error,status_code_conformance,"
            "content_type_conformance,response_schema_conformance",
            "--request-timeout",
            "20",
            "--workers",
            "1",
        ]
        out = subprocess.run(
            cmd, capture_output=True, text=True, timeout=90, cwd=tmp_path, check=False
        )
        assert svc.proc.poll() is None, "the server died under generated requests"
    report = out.stdout[-6000:] + out.stderr[-2000:]
    assert out.returncode == 0, report
    assert "/v1/run" in out.stdout and "/v1/sessions/{sid}/files/{path}" in out.stdout
