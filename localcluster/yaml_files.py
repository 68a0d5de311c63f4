"""YAML files read with libyaml's safe loader where PyYAML was built with it (PyPI's wheels and Debian's python3-yaml
are): the upstream CRDs the local cluster installs are megabytes, and Kubeflow Trainer's 2.4 MB took 7.9 s with
PyYAML's pure-Python loader, 0.5 s with libyaml's, at every cluster start that adds Trainer and in the unit tests."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def read(path: Path) -> Any:
    """The one document of ``path``."""
    return yaml.load(path.read_text(encoding="utf-8"), Loader=LOADER)


def read_all(path: Path) -> list[Any]:
    """Every document of ``path``, in order, empty ones left out."""
    return [doc for doc in yaml.load_all(path.read_text(encoding="utf-8"), Loader=LOADER) if doc is not None]
