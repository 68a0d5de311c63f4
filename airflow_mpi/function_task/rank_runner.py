"""The program every MPI rank of an ``@task.mpi`` / ``@task.horovod`` job runs (standard library only).

It travels with the call in a Kubernetes Secret made with the job and mounted into its pods
(function_task/function_call.py): ``python3 <mount>/runner.py <mount>/call`` is what mpirun starts on every rank, so
nothing has to exist in the image but Python 3, and neither the function nor its arguments are in the MPIJob or
pod specs. It decodes the call (the function's source, its pickled arguments, this try's nonce), runs the
function and, on rank 0 only, prints the return value as marker lines the operator reads back from the
launcher's log and keeps out of the task log (parsed by wait/rank_result_capture.py; formats shared by
name). Every marker line carries an HMAC of its words keyed by the nonce, never the nonce itself: the launcher's log
is readable by anyone with ``pods/log get``, and a nonce printed there would let them forge a result. The function
is never handed the nonce either: what the program itself prints, or a line of an earlier run, never passes for the
result. A value over the caps is not printed at all (``TOO_LARGE`` says how large it is).

An exception ends the rank with its traceback on stderr and a non-zero exit code; when mpi4py initialised MPI
it aborts the whole job (``MPI_Abort``), so the other ranks do not hang in a collective waiting for it.
"""

import base64
import hashlib
import hmac
import json
import linecache
import os
import pickle
import sys
import traceback
import zlib

MARKER = (
    "::airflow-mpi-result::"  # ``MARKER <line_mac(nonce, words)> <words...>``, the kind first among the words
)
STARTED = "started"  # rank 0 began (Python runs in the image)
VALUE = "value"  # <index> <count> <crc32> <chunk>: rank 0's return value, JSON, zlib, base64, in chunks
UNRETURNABLE = "unreturnable"  # <base64 of a message>: rank 0's return value is no JSON (cannot be an XCom)
TOO_LARGE = (
    "toolarge"  # <characters encoded> <bytes of JSON>: rank 0's return value is over a cap, not printed
)
CHUNK = 1000  # characters of a chunk: one write of a short line, which mpirun forwards whole
# Caps of a return value: as rank 0 prints it (base64 of zlib), and as JSON. An XCom lives in Airflow's database;
# larger results belong in storage the ranks write to, returned by reference. The reader holds no more than this.
MAX_ENCODED_CHARS = 1024 * 1024
MAX_JSON_BYTES = 8 * 1024 * 1024
# Rank of this process, as the MPI implementations (and horovodrun's Gloo mode) put it in the environment.
RANK_VARIABLES = ("OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK", "HOROVOD_RANK")


def rank():
    for variable in RANK_VARIABLES:
        value = os.environ.get(variable, "")
        if value.isdigit():
            return int(value)
    return 0  # not started by an MPI launcher: a single process


def line_mac(nonce, words):
    """The HMAC-SHA256 (hex) of a marker line's words, keyed by the nonce: only who holds the nonce makes one."""
    return hmac.new(nonce.encode(), " ".join(words).encode(), hashlib.sha256).hexdigest()


def say(nonce, *words):
    """One marker line in one write (lines of different ranks never interleave inside it)."""
    sys.stdout.flush()
    os.write(1, (" ".join((MARKER, line_mac(nonce, words)) + words) + "\n").encode())


def report(nonce, value):
    try:
        text = json.dumps(value).encode()
    except (TypeError, ValueError) as err:
        message = "%s: %s" % (type(value).__name__, err)
        say(nonce, UNRETURNABLE, base64.b64encode(message.encode()).decode())
        return
    data = base64.b64encode(zlib.compress(text)).decode()
    if len(data) > MAX_ENCODED_CHARS or len(text) > MAX_JSON_BYTES:
        say(nonce, TOO_LARGE, str(len(data)), str(len(text)))
        return
    chunks = [data[i : i + CHUNK] for i in range(0, len(data), CHUNK)] or [""]
    crc = str(zlib.crc32(data.encode()))
    for index, chunk in enumerate(chunks):
        say(nonce, VALUE, str(index), str(len(chunks)), crc, chunk)


def abort(code):
    """End this rank now; with MPI initialised by mpi4py, end the job (the others may wait in a collective)."""
    sys.stdout.flush()
    sys.stderr.flush()
    mpi = sys.modules.get("mpi4py.MPI")
    if mpi is not None and mpi.Is_initialized() and not mpi.Is_finalized():
        mpi.COMM_WORLD.Abort(code)
    os._exit(code)


def main(call_path):
    # Whole lines in one write each: Hydra's -prepend-rank tags every chunk it reads, so an unbuffered print
    # (text, then "\n") would end its line with another rank tag. Flushed at every line, as -u would.
    sys.stdout.reconfigure(line_buffering=True)
    sys.stderr.reconfigure(line_buffering=True)
    with open(call_path, "rb") as encoded:
        call = json.loads(zlib.decompress(base64.b64decode(encoded.read())))
    name, source, nonce = call.pop("name"), call.pop("source"), call.pop("nonce")
    del sys.argv[1:]  # the function sees no path to the call (nor its nonce)
    filename = "<@task function %s>" % name
    linecache.cache[filename] = (
        len(source),
        None,
        source.splitlines(True),
        filename,
    )  # source lines in tracebacks
    root = rank() == 0
    if root:
        say(nonce, STARTED)
    namespace = {"__name__": "__airflow_mpi_function__"}
    try:
        exec(compile(source, filename, "exec"), namespace)
        args, kwargs = pickle.loads(base64.b64decode(call.pop("arguments")))
        value = namespace[name](*args, **kwargs)
    except BaseException as err:  # noqa: BLE001 - every failure ends the rank, with its traceback
        traceback.print_exc()
        code = err.code if isinstance(err, SystemExit) and isinstance(err.code, int) and err.code else 1
        abort(code)
    if root:
        report(nonce, value)
    sys.stdout.flush()


if __name__ == "__main__":
    main(sys.argv[1])
