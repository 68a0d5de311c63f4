"""Property-based tests (Hypothesis) over MPIJobOperator's parameters and over base manifests.

* any input: either a manifest the real CRD schema (v2beta1 or v1, read from the pinned modules)
  accepts without pruning anything, or MPIJobValidationError naming only parameters (or, for a
  base manifest's own content, manifest paths); never another exception;
* valid input: always accepted; every parameter given appears in the manifest; every value of the
  base manifest survives unless a parameter given covers it.

Base manifests are upstream's published examples with fields removed or changed. Example counts
come from the Hypothesis profile in tests/unit/conftest.py.
"""

from __future__ import annotations

import re
import shlex
from typing import Any

import yaml
from hypothesis import event, given
from hypothesis import strategies as st

from airflow_mpi.jobspec import API_V1, API_V2BETA1, MPIJobValidationError
from airflow_mpi.operators import MPIJobOperator
from tests.unit.fakes import FakeSyncHook
from tests.unit.upstream import example, example_texts, schema_errors

ROLES = ("Launcher", "Worker")
NAMES = st.from_regex(r"[a-z][a-z0-9]{0,10}(-[a-z0-9]{1,5})?", fullmatch=True)
LABEL_KEYS = st.sampled_from(["team", "example.com/owner", "app.kubernetes.io/part-of"])
LABEL_VALUES = st.from_regex(r"([a-z0-9]([-a-z0-9_.]{0,10}[a-z0-9])?)?", fullmatch=True)
LABELS = st.dictionaries(LABEL_KEYS, LABEL_VALUES, max_size=3)
QUANTITIES = st.sampled_from(["500m", "1", "2", "1Gi", "512Mi", 1, 2])
LIMITS = st.dictionaries(st.sampled_from(["cpu", "memory"]), QUANTITIES, min_size=1)
RESOURCES = st.fixed_dictionaries({"limits": LIMITS})
ARGS = st.lists(st.sampled_from(["python", "/opt/app", "--epochs=3", "train.py"]), min_size=1, max_size=3)


def ints(low: int, high: int) -> st.SearchStrategy:
    """An integer parameter as given in a DAG or rendered by a template."""
    return st.integers(low, high) | st.integers(low, high).map(str)


def role_dict(restart_policies: tuple[str, ...]) -> st.SearchStrategy:
    return st.fixed_dictionaries(
        {}, optional={"labels": LABELS, "restart_policy": st.sampled_from(restart_policies)}
    )


