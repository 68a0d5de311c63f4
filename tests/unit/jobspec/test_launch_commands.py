"""mpirun / horovodrun command lines."""

from __future__ import annotations

import pytest

from airflow_mpi.jobspec import MPIJobValidationError, horovodrun_command, mpirun_command

OPENMPI_FLAGS = [
    "--allow-run-as-root", "-bind-to", "none", "-map-by", "slot",
    "-x", "PATH", "-mca", "pml", "ob1", "-mca", "btl", "^openib",
]  # fmt: skip


def test_openmpi_defaults_and_np_is_workers_times_slots():
    assert mpirun_command(["python", "train.py"], workers=3, slots_per_worker=4) == [
        "mpirun", *OPENMPI_FLAGS, "-np", "12", "python", "train.py",
    ]  # fmt: skip


def test_intel_uses_hostfile_n_and_ppn_without_bootstrap():
    command = mpirun_command(["/home/mpiuser/pi"], workers=2, slots_per_worker=2, implementation="Intel")
    assert command == ["mpirun", "-hostfile", "/etc/mpi/hostfile", "-n", "4", "-ppn", "2", "/home/mpiuser/pi"]
    assert "-bootstrap" not in command


def test_mpich_uses_n_and_ppn():
    assert mpirun_command("./pi", workers=5, implementation="MPICH") == [
        "mpirun",
        "-n",
        "5",
        "-ppn",
        "1",
        "./pi",
    ]


@pytest.mark.parametrize(
    "implementation, np",
    [("OpenMPI", ["-np", "6"]), ("Intel", ["-n", "6", "-ppn", "2"]), ("MPICH", ["-n", "6", "-ppn", "2"])],
)
def test_run_launcher_as_worker_adds_one_host(implementation, np):
    command = mpirun_command(
        ["app"], workers=2, slots_per_worker=2, implementation=implementation, run_launcher_as_worker=True
    )
    assert command[-len(np) - 1 : -1] == np


def test_program_string_is_split_like_a_shell():
    command = mpirun_command("python -c 'import sys; print(sys.argv)' \"a b\"", workers=1, default_flags=())
    assert command == ["mpirun", "-np", "1", "python", "-c", "import sys; print(sys.argv)", "a b"]


def test_default_flags_replace_the_defaults_and_extra_args_come_before_the_program():
    command = mpirun_command(
        ["app", "--epochs", "3"],
        workers=2,
        default_flags=["--allow-run-as-root"],
        extra_args=["-x", "NCCL_DEBUG=INFO", "--mca", "btl_tcp_if_include", "eth0"],
    )
    assert command == [
        "mpirun", "--allow-run-as-root", "-np", "2",
        "-x", "NCCL_DEBUG=INFO", "--mca", "btl_tcp_if_include", "eth0", "app", "--epochs", "3",
    ]  # fmt: skip


def test_flags_given_as_shell_strings():
    command = mpirun_command(
        "app", workers=1, implementation="Intel", default_flags="-genv I_MPI_DEBUG 5", extra_args="-l"
    )
    assert command == ["mpirun", "-genv", "I_MPI_DEBUG", "5", "-n", "1", "-ppn", "1", "-l", "app"]


def test_empty_default_flags_means_none():
    assert mpirun_command(["app"], workers=1, default_flags=[]) == ["mpirun", "-np", "1", "app"]


@pytest.mark.parametrize(
    "kwargs, field, value",
    [
        ({"workers": 0}, "workers", 0),
        ({"workers": -1}, "workers", -1),
        ({"workers": True}, "workers", True),
        ({"workers": "2"}, "workers", "2"),
        ({"workers": 1, "slots_per_worker": 0}, "slots_per_worker", 0),
        ({"workers": 1, "implementation": "openmpi"}, "implementation", "openmpi"),
        ({"workers": 1, "implementation": "MVAPICH"}, "implementation", "MVAPICH"),
        ({"workers": 1, "program": ""}, "program", ""),
        ({"workers": 1, "program": []}, "program", []),
        ({"workers": 1, "program": ["app", 1]}, "program", ["app", 1]),
        ({"workers": 1, "program": "app 'unclosed"}, "program", "app 'unclosed"),
        ({"workers": 1, "extra_args": [None]}, "extra_args", [None]),
        ({"workers": 1, "default_flags": 5}, "default_flags", 5),
        ({"workers": 1, "run_launcher_as_worker": "yes"}, "run_launcher_as_worker", "yes"),
    ],
)
def test_mpirun_rejects_bad_arguments(kwargs, field, value):
    kwargs.setdefault("program", ["app"])
    with pytest.raises(MPIJobValidationError) as info:
        mpirun_command(kwargs.pop("program"), **kwargs)
    assert (field, value) in [(e.field, e.value) for e in info.value.errors]
    assert f"{field}={value!r}: " in str(info.value)


