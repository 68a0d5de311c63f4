"""Defaults that make a first run work with an image of the mpi-operator's conventions, and names that never collide.

What a parameters-only job gets (the mpiuser convention of upstream's build/base image and v2beta1 pi examples),
what a base manifest keeps (its silence means the controller's own root convention), and that every default yields
to a parameter or to the base manifest.
"""

from __future__ import annotations

import shutil
import subprocess
import sys

import pytest

from airflow_mpi.jobspec import (
    API_V1,
    DEFAULT,
    PARAMETER,
    Defaults,
    MPIJobSpec,
    MPIJobValidationError,
    Mpirun,
    ReplicaSpec,
    RunPolicy,
    TaskIdentity,
    resolve,
)
from airflow_mpi.jobspec.container_defaults import STARTUP_PROBE
from airflow_mpi.jobspec.kinds import MPIJOB_V1
from airflow_mpi.jobspec.naming import MAX_NAME_LENGTH
from airflow_mpi.jobspec.spec import (
    MPIUSER_SSHD_COMMAND,
    SSHD_LISTENING_CHECK,
    WORKERS_DNS_WAIT,
    workers_dns_wait_script,
)
from localcluster.processes import child_env

IDENTITY = TaskIdentity("dag", "task", "manual__1", -1, 1, deployment="dep-a")


NO_RETRIES = Defaults(retries=0)


def resolved(base_manifest=None, defaults=NO_RETRIES, **kwargs):
    kwargs.setdefault("name", None)
    kwargs.setdefault("identity", IDENTITY)
    if base_manifest is None:
        kwargs.setdefault("launcher", ReplicaSpec(image="img"))
        kwargs.setdefault("worker", ReplicaSpec(image="img", replicas=2))
    return resolve(
        MPIJobSpec(base_manifest=base_manifest, defaults=defaults, launch=Mpirun(["/pi"]), **kwargs)
    )


def main(result, role: str) -> dict:
    return result.manifest["spec"]["mpiReplicaSpecs"][role]["template"]["spec"]["containers"][0]


def root_base() -> dict:
    """A base manifest written for the controller's defaults (root sshd, /root/.ssh), as upstream's Horovod ones."""
    container = {"name": "mpi", "image": "horovod:1"}
    return {
        "apiVersion": "kubeflow.org/v2beta1",
        "kind": "MPIJob",
        "metadata": {"name": "tf"},
        "spec": {
            "mpiReplicaSpecs": {
                "Launcher": {"replicas": 1, "template": {"spec": {"containers": [dict(container)]}}},
                "Worker": {"replicas": 2, "template": {"spec": {"containers": [dict(container)]}}},
            }
        },
    }


def test_a_parameters_only_job_follows_the_mpiuser_convention_and_waits_for_its_workers_sshd():
    result = resolved()
    spec = result.manifest["spec"]
    assert spec["sshAuthMountPath"] == "/home/mpiuser/.ssh"
    assert spec["launcherCreationPolicy"] == "WaitForWorkersReady"
    worker, launcher = main(result, "Worker"), main(result, "Launcher")
    assert worker["command"] == list(MPIUSER_SSHD_COMMAND)
    assert worker["startupProbe"] == STARTUP_PROBE and "readinessProbe" not in worker
    assert worker["securityContext"] == {"runAsUser": 1000} == launcher["securityContext"]
    defaulted = {k for k, s in result.settings.items() if s.source == DEFAULT}
    assert {
        "ssh_auth_mount_path",
        "launcher_creation_policy",
        "worker.startup_probe",
        "worker.command",
        "launcher.run_as_user",
        "worker.run_as_user",
    } <= defaulted


