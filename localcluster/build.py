"""Build (once) and cache the upstream binaries of the local cluster.

Every tool lives in its own Go module under ``localcluster/go/<module>`` (``go.mod``/``go.sum``; binaries declared
with ``tool`` directives; no third-party source in the repository) so that minimal version selection never mixes
the k8s.io versions of different tools.  The one exception is ``go/mpi-operator/main.go``: a 30-line main of our own
around the unmodified upstream ``cmd/mpi-operator/app`` package that makes its hard-coded :8080 health-check port
configurable.  Binaries are built with ``go build -trimpath -ldflags='-s -w'`` (plus the version stamps that
upstream release builds set) into ``$AIRFLOW_MPI_CACHE/bin/<key>`` (default ``~/.cache/airflow-mpi``), where
``<key>`` hashes the Go version, the build recipe and every ``go.mod``/``go.sum``/``*.go`` of ours: a second build
with the same pins is a no-op.

Add-ons (``ADDONS``: Kueue, the training-operator, JobSet, Kubeflow Trainer) are built only when a cluster asks for
them, each into ``bin/<name>-<key>`` with a key of its own (its module, tools and data), so that adding or re-pinning
one never invalidates the main build. What is built (tools, add-ons, data files) is listed in
localcluster/build_recipes.py. A build prints one line when it starts and one when it ends; ``go build``'s own output
goes to a log file (localcluster/build_log.py).
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from . import build_ledger, build_log, go_deps
from .build_recipes import ADDONS, CRDS, NODE_STAGES, PINNED_MODULES, TOOLS, Addon, Tool
from .processes import child_env

GO_DIR = Path(__file__).resolve().parent / "go"
LDFLAGS = "-s -w"
BUILD_FLAGS = ("-trimpath",)
_COMPLETE = ".complete.json"
RECIPE = 2  # bump when the way binaries are built changes (e.g. the -X version stamps)
_ADDON_MODULES = frozenset(t.module for a in ADDONS.values() for t in a.tools)


def cache_root() -> Path:
    env = os.environ.get("AIRFLOW_MPI_CACHE")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "airflow-mpi"


def go_binary() -> str:
    env = os.environ.get("GO")
    if env:
        return env
    found = shutil.which("go")
    if found:
        return found
    for candidate in ("/usr/local/go/bin/go", "/usr/lib/go/bin/go"):
        if os.access(candidate, os.X_OK):
            return candidate
    raise RuntimeError("no Go toolchain found (set $GO or put go on PATH)")


def _go_version(go: str) -> str:
    return subprocess.run(
        [go, "env", "GOVERSION"], check=True, capture_output=True, text=True, env=child_env()
    ).stdout.strip()


def modules(addons: bool = True) -> list[str]:
    """Our Go module directories (``addons=False``: those of the main build only)."""
    found = sorted(p.name for p in GO_DIR.iterdir() if (p / "go.mod").is_file())
    return found if addons else [m for m in found if m not in _ADDON_MODULES]


def pinned_versions(mods: list[str] | None = None) -> dict[str, str]:
    """Version of each upstream project, read from our go.mod files (tool modules show as `// indirect`);
    ``mods``: those module directories only (default: the main build's)."""
    out: dict[str, str] = {}
    for mod in modules(addons=False) if mods is None else mods:
        required = go_deps.requirements(GO_DIR / mod / "go.mod")
        out.update((path, version) for path, version in required.items() if path in PINNED_MODULES)
    return out


def _module_info(go: str, moddir: str, module_path: str) -> dict:
    res = subprocess.run(
        [go, "mod", "download", "-json", module_path],
        cwd=GO_DIR / moddir,
        check=True,
        capture_output=True,
        text=True,
        env=child_env(),
    )
    info = json.loads(res.stdout)
    if info.get("Error"):
        raise RuntimeError(f"go mod download {module_path}: {info['Error']}")
    return info


def _version_ldflags(go: str, mod: str) -> str:
    """`-X` stamps that upstream release builds set (kwokctl reads `<binary> --version` to pick flags)."""
    versions = pinned_versions(modules())
    if mod == "kubernetes":
        res = subprocess.run(
            [go, "list", "-m", "-json", "k8s.io/kubernetes"],
            cwd=GO_DIR / mod,
            check=True,
            capture_output=True,
            text=True,
            env=child_env(),
        )
        info = json.loads(res.stdout)
        v = info["Version"]
        major, minor = v.lstrip("v").split(".")[:2]
        date = (info.get("Time") or "1970-01-01T00:00:00Z")[:19] + "Z"
        flags = []
        for pkg in ("k8s.io/component-base/version", "k8s.io/client-go/pkg/version"):
            flags += [
                f"-X {pkg}.gitVersion={v}",
                f"-X {pkg}.gitMajor={major}",
                f"-X {pkg}.gitMinor={minor}",
                f"-X {pkg}.gitTreeState=clean",
                f"-X {pkg}.buildDate={date}",
            ]
        return " ".join(flags)
    if mod == "kwok":
        kube = versions.get("k8s.io/kubernetes") or ""
        flags = [f"-X sigs.k8s.io/kwok/pkg/consts.Version={versions['sigs.k8s.io/kwok'].lstrip('v')}"]
        if kube:
            flags.append(f"-X sigs.k8s.io/kwok/pkg/consts.KubeVersion={kube.lstrip('v')}")
        return " ".join(flags)
    if mod in _VERSION_STAMPS:  # what upstream's Makefile stamps (the commit is not known from the module)
        module_path, pkg, with_date = _VERSION_STAMPS[mod]
        res = subprocess.run(
            [go, "list", "-m", "-json", module_path],
            cwd=GO_DIR / mod,
            check=True,
            capture_output=True,
            text=True,
            env=child_env(),
        )
        info = json.loads(res.stdout)
        date = (info.get("Time") or "1970-01-01T00:00:00Z")[:19] + "Z"
        return f"-X {pkg}.GitVersion={info['Version']}" + (f" -X {pkg}.BuildDate={date}" if with_date else "")
    return ""


# module dir -> (module path, its version package, whether it has BuildDate): `-X <package>.GitVersion=<version>`
_VERSION_STAMPS = {
    "kueue": ("sigs.k8s.io/kueue", "sigs.k8s.io/kueue/pkg/version", True),
    "jobset": ("sigs.k8s.io/jobset", "sigs.k8s.io/jobset/pkg/version", False),
}


def build_key(go: str | None = None) -> str:
    go = go or go_binary()
    h = hashlib.sha256()
    h.update(_go_version(go).encode())
    h.update(repr((RECIPE, BUILD_FLAGS, LDFLAGS)).encode())
    h.update(repr(TOOLS).encode())
    h.update(repr(sorted(CRDS.items())).encode())
    _hash_modules(h, modules(addons=False))
    return h.hexdigest()[:16]


def _hash_modules(h, mods: list[str]) -> None:
    for mod in mods:
        names = ["go.mod", "go.sum", *sorted(p.name for p in (GO_DIR / mod).glob("*.go"))]
        for name in names:
            p = GO_DIR / mod / name
            h.update(f"{mod}/{name}\0".encode())
            if p.exists():
                h.update(p.read_bytes())


def addon_key(name: str, go: str | None = None) -> str:
    """Like ``build_key`` for one add-on: the Go version, the recipe, its tools, data and module files."""
    go = go or go_binary()
    addon = ADDONS[name]
    h = hashlib.sha256()
    h.update(_go_version(go).encode())
    h.update(repr((RECIPE, BUILD_FLAGS, LDFLAGS)).encode())
    h.update(repr(addon).encode())
    _hash_modules(h, sorted({t.module for t in addon.tools}))
    return h.hexdigest()[:16]


def addon_dir(name: str, key: str | None = None) -> Path:
    return cache_root() / "bin" / f"{name}-{key or addon_key(name)}"


def bin_dir(key: str | None = None) -> Path:
    return cache_root() / "bin" / (key or build_key())


def is_built(path: Path | None = None, tools: tuple[Tool, ...] = TOOLS) -> bool:
    path = path or bin_dir()
    return (path / _COMPLETE).is_file() and all((path / t.binary).is_file() for t in tools)


def _log(msg: str) -> None:
    print(f"[localcluster.build] {msg}", file=sys.stderr, flush=True)


def _module_dir(go: str, moddir: str, module_path: str) -> Path:
    return Path(_module_info(go, moddir, module_path)["Dir"])


def module_dir(moddir: str, module_path: str) -> Path:
    """Source directory of a pinned upstream module (``go mod download``: needs Go, builds nothing).

    The unit tests read the MPIJob CRDs and upstream's example manifests from there.
    """
    return _module_dir(go_binary(), moddir, module_path)


def build(force: bool = False, verbose: bool = True) -> Path:
    """Build every tool (unless cached) and return the directory holding the binaries and CRDs.

    ``$AIRFLOW_MPI_BIN_DIR`` names a directory built earlier (the node image ships one and has no Go).
    """
    prebuilt = os.environ.get("AIRFLOW_MPI_BIN_DIR")
    if prebuilt:
        if not is_built(Path(prebuilt)):
            raise RuntimeError(f"AIRFLOW_MPI_BIN_DIR={prebuilt} does not hold a complete build")
        return Path(prebuilt)
    go = go_binary()
    key = build_key(go)
    final = bin_dir(key)

    def cached() -> bool:
        if force or not is_built(final):
            return False
        _ensure_data(go, final)
        return True

    return _build_once(
        "Go binaries (Kubernetes, etcd, kwok, mpi-operator, CoreDNS)",
        final,
        cached,
        lambda log: _build_locked(go, key, final, log),
        log=build_log.log_path(cache_root(), "binaries"),
        cold="cold builds take tens of minutes on 2 cores",
        verbose=verbose,
    )


def _build_once(
    what: str,
    final: Path,
    cached: Callable[[], bool],
    build: Callable[[Path], object],
    *,
    log: Path,
    cold: str,
    verbose: bool = True,
) -> Path:
    """``final`` if ``cached()``, else ``build(log)`` under the cache's lock: parallel test sessions wait for, then
    reuse, the first one's build (noted as cached, with the time it waited).

    On the terminal (``verbose``): a line when the build starts (what, how long a cold one takes, the log that gets
    its whole output: ``localcluster.build_log``) and one when it ends or is found built (the build ledger's: what,
    built now or cached, seconds); a failure prints the log's tail whatever ``verbose`` says."""
    with build_ledger.timed(what) as entry:
        if not cached():
            final.parent.mkdir(parents=True, exist_ok=True)
            with open(lock_path(final), "w") as lock:
                try:
                    fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    if verbose:
                        _log(f"{what}: waiting for another process's build in {final.parent}")
                    fcntl.flock(lock, fcntl.LOCK_EX)
                if not cached():
                    if verbose:
                        _log(f"building {what} ({cold}); full output: {log}")
                    entry.built = True
                    build(build_log.begin(log, f"{what}: build into {final}"))
    if verbose:
        seconds = (build_info(final).get("seconds") or {}) if entry.built else {}
        parts = ", ".join(f"{mod} {s:.0f} s" for mod, s in seconds.items()) if len(seconds) > 1 else ""
        _log(entry.line() + (f" ({parts})" if parts else ""))
    return final


def lock_path(final: Path) -> Path:
    """The lock of the build into ``final``: one per build, so sessions building the same thing wait for each other
    while the main build and the add-ons' (scripts/test starts those beside it) go side by side."""
    return final.parent / f".{final.name}.lock"


def build_addon(name: str, force: bool = False, verbose: bool = True) -> Path:
    """Build one add-on (``ADDONS``; unless cached) and return its directory: binaries and data.

    ``$AIRFLOW_MPI_<NAME>_BIN_DIR`` (``addon_variable``: e.g. ``AIRFLOW_MPI_KUEUE_BIN_DIR``) names a directory
    built earlier: in a node container, the host's build mounted there (``NodeCluster(addons=...)``).
    """
    addon = ADDONS[name]
    variable = addon_variable(name)
    prebuilt = os.environ.get(variable)
    if prebuilt:
        if not is_built(Path(prebuilt), addon.tools):
            raise RuntimeError(f"{variable}={prebuilt} does not hold a complete build")
        return Path(prebuilt)
    if os.environ.get("AIRFLOW_MPI_BIN_DIR"):  # a node container: prebuilt binaries, no Go
        raise RuntimeError(
            f"no build of the {name} add-on here (${variable} is not set): the node's cluster must ask for it "
            f"when it starts (NodeCluster(addons=[{name!r}]), `node up --addon {name}`, or a controller that needs it)"
        )
    go = go_binary()
    key = addon_key(name, go)
    final = addon_dir(name, key)
    return _build_once(
        f"Go add-on {name}",
        final,
        lambda: not force and is_built(final, addon.tools),
        lambda log: _build_locked(
            go, final.name, final, log, addon.tools, lambda path: _copy_addon_data(go, addon, path)
        ),
        log=build_log.log_path(cache_root(), name),
        cold="a cold build takes a few minutes",
        verbose=verbose,
    )


def addon_variable(name: str) -> str:
    """The environment variable naming a prebuilt directory of add-on ``name`` (``-`` written ``_``)."""
    return f"AIRFLOW_MPI_{name.upper().replace('-', '_')}_BIN_DIR"


def _copy_addon_data(go: str, addon: Addon, path: Path) -> None:
    for dest, (mod, module_path, rel) in addon.data:
        src = _module_dir(go, mod, module_path) / rel
        if src.is_dir():
            shutil.copytree(src, path / dest)
        else:
            shutil.copyfile(src, path / dest)
    # module cache files are read-only: keep the copies writable so that prune() can delete them
    for p in path.rglob("*"):
        p.chmod(p.stat().st_mode | 0o200)


def _build_locked(
    go: str, key: str, final: Path, log: Path, tools: tuple[Tool, ...] = TOOLS, add_data=None
) -> Path:
    """Build ``tools`` into ``final`` (through a temporary directory), the output of ``go build`` into ``log``."""
    tmp = final.parent / f".{key}.tmp-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    env = dict(os.environ)
    env.setdefault("CGO_ENABLED", "0")
    # never stamp our repository's VCS state into upstream binaries (keeps builds reproducible)
    if "-buildvcs" not in env.get("GOFLAGS", ""):
        env["GOFLAGS"] = f"{env.get('GOFLAGS', '')} -buildvcs=false".strip()
    timings: dict[str, float] = {}
    started = time.monotonic()
    try:
        by_module: dict[str, list[Tool]] = {}
        for tool in tools:
            by_module.setdefault(tool.module, []).append(tool)
        for mod, mod_tools in by_module.items():
            t0 = time.monotonic()
            # One `go build` per module: packages shared by its binaries are compiled once.
            # With several packages and -o <dir>/, each main package lands as <dir>/<last path element>.
            outdir = tmp / f".out-{mod}"
            outdir.mkdir()
            ldflags = f"{LDFLAGS} {_version_ldflags(go, mod)}".strip()
            # -v: the log names each package as it is compiled (how far along a build is: `tail -f` it)
            cmd = [go, "build", "-v", *BUILD_FLAGS, f"-ldflags={ldflags}", "-o", str(outdir) + os.sep]
            cmd += [t.package for t in mod_tools]
            build_log.run(cmd, log, _log, what=f"go build of {mod}", cwd=GO_DIR / mod, env=env)
            for tool in mod_tools:
                produced = outdir / tool.package.rstrip("/").split("/")[-1]
                if tool.package == "go.etcd.io/etcd/server/v3":
                    produced = outdir / "server"
                    if not produced.exists():
                        produced = outdir / "v3"
                if not produced.exists():
                    raise RuntimeError(
                        f"go build did not produce {produced} (have {sorted(os.listdir(outdir))})"
                    )
                produced.rename(tmp / tool.binary)
            outdir.rmdir()
            timings[mod] = round(time.monotonic() - t0, 1)
        (add_data or (lambda path: _ensure_data(go, path)))(tmp)
        total = round(time.monotonic() - started, 1)
        (tmp / _COMPLETE).write_text(
            json.dumps(
                {
                    "key": key,
                    "go": _go_version(go),
                    "flags": [*BUILD_FLAGS, f"-ldflags={LDFLAGS}"],
                    "versions": pinned_versions(sorted({t.module for t in tools})),
                    "seconds": timings,
                    "total_seconds": total,
                    "built_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                },
                indent=2,
            )
        )
        shutil.rmtree(final, ignore_errors=True)
        tmp.rename(final)
        return final
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _ensure_data(go: str, path: Path) -> None:
    """Copy the CRDs and kwok node stages from the module sources into ``path`` (if missing)."""
    for sub, files in (("crds", CRDS), ("stages", NODE_STAGES)):
        (path / sub).mkdir(exist_ok=True)
        for name, (mod, module_path, rel) in files.items():
            dest = path / sub / name
            if not dest.exists():
                tmp = dest.with_suffix(f".tmp{os.getpid()}")
                shutil.copyfile(_module_dir(go, mod, module_path) / rel, tmp)
                tmp.replace(dest)


def prune() -> list[Path]:
    """Delete cached builds other than the current one, except those a running cluster still uses."""
    current = bin_dir()
    in_use = {current.resolve(), *(addon_dir(name).resolve() for name in ADDONS)}
    clusters = cache_root() / "clusters"
    if clusters.is_dir():
        for state in clusters.glob("*/state.json"):
            try:
                st = json.loads(state.read_text())
            except ValueError:
                continue
            if st.get("phase") in ("starting", "running"):
                for k in ("bin_dir", *(f"{name}_bin_dir" for name in ADDONS)):
                    if st.get(k):
                        in_use.add(Path(st[k]).resolve())
    removed = []
    root = cache_root() / "bin"
    for d in root.iterdir() if root.is_dir() else []:
        if d.name.startswith(".") and ".tmp-" in d.name:  # a build in progress, unless its builder is gone
            with contextlib.suppress(ValueError, ProcessLookupError, PermissionError):
                os.kill(int(d.name.rsplit("-", 1)[1]), 0)
                continue
        if d.is_dir() and d.resolve() not in in_use:
            shutil.rmtree(d, ignore_errors=True)
            removed.append(d)
    return removed


def binaries(path: Path | None = None) -> dict[str, Path]:
    path = path or build()
    return {t.binary: path / t.binary for t in TOOLS}


def crd_path(api_version: str, path: Path | None = None) -> Path:
    path = path or build()
    return path / "crds" / ("mpijobs-v1.yaml" if api_version == "v1" else "mpijobs-v2beta1.yaml")


def build_info(path: Path | None = None) -> dict:
    path = path or bin_dir()
    try:
        return json.loads((path / _COMPLETE).read_text())
    except FileNotFoundError:
        return {}
