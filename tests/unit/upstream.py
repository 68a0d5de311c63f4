"""Upstream's own definition of an MPIJob, read from the pinned Go modules (nothing copied into this repository).

* The CRDs' ``openAPIV3Schema`` (kubeflow.org/v2beta1 from the mpi-operator module, kubeflow.org/v1
  from the training-operator module), applied as the API server applies it: null fields are pruned
  first; an object field the schema does not declare would be pruned silently (so a parameter
  would be lost), which here is an error; int32/int64 ranges are checked. CEL rules
  (``x-kubernetes-validations``, only an immutability rule here) are not evaluated.
* The published example manifests: mpi-operator's ``examples/v2beta1`` and training-operator's
  ``examples/mpi`` (kubeflow.org/v1).

The modules come from ``go mod download`` (localcluster.build.module_dir): Go is a requirement of
this repository's tests, and no build is needed.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path
from typing import Any

import yaml
from jsonschema import Draft4Validator, FormatChecker

from airflow_mpi.jobspec import API_V1, API_V2BETA1
from localcluster.build import CRDS, module_dir
from localcluster.yaml_files import read as _load

CRD_FILES = {API_V2BETA1: "mpijobs-v2beta1.yaml", API_V1: "mpijobs-v1.yaml"}
# Published examples: (API version, path inside the module of that version's CRD).
EXAMPLES = (
    (API_V2BETA1, "examples/v2beta1/pi/pi.yaml"),
    (API_V2BETA1, "examples/v2beta1/pi/pi-intel.yaml"),
    (API_V2BETA1, "examples/v2beta1/pi/pi-mpich.yaml"),
    (API_V2BETA1, "examples/v2beta1/horovod/tensorflow-mnist.yaml"),
    (API_V2BETA1, "examples/v2beta1/tensorflow-benchmarks/tensorflow-benchmarks.yaml"),
    (API_V1, "examples/mpi/tensorflow-mnist.yaml"),
    (API_V1, "examples/mpi/tensorflow-mnist-elastic.yaml"),
)
_INT_RANGES = {"int32": 2**31, "int64": 2**63}
_FORMATS = FormatChecker(formats=())
for _name, _bound in _INT_RANGES.items():
    _FORMATS.checks(_name)(lambda value, bound=_bound: not isinstance(value, int) or -bound <= value < bound)


@cache
def _module(api_version: str) -> Path:
    moddir, module_path, _ = CRDS[CRD_FILES[api_version]]
    return module_dir(moddir, module_path)


def _closed(schema: Any) -> Any:
    """A copy of ``schema`` where an object with declared properties accepts no other key."""
    if isinstance(schema, list):
        return [_closed(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    closed = {k: (_closed(v) if k in ("items", "additionalProperties", "anyOf", "allOf", "oneOf")
                  else v) for k, v in schema.items()}  # fmt: skip
    if "properties" in closed:
        closed["properties"] = {k: _closed(v) for k, v in schema["properties"].items()}
        if "additionalProperties" not in closed and not schema.get("x-kubernetes-preserve-unknown-fields"):
            closed["additionalProperties"] = False
    return closed


def crd_validator(crd: dict, version: str) -> Draft4Validator:
    """A validator of the ``openAPIV3Schema`` of version ``version`` of ``crd`` (any CRD), closed as above."""
    schema = next(v for v in crd["spec"]["versions"] if v["name"] == version)["schema"]["openAPIV3Schema"]
    return Draft4Validator(_closed(schema), format_checker=_FORMATS)


@cache
def _validator(api_version: str) -> Draft4Validator:
    crd = _load(_module(api_version) / CRDS[CRD_FILES[api_version]][2])
    return crd_validator(crd, api_version.split("/", 1)[1])


def _pruned(value: Any) -> Any:
    """``value`` without null fields (the API server prunes them before validating)."""
    if isinstance(value, dict):
        return {k: _pruned(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_pruned(v) for v in value]
    return value


def schema_errors(manifest: dict) -> list[str]:
    """Why the API server would reject or silently prune part of ``manifest`` (empty: it would not)."""
    api_version = manifest.get("apiVersion")
    if api_version not in CRD_FILES:
        return [f"apiVersion {api_version!r} is no MPIJob CRD version"]
    return validation_errors(_validator(api_version), manifest)


def validation_errors(validator: Draft4Validator, manifest: dict) -> list[str]:
    """What ``validator`` finds wrong with ``manifest`` once pruned of null fields, as ``path: message`` lines."""
    errors = validator.iter_errors(_pruned(manifest))
    return sorted(f"{'.'.join(str(p) for p in e.absolute_path)}: {e.message}" for e in errors)


@cache
def example_texts() -> dict[str, tuple[str, str]]:
    """Each published example: its short name -> (API version, YAML text exactly as published)."""
    return {
        Path(rel).stem if api == API_V2BETA1 else f"v1-{Path(rel).stem}": (
            api,
            (_module(api) / rel).read_text(encoding="utf-8"),
        )
        for api, rel in EXAMPLES
    }


def example(name: str) -> dict:
    """One published example, parsed."""
    return yaml.safe_load(example_texts()[name][1])


@cache
def _trainjob_validator() -> Draft4Validator:
    """The Kubeflow Trainer module's TrainJob CRD (v1alpha1), as localcluster installs it."""
    from localcluster.build_recipes import ADDONS
    from localcluster.controllers.webhook_manager import load_crds

    moddir, module_path, rel = dict(ADDONS["trainer"].data)["crd"]
    crds = {c["metadata"]["name"]: c for c in load_crds(module_dir(moddir, module_path) / rel)}
    return crd_validator(crds["trainjobs.trainer.kubeflow.org"], "v1alpha1")


def trainjob_schema_errors(manifest: dict) -> list[str]:
    """Why the API server would reject or silently prune part of a TrainJob ``manifest`` (empty: it would not)."""
    return validation_errors(_trainjob_validator(), manifest)