def test_each_default_yields_to_the_parameter_that_sets_it():
    root = resolved(ssh_auth_mount_path="/root/.ssh")
    assert "command" not in main(root, "Worker") and "securityContext" not in main(root, "Worker")
    assert "securityContext" not in main(root, "Launcher")  # root convention: the controller's sshd -De
    assert main(root, "Worker")["startupProbe"] == STARTUP_PROBE  # still waits for sshd, on any port
    at_startup = resolved(launcher_creation_policy="AtStartup")
    assert at_startup.manifest["spec"]["launcherCreationPolicy"] == "AtStartup"
    assert "startupProbe" not in main(at_startup, "Worker")
    assert at_startup.settings["launcher_creation_policy"].source == PARAMETER
    probe = {"tcpSocket": {"port": 2222}}
    probed = resolved(
        worker=ReplicaSpec(
            image="img",
            replicas=2,
            readiness_probe=probe,
            security_context={"runAsUser": 0, "privileged": False},
        )
    )
    assert main(probed, "Worker")["readinessProbe"] == probe and "startupProbe" not in main(probed, "Worker")
    assert main(probed, "Worker")["securityContext"] == {"runAsUser": 0, "privileged": False}
    assert main(probed, "Launcher")["securityContext"] == {"runAsUser": 1000}
    pod_uid = resolved(launcher=ReplicaSpec(image="img", pod_security_context={"runAsUser": 2000}))
    assert "securityContext" not in main(pod_uid, "Launcher")
    own = resolved(worker=ReplicaSpec(image="img", replicas=2, args=["/usr/sbin/sshd", "-D"]))
    assert "command" not in main(own, "Worker") and main(own, "Worker")["args"] == ["/usr/sbin/sshd", "-D"]


def test_a_base_manifests_silence_keeps_the_controllers_root_convention():
    result = resolved(root_base())
    spec = result.manifest["spec"]
    assert "sshAuthMountPath" not in spec  # the controller's /root/.ssh
    worker, launcher = main(result, "Worker"), main(result, "Launcher")
    assert "command" not in worker  # the controller's /usr/sbin/sshd -De
    assert "securityContext" not in worker and "securityContext" not in launcher
    assert spec["launcherCreationPolicy"] == "WaitForWorkersReady" and worker["startupProbe"] == STARTUP_PROBE
    mpiuser = resolved(root_base(), ssh_auth_mount_path="/home/mpiuser/.ssh")  # the convention asked for
    assert main(mpiuser, "Worker")["command"] == list(MPIUSER_SSHD_COMMAND)
    assert main(mpiuser, "Launcher")["securityContext"] == {"runAsUser": 1000}


def test_a_base_manifest_that_sets_a_field_keeps_it():
    base = root_base()
    base["spec"]["launcherCreationPolicy"] = "AtStartup"
    base["spec"]["sshAuthMountPath"] = "/home/mpiuser/.ssh"
    pod = base["spec"]["mpiReplicaSpecs"]["Worker"]["template"]["spec"]
    pod["securityContext"] = {"runAsUser": 1001}
    pod["containers"][0]["command"] = ["/usr/local/bin/start-sshd"]
    result = resolved(base)
    worker = main(result, "Worker")
    assert result.manifest["spec"]["launcherCreationPolicy"] == "AtStartup" and "startupProbe" not in worker
    assert worker["command"] == ["/usr/local/bin/start-sshd"] and "securityContext" not in worker
    assert main(result, "Launcher")["securityContext"] == {"runAsUser": 1000}  # the base is silent there


def test_v1_gets_none_of_the_v2beta1_defaults():
    v1 = {"apiVersion": API_V1, "spec": {"mpiReplicaSpecs": {"Worker": {"replicas": 2}}}}
    result = resolved(v1, api_version=API_V1, launcher=ReplicaSpec(image="i"), worker=ReplicaSpec(image="i"))
    assert {"sshAuthMountPath", "launcherCreationPolicy"}.isdisjoint(result.manifest["spec"])
    assert {"startupProbe", "securityContext"}.isdisjoint(main(result, "Worker"))
    # its workers idle for kubectl exec, ending on SIGTERM (not sshd)
    assert main(result, "Worker")["command"] == list(MPIJOB_V1.idle_worker_command)
    assert result.settings["worker.command"].source == DEFAULT


