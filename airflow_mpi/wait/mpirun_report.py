"""Which rank ended a failed MPI job, as mpirun itself reports it in the launcher's last lines (pure).

A rank killed by a signal (the OOM killer on cgroup v1, a SIGKILL) or exiting non-zero is a *process* of a worker
container: the worker pod lives on (sshd is its main process), so the pods' states name only the launcher, which
exits with mpirun's status. mpirun's own report names the rank and its host (the worker pod's host name):

* Open MPI 4 and 5 (mpirun / prterun): ``... noticed that process rank 1 with PID 42 on node <host> exited on signal 9
  (Killed).`` and ``... detected that one or more processes exited with non-zero status ... Process name:
  [[58427,1],1] Exit code: 3``;
* MPICH and Intel MPI (hydra): the ``BAD TERMINATION OF ONE OF YOUR APPLICATION PROCESSES`` box with ``PID 42 RUNNING
  AT <host>`` (``RANK 1`` before it in some releases) and ``EXIT CODE: 9`` (MPICH 4.3.2 on a rank SIGKILLed on the
  real node: hydra gives a killed process's signal number, so the code is quoted in hydra's words) or ``KILLED BY
  SIGNAL: 9 (Killed)``.

Help texts wrap at any word and hydra draws its box with ``=``, so the tail is read as one text, ``=`` and runs of
whitespace made single spaces.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any, cast

from airflow_mpi.wait.failure_causes import clip, exit_text, signal_name

_OPEN_MPI_SIGNAL = re.compile(
    r"noticed that process rank (?P<rank>\d+) with PID \S+ on node (?P<host>\S+) exited on signal (?P<signal>\d+)"
)
_OPEN_MPI_EXIT = re.compile(
    r"exited with non-zero status.*?Process name: \[\S*?,(?P<rank>\d+)\]+ Exit code: (?P<code>\d+)"
)
_HYDRA = re.compile(
    r"BAD TERMINATION OF ONE OF YOUR APPLICATION PROCESSES (?:RANK (?P<rank>\d+) )?PID \S+ RUNNING AT (?P<host>\S+) "
    r"(?:KILLED BY SIGNAL: (?P<signal>\d+)|EXIT (?:CODE|STATUS): (?P<code>\d+))"
)

MAX_RANKS = 4  # rank ends named; mpirun reports the first one, hydra one per failed process


def _hydra_code(code: int) -> str:
    """Hydra's EXIT CODE is a killed process's signal number or an exit status: say both readings."""
    name = signal_name(code)
    return f"EXIT CODE {code}" + (f" (the number of {name}, or the program's exit status)" if name else "")


def rank_ends(lines: Sequence[str]) -> list[str]:
    """Cause lines for the ranks mpirun reports dead in ``lines`` (the launcher's tail), in the order reported:
    ``rank 1 on <host>: signal 9 (SIGKILL), as mpirun reports it``."""
    text = " ".join(" ".join(lines).replace("=", " ").split())
    found: list[tuple[int, str]] = []
    for pattern in (_OPEN_MPI_SIGNAL, _OPEN_MPI_EXIT, _HYDRA):
        for match in pattern.finditer(text):
            parts = match.groupdict()
            signal: Any = parts.get("signal")  # each pattern has a signal or a code
            code: Any = parts.get("code")
            how = (
                exit_text(None, int(signal))
                if signal
                else _hydra_code(int(code))
                if pattern is _HYDRA
                else exit_text(int(code))
            )
            rank = f"rank {parts['rank']}" if parts.get("rank") else "a rank"
            host = f" on {parts['host'].rstrip('.,')}" if parts.get("host") else ""
            cause = cast(str, clip(f"{rank}{host}: {how}", 200))
            found.append((match.start(), cause + ", as mpirun reports it"))
    return list(dict.fromkeys(cause for _, cause in sorted(found)))[:MAX_RANKS]