VALID: dict[str, st.SearchStrategy] = {
    "image": st.sampled_from(["mpi:1", "registry.example.com/team/mpi-pi:openmpi"]),
    "workers": ints(1, 12),
    "slots_per_worker": ints(1, 4),
    "env": st.dictionaries(
        st.from_regex(r"[A-Z_][A-Z0-9_]{0,8}", fullmatch=True), st.sampled_from(["a", "1 2", 3])
    ),
    "worker_resources": RESOURCES,
    "launcher_resources": RESOURCES,
    "gpus_per_worker": ints(0, 4),
    "labels": LABELS,
    "annotations": st.dictionaries(LABEL_KEYS, st.text(max_size=12), max_size=2),
    "node_selector": LABELS,
    "tolerations": st.just([{"key": "gpu", "operator": "Exists", "effect": "NoSchedule"}]),
    "clean_pod_policy": st.sampled_from(["None", "Running", "All"]),
    "backoff_limit": st.integers(0, 6),
    "ttl_seconds_after_finished": st.integers(1, 3600),  # 0 is refused on v2beta1 (validation._launcher_ttl)
    "active_deadline_seconds": st.integers(1, 86400),
    "suspend": st.booleans(),
    "name": NAMES,
    "namespace": NAMES,
    "launcher": role_dict(("Never", "OnFailure")),
    "worker": role_dict(("Never", "OnFailure")),
    "retries": st.integers(0, 3),
}
INVALID: dict[str, st.SearchStrategy] = {
    "image": st.just(""),
    "workers": st.sampled_from([0, -1, 2.5, 2.0, True, "two", "2.5", ""]),
    "slots_per_worker": st.sampled_from([0, 1.5, "x"]),
    "mpi_implementation": st.sampled_from(["openmpi", 3]),
    "program": st.sampled_from([[], 5, "'unclosed", [1]]),
    "mpirun_args": st.sampled_from([5, "'unclosed", [3]]),
    "command": st.sampled_from([5, [1], "'unclosed"]),
    "env": st.sampled_from([{"1BAD": "x"}, {"A": [1]}, "A=1", [{"value": "x"}]]),
    "worker_resources": st.sampled_from(
        [
            {"limits": {"cpu": 0.5}},
            {"limits": {"cpu": "lots"}},
            {"cpu": "1"},
            [],
            {"limits": {"cpu": "1"}, "requests": {"cpu": "2"}},
        ]
    ),
    "gpus_per_worker": st.sampled_from([-1, 1.5, "x", True]),
    "labels": st.sampled_from([{"bad key!": "v"}, {"k": "bad value!"}, ["x"]]),
    "annotations": st.sampled_from([{"k": 1}, "x"]),
    "clean_pod_policy": st.sampled_from(["Sometimes", 1]),
    "backoff_limit": st.sampled_from([-1, 1.5, "x"]),
    "name": st.sampled_from(["Bad_Name", "a" * 70, 5]),
    "namespace": st.sampled_from(["Bad NS", 7]),
    "worker": st.sampled_from([{"colour": 1}, "x", {"replicas": 0}, {"image": 3}]),
    "launcher": st.sampled_from([{"replicas": 2}, {"restart_policy": "Always"}, {"env": {"A": None}}]),
    "scheduling_policy": st.sampled_from([{"colour": 1}, "x", {"minAvailable": 0}, {"queue": ""}]),
    "run_launcher_as_worker": st.just("yes"),
    "ssh_auth_mount_path": st.just("relative/path"),
    "launcher_creation_policy": st.just(
        "Later"
    ),  # WaitForWorkersReady is valid with pi-intel's readinessProbe
    "main_container": st.just("Not_A_Container"),
    "startup_timeout": st.sampled_from([0, -1, "x"]),
    "schedule_timeout": st.sampled_from([0, "x"]),
    "poll_interval": st.sampled_from([0, None]),
    "deferrable": st.sampled_from(["yes", None]),
    "worker_log_tail_lines": st.sampled_from([-1, 1.5]),
    "on_finish_action": st.just("explode"),
    "api_version": st.just("kubeflow.org/v1alpha1"),
    "base_manifest": st.sampled_from(["- a\n- b\n", {"kind": "TFJob"}, "/nonexistent/x.yaml", 42]),
}
# Where a refused input may be reported: the operator's parameters, or paths of a base manifest's content.
NAMED = {*MPIJobOperator.parameters, "spec", "run_policy", "mpi_replica_specs", "metadata"}
# Mutations of a published example used as a base manifest.
REMOVALS = {
    "workers": ("spec", "mpiReplicaSpecs", "Worker", "replicas"),
    "slots": ("spec", "slotsPerWorker"),
    "run_policy": ("spec", "runPolicy"),
    "implementation": ("spec", "mpiImplementation"),
    "name": ("metadata", "name"),
}


def run(params: dict[str, Any]) -> tuple[MPIJobOperator, dict]:
    op = MPIJobOperator(task_id="prop", **params)
    op.__dict__["hook"] = FakeSyncHook(namespace=None)
    return op, op.build_manifest()


@st.composite
def base_manifests(draw, api: str | None = None) -> dict | str | None:
    names = [n for n, (version, _) in example_texts().items() if api in (None, version)]
    name = draw(st.sampled_from(names))
    manifest = example(name)
    for removal in draw(st.sets(st.sampled_from(sorted(REMOVALS)))):
        *parents, key = REMOVALS[removal]
        node = manifest
        for parent in parents:
            node = node.get(parent, {})
        node.pop(key, None)
    if draw(st.booleans()):
        manifest["spec"].setdefault("runPolicy", {})["backoffLimit"] = draw(st.integers(0, 6))
    if draw(st.booleans()):
        manifest["spec"]["mpiReplicaSpecs"]["Launcher"]["restartPolicy"] = draw(
            st.sampled_from(["Never", "OnFailure"])
        )
    return yaml.safe_dump(manifest) if draw(st.booleans()) else manifest


