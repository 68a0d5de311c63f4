"""The Airflow UI in a real browser: Debian's Chromium, headless, driven by Playwright for Python.

Log in, open mpi_pi, change Workers in the trigger form, submit; the run succeeds with that conf. The task's log
shows the settings and the manifest as one folded group (unfolded by a click) and the ranks' output unfolded; the
task's extra links lead to the MPIJob and its launcher pod (conftest.LINK_TEMPLATES). Screenshots of the finished
run and of the task's log are saved under .artifacts/e2e/.
"""

from __future__ import annotations

import re
from urllib.parse import quote

import pytest

from airflowstack import wait_until
from airflowstack.browser import chromium, logged_in_page
from airflowstack.kube import pi_output

from .conftest import LINK_TEMPLATES, NAMESPACE

DAG = "mpi_pi"


@pytest.fixture(scope="module")
def browser():
    try:
        with chromium() as b:
            yield b
    except FileNotFoundError as missing:
        pytest.fail(str(missing), pytrace=False)


@pytest.fixture
def page(browser, airflow_stack):
    with logged_in_page(
        browser, airflow_stack.base_url, airflow_stack.username, airflow_stack.password
    ) as page:
        yield page


def _new_run(client, before: set[str], timeout: float = 60) -> dict:
    def probe():
        new = [r for r in client.dag_runs(DAG) if r["dag_run_id"] not in before]
        return new[0] if new else None

    return wait_until(probe, timeout=timeout, interval=0.3, what=f"the {DAG} run submitted through the form")


def test_trigger_form_run_succeeds(page, client, cluster, artifacts_dir):
    client.wait_for_dags([DAG], timeout=180)
    cluster.serve_launcher_logs(NAMESPACE, pi_output(3))
    before = {r["dag_run_id"] for r in client.dag_runs(DAG)}

    page.goto(f"/dags/{DAG}")
    page.get_by_test_id("trigger-dag-button").click()
    form = page.get_by_role("dialog")
    form.get_by_text("Run Parameters").first.wait_for()
    # the form is built from the Params: their titles and descriptions
    for text in (
        "Workers",
        "Slots per worker",
        "MPI implementation",
        "Deferrable",
        "Worker pods (the MPIJob's Worker replicas).",
        "Selects the mpirun flavour",
    ):
        form.get_by_text(text).first.wait_for()
    workers = form.locator("input[name=element_workers]")
    assert workers.input_value() == "2"
    workers.fill("3")
    workers.press("Tab")
    assert workers.input_value() == "3"
    page.get_by_test_id("trigger-dag-submit").click()

    run = _new_run(client, before)
    assert run["conf"]["workers"] == 3
    assert run["triggered_by"] == "ui"
    finished = client.wait_run(DAG, run["dag_run_id"], timeout=240)
    assert finished["state"] == "success", client.task_log(DAG, run["dag_run_id"], "pi")
    assert "replicas: 3" in client.task_log(DAG, run["dag_run_id"], "pi")

    run_path = f"/dags/{DAG}/runs/{quote(run['dag_run_id'], safe='')}"
    page.goto(run_path)
    page.get_by_text("Success").first.wait_for()
    page.get_by_role("link", name="report").first.wait_for()
    page.screenshot(path=str(artifacts_dir / "ui-mpi_pi-run.png"), full_page=True)

    page.goto(f"{run_path}/tasks/pi")
    page.get_by_text("pi is approximately").first.wait_for()  # the ranks' output: not folded
    page.screenshot(path=str(artifacts_dir / "ui-mpi_pi-pi-log.png"), full_page=True)
    job = client.xcom(DAG, run["dag_run_id"], "pi")
    _settings_are_folded_until_clicked(page, job["name"])
    page.goto(f"{run_path}/tasks/pi/details")  # where the UI lists a task's extra links
    _links_lead_to_the_job_and_its_launcher(page, client, run["dag_run_id"], job)


def _settings_are_folded_until_clicked(page, name: str) -> None:
    header = page.get_by_test_id(re.compile(r"^group-header-")).filter(
        has_text=f"MPIJob {NAMESPACE}/{name}: settings and manifest"
    )
    header.wait_for()
    assert header.inner_text().startswith("\u25b6"), header.inner_text()  # the UI's folded mark
    assert page.get_by_text("MPIJob manifest:").count() == 0
    page.get_by_text(f"========== MPIJob {NAMESPACE}/{name}: ").first.wait_for()  # the verdict: not folded
    header.click()
    page.get_by_text("MPIJob manifest:").first.wait_for()
    assert header.inner_text().startswith("\u25bc"), header.inner_text()


def _links_lead_to_the_job_and_its_launcher(page, client, run_id: str, job: dict) -> None:
    """Airflow 3 asks the links when the try ends and shows the URLs they gave; a link without a template is
    empty, and the UI shows no button for it."""
    expected = {
        "MPIJob": LINK_TEMPLATES["airflow_mpi_job_url"].format(namespace=NAMESPACE, name=job["name"]),
        "MPIJob launcher pod": LINK_TEMPLATES["airflow_mpi_pod_url"].format(
            namespace=NAMESPACE, pod=job["launcher_pods"][-1]
        ),
    }
    links = client.get(f"/api/v2/dags/{DAG}/dagRuns/{quote(run_id, safe='')}/taskInstances/pi/links")
    assert {name: url for name, url in links["extra_links"].items() if url} == expected, links
    for name, url in expected.items():
        link = page.get_by_role("link", name=name, exact=True)
        link.wait_for()
        assert link.get_attribute("href") == url
    assert page.get_by_role("link", name="MPIJob logs", exact=True).count() == 0  # no template: no link
