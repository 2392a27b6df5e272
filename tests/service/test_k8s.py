"""The Kubernetes manifests in deploy/k8s: valid against the Kubernetes JSON schemas
(offline, the schemas ``kubernetes-validate`` ships), and consistent with the service."""

from __future__ import annotations

import inspect
from pathlib import Path
from typing import Any

import pytest
import yaml

from codegym.service._cli import serve

kv = pytest.importorskip("kubernetes_validate")

K8S = Path(__file__).resolve().parents[2] / "deploy" / "k8s"
VERSION = "1.30.0"  # the oldest Kubernetes the manifests promise to work with


def _docs() -> list[tuple[str, dict[str, Any]]]:
    out = []
    for path in sorted(K8S.glob("*.yaml")):
        out += [(path.name, d) for d in yaml.safe_load_all(path.read_text()) if d]
    return out


def _by_kind(kind: str) -> list[dict[str, Any]]:
    return [d for _, d in _docs() if d["kind"] == kind]


@pytest.mark.parametrize("version", [VERSION, kv.latest_version()])
def test_every_manifest_is_valid_against_the_kubernetes_schemas(version: str) -> None:
    docs = _docs()
    assert {d["kind"] for _, d in docs} >= {"Deployment", "Service", "NetworkPolicy", "Secret"}
    for name, doc in docs:
        try:
            kv.validate(doc, version, strict=True)  # strict: unknown fields are errors
        except kv.ValidationError as e:
            pytest.fail(f"{name} ({doc['kind']}) is invalid for Kubernetes {version}: {e}")


def test_the_validator_catches_a_broken_manifest() -> None:
    (deployment,) = _by_kind("Deployment")
    broken = yaml.safe_load(yaml.safe_dump(deployment))
    broken["spec"]["template"]["spec"]["containers"][0]["securityContext"]["privileged"] = "yes"
    with pytest.raises(kv.ValidationError):
        kv.validate(broken, VERSION, strict=True)


def test_deployment_runs_the_service_as_documented() -> None:
    (deployment,) = _by_kind("Deployment")
    (secret,) = _by_kind("Secret")
    pod = deployment["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert container["command"] == ["codegym", "sandbox", "serve"]
    options = {p.replace("_", "-") for p in inspect.signature(serve).parameters}
    for arg in container["args"]:
        assert arg.startswith("--") and arg[2:].split("=")[0] in options, arg
    (env,) = [e for e in container["env"] if e["name"] == "CODEGYM_TOKEN"]
    assert env["valueFrom"]["secretKeyRef"]["name"] == secret["metadata"]["name"]
    assert "token" not in " ".join(container["args"])  # never on the command line
    assert pod["automountServiceAccountToken"] is False
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
    drain = next(int(a.split("=")[1]) for a in container["args"] if a.startswith("--drain-s"))
    assert pod["terminationGracePeriodSeconds"] > drain  # k8s must not SIGKILL mid-drain


def test_network_policy_selects_the_pods_and_denies_egress() -> None:
    (deployment,) = _by_kind("Deployment")
    (policy,) = _by_kind("NetworkPolicy")
    labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert policy["spec"]["podSelector"]["matchLabels"].items() <= labels.items()
    assert policy["spec"]["policyTypes"] == ["Ingress", "Egress"]
    assert policy["spec"]["egress"] == []
    for service in _by_kind("Service"):
        assert service["spec"]["selector"].items() <= labels.items()