@st.composite
def valid_inputs(draw) -> tuple[dict[str, Any], dict | None]:
    """Valid parameters and the base manifest they go with (as parsed, for the checks)."""
    api = draw(st.sampled_from([API_V2BETA1, API_V2BETA1, API_V1]))
    params = draw(st.fixed_dictionaries({}, optional=VALID))
    params["api_version"] = api
    launch = draw(st.sampled_from(["none", "command", "program"]))
    if launch == "command":
        params["command"] = draw(
            st.lists(st.sampled_from(["sh", "-c", "echo hi"]), min_size=1) | st.just("sleep 1")
        )
    elif launch == "program":
        params["program"] = draw(ARGS | st.sampled_from(["python train.py", "/home/mpiuser/pi"]))
        params["mpirun_args"] = draw(
            st.none() | st.just("-x LD_LIBRARY_PATH") | st.lists(st.just("--verbose"))
        )
    if api == API_V2BETA1 or launch == "program":
        params["mpi_implementation"] = draw(st.none() | st.sampled_from(["OpenMPI", "Intel", "MPICH"]))
    base = draw(st.none() | base_manifests(api))
    if base is None:
        params.setdefault("image", "mpi:1")
    else:
        params["base_manifest"] = base
    params = {k: v for k, v in params.items() if v is not None}
    return params, (yaml.safe_load(base) if isinstance(base, str) else base)


@st.composite
def any_parameters(draw) -> tuple[dict[str, Any], list[str]]:
    """Valid parameters (see valid_inputs) with up to two of them replaced by an invalid value (named)."""
    params, _ = draw(valid_inputs())
    invalid = draw(st.lists(st.sampled_from(sorted(INVALID)), max_size=2, unique=True))
    for name in invalid:
        params[name] = draw(INVALID[name])
    return params, invalid


@given(any_parameters())
def test_any_input_gives_a_crd_valid_manifest_or_errors_naming_parameters(case):
    params, invalid = case
    try:
        _, manifest = run(params)
    except MPIJobValidationError as err:
        event("refused")
        roots = {e.field: e.field.split(".")[0].split("[")[0] for e in err.errors}
        assert {f for f, root in roots.items() if root not in NAMED} == set(), str(err)
        return
    event("accepted")
    assert invalid == [], f"accepted invalid {invalid}"
    assert schema_errors(manifest) == []


@given(valid_inputs())
def test_valid_input_is_accepted_shows_every_parameter_and_keeps_the_rest_of_the_base(case):
    params, base = case
    _, manifest = run(params)
    assert schema_errors(manifest) == []
    mains = {role: _main(manifest, role) for role in ROLES}
    for name, shown in _GIVEN_CHECKS.items():
        assert name not in params or shown(params, manifest, mains), (
            f"{name}={params[name]!r} is not in the manifest"
        )
    if base is not None:
        names = {role: _main(base, role)["name"] for role in ROLES}
        for path, value in _leaves(base):
            if not _covered(path, params, names, manifest["apiVersion"]):
                assert _lookup(manifest, path) == value, (path, value)


# ---------------------------------------------------------------- helpers of the valid-input property


def _pod(manifest: dict, role: str) -> dict:
    return manifest["spec"]["mpiReplicaSpecs"][role]["template"]["spec"]


def _main(manifest: dict, role: str) -> dict:
    return _pod(manifest, role)["containers"][0]


def _argv(value: Any) -> list[str]:
    return shlex.split(value) if isinstance(value, str) else list(value)


