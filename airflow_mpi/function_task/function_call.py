"""A Python function as the MPI program: checks, serialisation and the ranks' command line (no I/O).

The function travels as source (as cncf.kubernetes' ``@task.kubernetes`` does: it must be self-contained, importing
what it uses inside its body), its arguments (upstream XComs included) as a pickle, together with this try's nonce
(function_task/rank_result.py) in a Kubernetes Secret the operator makes with the job, owned by it (the garbage
collector removes it with the job) and mounted read-only at ``CALL_MOUNT`` only into the containers that run ranks
(``mount_call_secret``): neither the function nor its arguments are in the MPIJob or pod specs, where anyone who may
read those (the provider's own role included) would find them. Everything that can be found out before submission
is checked here, naming the argument and the reason; what only the ranks can tell (a missing Python, a return value
that is no JSON) comes back in rank 0's marker lines.
"""

from __future__ import annotations

import ast
import base64
import builtins
import copy
import dis
import inspect
import io
import json
import pickle
import types
import zlib
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from airflow_mpi.function_task import rank_runner
from airflow_mpi.jobspec.errors import ErrorList, MPIJobValidationError
from airflow_mpi.jobspec.kinds import JobKind, kind_or_default
from airflow_mpi.jobspec.layout import pod_spec, replica_spec
from airflow_mpi.jobspec.vocabulary import ROLES, WORKER_REPLICA

PICKLE_PROTOCOL = 4  # readable by any Python 3 of an image (3.4+), whatever the worker's version
# A Secret holds at most 1 MiB of data (etcd's object limit); the call takes at most this much, encoded, leaving
# room for the runner and the object's metadata.
MAX_CALL_BYTES = 768 * 1024
CALL_MOUNT = "/etc/airflow-mpi/call"  # where the call's Secret is mounted in the containers that run ranks
CALL_KEY, RUNNER_KEY = "call", "runner.py"  # the Secret's keys: the encoded call, the ranks' program
CALL_VOLUME = "airflow-mpi-call"
# the manager of the runtimePatch that mounts the Secret into a runtime's pods (Trainer v2.3.0 wants a domain-prefixed
# path, unique in the list: a re-mount replaces it)
CALL_PATCH_MANAGER = "airflow-mpi.io/call-secret"
# Module names that exist only where the DAG is parsed: the DAG file itself (Airflow imports it under an
# "unusual_prefix_..." name) or a script run directly. Objects of their classes cannot be unpickled on a rank.
DAG_LOCAL_MODULE_PREFIXES = ("unusual_prefix_", "__main__")


def check_function(func: Callable, decorator: str) -> list[str]:
    """Reasons ``func`` cannot run on the ranks from its source alone (empty: it can)."""
    reasons = []
    if inspect.iscoroutinefunction(func) or inspect.isasyncgenfunction(func):
        reasons.append("is a coroutine function: the ranks call it synchronously")
    if getattr(func, "__name__", "<lambda>") == "<lambda>":
        reasons.append(f"is a lambda: {decorator} needs a function defined with def")
    code = getattr(func, "__code__", None)
    if code is None:
        return [*reasons, "is not a Python function"]
    if code.co_freevars:
        reasons.append(
            f"uses variables of an enclosing function ({', '.join(code.co_freevars)}): pass them as arguments"
        )
    dag_globals = sorted(_global_names(code) & set(func.__globals__) - set(vars(builtins)) - {func.__name__})
    if dag_globals:
        reasons.append(
            f"uses names of its module ({', '.join(dag_globals)}), which do not exist on the ranks: "
            "import or define them inside the function"
        )
    return reasons


def _global_names(code: types.CodeType) -> set[str]:
    """Global names the code (and the functions it defines) reads."""
    names = {i.argval for i in dis.get_instructions(code) if i.opname in ("LOAD_GLOBAL", "LOAD_NAME")}
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            names |= _global_names(const)
    return names


def check_source(source: str, name: str) -> str | None:
    """Why ``source`` (the function without its decorator) does not define ``name``, or None."""
    try:
        tree = ast.parse(source)
    except SyntaxError as err:
        return f"its source does not compile without its decorator: {err}"
    if not any(isinstance(n, ast.FunctionDef) and n.name == name for n in tree.body):
        return f"its source does not define a function {name!r} at its top level"
    return None