def test_v1_idle_workers_end_on_sigterm_and_yield_to_a_given_command():
    """The controller's own idle command (``sleep 365d`` as the first process) ignores SIGTERM: every deletion
    waited 30 s. The kind's ends on it; a command or args from a parameter or the base manifest win."""
    sh, dash_c, script = MPIJOB_V1.idle_worker_command
    assert (sh, dash_c) == ("sh", "-c") and script.startswith('trap "exit 0" TERM;')
    v1 = {"apiVersion": API_V1, "spec": {"mpiReplicaSpecs": {"Worker": {"replicas": 2}}}}
    common = dict(api_version=API_V1, launcher=ReplicaSpec(image="i"))
    given = resolved(v1, worker=ReplicaSpec(image="i", args=["serve"]), **common)
    assert "command" not in main(given, "Worker") and "worker.command" not in given.settings
    base = {**v1, "spec": {"mpiReplicaSpecs": {"Worker": {"replicas": 2, "template": {"spec": {
        "containers": [{"name": "mpi", "image": "i", "command": ["own"]}]}}}}}}  # fmt: skip
    assert main(resolved(base, worker=ReplicaSpec(image="i"), **common), "Worker")["command"] == ["own"]


def test_a_given_name_is_a_prefix_unique_per_task_instance_of_each_deployment():
    first = resolved(name="pi").manifest["metadata"]["name"]
    assert first.startswith("pi-") and first == resolved(name="pi").manifest["metadata"]["name"]  # a retry's
    other_run = TaskIdentity("dag", "task", "manual__2", -1, 1, deployment="dep-a")
    other_deployment = TaskIdentity("dag", "task", "manual__1", -1, 1, deployment="dep-b")
    names = {
        first,
        *(
            resolved(name="pi", identity=i).manifest["metadata"]["name"]
            for i in (other_run, other_deployment)
        ),
    }
    assert len(names) == 3
    assert resolved(name="pi", unique_name_suffix=False).manifest["metadata"]["name"] == "pi"


def test_a_long_prefix_is_cut_so_every_pod_name_fits():
    prefix = "a" + "b" * 60
    name = resolved(name=prefix, worker=ReplicaSpec(image="i", replicas=1000)).manifest["metadata"]["name"]
    assert len(f"{name}-worker-999") <= MAX_NAME_LENGTH and name.startswith("abbb")


@pytest.mark.parametrize(
    ("params", "field", "value"),
    [
        ({"name": "My_Job"}, "name", "My_Job"),
        ({"name": "pi", "unique_name_suffix": "yes"}, "unique_name_suffix", "yes"),
        ({"launcher": ReplicaSpec(image=" mpi:1")}, "launcher.image", " mpi:1"),
        ({"worker": ReplicaSpec(image="mpi :1", replicas=1)}, "worker.image", "mpi :1"),
        ({"worker": ReplicaSpec(image="mpi:1\n", replicas=1)}, "worker.image", "mpi:1\n"),
    ],
)
def test_bad_names_and_images_are_refused_naming_the_field(params, field, value):
    with pytest.raises(MPIJobValidationError) as info:
        resolved(**params)
    assert (field, value) in {(e.field, e.value) for e in info.value.errors}


@pytest.mark.skipif(shutil.which("unshare") is None, reason="needs util-linux unshare")
@pytest.mark.parametrize("family", ["", "AF_INET", "AF_INET6"])
def test_the_startup_check_passes_once_a_tcp_socket_listens_in_the_pod(family):
    """The probe's shell runs in an empty network namespace (as a pod's before sshd starts), then beside a listener."""
    listen = (
        (
            f"import socket, subprocess, sys; s = socket.socket(socket.{family}); s.bind(('', 2222)); s.listen(); "
            "sys.exit(subprocess.call(sys.argv[1:]))"
        )
        if family
        else "import subprocess, sys; sys.exit(subprocess.call(sys.argv[1:]))"
    )
    probe = subprocess.run(
        ["unshare", "-rn", sys.executable, "-c", listen, *SSHD_LISTENING_CHECK], timeout=30, env=child_env()
    )
    if probe.returncode not in (0, 1):
        pytest.fail(f"probe exited {probe.returncode}")
    assert probe.returncode == (0 if family else 1)


def launcher_pod(result) -> dict:
    return result.manifest["spec"]["mpiReplicaSpecs"]["Launcher"]["template"]["spec"]


