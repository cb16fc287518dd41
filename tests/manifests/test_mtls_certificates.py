"""The cert-manager objects in manifests/components/mtls/cert-manager.md
issue exactly the Secrets the mtls overlay reads: right names, namespaces,
keys' purposes and DNS name, both from one CA."""

from __future__ import annotations

import re
from typing import Any

import pytest
import yaml

from tests.manifests.conftest import MANIFESTS, find

Objs = list[dict[str, Any]]
NOTES = MANIFESTS / "components" / "mtls" / "cert-manager.md"


@pytest.fixture(scope="module")
def cert_objects() -> Objs:
    text = NOTES.read_text(encoding="utf-8")
    (block,) = re.findall(r"```yaml\n(.*?)```", text, flags=re.S)
    return [d for d in yaml.safe_load_all(block) if d]


def _certificate_for(objs: Objs, secret: str) -> dict[str, Any]:
    (cert,) = [o for o in objs if o["kind"] == "Certificate" and o["spec"]["secretName"] == secret]
    return cert


def test_the_component_points_at_the_notes() -> None:
    comment = (MANIFESTS / "components" / "mtls" / "kustomization.yaml").read_text()
    assert "cert-manager.md" in comment
    assert NOTES.exists()


def test_server_certificate_matches_the_scaler(
    rendered: dict[str, Objs], cert_objects: Objs
) -> None:
    objs = rendered["mtls"]
    deploy = find(objs, "Deployment", "prescaler")
    volumes = {v["name"]: v for v in deploy["spec"]["template"]["spec"]["volumes"]}
    secret = volumes["tls"]["secret"]["secretName"]
    cert = _certificate_for(cert_objects, secret)
    assert cert["metadata"]["namespace"] == deploy["metadata"]["namespace"]
    so = find(objs, "ScaledObject", "vllm-llama3-8b")
    address = so["spec"]["triggers"][0]["metadata"]["scalerAddress"]
    host = address.removeprefix("dns:///").rsplit(":", 1)[0]
    assert host in cert["spec"]["dnsNames"]
    assert "server auth" in cert["spec"]["usages"]


def test_client_certificate_matches_the_trigger_authentication(
    rendered: dict[str, Objs], cert_objects: Objs
) -> None:
    auth = find(rendered["mtls"], "TriggerAuthentication", "prescaler-mtls")
    refs = auth["spec"]["secretTargetRef"]
    (secret,) = {r["name"] for r in refs}
    assert {r["key"] for r in refs} == {"ca.crt", "tls.crt", "tls.key"}
    cert = _certificate_for(cert_objects, secret)
    assert cert["metadata"]["namespace"] == auth["metadata"]["namespace"]
    assert "client auth" in cert["spec"]["usages"]


def test_one_ca_signs_both(cert_objects: Objs) -> None:
    issuers = {o["metadata"]["name"]: o for o in cert_objects if o["kind"] == "ClusterIssuer"}
    leaves = [o for o in cert_objects if o["kind"] == "Certificate" and not o["spec"].get("isCA")]
    (ca_issuer,) = {c["spec"]["issuerRef"]["name"] for c in leaves}
    ca_secret = issuers[ca_issuer]["spec"]["ca"]["secretName"]
    (ca_cert,) = [o for o in cert_objects if o["kind"] == "Certificate" and o["spec"].get("isCA")]
    assert ca_cert["spec"]["secretName"] == ca_secret
    # A CA ClusterIssuer reads its Secret from cert-manager's cluster resource namespace.
    assert ca_cert["metadata"]["namespace"] == "cert-manager"
    assert "selfSigned" in issuers[ca_cert["spec"]["issuerRef"]["name"]]["spec"]
