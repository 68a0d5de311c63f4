"""Horovod for real: horovodrun on the real node trains a TensorFlow model on workers x slots real ranks.

images/mpi's ``horovod`` image (Horovod 0.28.1 with Open MPI and Gloo, TensorFlow 2.12 for CPUs). The static mode
runs horovodrun over the mpi-operator's hostfile (horovodrun starts the ranks with mpirun); the elastic mode over
its host discovery script (Gloo). ``@task.horovod`` runs a function with a real Horovod allreduce on every rank.
"""

from __future__ import annotations

import re

import pytest

from airflow_mpi.function_task.rank_runner import MARKER
from airflow_mpi.operators import HorovodJobOperator
from localcluster.mpi_images import HOROVOD_IMAGE
from localcluster.node_container import await_image
from tests.integration.test_operator import record  # noqa: F401
from tests.integration.test_real_mpi import launcher_pods, pod_log, real_job
from tests.integration.test_task_mpi import decorated, run

# every line of a rank comes tagged with it: "[<rank>]<stdout>:" (Gloo), "[1,<rank>]<stdout>:" (mpirun)
TAG = r"^\[(?:1,)?(\d+)\]<stdout>:"
# Horovod's background thread logs "[<time>: I .../operations.cc:689] [<rank>]: Horovod initialized" to the same
# stdout as the script's print, in pieces and unsynchronised with it. The script's line is one write (print with
# flush), so it stays whole, but Horovod's pieces may come before it on its line ("...Horovod initializedhorovod rank
# 0 of 2 (local rank 0)", seen) or after it. So the rank text is searched for anywhere after the tag.
RANK_LINE = re.compile(TAG + r".*?horovod rank (\d+) of (\d+) \(local rank (\d+)\)")
EPOCH_LINE = re.compile(TAG + r"epoch (\d+): loss \S+ accuracy \S+ over (\d+) ranks$")


@pytest.fixture(scope="module")
def horovod(real_node) -> dict:
    """images/mpi's horovod image in the real node's containerd (loaded in the session's background: conftest's
    BACKGROUND_IMAGES), and the mpi-operator's conventions for it."""
    await_image(HOROVOD_IMAGE)
    return {**real_job("openmpi"), "image": HOROVOD_IMAGE}


@pytest.mark.parametrize(
    ("workers", "slots", "elastic", "deferrable"),
    [(2, 2, False, False), (2, 1, True, True)],
    ids=["static", "elastic"],
)
def test_horovodrun_trains_on_every_rank_and_streams_the_launcher_log_once(
    real_k8s, real_namespace, real_conn, record, horovod, workers, slots, elastic, deferrable
):
    op = HorovodJobOperator(
        task_id=f"train_{'elastic' if elastic else 'static'}", namespace=real_namespace,
        program=["python", "/home/mpiuser/horovod_train.py", "--epochs", "2", "--samples", "512"],
        workers=workers, slots_per_worker=slots, min_np=1 if elastic else None, deferrable=deferrable,
        on_finish_action="keep", **horovod,
    )  # fmt: skip
    xcom = run(op, deferrable)
    assert xcom["condition"] == "Succeeded" and xcom["launcher_attempts"] == 1

    n = workers * slots
    ranks = [m for m in map(RANK_LINE.match, record.lines) if m]
    said = [ln for ln in record.lines if "horovod rank" in ln or "Horovod initialized" in ln]
    assert sorted(int(m[2]) for m in ranks) == list(range(n)), (
        said
    )  # every rank once, as horovodrun tagged it
    assert all(m[1] == m[2] and int(m[3]) == n and int(m[4]) < slots for m in ranks)
    epochs = [m for m in map(EPOCH_LINE.match, record.lines) if m]
    assert [m.groups() for m in epochs] == [("0", "1", str(n)), ("0", "2", str(n))]  # rank 0 averaged n ranks

    (launcher,) = launcher_pods(real_k8s, real_namespace)
    real_lines = pod_log(real_k8s, real_namespace, launcher.metadata.name)
    assert [ln for ln in record.lines if ln in set(real_lines)] == real_lines


def horovod_sum(data: dict) -> dict:
    """Every rank: a Horovod allreduce of its rank over all ranks; the value returned is rank 0's."""
    import horovod.tensorflow as hvd
    import tensorflow as tf

    hvd.init()
    print(f"rank {hvd.rank()} of {hvd.size()} got {data['label']}")
    total = hvd.allreduce(tf.constant(hvd.rank()), op=hvd.Sum)
    return {
        "rank": hvd.rank(),
        "size": hvd.size(),
        "sum_of_ranks": int(total.numpy()),
        "label": data["label"],
    }


def test_task_horovod_returns_rank_zeros_allreduce(real_namespace, real_conn, record, horovod):
    op = decorated(horovod_sum, real_namespace, "openmpi", {"label": "from upstream"}, decorator="horovod",
                   image=horovod["image"], python="python")  # the image's Python with Horovod  # fmt: skip
    assert run(op, deferrable=False) == {"rank": 0, "size": 4, "sum_of_ranks": 6, "label": "from upstream"}

    said = sorted(int(m[1]) for m in (re.search(TAG + r"rank \1 of 4 got from upstream$", ln)
                                      for ln in record.lines) if m)  # fmt: skip
    assert said == [0, 1, 2, 3]
    assert not any(MARKER in line for line in record.lines)