@pytest.mark.parametrize("implementation", ["MPICH", "Intel"])
def test_an_mpich_or_intel_launcher_finds_its_own_short_name_as_the_workers_do(implementation):
    """Upstream's MPICH/Intel entrypoint waits for `nslookup $HOSTNAME`: without the job's search domain (which the
    mpi-operator gives the workers only) it gave up after about 100 s in every job."""
    result = resolved(mpi_implementation=implementation, namespace="team-a")
    name = result.manifest["metadata"]["name"]
    assert launcher_pod(result)["dnsConfig"] == {"searches": [f"{name}.team-a.svc.cluster.local"]}
    assert result.settings["launcher.dns_searches"].source == DEFAULT
    assert "dnsConfig" not in result.manifest["spec"]["mpiReplicaSpecs"]["Worker"]["template"]["spec"]


@pytest.mark.parametrize(
    "kwargs",
    [
        {
            "mpi_implementation": "OpenMPI",
            "namespace": "team-a",
        },  # Open MPI's daemons never call the launcher by name
        {"mpi_implementation": "MPICH"},  # no namespace known (offline rendering): no guess
    ],
)
def test_no_launcher_search_domain_where_it_is_not_needed_or_not_known(kwargs):
    assert "dnsConfig" not in launcher_pod(resolved(**kwargs))


def test_a_dns_config_of_the_base_manifest_is_kept_as_it_is():
    base = root_base()
    dns = {"options": [{"name": "ndots", "value": "2"}]}
    base["spec"]["mpiImplementation"] = "MPICH"
    base["spec"]["mpiReplicaSpecs"]["Launcher"]["template"]["spec"]["dnsConfig"] = dns
    assert launcher_pod(resolved(base, namespace="team-a"))["dnsConfig"] == dns


QUEUED = {"kueue.x-k8s.io/queue-name": "user-queue"}


@pytest.mark.parametrize("kwargs", [{}, {"labels": QUEUED}, {"run_policy": RunPolicy(suspend=True)}])
def test_under_the_default_policy_the_launcher_waits_for_its_workers_names_in_an_init_container(kwargs):
    """WaitForWorkersReady holds the launcher until the workers are Ready, not until CoreDNS knows them (it lags
    after an API server restart: test_real_node_faults.py); a job stored suspended gets its launcher at once when
    resumed (mpi-operator v0.8.2, kubeflow/mpi-operator#615)."""
    result = resolved(**kwargs)
    (waiter,) = launcher_pod(result)["initContainers"]
    launcher = main(result, "Launcher")
    assert waiter["name"] == WORKERS_DNS_WAIT and waiter["image"] == launcher["image"] == "img"
    assert waiter["command"] == ["/bin/sh", "-c", workers_dns_wait_script(300 + 60)]  # the task's default
    assert waiter["securityContext"] == launcher["securityContext"] == {"runAsUser": 1000}
    assert waiter["volumeMounts"] == [{"name": "mpi-job-config", "mountPath": "/etc/mpi"}]
    assert result.settings["launcher.wait_for_workers"].source == DEFAULT


@pytest.mark.parametrize(
    "kwargs",
    [
        {
            "labels": QUEUED,
            "launcher_creation_policy": "WaitForWorkersReady",
        },  # the user's own choice: as written
        {"labels": QUEUED, "launcher_creation_policy": "AtStartup"},
        {"labels": QUEUED, "run_launcher_as_worker": True},
    ],
)
def test_no_init_container_where_the_launcher_needs_none_or_the_user_chose(kwargs):
    result = resolved(**kwargs)
    assert "initContainers" not in launcher_pod(result)
    assert "launcher.wait_for_workers" not in result.settings


def _waiter_script(tmp_path, deadline=360) -> str:
    hostfile = tmp_path / "hostfile"
    hostfile.write_text("job-worker-0.job.ns.svc slots=2\njob-worker-1.job.ns.svc:2\n")
    return workers_dns_wait_script(deadline).replace("/etc/mpi/hostfile", str(hostfile))


