"""What a build shows: a line when a component starts and one when it ends; its whole output in a log file.

A cold Go build prints hundreds of ``go: downloading ...`` lines for many minutes and none of them says what is being
built or how far along it is. The builders (the Go binaries and add-ons of localcluster/build.py, the node image of
localcluster/node_image.py) run their commands through :func:`run`: the output goes to
``$AIRFLOW_MPI_CACHE/logs/build-<what>.log`` (``tail -f`` it to follow a build), and a failure prints the log's last
lines and its path, then raises :class:`BuildFailed`. The start and end lines are the builders' own (the end line is
the build ledger's, localcluster/build_ledger.py).
"""

from __future__ import annotations

import collections
import shlex
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import NoReturn

TAIL_LINES = 40


class BuildFailed(RuntimeError):
    """A build command failed; the message names the log that holds its whole output."""


def log_path(cache: Path, what: str) -> Path:
    """The log of the latest build of ``what`` (each build of it starts the file anew)."""
    return cache / "logs" / f"build-{what}.log"


def begin(log: Path, title: str) -> Path:
    log.parent.mkdir(parents=True, exist_ok=True)
    log.write_text(f"# {title} ({time.strftime('%Y-%m-%d %H:%M:%S')})\n")
    return log


def run(
    cmd: Sequence[str],
    log: Path,
    say: Callable[[str], None],
    *,
    what: str | None = None,
    cwd: Path | None = None,
    env: Mapping[str, str] | None = None,
    timeout: float | None = None,
) -> None:
    """Run ``cmd`` (``what``: its name in messages) with its stdout and stderr appended to ``log``; on failure
    :func:`fail`."""
    what = what or " ".join([Path(cmd[0]).name, *cmd[1:2]])
    with log.open("a") as out:
        out.write(f"\n$ {shlex.join(cmd)}" + (f"  # in {cwd}" if cwd else "") + "\n")
        out.flush()
        try:
            rc = subprocess.run(
                cmd,
                cwd=cwd,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                timeout=timeout,
                check=False,
            ).returncode
        except subprocess.TimeoutExpired:
            out.write(f"\n# timed out after {timeout:.0f} s\n")
            rc = None
    if rc != 0:
        fail(log, f"{what} " + ("timed out" if rc is None else f"failed (exit {rc})"), say)


def fail(log: Path, what: str, say: Callable[[str], None]) -> NoReturn:
    """Print the log's last lines and its path (whatever the builder's verbosity), then raise."""
    lines = tail(log)
    say(f"{what}; the last {len(lines)} lines of its output:")
    for line in lines:
        print(f"    {line}", file=sys.stderr)
    say(f"full output: {log}")
    raise BuildFailed(f"{what}; full output: {log}")


def tail(path: Path, n: int = TAIL_LINES) -> list[str]:
    with path.open(errors="replace") as lines:
        return [line.rstrip("\n") for line in collections.deque(lines, n)]
