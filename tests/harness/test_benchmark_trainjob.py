"""P2 on TrainJobs (benchmarks/trainjob_load.py, benchmarks/waits_trainjob.py): the TrainJobs it creates, how it
counts what runs, and its section of docs/benchmarks.md (no cluster: the runs are given)."""

from __future__ import annotations

from types import SimpleNamespace as NS

import pytest

from benchmarks import cluster_load as load
from benchmarks import trainjob_load as tj
from benchmarks.waits_trainjob import MPIJOB_WAIT, TRAINJOB_WAIT, columns, section, target_rows
from localcluster import behaviour as bh
from tests.unit.upstream import trainjob_schema_errors


def test_a_benchmark_trainjob_keeps_only_its_launcher_running_through_one_runtime_patch():
    job = tj.trainjob("p2-0001")
    assert trainjob_schema_errors(job) == []  # nothing the API server would refuse or prune
    assert job["spec"]["runtimeRef"] == {"name": "openmpi-mpiuser"} and job["spec"]["trainer"] == {
        "numNodes": 1
    }
    (patch,) = job["spec"]["runtimePatches"]
    assert patch["manager"] == "airflow-mpi.io/benchmark"
    (launcher,) = patch["trainingRuntimeSpec"]["template"]["spec"]["replicatedJobs"]
    assert launcher == {
        "name": "launcher",
        "template": {"spec": {"template": {"metadata": {"labels": {bh.LIFECYCLE: bh.RUN}}}}},
    }


def _pod(replicated_job: str, container: str, running: bool) -> NS:
    state = NS(running=NS() if running else None)
    return NS(
        metadata=NS(labels={bh.JOBSET_REPLICATED_JOB: replicated_job}),
        status=NS(container_statuses=[NS(name=container, state=state)]),
    )


def test_running_launchers_are_launcher_pods_whose_node_container_runs():
    pods = [
        _pod("launcher", "node", True),
        _pod("launcher", "node", False),  # Pending: the nodes are full
        _pod("node", "node", True),  # a node pod (sshd)
        _pod("launcher", "intruder", True),
        NS(metadata=NS(labels=None), status=NS(container_statuses=None)),
    ]
    assert tj.running_launchers(pods) == 1


def test_a_trainjob_is_acknowledged_once_its_status_has_the_jobsets_jobs():
    jobs = [{"status": {"jobsStatus": [{"name": "node"}]}}, {"status": {}}, {}]
    assert tj.acknowledged(jobs) == 1


def test_the_simulated_nodes_hold_a_trainjob_in_two_pods():
    assert tj.capacity(4) == 220  # 4 nodes x 110 pods
    assert tj.capacity(12) == 660


def test_a_larger_ns_jobs_are_refused_and_counters_that_grew_are_the_delta():
    load.refuse_larger("ns", [{"metadata": {"name": "a"}}], ["a", "b"])
    with pytest.raises(RuntimeError, match="holds 1 jobs of a larger N"):
        load.refuse_larger("ns", [{"metadata": {"name": "c"}}], ["a"])
    assert load.delta(
        {"GET pods": 2.0, "WATCH pods": 1.0}, {"GET pods": 5.0, "WATCH pods": 1.0, "LIST x": 1.0}
    ) == {
        "GET pods": 3.0,
        "LIST x": 1.0,
    }


def _figures(running: int, **more) -> dict:
    return {
        "cpu_per_min": 0.8,
        "peak_rss_mib": 270.0,
        "tcp": 100,
        "tcp_end": 67,
        "requests": {},
        "requests_per_job_hour": 0.0,
        "open_long_running": {"WATCH trainjobs": 1.0, "WATCH pods": 1.0, "CONNECT pods/log": 64.0},
        "lag_p99_ms": 3.0,
        "running": running,
        **more,
    }


def _results() -> dict:
    trainjobs = _figures(
        300,
        acknowledged=300,
        capacity=660,
        settled_s=140.0,
        hubs=[{"namespace": "n", "jobs": 300, "stats": {"launcher_job_checks": 600, "trainjobs_lists": 1}}],
        control={"seconds": 30.0, "requests": {}},
    )
    entry = {
        "date": "2026-12-05 12:00 UTC",
        "commit": "abc1234",
        "machine": "vm",
        "load": "1.00 / 1.00 / 1.00 (1 / 5 / 15 min)",
        "window": 60.0,
        "settle": 30.0,
        "command": "python -m benchmarks.waits --kind trainjob --n 300",
        "nodes": 12,
        "notes": ["a note"],
        TRAINJOB_WAIT: trainjobs,
        MPIJOB_WAIT: _figures(300, requests={"GET mpijobs": 1.0}),
    }
    return {"p2_trainjob": {"300": entry}, "p2": {"300": {MPIJOB_WAIT: _figures(201)}}}


def test_the_section_puts_trainjobs_beside_mpijobs_of_the_same_run_and_of_the_p2_table():
    results = _results()
    assert [title for title, _ in columns(results)] == [
        "TrainJob, N=300 (300 running)",
        "MPIJob, N=300, same cluster, right after (300 running)",
        "MPIJob, N=300, the P2 table above (201 running)",
    ]
    text = "\n".join(section(results, "benchmarks-waits-trainjob.png"))
    assert text.startswith("## P2 on TrainJobs")
    assert "| CPU s / min (the waiting process) | 0.80 | 0.80 | 0.80 |" in text
    assert "| reads in the window by verb | none | GET mpijobs: 1 | none |" in text
    assert (
        "| TrainJobs acknowledged / launchers running / fit on the nodes | 300 / 300 / 660 | - | - |" in text
    )
    assert "(3 GETs each for a TrainJob, 1 for an MPIJob) | 600 | - | - |" in text
    assert "none in 30 s" in text and "12 simulated nodes" in text and "- a note" in text
    assert "![P2 on TrainJobs](benchmarks-waits-trainjob.png)" in text


def test_the_targets_rows_for_trainjobs_are_from_the_largest_n():
    results = _results()
    results["p2_trainjob"]["10"] = {TRAINJOB_WAIT: _figures(10, requests_per_job_hour=72.0)}
    assert target_rows(results) == [
        "| O(1) watches per namespace, TrainJobs | WATCH pods: 1, WATCH trainjobs: 1 at N=300 | met |",
        "| O(1) API reads per job per hour, TrainJobs | 0.0 at N=300 | met |",
    ]


def test_no_trainjob_results_no_section():
    assert section({"p2": {}}, "x.png") == [] and columns({}) == [] and target_rows({}) == []
