"""What a test run built and what it found already built, so that its time means something.

scripts/test points ``$AIRFLOW_MPI_BUILDS`` at a file; every builder of the test loop (the Go binaries, the Kueue
add-on, the node image, the MPI and Horovod images, the compose images, and the shell steps of scripts/bootstrap and
scripts/docker-setup) appends one line: what, ``built now`` or ``cached``, seconds. Unset, nothing is written. The
end-of-run report (scripts/test_report.py) calls a run cold, partly cold or warm from these lines.
"""

from __future__ import annotations

import contextlib
import os
import re
import time
from collections.abc import Iterator

BUILT, CACHED = "built now", "cached"
# marks what every fresh clone or code change builds anew (its virtualenvs, the provider layer of the compose image):
# the report does not count it when it calls a run cold or warm
CHECKOUT_OWN = "(the checkout's own)"


def steps_ran(progress: str) -> list[str]:
    """The RUN, COPY and ADD steps a BuildKit build ran, from its plain progress (``#N DONE`` after the step's
    header; a cached step says ``#N CACHED``). An image's id says less: the same tag built by compose and by buildx
    differs in id with every layer cached."""
    steps = dict(re.findall(r"^#(\d+) \[[^\]]* \d+/\d+\] ((?:RUN|COPY|ADD) .*)$", progress, re.M))
    return [steps[n] for n in sorted(set(re.findall(r"^#(\d+) DONE ", progress, re.M)) & steps.keys())]


def line(what: str, built: bool, seconds: float) -> str:
    """A build's end as a person reads it (the builders' terminal line): what, built now or cached, how long."""
    return f"{what}: {BUILT if built else CACHED}, {seconds:.{1 if seconds < 10 else 0}f} s"


def note(what: str, built: bool, seconds: float) -> None:
    """One build's line (appends are atomic for lines this short: parallel lanes share the file)."""
    path = os.environ.get("AIRFLOW_MPI_BUILDS")
    if path:
        with open(path, "a") as out:
            out.write(f"{what}\t{BUILT if built else CACHED}\t{seconds:.0f}\n")


class Timed:
    """``with timed(what) as build: ... build.built = True``: notes the block's time and whether it built."""

    def __init__(self, what: str) -> None:
        self.what, self.built, self.seconds = what, False, 0.0

    def line(self) -> str:
        return line(self.what, self.built, self.seconds)


@contextlib.contextmanager
def timed(what: str) -> Iterator[Timed]:
    entry, t0 = Timed(what), time.monotonic()
    yield entry
    entry.seconds = time.monotonic() - t0
    note(entry.what, entry.built, entry.seconds)
