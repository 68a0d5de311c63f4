"""docs/parameters.md (what users read of the field table) says what the rows say: every parameter with its type,
default, templating, API versions, manifest path and line. Regenerate with python -m airflow_mpi.signature_writer."""

from __future__ import annotations

import dataclasses

import pytest

from airflow_mpi import parameter_reference, signature_writer
from airflow_mpi.jobspec.fields import FIELDS, HOROVOD_FIELDS, PARAMETERS, REPLICA
from airflow_mpi.operators.horovod import HorovodJobOperator
from airflow_mpi.operators.mpijob import MPIJobOperator
from airflow_mpi.operators.task_params import TASK_FIELDS


def _row_line(name: str) -> str:
    text = parameter_reference.REFERENCE.read_text()
    return next(line for line in text.splitlines() if line.startswith(f"| `{name}` |"))


def test_checked_in_reference_is_the_field_tables():
    assert parameter_reference.REFERENCE.read_text() == parameter_reference.render_reference(), (
        "docs/parameters.md is stale: run python -m airflow_mpi.signature_writer"
    )


def test_the_signature_writer_writes_and_checks_it():
    assert parameter_reference.REFERENCE in signature_writer.rendered()


def test_a_row_change_makes_the_reference_stale(monkeypatch):
    row = PARAMETERS["image"]
    monkeypatch.setitem(PARAMETERS, "image", dataclasses.replace(row, doc="another line"))
    assert parameter_reference.render_reference() != parameter_reference.REFERENCE.read_text()
    assert signature_writer.main(["--check"]) == 1


@pytest.mark.parametrize("operator", [MPIJobOperator, HorovodJobOperator], ids=lambda o: o.__name__)
def test_every_parameter_of_the_operators_has_its_row(operator):
    for name in operator.parameters:
        assert _row_line(name)


def test_every_parameter_and_replica_field_carries_one_line_for_users():
    for row in (*FIELDS, *TASK_FIELDS, *HOROVOD_FIELDS):
        if row.param or row.owner == REPLICA:
            assert row.doc.strip() and "\n" not in row.doc, f"{row.owner}.{row.name} has no one-line doc"


def test_the_filled_in_defaults_name_parameters():
    assert set(parameter_reference.filled_defaults()) <= set(MPIJobOperator.parameters)


@pytest.mark.parametrize(
    ("name", "cells"),
    [
        (
            "workers",
            ["`int \\| str \\| None`", "`1` (filled in)", "yes", "`spec.mpiReplicaSpecs.Worker.replicas`"],
        ),
        ("image", ["`spec.mpiReplicaSpecs.*.template.spec.containers[0].image`"]),
        ("clean_pod_policy", ["`spec.runPolicy.cleanPodPolicy` (v1: `spec.cleanPodPolicy`)"]),
        ("queue_name", ['`metadata.labels["kueue.x-k8s.io/queue-name"]`', " v2beta1, TrainJob |"]),
        ("main_container", [" v1 |"]),
        ("deferrable", ["`[operators] default_deferrable`"]),
        ("on_finish_action", ['`"delete_succeeded"`', "cncf.kubernetes' `keep_pod`"]),
        ("launcher_resources", ["`spec.mpiReplicaSpecs.Launcher.template.spec.containers[0].resources`"]),
        ("kubernetes_conn_id", ["[guide.md](guide.md)"]),
    ],
)
def test_a_row_says_what_its_field_is(name, cells):
    line = _row_line(name)
    for cell in cells:
        assert cell in line, f"{cell!r} not in {line!r}"
