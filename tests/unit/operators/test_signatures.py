"""The checked-in operators/signatures.py and jobspec/spec_classes.py (what mypy and IDEs read) say what
the field table says."""

from __future__ import annotations

import ast
import dataclasses
import inspect

import pytest

from airflow_mpi import signature_writer
from airflow_mpi.jobspec import fields
from airflow_mpi.operators.horovod import HorovodJobOperator
from airflow_mpi.operators.mpijob import MPIJobOperator
from airflow_mpi.operators.signatures import typed_init


@pytest.mark.parametrize(
    "path", [signature_writer.SIGNATURES, signature_writer.SPEC_CLASSES], ids=lambda p: p.name
)
def test_checked_in_module_is_the_field_tables(path):
    assert path.read_text() == signature_writer.rendered()[path], (
        f"{path.name} is stale: run python -m airflow_mpi.signature_writer"
    )


def _declared(cls_name: str) -> dict[str, ast.expr | None]:
    """The keyword-only parameters of ``cls_name.__init__`` in the checked-in module, with their defaults
    (None: required)."""
    tree = ast.parse(signature_writer.SIGNATURES.read_text())
    cls = next(n for n in ast.walk(tree) if isinstance(n, ast.ClassDef) and n.name == cls_name)
    init = next(n for n in cls.body if isinstance(n, ast.FunctionDef) and n.name == "__init__")
    return dict(zip([a.arg for a in init.args.kwonlyargs], init.args.kw_defaults, strict=True))


@pytest.mark.parametrize(
    ("operator", "signature_class"),
    [(MPIJobOperator, "MPIJobOperatorSignature"), (HorovodJobOperator, "HorovodJobOperatorSignature")],
)
def test_every_runtime_parameter_is_declared_with_its_default(operator, signature_class):
    declared = _declared(signature_class)
    runtime = {
        name: p
        for name, p in inspect.signature(operator.__init__).parameters.items()
        if p.kind is inspect.Parameter.KEYWORD_ONLY
    }
    assert runtime, "the operator's run-time signature lists no parameter"
    for name, parameter in runtime.items():
        assert name in declared, f"{name} is missing from {signature_class}"
        if parameter.default is inspect.Parameter.empty:
            assert declared[name] is None, f"{name} is required at run time"
        elif name not in signature_writer.CONFIGURED_DEFAULTS:
            assert ast.literal_eval(declared[name]) == parameter.default, name


def test_horovod_declares_all_of_mpijob_operators_parameters_and_requires_program():
    horovod = _declared("HorovodJobOperatorSignature")
    assert set(_declared("MPIJobOperatorSignature")) <= set(horovod)
    assert horovod["program"] is None  # no default: required


def test_a_row_change_makes_the_module_stale(monkeypatch):
    row = signature_writer.PARAMETERS["image"]
    monkeypatch.setitem(signature_writer.PARAMETERS, "image", type(row)(**{**row.__dict__, "type": int}))
    assert signature_writer.render_signatures() != signature_writer.SIGNATURES.read_text()
    assert signature_writer.main(["--check"]) == 1


def test_typed_init_leaves_the_method_unchanged():
    def init(self, **kwargs):
        return None

    assert typed_init(init)(init) is init
    assert MPIJobOperator.__init__.__signature__.parameters["image"].default is None


@pytest.mark.parametrize("owner", [fields.JOB, fields.REPLICA, fields.RUN_POLICY, fields.SCHEDULING])
def test_spec_classes_declare_the_run_time_dataclasses_fields_and_defaults(owner):
    tree = ast.parse(signature_writer.SPEC_CLASSES.read_text())
    cls = next(n for n in ast.walk(tree) if isinstance(n, ast.ClassDef) and n.name == owner)
    declared = {n.target.id: n.value for n in cls.body if isinstance(n, ast.AnnAssign)}
    runtime = {f.name: f for f in dataclasses.fields(getattr(fields, owner))}
    assert list(declared) == list(runtime)
    for name, spec_field in runtime.items():
        if spec_field.default_factory is not dataclasses.MISSING:
            assert (
                ast.unparse(declared[name]) == f"field(default_factory={spec_field.default_factory.__name__})"
            )
        else:
            assert ast.literal_eval(declared[name]) == spec_field.default, name
