"""The tuned ScaledObject as a team applies it: their names, addresses and
model written in, and what is still missing said in words.

What is scored carries the simulator's placeholders; what is printed must
carry the team's own or list each one under "still to set". Nothing here
changes how the ScaledObject scales.
"""

from __future__ import annotations

import copy
import ipaddress
from collections.abc import Mapping
from typing import Any
from urllib.parse import urlsplit

from simulations.fleet_trace import parse_labels
from simulations.tune.advice import floor_of
from simulations.tune.manifest import apply_to_manifest
from simulations.tune.request import TuneRequest
from simulations.tune.sides import gateway_note

__all__ = [
    "DEFAULT_SCALER_ADDRESS",
    "IN_CLUSTER_PROMETHEUS",
    "is_loopback",
    "paste_fields",
    "paste_manifest",
    "prometheus_address",
    "window_notes",
]

DEFAULT_SCALER_ADDRESS = "dns:///prescaler.prescaler.svc.cluster.local:9090"
"""The scaler's address as the shipped manifests deploy it (the headless
Service in namespace ``prescaler``, ``dns:///`` so KEDA reaches every replica)."""

IN_CLUSTER_PROMETHEUS = "http://prometheus-operated.monitoring:9090"
"""kube-prometheus-stack's Prometheus Service, as a pod in another namespace
reaches it: the example a loopback address is told to be replaced with."""

PLACEHOLDER_PROMETHEUS = "http://prometheus:9090"
"""The simulator's Prometheus address, in every base the tune renders."""

_PRESCALER = ("external", "external-push")


def is_loopback(url: str) -> bool:
    """Whether ``url`` names this machine (``localhost``, ``127.x``, ``::1``,
    ``0.0.0.0``): a port-forward's address, which inside the cluster names
    the scaler's own pod instead."""
    try:
        host = urlsplit(url if "//" in url else f"//{url}").hostname or ""
    except ValueError:
        return False
    if host == "localhost" or host.endswith(".localhost"):
        return True
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        return False
    return ip.is_loopback or ip.is_unspecified


def _loopback_note(key: str, url: str) -> str:
    return (
        f"{key}: {url!r} is an address on this machine (a port-forward); inside the "
        "cluster it names the reading pod itself: write Prometheus's Service address, "
        f"e.g. {IN_CLUSTER_PROMETHEUS} (kube-prometheus-stack), or give "
        "--prometheus-address URL"
    )


def prometheus_address(request: TuneRequest, user: Mapping[str, Any] | None) -> str | None:
    """The Prometheus the printed triggers read: ``--prometheus-address``,
    else the one tune read (``--prometheus``), else the user's ScaledObject's
    (its prescaler trigger's ``prometheusAddress`` or a prometheus trigger's
    ``serverAddress``); None when none was given."""
    given = request.paste.prometheus_address or request.source.prometheus
    if given:
        return given
    for trig in ((user or {}).get("spec") or {}).get("triggers") or []:
        meta = trig.get("metadata") or {}
        written = meta.get("prometheusAddress") or meta.get("serverAddress")
        if written:
            return str(written)
    return None


def paste_fields(
    request: TuneRequest, manifest: Mapping[str, Any], address: str | None = None
) -> tuple[dict[str, str], list[str]]:
    """(prescaler trigger metadata to set, what is still missing, in words):
    the Prometheus ``address`` (:func:`prometheus_address`), the model
    (``--model``, or ``model_name`` in ``--selector``) and the scaler's
    address (``--scaler-address``, else the user's ScaledObject's) make the
    block complete."""
    have: dict[str, str] = {}
    for trig in manifest.get("spec", {}).get("triggers") or []:
        if trig.get("type") in _PRESCALER:
            have = {str(k): str(v) for k, v in (trig.get("metadata") or {}).items()}
    fields: dict[str, str] = {}
    missing: list[str] = []
    address = address or request.paste.prometheus_address or request.source.prometheus
    if address:
        fields["prometheusAddress"] = address
    elif have.get("prometheusAddress", PLACEHOLDER_PROMETHEUS) == PLACEHOLDER_PROMETHEUS:
        missing.append(
            f"prometheusAddress: the shipped placeholder {PLACEHOLDER_PROMETHEUS!r} is "
            "printed; give --prometheus-address URL (the Prometheus that scrapes vLLM)"
        )
    model = request.paste.model or parse_labels(request.source.selector).get("model_name")
    if model:
        fields["model"] = model
    elif "model" not in have:
        missing.append("model: give --model NAME (vLLM's model_name label) so the scaler "
                       "reads this model's series only")  # fmt: skip
    if request.paste.scaler_address:
        fields["scalerAddress"] = request.paste.scaler_address
    elif "scalerAddress" not in have:
        missing.append(
            f"scalerAddress: give --scaler-address (e.g. {DEFAULT_SCALER_ADDRESS}, "
            "where the shipped manifests deploy the scaler) or a --scaledobject that has it"
        )
    return fields, missing


