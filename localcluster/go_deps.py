"""The shared dependencies of our Go build modules, aligned so that Go's build cache compiles them once.

Go's build cache reuses a compiled package only when its source and every package under it are the same: a
``k8s.io/client-go`` at v0.36.0 in one module and at v0.36.3 in another is compiled twice, and so is everything that
imports it. Each upstream controller pins its own patch of the Kubernetes client stack, so a cold build compiled it
eight times (run H, docs/test-loop.md: 8,312 package compiles, 3,552 distinct packages).

The modules of one group of ``build_recipes.SHARED_DEPENDENCIES`` require each shared dependency at the newest
version any of them requires (Go's own rule when modules meet: minimal version selection picks the newest required
version). The upstream projects themselves (``PINNED_MODULES``) keep the versions we pin. ``python -m localcluster
go-deps --align`` writes the requirements (``go mod edit``, then ``go mod tidy`` until nothing moves);
``misaligned()`` reads the go.mod files only, for the harness test that keeps them aligned.
"""

from __future__ import annotations

import re
import subprocess
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from .build_recipes import PINNED_MODULES, SHARED_DEPENDENCIES
from .processes import child_env

_REQUIRE = re.compile(r"^(?:require\s+)?([^\s()]+)\s+(v\S+)(?:\s*//.*)?$")
_REPLACE = re.compile(r"^(?:replace\s+)?([^\s()]+)(?:\s+v\S+)?\s*=>\s*([^\s()]+)\s+(v\S+)")
_ROUNDS = 6  # go mod tidy may raise what a raised requirement requires; it settles in two or three rounds


@dataclass(frozen=True)
class Misaligned:
    group: tuple[str, ...]
    dependency: str
    versions: dict[str, str]  # module directory -> the version it builds with
    newest: str


def requirements(go_mod: Path) -> dict[str, str]:
    """Module path -> the version its build uses: every requirement of a go.mod, a ``replace`` winning."""
    required: dict[str, str] = {}
    replaced: dict[str, str] = {}
    for raw in go_mod.read_text().splitlines():
        line = raw.strip()
        if line.startswith(("module ", "go ", "tool", "toolchain ", "//", "exclude ")):
            continue
        if match := _REPLACE.match(line):
            replaced[match.group(1)] = match.group(3)
        elif match := _REQUIRE.match(line):
            required[match.group(1)] = match.group(2)
    return {**required, **replaced}


def version_key(version: str) -> tuple:
    """Semantic version order of a Go module version (pseudo-versions are pre-releases, ``+incompatible`` ignored)."""
    core, _, pre = version.lstrip("v").split("+")[0].partition("-")
    numbers = tuple(int(n) for n in core.split("."))
    if not pre:
        return numbers, 1, ()
    return numbers, 0, tuple((0, int(p), "") if p.isdigit() else (1, 0, p) for p in pre.split("."))


def newest(versions: Iterable[str]) -> str:
    return max(versions, key=version_key)


def misaligned(go_dir: Path, groups: tuple[tuple[str, ...], ...] = SHARED_DEPENDENCIES) -> list[Misaligned]:
    """Each dependency that two modules of a group build at different versions (the upstream projects aside)."""
    found = []
    for group in groups:
        reqs = {mod: requirements(go_dir / mod / "go.mod") for mod in group}
        for dep in sorted(set().union(*reqs.values()) - set(PINNED_MODULES)):
            versions = {mod: r[dep] for mod, r in reqs.items() if dep in r}
            if len(set(versions.values())) > 1:
                found.append(Misaligned(group, dep, versions, newest(versions.values())))
    return found


def align(go: str, go_dir: Path, groups: tuple[tuple[str, ...], ...] = SHARED_DEPENDENCIES) -> list[str]:
    """Raise each group's shared dependencies to their newest version, in rounds until aligned; the edits made."""
    edits: list[str] = []
    for _ in range(_ROUNDS):
        todo = misaligned(go_dir, groups)
        if not todo:
            return edits
        raises: dict[str, list[str]] = {}
        for m in todo:
            for mod, version in m.versions.items():
                if version != m.newest:
                    raises.setdefault(mod, []).append(f"-require={m.dependency}@{m.newest}")
                    edits.append(f"{mod}: {m.dependency} {version} -> {m.newest}")
        for mod, args in raises.items():
            subprocess.run([go, "mod", "edit", *args], cwd=go_dir / mod, check=True, env=child_env())
            subprocess.run([go, "mod", "tidy"], cwd=go_dir / mod, check=True, env=child_env())
    left = misaligned(go_dir, groups)
    if left:
        names = ", ".join(f"{m.dependency} {m.versions}" for m in left[:5])
        raise RuntimeError(f"still misaligned after {_ROUNDS} rounds of go mod tidy: {names}")
    return edits
