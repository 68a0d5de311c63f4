"""The Go build modules' shared dependencies: one version per group, so that Go's build cache compiles them once."""

from __future__ import annotations

from pathlib import Path

import pytest

from localcluster import build, cli, go_deps
from localcluster.build_recipes import SHARED_DEPENDENCIES


def test_the_checked_in_modules_build_each_shared_dependency_at_one_version_per_group():
    left = go_deps.misaligned(build.GO_DIR)
    assert not left, "run `python -m localcluster go-deps --align`: " + "; ".join(
        f"{m.dependency} {m.versions}" for m in left[:5]
    )


def test_every_grouped_module_is_one_of_ours():
    assert {mod for group in SHARED_DEPENDENCIES for mod in group} <= set(build.modules())


@pytest.mark.parametrize(
    ("older", "newer"),
    [
        ("v0.36.0", "v0.36.3"),
        ("v0.9.0", "v0.15.0"),  # numeric, not string, order
        ("v1.0.0-rc.1", "v1.0.0"),  # a pre-release before its release
        ("v1.36.12-0.20260120151049-f2248ac996af", "v1.36.12"),  # a pseudo-version before its release
        ("v0.0.0-20250910181357-589584f1c912", "v0.0.0-20260127142750-a19766b6e2d4"),  # pseudo by date
        ("v0.34.7", "v0.35.4-devel"),
        ("v1.0.0-alpha", "v1.0.0-alpha.1"),  # fewer identifiers first
        ("v1.0.0-2", "v1.0.0-alpha"),  # numeric identifiers before alphanumeric ones
        ("v2.0.0+incompatible", "v2.0.1"),
    ],
)
def test_version_order(older, newer):
    assert go_deps.version_key(older) < go_deps.version_key(newer)
    assert go_deps.newest([newer, older]) == newer == go_deps.newest([older, newer])


def _module(go_dir: Path, name: str, text: str) -> None:
    (go_dir / name).mkdir(parents=True)
    (go_dir / name / "go.mod").write_text(text)


def test_requirements_read_blocks_single_lines_and_replaces(tmp_path):
    _module(
        tmp_path,
        "m",
        "module example.com/m\n\ngo 1.26.0\n\ntool example.com/tool\n\n"
        "require example.com/single v1.2.3\n\n"
        "require (\n\texample.com/a v0.1.0 // indirect\n\texample.com/b v0.0.0-2025-abc\n)\n\n"
        "replace example.com/a => example.com/a v0.2.0\n\n"
        "replace (\n\texample.com/b v0.0.0-2025-abc => example.com/b v0.3.0\n)\n",
    )
    assert go_deps.requirements(tmp_path / "m" / "go.mod") == {
        "example.com/single": "v1.2.3",
        "example.com/a": "v0.2.0",  # a replace decides what is built
        "example.com/b": "v0.3.0",
    }


def test_misaligned_names_the_newest_and_leaves_the_upstream_projects_pins_alone(tmp_path, monkeypatch):
    monkeypatch.setattr(go_deps, "PINNED_MODULES", ("example.com/controller",))
    _module(
        tmp_path,
        "one",
        "module x/one\n\nrequire (\n\texample.com/client v0.36.0\n\texample.com/controller v1.0.0\n"
        "\texample.com/same v1.1.1\n\texample.com/only-here v9.0.0\n)\n",
    )
    _module(
        tmp_path,
        "two",
        "module x/two\n\nrequire (\n\texample.com/client v0.36.3\n\texample.com/controller v1.2.0\n"
        "\texample.com/same v1.1.1\n)\n",
    )
    _module(tmp_path, "three", "module x/three\n\nrequire example.com/client v0.35.0\n")
    found = go_deps.misaligned(tmp_path, (("one", "two"),))
    assert found == [
        go_deps.Misaligned(
            ("one", "two"), "example.com/client", {"one": "v0.36.0", "two": "v0.36.3"}, "v0.36.3"
        )
    ]
    assert go_deps.misaligned(tmp_path, (("one",), ("three",))) == []  # groups are apart


def test_the_command_lists_what_is_misaligned_and_fails(tmp_path, monkeypatch, capsys):
    _module(tmp_path, "one", "module x/one\n\nrequire example.com/client v0.36.0\n")
    _module(tmp_path, "two", "module x/two\n\nrequire example.com/client v0.36.3\n")
    monkeypatch.setattr(build, "GO_DIR", tmp_path)
    monkeypatch.setattr(go_deps.misaligned, "__defaults__", ((("one", "two"),),))
    assert cli.main(["go-deps"]) == 1
    assert (
        "example.com/client {'one': 'v0.36.0', 'two': 'v0.36.3'} (newest v0.36.3)" in capsys.readouterr().out
    )


def test_an_alignment_that_does_not_settle_is_an_error_not_a_traceback(monkeypatch, capsys):
    def unsettled(go, go_dir):
        raise RuntimeError("still misaligned after 6 rounds of go mod tidy: example.com/client")

    monkeypatch.setattr(go_deps, "align", unsettled)
    monkeypatch.setattr(build, "go_binary", lambda: "go")
    assert cli.main(["go-deps", "--align"]) == 1
    assert "error: still misaligned after 6 rounds" in capsys.readouterr().err