def _launched(params: dict, manifest: dict, mains: dict) -> bool:
    """mpirun sized from the job; for MPICH and Intel in args on v2beta1 (keeping the image's entrypoint), behind
    the kind's Hydra wiring on v1 (``sh -c '<hostfile rewrite> && exec "$0" ...' mpirun ...``)."""
    spec, program = manifest["spec"], _argv(params["program"])
    in_args = spec.get("mpiImplementation") in ("MPICH", "Intel")
    line, other = ("args", "command") if in_args else ("command", "args")
    command = mains["Launcher"][line]
    if manifest["apiVersion"] == API_V1 and params.get("mpi_implementation") in ("MPICH", "Intel"):
        command = command[3:] if command[:2] == ["sh", "-c"] else []
    np = spec["mpiReplicaSpecs"]["Worker"]["replicas"] * spec.get("slotsPerWorker", 1)
    return (
        bool(command)
        and command[0] == "mpirun"
        and command[-len(program) :] == program
        and str(np) in command
        and (other not in mains["Launcher"])
    )


def _named(given: str, name: str) -> bool:
    """``name`` is ``given``, or (the default) a prefix of it with the task instance's 8-hex suffix."""
    prefix, _, digest = name.rpartition("-")
    return name == given or (given.startswith(prefix) and re.fullmatch("[0-9a-f]{8}", digest) is not None)


def _subset(given: dict, actual: dict) -> bool:
    return all(actual.get(k) == v for k, v in given.items())


def _role(params: dict, manifest: dict, role: str) -> bool:
    given, replica = params[role.lower()], manifest["spec"]["mpiReplicaSpecs"][role]
    labels = replica["template"].get("metadata", {}).get("labels", {})
    return _subset(given.get("labels", {}), labels) and (
        replica.get("restartPolicy") == given.get("restart_policy", replica.get("restartPolicy"))
    )


def _run_policy(name: str, key: str):
    return lambda p, m, c: m["spec"]["runPolicy"][key] == p[name]


# parameter -> (params, manifest, main containers by role) -> whether the manifest shows it
_GIVEN_CHECKS = {
    "workers": lambda p, m, c: m["spec"]["mpiReplicaSpecs"]["Worker"]["replicas"] == int(p["workers"]),
    "slots_per_worker": lambda p, m, c: m["spec"]["slotsPerWorker"] == int(p["slots_per_worker"]),
    "name": lambda p, m, c: _named(p["name"], m["metadata"]["name"]),
    "namespace": lambda p, m, c: m["metadata"]["namespace"] == p["namespace"],
    "labels": lambda p, m, c: _subset(p["labels"], m["metadata"]["labels"]),
    "annotations": lambda p, m, c: _subset(p["annotations"], m["metadata"]["annotations"]),
    "backoff_limit": _run_policy("backoff_limit", "backoffLimit"),
    "ttl_seconds_after_finished": _run_policy("ttl_seconds_after_finished", "ttlSecondsAfterFinished"),
    "active_deadline_seconds": _run_policy("active_deadline_seconds", "activeDeadlineSeconds"),
    "suspend": _run_policy("suspend", "suspend"),
    "clean_pod_policy": lambda p, m, c: (
        p["clean_pod_policy"]
        == (
            m["spec"]["cleanPodPolicy"]
            if m["apiVersion"] == API_V1
            else m["spec"]["runPolicy"]["cleanPodPolicy"]
        )
    ),
    "mpi_implementation": lambda p, m, c: (
        m["apiVersion"] == API_V1 or m["spec"]["mpiImplementation"] == p["mpi_implementation"]
    ),
    "image": lambda p, m, c: all(x["image"] == p["image"] for x in c.values()),
    "env": lambda p, m, c: all(
        {"name": k, "value": str(v)} in x.get("env", []) for k, v in p["env"].items() for x in c.values()
    ),
    "worker_resources": lambda p, m, c: _subset(
        p["worker_resources"]["limits"], c["Worker"]["resources"]["limits"]
    ),
    "launcher_resources": lambda p, m, c: _subset(
        p["launcher_resources"]["limits"], c["Launcher"]["resources"]["limits"]
    ),
    "gpus_per_worker": lambda p, m, c: (
        c["Worker"]["resources"]["limits"]["nvidia.com/gpu"] == int(p["gpus_per_worker"])
    ),
    "command": lambda p, m, c: c["Launcher"]["command"] == _argv(p["command"]),
    "program": _launched,
    "node_selector": lambda p, m, c: all(
        _subset(p["node_selector"], _pod(m, r).get("nodeSelector", {})) for r in ROLES
    ),
    "tolerations": lambda p, m, c: all(_pod(m, r)["tolerations"] == p["tolerations"] for r in ROLES),
    "launcher": lambda p, m, c: _role(p, m, "Launcher"),
    "worker": lambda p, m, c: _role(p, m, "Worker"),
}


