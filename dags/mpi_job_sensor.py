"""Example DAG ``mpi_job_sensor``: submit an MPIJob without waiting, then wait for it with ``MPIJobSensor``."""

from __future__ import annotations

from datetime import UTC, datetime

from airflow.providers.common.compat.sdk import DAG, Param, TriggerRule, task

from airflow_mpi.sensors import MPIJobSensor

DOC = """
### Submit, then sense

Some MPIJobs are started by another system (a CI pipeline, a notebook, `kubectl apply`) and
Airflow only has to wait for them. This DAG shows that pattern end to end:

1. `submit` builds the pi MPIJob with the provider's model (`MPIJobSpec`, `build_manifest`:
   validated before anything reaches the cluster) and creates it with `MPIJobHook`, **without
   waiting**; it returns the job's name and namespace.
2. `wait` is an `MPIJobSensor` in **deferrable** mode: the triggerer watches the job, no worker
   slot is held; a `Failed` job fails the sensor at once. It attaches the launcher's log.
3. `cleanup` deletes the MPIJob whatever happened (trigger rule `all_done`).

Connection `kubernetes_default`; requires the mpi-operator (`kubeflow.org/v2beta1`).
"""

with DAG(
    dag_id="mpi_job_sensor",
    description="Submit an MPIJob without waiting and wait for it with a deferrable MPIJobSensor",
    doc_md=DOC,
    schedule=None,
    start_date=datetime(2025, 1, 1, tzinfo=UTC),
    catchup=False,
    render_template_as_native_obj=True,
    tags=["example", "mpi", "sensor"],
    params={
        "workers": Param(
            2,
            type="integer",
            minimum=1,
            maximum=16,
            title="Workers",
            description="Worker pods of the submitted MPIJob.",
        ),
        "image": Param(
            "mpioperator/mpi-pi:openmpi",
            type="string",
            minLength=1,
            title="Image",
            description="Image with /home/mpiuser/pi (Open MPI build).",
        ),
    },
) as dag:

    @task
    def submit(params=None, ti=None) -> dict:
        """Create the MPIJob and return at once (no waiting)."""
        from airflow_mpi import deployment_identity
        from airflow_mpi.hooks import MPIJobHook
        from airflow_mpi.jobspec import (
            Defaults,
            MPIJobSpec,
            ReplicaSpec,
            RunPolicy,
            build_manifest,
            mpirun_command,
        )
        from airflow_mpi.jobspec.naming import job_name

        hook = MPIJobHook()
        namespace = hook.resolve_namespace(None)
        workers = int(params["workers"])
        # unique to this task instance of this Airflow deployment (another deployment may share the namespace)
        name = job_name(
            ti.dag_id,
            ti.task_id,
            ti.run_id,
            ti.map_index,
            max_workers=workers,
            deployment=deployment_identity.for_task(),
        )
        spec = MPIJobSpec(
            name=name,
            namespace=namespace,
            launcher=ReplicaSpec(
                replicas=1,
                image=params["image"],
                command=mpirun_command("/home/mpiuser/pi", workers=workers, slots_per_worker=1),
            ),
            worker=ReplicaSpec(replicas=workers, image=params["image"]),
            run_policy=RunPolicy(clean_pod_policy="Running", backoff_limit=0),
            labels={"app.kubernetes.io/created-by": "mpi_job_sensor"},
            # the operator's defaults: the image conventions' sshd and user, the launcher after the workers' sshd
            defaults=Defaults(),
        )
        hook.create_mpijob(build_manifest(spec), namespace)
        print(f"submitted MPIJob {namespace}/{name}; not waiting for it here")
        return {"name": name, "namespace": namespace}

    job = submit()

    wait = MPIJobSensor(
        task_id="wait",
        job_name="{{ ti.xcom_pull(task_ids='submit')['name'] }}",
        namespace="{{ ti.xcom_pull(task_ids='submit')['namespace'] }}",
        target_condition="Succeeded",
        deferrable=True,
        attach_logs=True,
        poke_interval=5,
        timeout=3600,
    )

    @task(trigger_rule=TriggerRule.ALL_DONE)
    def cleanup(job: dict) -> None:
        """Delete the MPIJob (its pods go with it), whether the wait succeeded or not."""
        from airflow_mpi.hooks import MPIJobHook

        deleted = MPIJobHook().delete_mpijob(job["name"], job["namespace"])
        print(f"MPIJob {job['namespace']}/{job['name']}: {'deleted' if deleted else 'already gone'}")

    job >> wait >> cleanup(job)