def _names(request: TuneRequest, doc: dict[str, Any], user: Mapping[str, Any] | None) -> list[str]:
    """Write the ScaledObject's name, namespace and target into ``doc``:
    the flags first, else the user's ScaledObject's; each still missing, in words."""
    meta = doc.setdefault("metadata", {})
    spec = doc.setdefault("spec", {})
    mine = dict((user or {}).get("metadata") or {})
    their_ref = dict(((user or {}).get("spec") or {}).get("scaleTargetRef") or {})
    missing: list[str] = []
    name = request.paste.name or mine.get("name")
    if name:
        meta["name"] = str(name)
    else:
        missing.append(
            f"metadata.name: {meta.get('name')!r} is the simulator's name; give --name NAME "
            "(or --scaledobject FILE, whose names are kept)"
        )
    namespace = request.paste.namespace or mine.get("namespace")
    if namespace:
        meta["namespace"] = str(namespace)
    elif user is None:
        missing.append(
            "metadata.namespace: none written; give --namespace NS, the vLLM Deployment's "
            "(a ScaledObject scales a target in its own namespace), or apply with -n NS"
        )
    ref = dict(spec.get("scaleTargetRef") or {})
    if their_ref:
        ref = {**ref, **their_ref}
    if request.paste.target_name:
        ref["name"] = request.paste.target_name
    spec["scaleTargetRef"] = ref
    if not (request.paste.target_name or their_ref.get("name")):
        missing.append(
            f"scaleTargetRef.name: {ref.get('name')!r} is the simulator's name; give "
            "--target-name NAME, the vLLM Deployment this ScaledObject scales"
        )
    return missing


def _server_addresses(doc: dict[str, Any], address: str | None) -> list[str]:
    """The KEDA prometheus triggers' ``serverAddress``: ``address``
    (:func:`prometheus_address`), else as written; the simulator's
    placeholder or a loopback address said in words."""
    loopback: dict[str, list[int]] = {}
    placeholder: list[int] = []
    for i, trig in enumerate(doc.get("spec", {}).get("triggers") or []):
        if trig.get("type") != "prometheus":
            continue
        meta = trig.setdefault("metadata", {})
        if address:
            meta["serverAddress"] = address
        written = str(meta.get("serverAddress", ""))
        if is_loopback(written):
            loopback.setdefault(written, []).append(i)
        elif written == PLACEHOLDER_PROMETHEUS:
            placeholder.append(i)

    def where(indices: list[int]) -> str:
        return f"triggers[{','.join(map(str, indices))}].metadata.serverAddress"

    missing = [_loopback_note(where(at), url) for url, at in loopback.items()]
    if placeholder:
        missing.append(
            f"{where(placeholder)}: {PLACEHOLDER_PROMETHEUS!r} is the simulator's "
            "placeholder; give --prometheus-address URL (the Prometheus that scrapes vLLM)"
        )
    return missing


def window_notes(doc: Mapping[str, Any]) -> list[str]:
    """A cron window at or below the floor holds nothing the floor does not
    (the HPA takes the largest proposal): said so, since tune does not
    search one but a ScaledObject may be written with one."""
    spec = doc.get("spec", {})
    floor = floor_of(doc)
    notes: list[str] = []
    for i, trig in enumerate(spec.get("triggers") or []):
        if trig.get("type") != "cron":
            continue
        held = int((trig.get("metadata") or {}).get("desiredReplicas", 0) or 0)
        if held <= floor:
            notes.append(
                f"triggers[{i}] (cron): its window holds {held} replicas, not above the floor "
                f"of {floor}, so it changes nothing; drop it or raise its desiredReplicas"
            )
    return notes


def paste_manifest(
    request: TuneRequest, manifest: Mapping[str, Any], user: Mapping[str, Any] | None = None
) -> tuple[dict[str, Any], list[str]]:
    """(the manifest to paste, what is still to set, in words): ``manifest``
    with the names (:func:`_names`), prescaler trigger fields
    (:func:`paste_fields`) and Prometheus addresses the run was given;
    ``user`` is the ``--scaledobject`` document, whose names every side's
    block takes. Loopback addresses, placeholders, the simulator's gateway
    series and a window below the floor are listed."""
    doc = copy.deepcopy(dict(manifest))
    missing = _names(request, doc, user)
    address = prometheus_address(request, user)
    if any(t.get("type") in _PRESCALER for t in doc.get("spec", {}).get("triggers") or []):
        fields, needs = paste_fields(request, doc, address)
        doc = apply_to_manifest(doc, fields)
        missing.extend(needs)
        for trig in doc["spec"]["triggers"]:
            written = str((trig.get("metadata") or {}).get("prometheusAddress", ""))
            if trig.get("type") in _PRESCALER and is_loopback(written):
                missing.append(_loopback_note("prometheusAddress", written))
    missing.extend(_server_addresses(doc, address))
    gateway = gateway_note(doc)
    if gateway:
        missing.append(gateway)
    missing.extend(window_notes(doc))
    return doc, missing