@pytest.mark.parametrize(("schedule_timeout", "deadline"), [(1200.0, 1260), (0.5, 61), (None, None)])
def test_the_launchers_wait_for_its_workers_follows_the_tasks_schedule_timeout(schedule_timeout, deadline):
    """The task lets a worker stay unscheduled ``schedule_timeout`` s, then its sshd a minute to listen: the launcher
    waits as long (a fixed 300 s failed, for good, a Kueue-admitted job whose workers took longer); None: for ever."""
    result = resolved(defaults=Defaults(retries=0, schedule_timeout=schedule_timeout), labels=QUEUED)
    (waiter,) = launcher_pod(result)["initContainers"]
    assert waiter["command"] == ["/bin/sh", "-c", workers_dns_wait_script(deadline)]
    script = waiter["command"][2]
    assert (f"deadline=$(( $(date +%s) + {deadline} ))" in script) if deadline else ("deadline" not in script)
    said = result.settings["launcher.wait_for_workers"].value
    assert (f"for up to {deadline} s (schedule_timeout + 60 s" if deadline else "without a deadline") in said


def _slow_workers(tmp_path, resolves_after: int) -> str:
    """PATH of a getent that resolves a host from its ``resolves_after``-th lookup on, and a clock that moves an
    hour per reading (no waiting in the test), with no-op sleep."""
    path = _tools(tmp_path, ["sed", "grep", "cat"])
    asked = tmp_path / "asked"
    clock = tmp_path / "clock"
    clock.write_text("0")
    for name, body in (
        ("getent", f'echo "$2" >> {asked}\n[ "$(grep -c "^$2$" {asked})" -ge {resolves_after} ]'),
        ("date", f'now=$(cat {clock}); echo $((now + 3600)) > {clock}; echo "$now"'),
        ("sleep", "exit 0"),
    ):
        (tmp_path / "bin" / name).write_text(f"#!/bin/sh\n{body}\n")
        (tmp_path / "bin" / name).chmod(0o755)
    return path


def test_without_a_deadline_the_init_container_waits_for_slow_workers(tmp_path):
    """Workers Ready after hours (a large image pull, nodes being provisioned): the launcher still starts."""
    path = _slow_workers(tmp_path, resolves_after=5)
    done = subprocess.run(
        ["/bin/sh", "-c", _waiter_script(tmp_path, deadline=None)],
        env={"PATH": path},
        timeout=30,
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr


def test_with_a_deadline_the_init_container_gives_up_naming_the_worker_and_the_setting(tmp_path):
    path = _slow_workers(tmp_path, resolves_after=5)
    done = subprocess.run(
        ["/bin/sh", "-c", _waiter_script(tmp_path, deadline=7200)],
        env={"PATH": path},
        timeout=30,
        capture_output=True,
        text=True,
    )
    assert done.returncode == 1
    assert done.stderr.strip() == (
        "wait-for-workers: worker job-worker-0.job.ns.svc not resolvable (not Ready) after "
        "7200 s (the task's schedule_timeout + 60 s for its sshd)"
    )


def _tools(tmp_path, names) -> str:
    tools = tmp_path / "bin"
    tools.mkdir()
    for name in names:
        (tools / name).symlink_to(shutil.which(name))
    return str(tools)


def test_the_init_container_waits_until_every_worker_resolves(tmp_path):
    """A fake getent resolves each worker only from its second lookup on: the script looks again until all do."""
    path = _tools(tmp_path, ["sed", "date", "sleep", "cat"])
    asked = tmp_path / "asked"
    getent = tmp_path / "bin" / "getent"
    getent.write_text(f'#!/bin/sh\necho "$2" >> {asked}\n[ "$(grep -c "^$2$" {asked})" -ge 2 ]\n')
    getent.chmod(0o755)
    (tmp_path / "bin" / "grep").symlink_to(shutil.which("grep"))
    done = subprocess.run(["/bin/sh", "-c", _waiter_script(tmp_path)], env={"PATH": path}, timeout=30)
    assert done.returncode == 0
    assert asked.read_text().split() == ["job-worker-0.job.ns.svc"] * 2 + ["job-worker-1.job.ns.svc"] * 2


def test_an_image_without_getent_or_nslookup_is_not_held(tmp_path):
    path = _tools(tmp_path, ["sed", "date", "sleep"])
    done = subprocess.run(
        ["/bin/sh", "-c", _waiter_script(tmp_path)],
        env={"PATH": path},
        timeout=30,
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0 and "no getent or nslookup in the image: not waiting" in done.stdout