def test_horovodrun_minimal():
    assert horovodrun_command(["python", "train.py"], workers=2, slots_per_worker=4) == [
        "horovodrun", "-np", "8", "--slots-per-host", "4", "--hostfile", "/etc/mpi/hostfile", "python", "train.py",
    ]  # fmt: skip


def test_horovodrun_is_elastic_with_the_discovery_script_only_with_np_bounds():
    elastic = horovodrun_command(["app"], workers=2, min_np=1)
    assert elastic[elastic.index("--host-discovery-script") + 1] == "/etc/mpi/discover_hosts.sh"
    assert "--hostfile" not in elastic
    with pytest.raises(MPIJobValidationError, match=r"elastic_timeout=60: applies to elastic mode only"):
        horovodrun_command(["app"], workers=2, elastic_timeout=60)


def test_horovodrun_all_options_in_order():
    command = horovodrun_command(
        "python train.py --lr 0.1",
        workers=4,
        slots_per_worker=2,
        min_np=4,
        max_np=16,
        discovery_script="/opt/discover.sh",
        log_level="WARNING",
        verbose=True,
        elastic_timeout=1200,
        network_interface="eth0,eth1",
        extra_args=["--gloo"],
    )
    assert command == [
        "horovodrun", "-np", "8", "--min-np", "4", "--max-np", "16",
        "--slots-per-host", "2", "--host-discovery-script", "/opt/discover.sh",
        "--log-level", "WARNING", "--verbose", "--elastic-timeout", "1200",
        "--network-interface", "eth0,eth1", "--gloo", "python", "train.py", "--lr", "0.1",
    ]  # fmt: skip


def test_horovodrun_elastic_flags_only_when_given():
    command = horovodrun_command(["app"], workers=2, max_np=4)
    assert "--max-np" in command and "--min-np" not in command
    plain = horovodrun_command(["app"], workers=2)
    assert not {
        "--min-np",
        "--max-np",
        "--log-level",
        "--verbose",
        "--elastic-timeout",
        "--network-interface",
    } & set(plain)


@pytest.mark.parametrize("level", ["TRACE", "DEBUG", "INFO", "WARNING", "ERROR", "FATAL"])
def test_horovod_log_levels(level):
    assert horovodrun_command(["app"], workers=1, log_level=level)[-3:-1] == ["--log-level", level]


@pytest.mark.parametrize(
    "kwargs, field, value",
    [
        ({"workers": 0}, "workers", 0),
        ({"workers": 2, "slots_per_worker": -1}, "slots_per_worker", -1),
        ({"workers": 2, "min_np": 3}, "min_np", 3),  # np = 2
        ({"workers": 2, "min_np": 0}, "min_np", 0),
        ({"workers": 2, "max_np": 1}, "max_np", 1),
        ({"workers": 2, "max_np": 2.5}, "max_np", 2.5),
        ({"workers": 2, "log_level": "info"}, "log_level", "info"),
        ({"workers": 2, "log_level": "WARN"}, "log_level", "WARN"),
        ({"workers": 2, "elastic_timeout": -1}, "elastic_timeout", -1),
        ({"workers": 2, "elastic_timeout": "600"}, "elastic_timeout", "600"),
        ({"workers": 2, "network_interface": ""}, "network_interface", ""),
        ({"workers": 2, "discovery_script": ""}, "discovery_script", ""),
        ({"workers": 2, "verbose": "yes"}, "verbose", "yes"),
        ({"workers": 2, "program": []}, "program", []),
    ],
)
def test_horovodrun_rejects_bad_arguments(kwargs, field, value):
    kwargs.setdefault("program", ["app"])
    with pytest.raises(MPIJobValidationError) as info:
        horovodrun_command(kwargs.pop("program"), **kwargs)
    assert (field, value) in [(e.field, e.value) for e in info.value.errors]
    assert f"{field}={value!r}: " in str(info.value)


def test_horovod_np_bounds_are_inclusive():
    command = horovodrun_command(["app"], workers=2, slots_per_worker=2, min_np=4, max_np=4)
    assert command[:7] == ["horovodrun", "-np", "4", "--min-np", "4", "--max-np", "4"]
