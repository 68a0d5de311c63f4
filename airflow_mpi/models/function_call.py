"""A Python function as the MPI program: checks, serialisation and the ranks' command line (no I/O).

The function travels as source (as cncf.kubernetes' ``@task.kubernetes`` does: it must be self-contained,
importing what it uses inside its body), its arguments (upstream XComs included) as a pickle. Both go inline
into the launcher's command, and mpirun passes that argv on to every rank on the workers: no registry, no
shared volume, no ConfigMap. Everything that can be found out before submission is checked here, naming the
argument and the reason; what only the ranks can tell (a missing Python, a return value that is no JSON) comes
back in rank 0's marker lines (models/rank_result.py).
"""

from __future__ import annotations

import ast
import base64
import builtins
import dis
import inspect
import io
import json
import pickle
import types
import zlib
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

from airflow_mpi.models import rank_runner
from airflow_mpi.models.errors import ErrorList

PICKLE_PROTOCOL = 4  # readable by any Python 3 of an image (3.4+), whatever the worker's version
# One argv word stays well under Linux's 128 KiB per argument; the whole call under what the exec of the
# launcher's mpirun and the ranks accepts (ARG_MAX, about 2 MiB with the environment) and an object in etcd.
ARG_CHUNK = 100_000
MAX_CALL_BYTES = 512 * 1024
BOOTSTRAP = "import base64,sys;exec(base64.b64decode(sys.argv[1]))"
ENCODED_FROM, CALL_FROM = 3, 4  # rank_command()'s words from these on: the runner and the call, base64
# Module names that exist only where the DAG is parsed: the DAG file itself (Airflow imports it under an
# "unusual_prefix_..." name) or a script run directly. Objects of their classes cannot be unpickled on a rank.
DAG_LOCAL_MODULE_PREFIXES = ("unusual_prefix_", "__main__")


def check_function(func: Callable, decorator: str) -> list[str]:
    """Reasons ``func`` cannot run on the ranks from its source alone (empty: it can)."""
    reasons = []
    if inspect.iscoroutinefunction(func) or inspect.isasyncgenfunction(func):
        reasons.append("is a coroutine function: the ranks call it synchronously")
    if getattr(func, "__name__", "<lambda>") == "<lambda>":
        reasons.append(f"is a lambda: {decorator} needs a function defined with def")
    code = getattr(func, "__code__", None)
    if code is None:
        return [*reasons, "is not a Python function"]
    if code.co_freevars:
        reasons.append(
            f"uses variables of an enclosing function ({', '.join(code.co_freevars)}): pass them as arguments"
        )
    dag_globals = sorted(_global_names(code) & set(func.__globals__) - set(vars(builtins)) - {func.__name__})
    if dag_globals:
        reasons.append(
            f"uses names of its module ({', '.join(dag_globals)}), which do not exist on the ranks: "
            "import or define them inside the function"
        )
    return reasons


def _global_names(code: types.CodeType) -> set[str]:
    """Global names the code (and the functions it defines) reads."""
    names = {i.argval for i in dis.get_instructions(code) if i.opname in ("LOAD_GLOBAL", "LOAD_NAME")}
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            names |= _global_names(const)
    return names


def check_source(source: str, name: str) -> str | None:
    """Why ``source`` (the function without its decorator) does not define ``name``, or None."""
    try:
        tree = ast.parse(source)
    except SyntaxError as err:
        return f"its source does not compile without its decorator: {err}"
    if not any(isinstance(n, ast.FunctionDef) and n.name == name for n in tree.body):
        return f"its source does not define a function {name!r} at its top level"
    return None


class _ModuleRecorder(pickle.Pickler):
    """A pickler noting the module of every class and function pickled by reference."""

    def __init__(self, file: io.BytesIO) -> None:
        super().__init__(file, protocol=PICKLE_PROTOCOL)
        self.modules: set[str] = set()

    def reducer_override(self, obj: Any) -> Any:
        owner = obj if isinstance(obj, (type, types.FunctionType, types.BuiltinFunctionType)) else type(obj)
        self.modules.add(getattr(owner, "__module__", None) or "")
        return NotImplemented  # pickle it as usual


def pickle_arguments(errors: ErrorList, args: Sequence[Any], kwargs: Mapping[str, Any]) -> bytes:
    """``(args, kwargs)`` pickled; an argument that cannot be, or that needs the DAG file to load, is an error."""
    named = [(f"op_args[{i}]", v) for i, v in enumerate(args)] + [(f"op_kwargs[{k!r}]", v) for k, v in kwargs.items()]
    for field, value in named:
        recorder = _ModuleRecorder(io.BytesIO())
        try:
            recorder.dump(value)
        except Exception as err:  # noqa: BLE001 - whatever pickle raises, the argument cannot travel
            errors.add(field, value, f"cannot be pickled to reach the ranks: {type(err).__name__}: {err}")
            continue
        local = sorted(m for m in recorder.modules if m.startswith(DAG_LOCAL_MODULE_PREFIXES))
        if local:
            errors.add(field, value, f"needs classes or functions of the DAG file ({', '.join(local)}), which the ranks "
                       "cannot import: pass plain data (JSON-like values, or types of modules in the image)")  # fmt: skip
    if errors:
        return b""
    return pickle.dumps((tuple(args), dict(kwargs)), protocol=PICKLE_PROTOCOL)


def encode_call(source: str, name: str, arguments: bytes) -> str:
    """The call as one base64 text: JSON {name, source, arguments (pickle, base64)}, compressed."""
    call = {"name": name, "source": source, "arguments": base64.b64encode(arguments).decode()}
    return base64.b64encode(zlib.compress(json.dumps(call).encode(), 9)).decode()


def runner_source() -> str:
    """The ranks' program (models/rank_runner.py), as shipped in the command."""
    return inspect.getsource(rank_runner)


def rank_command(source: str, name: str, arguments: bytes, *, python: str = "python3") -> list[str]:
    """``python -c BOOTSTRAP <runner> <call...>``: what mpirun/horovodrun starts on every rank.

    Raises MPIJobValidationError when the call is too large to travel in a command line.
    """
    call = encode_call(source, name, arguments)
    if len(call) > MAX_CALL_BYTES:
        errors = ErrorList()
        errors.add("op_args/op_kwargs", f"<{len(call)} bytes>", f"the function and its arguments take {len(call)} "
                   f"bytes encoded, over the {MAX_CALL_BYTES} a command line carries: pass large data by reference "
                   "(a path or URL the ranks read)")  # fmt: skip
        errors.raise_if_any()
    runner = base64.b64encode(runner_source().encode()).decode()
    return [python, "-c", BOOTSTRAP, runner, *_chunks(call, ARG_CHUNK)]


def _chunks(text: str, size: int) -> Iterator[str]:
    for start in range(0, len(text), size):
        yield text[start : start + size]


def decode_call(argv: Sequence[str]) -> dict[str, Any]:
    """The call a rank command carries (``rank_command(...)[CALL_FROM:]``): for tests and log summaries."""
    call = json.loads(zlib.decompress(base64.b64decode("".join(argv))))
    call["arguments"] = pickle.loads(base64.b64decode(call["arguments"]))
    return call
