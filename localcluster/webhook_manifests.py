"""Upstream webhook manifests, as their kustomize build would make them, served by a local process.

A controller's module ships its admission webhooks as a kustomize directory: ``manifests.yaml`` (Mutating/
ValidatingWebhookConfigurations whose ``clientConfig`` names an in-cluster Service) and JSON 6902 patches listed in
``kustomization.yaml`` (JobSet's limit its Pod webhooks to JobSet's pods with an ``objectSelector``; Trainer's set
the configurations' names). ``kustomized`` applies those patches (no kustomize binary: the little of it these
directories use); ``served_at`` points every webhook at ``https://127.0.0.1:<port><path>`` with this cluster's CA
(``localcluster.webhook_certs``) as ``caBundle``, where the controller's own process listens.
"""

from __future__ import annotations

import base64
import copy
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from . import yaml_files

WEBHOOK_KINDS = ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration")


def _pointer(path: str) -> list[str]:
    return [p.replace("~1", "/").replace("~0", "~") for p in path.lstrip("/").split("/")]


def json_patch(doc: Any, ops: Iterable[dict]) -> Any:
    """``doc`` with the JSON 6902 operations ``add``, ``replace`` and ``remove`` applied (in place)."""
    for op in ops:
        *parents, last = _pointer(op["path"])
        target = doc
        for key in parents:
            target = target[int(key)] if isinstance(target, list) else target[key]
        kind = op["op"]
        if isinstance(target, list):
            index = len(target) if last == "-" else int(last)
            if kind == "add":
                target.insert(index, op["value"])
            elif kind == "replace":
                target[index] = op["value"]
            elif kind == "remove":
                del target[index]
            else:
                raise ValueError(f"JSON patch op {kind!r} not supported")
        elif kind in ("add", "replace"):
            if kind == "replace" and last not in target:
                raise KeyError(f"JSON patch: nothing to replace at {op['path']}")
            target[last] = op["value"]
        elif kind == "remove":
            del target[last]
        else:
            raise ValueError(f"JSON patch op {kind!r} not supported")
    return doc


def kustomized(directory: Path, name_prefix: str = "") -> list[dict]:
    """The webhook configurations of a kustomize ``directory`` (its ``resources``, with its JSON 6902 ``patches``
    applied to the documents their ``target`` selects by kind and name), names prefixed with ``name_prefix`` as an
    overlay's ``namePrefix`` would."""
    kustomization = yaml_files.read(directory / "kustomization.yaml")
    docs = [
        d
        for rel in kustomization.get("resources") or []
        for d in yaml_files.read_all(directory / rel)
        if d and d.get("kind") in WEBHOOK_KINDS
    ]
    for patch in kustomization.get("patches") or []:
        ops = yaml_files.read(directory / patch["path"])
        if not isinstance(ops, list):
            raise ValueError(f"{directory / patch['path']}: only JSON 6902 patches are supported")
        target = patch.get("target") or {}
        for doc in docs:
            if doc["kind"] == target.get("kind", doc["kind"]) and doc["metadata"]["name"] == target.get(
                "name", doc["metadata"]["name"]
            ):
                json_patch(doc, ops)
    for doc in docs:
        doc["metadata"] = {"name": f"{name_prefix}{doc['metadata']['name']}"}
    return docs


def served_at(docs: Iterable[dict], url: str, ca: bytes) -> list[dict]:
    """Copies of ``docs`` whose webhooks call ``url`` + their Service path, trusting ``ca``."""
    out = []
    for doc in docs:
        doc = copy.deepcopy(doc)
        for hook in doc.get("webhooks") or []:
            path = hook["clientConfig"]["service"].get("path", "")
            hook["clientConfig"] = {"url": f"{url}{path}", "caBundle": base64.b64encode(ca).decode()}
        out.append(doc)
    return out


def install(api: Any, docs: Iterable[dict]) -> list[str]:
    """Create the webhook configurations ``docs`` (``api``: an ApiClient); returns their names."""
    from kubernetes import client

    adm = client.AdmissionregistrationV1Api(api)
    names = []
    for doc in docs:
        if doc["kind"] == "MutatingWebhookConfiguration":
            adm.create_mutating_webhook_configuration(doc)
        else:
            adm.create_validating_webhook_configuration(doc)
        names.append(doc["metadata"]["name"])
    return names
