"""What one fault-injection run left behind, measured the same way for every scenario, and the results table."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from airflow_mpi.jobspec.status import job_state
from tests.e2e.conftest import mpijobs


@dataclass
class Run:
    scenario: str
    jobs: int  # MPIJobs created for the task instance
    orphans: int  # live (not finished, not being deleted) MPIJobs of a finished task instance
    lost: int  # launcher lines missing from the task log
    doubled: int  # launcher lines in the task log more than once (extra copies)
    state: str
    message: str
    spurious: int = (
        0  # tries that failed without the fault causing it, or a final state other than the expected one
    )
    unserved: int = 0  # lines on the node the API never served (a rotated file's tail): not in ``lost``


def jobs_of(custom_api, dag_id: str, run_id: str) -> list[dict]:
    return [
        j
        for j in mpijobs(custom_api, f"airflow-mpi.io/dag-id={dag_id}")
        if (j["metadata"].get("annotations") or {}).get("airflow-mpi.io/run-id") == run_id
    ]


def live_jobs(custom_api, dag_id: str, run_id: str) -> list[dict]:
    """Jobs of the run neither finished nor being deleted."""
    return [
        j
        for j in jobs_of(custom_api, dag_id, run_id)
        if not j["metadata"].get("deletionTimestamp") and not job_state(j).terminal
    ]


def measure(
    scenario: str,
    custom_api,
    dag_id: str,
    run_id: str,
    ti: dict,
    log_lines: list[str],
    expected: list[str],
    message: str,
    seen_uids: set[str],
    outcome: tuple[str, int],
) -> Run:
    """``seen_uids``: the MPIJobs observed during the run (a job the fault deleted is no longer listed);
    ``outcome``: the final state and try number the fault implies (anything else counts as a spurious failure)."""
    jobs = jobs_of(custom_api, dag_id, run_id)
    live = live_jobs(custom_api, dag_id, run_id)
    seen = Counter(line for line in log_lines if line in set(expected))
    return Run(
        scenario,
        jobs=len(seen_uids | {j["metadata"]["uid"] for j in jobs}),
        orphans=len(live),
        lost=sum(1 for line in expected if seen[line] == 0),
        doubled=sum(n - 1 for n in seen.values() if n > 1),
        state=ti["state"],
        message=message,
        spurious=int(ti["state"] != outcome[0]) + max(0, ti["try_number"] - outcome[1]),
    )


@dataclass
class Results:
    runs: list[Run] = field(default_factory=list)

    def add(self, run: Run) -> Run:
        self.runs.append(run)
        return run

    def markdown(
        self, date: str, repeat: int, source: str = "tests/faults", output: str = "faults.md"
    ) -> str:
        rows = [
            "| scenario | runs | MPIJobs per task instance | orphans | lines lost | lines doubled "
            "| spurious failures | lines the kubelet never served | final state: message |",
            "|---|---|---|---|---|---|---|---|---|",
        ]
        for scenario in dict.fromkeys(r.scenario for r in self.runs):
            runs = [r for r in self.runs if r.scenario == scenario]
            outcomes = sorted({f"{r.state}: {r.message}" for r in runs})
            counts = [
                sum(getattr(r, column) for r in runs)
                for column in ("orphans", "lost", "doubled", "spurious", "unserved")
            ]
            rows.append(
                f"| {scenario} | {len(runs)} | {sorted({r.jobs for r in runs})} | "
                + " | ".join(map(str, counts))
                + f" | {'<br>'.join(outcomes)} |"
            )
        return (
            f"# Fault injection results\n\nRun of {date}, each scenario {repeat} times "
            f"(`pytest {source}`; generated into .artifacts/faults/{output}).\n\n" + "\n".join(rows) + "\n"
        )