def _leaves(node: Any, path: tuple = ()):
    """(path, value) of every leaf; containers are addressed by name, other lists are leaves."""
    if isinstance(node, dict):
        for key, value in node.items():
            yield from _leaves(value, (*path, key))
    elif path and path[-1] == "containers" and isinstance(node, list):
        for item in node:
            yield from _leaves(item, (*path, f"[{item['name']}]"))
    else:
        yield path, node


def _lookup(node: Any, path: tuple) -> Any:
    for key in path:
        if isinstance(key, str) and key.startswith("["):
            node = next((c for c in node if c.get("name") == key[1:-1]), None)
        else:
            node = node.get(key) if isinstance(node, dict) else None
    return node


_RUN_POLICY = {
    "clean_pod_policy": "cleanPodPolicy",
    "backoff_limit": "backoffLimit",
    "suspend": "suspend",
    "ttl_seconds_after_finished": "ttlSecondsAfterFinished",
    "active_deadline_seconds": "activeDeadlineSeconds",
}


def _covered(path: tuple, params: dict, mains: dict[str, str], api: str) -> bool:
    """Whether a parameter given sets what ``path`` of the base manifest holds."""
    given = set(params)
    single = {
        ("metadata", "name"): "name",
        ("metadata", "namespace"): "namespace",
        ("spec", "slotsPerWorker"): "slots_per_worker",
        ("spec", "mpiImplementation"): "mpi_implementation",
        ("spec", "cleanPodPolicy"): "clean_pod_policy",
        ("spec", "mpiReplicaSpecs", "Worker", "replicas"): "workers",
    }
    if path == ("metadata", "name"):
        return True  # a prefix, made unique per task instance (the "name" check above)
    if path in single:
        return single[path] in given
    if path[:1] == ("metadata",) and len(path) == 3:
        return path[1] in params and path[2] in params[path[1]]  # labels, annotations
    if path[:2] == ("spec", "runPolicy"):
        return any(p in given and _RUN_POLICY[p] == path[2] for p in _RUN_POLICY)
    if path[:2] != ("spec", "mpiReplicaSpecs"):
        return False  # apiVersion, kind, sshAuthMountPath, ...: no parameter given here sets them
    role = path[2]
    if len(path) == 4 and path[3] == "restartPolicy":
        return "restart_policy" in params.get(role.lower(), {})
    if path[3:6] == ("template", "metadata", "labels"):
        return path[6] in params.get(role.lower(), {}).get("labels", {})
    if path[3:6] in (("template", "spec", "nodeSelector"), ("template", "spec", "tolerations")):
        return "node_selector" in given if path[5] == "nodeSelector" else "tolerations" in given
    if path[3:7] != ("template", "spec", "containers", f"[{mains[role]}]"):
        return False  # sidecars and other pod fields: no parameter sets them
    field = path[7:]
    resources = params.get("worker_resources" if role == "Worker" else "launcher_resources", {})
    return (
        (field[0] == "image" and "image" in given)
        or (field[0] == "env" and "env" in given)
        or (field[0] == "command" and role == "Launcher" and bool(given & {"command", "program"}))
        or (field[0] == "args" and role == "Launcher" and "program" in given)
        or (field[:2] == ("resources", "limits") and field[2] in resources.get("limits", {}))
        or (
            field == ("resources", "limits", "nvidia.com/gpu")
            and role == "Worker"
            and "gpus_per_worker" in given
        )
    )