class _ModuleRecorder(pickle.Pickler):
    """A pickler noting the module of every class and function pickled by reference."""

    def __init__(self, file: io.BytesIO) -> None:
        super().__init__(file, protocol=PICKLE_PROTOCOL)
        self.modules: set[str] = set()

    def reducer_override(self, obj: Any) -> Any:
        owner = obj if isinstance(obj, (type, types.FunctionType, types.BuiltinFunctionType)) else type(obj)
        self.modules.add(getattr(owner, "__module__", None) or "")
        return NotImplemented  # pickle it as usual


def pickle_arguments(errors: ErrorList, args: Sequence[Any], kwargs: Mapping[str, Any]) -> bytes:
    """``(args, kwargs)`` pickled; an argument that cannot be, or that needs the DAG file to load, is an error."""
    named = [(f"op_args[{i}]", v) for i, v in enumerate(args)] + [
        (f"op_kwargs[{k!r}]", v) for k, v in kwargs.items()
    ]
    for field, value in named:
        recorder = _ModuleRecorder(io.BytesIO())
        try:
            recorder.dump(value)
        except Exception as err:  # noqa: BLE001 - whatever pickle raises, the argument cannot travel
            errors.add(field, value, f"cannot be pickled to reach the ranks: {type(err).__name__}: {err}")
            continue
        local = sorted(m for m in recorder.modules if m.startswith(DAG_LOCAL_MODULE_PREFIXES))
        if local:
            errors.add(
                field,
                value,
                f"needs classes or functions of the DAG file ({', '.join(local)}), which the "
                "ranks cannot import: pass plain data (JSON-like values, or types of modules in the image)",
            )
    if errors:
        return b""
    return pickle.dumps((tuple(args), dict(kwargs)), protocol=PICKLE_PROTOCOL)


def call_secret_data(source: str, name: str, arguments: bytes, nonce: str) -> dict[str, str]:
    """The Secret's ``stringData``: the call (JSON {name, source, arguments (pickle, base64), nonce}, compressed, as
    one base64 text) and the ranks' program. A call too large for a Secret raises MPIJobValidationError."""
    call = {"name": name, "source": source, "arguments": base64.b64encode(arguments).decode(), "nonce": nonce}
    encoded = base64.b64encode(zlib.compress(json.dumps(call).encode(), 9)).decode()
    if len(encoded) > MAX_CALL_BYTES:
        raise MPIJobValidationError(
            "op_args/op_kwargs",
            f"<{len(encoded)} bytes>",
            f"the function and its arguments "
            f"take {len(encoded)} bytes encoded (zlib, base64), over the {MAX_CALL_BYTES} the "
            "call's Kubernetes Secret may hold (1 MiB in all): pass large data by reference (a "
            "path or URL the ranks read)",
        )
    return {CALL_KEY: encoded, RUNNER_KEY: inspect.getsource(rank_runner)}


def rank_command(*, python: str = "python3") -> list[str]:
    """``python <mount>/runner.py <mount>/call``: what mpirun/horovodrun starts on every rank."""
    return [python, f"{CALL_MOUNT}/{RUNNER_KEY}", f"{CALL_MOUNT}/{CALL_KEY}"]


def call_secret_name(job_name: str, nonce_digest: str) -> str:
    """The Secret of one submission (a replaced job's Secret may not be collected yet: the name differs)."""
    return f"{job_name}-call-{nonce_digest[:10]}"


def mount_call_secret(manifest: dict, secret_name: str) -> dict:
    """``manifest`` with the call's Secret mounted read-only where the ranks run, and nowhere else: the main
    container of the workers (mpirun reaches a worker through its sshd, training-operator v1 through ``kubectl exec``
    into its first container: both the main one) and, when the launcher runs ranks too (``runLauncherAsWorker``),
    the launcher's main container. mpirun, mpiexec and horovodrun only pass the file names on; sidecars, init
    containers and a launcher that runs no rank never see the function or its arguments. A kind whose pods come from a
    runtime (``rank_pods_patch``: TrainJob) gets it through a patch of the runtime's rank pods instead."""
    volume = {"name": CALL_VOLUME, "secret": {"secretName": secret_name, "defaultMode": 0o444}}
    mount = {"name": CALL_VOLUME, "mountPath": CALL_MOUNT, "readOnly": True}
    kind = kind_or_default(manifest.get("apiVersion"))
    if kind.rank_pods_patch is not None:
        return _patch_call_secret(manifest, kind, volume, mount)
    if not kind.replica_layout.present:
        raise MPIJobValidationError(
            "api_version",
            kind.api_version,
            f"a {kind.kind} has neither replica specs nor runtime patches to mount the call's Secret into the pods "
            "that run ranks",
        )
    launcher_runs_ranks = manifest["spec"].get("runLauncherAsWorker") is True
    for role in ROLES:  # each role's replica spec, where the job's kind keeps it (jobspec/layout.py)
        pod = replica_spec(manifest, role)["template"].setdefault("spec", {})
        volumes = [v for v in pod.get("volumes") or [] if v.get("name") != CALL_VOLUME]
        for container in [*(pod.get("initContainers") or []), *pod["containers"]]:
            if any(m.get("name") == CALL_VOLUME for m in container.get("volumeMounts") or []):
                container["volumeMounts"] = [
                    m for m in container["volumeMounts"] if m.get("name") != CALL_VOLUME
                ]
        if role == WORKER_REPLICA or launcher_runs_ranks:
            main = pod["containers"][0]  # the main container comes first (jobspec/precedence.py _merged)
            main["volumeMounts"] = [*(main.get("volumeMounts") or []), dict(mount)]
            volumes.append(copy.deepcopy(volume))
        if volumes or "volumes" in pod:
            pod["volumes"] = volumes
    return manifest


