"""The launcher's wait for its workers' names (issue 32, item 8): as long as the task's ``schedule_timeout`` lets a
worker start, rendered from the task's own (templated) setting; unbounded when the task sets none."""

from __future__ import annotations

import pytest

from airflow_mpi.jobspec.spec import WORKERS_DNS_WAIT, workers_dns_wait_script
from tests.unit.operators.test_mpijob_operator import context, make


def waiter(op) -> dict:
    (init,) = op.build_manifest(context())["spec"]["mpiReplicaSpecs"]["Launcher"]["template"]["spec"][
        "initContainers"
    ]
    assert init["name"] == WORKERS_DNS_WAIT
    return init


@pytest.mark.parametrize(("schedule_timeout", "deadline"), [(None, None), ("{{ 1800 }}", 1860), (300.0, 360)])
def test_the_init_containers_deadline_is_the_tasks_schedule_timeout_plus_the_sshds_minute(
    schedule_timeout, deadline
):
    op = make(schedule_timeout=schedule_timeout)
    if isinstance(schedule_timeout, str):
        op.schedule_timeout = "1800"  # as Jinja renders it
    script = waiter(op)["command"][2]
    assert script == workers_dns_wait_script(deadline)
    assert (f"deadline=$(( $(date +%s) + {deadline} ))" in script) if deadline else ("deadline" not in script)
