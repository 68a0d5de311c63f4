"""mpirun's own report of a dead rank, from the launcher's last lines, as each MPI prints it."""

from hypothesis import given
from hypothesis import strategies as st

from airflow_mpi.wait.mpirun_report import MAX_RANKS, rank_ends

RULE = "-" * 74
BOX = "=" * 83


def test_open_mpi_4_a_rank_killed_by_a_signal():
    tail = [
        "rank 0 line 41",
        RULE,
        "mpirun noticed that process rank 1 with PID 0 on node pi-worker-1 exited on signal 9 (Killed).",
        RULE,
    ]
    assert rank_ends(tail) == ["rank 1 on pi-worker-1: signal 9 (SIGKILL), as mpirun reports it"]


def test_open_mpi_5_wrapped_help_text():
    tail = [
        RULE,
        "prterun noticed that process rank 3 with PID 118 on node pi-worker-1 exited on",
        "signal 15 (Terminated).",
        RULE,
    ]
    assert rank_ends(tail) == ["rank 3 on pi-worker-1: signal 15 (SIGTERM), as mpirun reports it"]


def test_open_mpi_a_rank_exiting_non_zero():
    tail = [
        RULE,
        "Primary job  terminated normally, but 1 process returned",
        "a non-zero exit code. Per user-direction, the job has been aborted.",
        RULE,
        RULE,
        "mpirun detected that one or more processes exited with non-zero status, thus causing",
        "the job to be terminated. The first process to do so was:",
        "",
        "  Process name: [[58427,1],2]",
        "  Exit code:    3",
        RULE,
    ]
    assert rank_ends(tail) == ["rank 2: exit code 3, as mpirun reports it"]


def test_hydra_mpich_4_3_a_rank_killed_and_a_rank_exiting():
    """MPICH 4.3.2's box on the real node for a SIGKILLed rank (hydra gives the signal's number as EXIT CODE)."""
    host = "pi-worker-1.pi.ns.svc"
    killed = [
        "",
        BOX,
        "=   BAD TERMINATION OF ONE OF YOUR APPLICATION PROCESSES",
        f"=   PID 17 RUNNING AT {host}",
        "=   EXIT CODE: 9",
        "=   CLEANING UP REMAINING PROCESSES",
        "=   YOU CAN IGNORE THE BELOW CLEANUP MESSAGES",
        BOX,
        "[proxy:0@pi-worker-0] HYD_pmcd_pmip_control_cmd_cb (pmip_cb.c:487): assert (!closed) failed",
    ]
    exited = [
        BOX,
        "=   BAD TERMINATION OF ONE OF YOUR APPLICATION PROCESSES",
        "=   RANK 0 PID 8 RUNNING AT pi-worker-0",
        "=   EXIT CODE: 70",
        BOX,
    ]
    assert rank_ends(killed + exited) == [
        f"a rank on {host}: EXIT CODE 9 (the number of SIGKILL, or the program's exit status), as mpirun reports it",
        "rank 0 on pi-worker-0: EXIT CODE 70, as mpirun reports it",
    ]


def test_hydra_killed_by_signal():
    tail = [
        BOX,
        "=   BAD TERMINATION OF ONE OF YOUR APPLICATION PROCESSES",
        "=   RANK 1 PID 77 RUNNING AT pi-worker-0",
        "=   KILLED BY SIGNAL: 11 (Segmentation fault)",
        BOX,
    ]
    assert rank_ends(tail) == ["rank 1 on pi-worker-0: signal 11 (SIGSEGV), as mpirun reports it"]


def test_a_program_that_prints_nothing_of_the_kind_names_no_rank():
    assert (
        rank_ends(["rank 1 exited on signal 9", "mpirun noticed that process rank 1 exited on signal 9"])
        == []
    )


@given(st.lists(st.text(max_size=200), max_size=30))
def test_any_tail_gives_at_most_a_few_bounded_lines(tail):
    ends = rank_ends(tail)
    assert len(ends) <= MAX_RANKS and all(
        line.endswith("as mpirun reports it") and len(line) < 250 for line in ends
    )