def _patch_call_secret(manifest: dict, kind: JobKind, volume: dict, mount: dict) -> dict:
    """``manifest`` (a kind whose pods come from a runtime) with its one CALL_PATCH_MANAGER patch mounting the Secret
    into the container of the replicated job that runs ranks (``kind.rank_pods_patch``); other managers' kept."""
    rank_pods = kind.rank_pods_patch
    assert rank_pods is not None  # mount_call_secret's caller checked
    kept = [
        p
        for p in rank_pods.entries(manifest)
        if not (isinstance(p, dict) and p.get("manager") == CALL_PATCH_MANAGER)
    ]
    node = manifest
    for key in rank_pods.patches[:-1]:
        node = node.setdefault(key, {})
    node[rank_pods.patches[-1]] = [*kept, rank_pods.entry(CALL_PATCH_MANAGER, volume, mount)]
    return manifest


def mounted_call_secret(job: dict) -> str | None:
    """The name of the call Secret ``job``'s workers mount (a ``@task.mpi`` job's), or None."""
    kind = kind_or_default(job.get("apiVersion") if isinstance(job, dict) else None)
    rank_pods = kind.rank_pods_patch
    volumes = (
        rank_pods.volumes(job, CALL_PATCH_MANAGER)
        if rank_pods
        else pod_spec(job, WORKER_REPLICA).get("volumes")
    )
    for volume in volumes or []:
        if isinstance(volume, dict) and volume.get("name") == CALL_VOLUME:
            name = (volume.get("secret") or {}).get("secretName")
            return name if isinstance(name, str) else None
    return None


def call_patch_refusal(manifest: dict, why: str) -> str:
    """What the call's patch needs of the runtime, for a create of ``manifest`` refused over its runtime patches
    (``why``: the API server's causes), or "": the Trainer's webhook refuses a patch of a replicated job or container
    its runtime lacks, in words that do not say the patch is the decorator's."""
    rank_pods = kind_or_default(manifest.get("apiVersion")).rank_pods_patch
    if rank_pods is None or mounted_call_secret(manifest) is None or rank_pods.patches[-1] not in why:
        return ""
    return (
        f". The function's call Secret is mounted through {'.'.join(rank_pods.patches)} (manager "
        f"{CALL_PATCH_MANAGER}) into the runtime's replicated job {rank_pods.replicated_job!r} and its container "
        f"{rank_pods.container!r}, where the ranks run: the runtime must have both (docs/kubeflow-trainer.md)"
    )


def lost_call_data() -> dict[str, str]:
    """What a reattaching try puts into a job's call Secret found missing (operators/submission.py): the job is
    deleted at once; should a rank start before that, it runs nothing of the function (which no try can restore:
    the job's pods expect the nonce of the try that made it, never stored) and exits 1 saying why."""
    reason = "airflow-mpi: this MPIJob lost its call Secret before it started; it is being replaced"
    return {CALL_KEY: "", RUNNER_KEY: f"import sys\nsys.exit({reason!r})\n"}


def decode_call(encoded: str) -> dict[str, Any]:
    """The call a Secret carries (``call_secret_data(...)[CALL_KEY]``): for tests and log summaries."""
    call = json.loads(zlib.decompress(base64.b64decode(encoded)))
    call["arguments"] = pickle.loads(base64.b64decode(call["arguments"]))
    return call
