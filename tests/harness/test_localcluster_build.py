"""localcluster's builds: quiet on the terminal, whole in a log file; and only what is used.

No Go and no Docker here: ``$GO`` names a stand-in `go` that prints a cold build's flood of lines, and a stand-in
`docker` on ``PATH`` records what it is asked and answers as the real one would.
"""

from __future__ import annotations

import json
import shlex
import sys
from pathlib import Path

import pytest
import yaml

from localcluster import build, cli, node_container, node_image
from localcluster.build_log import BuildFailed
from localcluster.build_recipes import Addon, Tool
from localcluster.waiting import ClusterError

FAKE_GO = """#!/bin/sh
case "$1" in
  env) echo go1.fake ;;
  build)
    i=0
    while [ $i -lt 300 ]; do echo "go: downloading example.com/dep$i v0.0.$i" >&2; i=$((i + 1)); done
    echo example.com/fake/cmd/fake >&2
    if [ -n "$FAKE_GO_FAIL" ]; then echo "cmd/fake/main.go:3:1: syntax error: boom" >&2; exit 1; fi
    prev=; for arg in "$@"; do [ "$prev" = -o ] && out=$arg; prev=$arg; done
    echo binary > "${out}fake" ;;
  *) echo "unexpected: go $*" >&2; exit 2 ;;
esac
"""


@pytest.fixture
def fake_go(tmp_path, monkeypatch) -> Path:
    """A Go "module" ``fake`` with one tool as add-on ``fake``, built by the stand-in `go`; returns the cache."""
    go_dir = tmp_path / "go"
    (go_dir / "fake").mkdir(parents=True)
    (go_dir / "fake" / "go.mod").write_text("module example.com/fake\n\ngo 1.22\n")
    go = tmp_path / "go-standin"
    go.write_text(FAKE_GO)
    go.chmod(0o755)
    monkeypatch.setattr(build, "GO_DIR", go_dir)
    monkeypatch.setitem(
        build.ADDONS, "fake", Addon("fake", (Tool("fake", "fake", "example.com/fake/cmd/fake"),), ())
    )
    monkeypatch.setenv("GO", str(go))
    monkeypatch.setenv("AIRFLOW_MPI_CACHE", str(tmp_path / "cache"))
    for name in ("AIRFLOW_MPI_BIN_DIR", "AIRFLOW_MPI_FAKE_BIN_DIR", "AIRFLOW_MPI_BUILDS", "FAKE_GO_FAIL"):
        monkeypatch.delenv(name, raising=False)
    return tmp_path / "cache"


def _lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.strip()]


def test_a_build_prints_a_start_and_an_end_line_and_keeps_the_whole_output_in_its_log(fake_go, capsys):
    path = build.build_addon("fake")
    log = fake_go / "logs" / "build-fake.log"
    out = capsys.readouterr()
    assert out.out == ""
    start, end = _lines(out.err)
    assert start.startswith("[localcluster.build] building Go add-on fake (a cold build takes")
    assert start.endswith(f"full output: {log}")
    assert end.startswith("[localcluster.build] Go add-on fake: built now, ")
    text = log.read_text()
    assert all(f"go: downloading example.com/dep{i} v0.0.{i}" in text for i in range(300))
    assert "$ " + shlex.join([str(Path(build.go_binary())), "build", "-v"]) in text
    assert build.is_built(path, build.ADDONS["fake"].tools) and (path / "fake").read_text() == "binary\n"

    assert build.build_addon("fake") == path  # found built: one line, no log written anew
    (again,) = _lines(capsys.readouterr().err)
    assert again.startswith("[localcluster.build] Go add-on fake: cached, ")
    assert log.read_text() == text

    assert build.build_addon("fake", force=True, verbose=False) == path
    assert capsys.readouterr().err == ""


@pytest.mark.parametrize("verbose", [True, False])
def test_a_failed_build_prints_its_log_s_tail_and_path_and_raises(fake_go, capsys, monkeypatch, verbose):
    monkeypatch.setenv("FAKE_GO_FAIL", "1")
    log = fake_go / "logs" / "build-fake.log"
    with pytest.raises(BuildFailed, match=f"go build of fake failed \\(exit 1\\); full output: {log}"):
        build.build_addon("fake", verbose=verbose)
    err = capsys.readouterr().err
    assert "syntax error: boom" in err and "example.com/dep299 " in err  # the tail ...
    assert "example.com/dep0 " not in err  # ... only
    assert f"full output: {log}" in err.splitlines()[-1]
    assert len(_lines(err)) <= 40 + 3
    assert "example.com/dep0 v0.0.0" in log.read_text()
    assert not build.is_built(build.addon_dir("fake"), build.ADDONS["fake"].tools)
    # no half-built directory left: only its lock
    assert [p.name for p in (fake_go / "bin").iterdir()] == [build.lock_path(build.addon_dir("fake")).name]


def test_an_add_on_missing_from_a_node_container_is_named_not_built(fake_go, monkeypatch):
    monkeypatch.setenv("AIRFLOW_MPI_BIN_DIR", str(fake_go / "prebuilt"))
    with pytest.raises(RuntimeError, match=r"no build of the fake add-on here \(\$AIRFLOW_MPI_FAKE_BIN_DIR"):
        build.build_addon("fake")


# ---------------------------------------------------------------- what the demo's path builds: no add-on

FAKE_DOCKER = """#!{python}
import json, os, sys
args = sys.argv[1:]
with open(os.environ["FAKE_DOCKER_CALLS"], "a") as calls:
    calls.write(json.dumps(args) + "\\n")
if args[:2] == ["image", "inspect"]:
    sys.exit(0 if os.path.exists(os.environ["FAKE_DOCKER_CALLS"] + ".built") else 1)
if args[:2] == ["buildx", "build"]:
    context = args[-1]
    listing = sorted(os.path.relpath(os.path.join(d, f), context) for d, _, fs in os.walk(context) for f in fs)
    with open(os.environ["FAKE_DOCKER_CALLS"] + ".built", "w") as built:
        json.dump(listing, built)
    for i in range(200):
        print(f"#{{i}} [node 2/5] RUN apt-get update", file=sys.stderr)
elif args[:2] == ["logs", "-f"]:
    print("[localcluster.serve] ready in 1.0s")
elif args[:1] == ["port"]:
    print("127.0.0.1:16443")
elif args[:1] == ["exec"] and args[-1] == "/run/airflow-mpi/kubeconfig":
    print(json.dumps({{"clusters": [{{"name": "node", "cluster": {{"server": "https://10.0.0.2:6443"}}}}]}}))
"""


@pytest.fixture
def fake_docker(tmp_path, monkeypatch) -> Path:
    """A stand-in `docker` on PATH and a main build in the cache; add-on builds refused (``build_addon``)."""
    bindir = tmp_path / "path"
    bindir.mkdir()
    (bindir / "docker").write_text(FAKE_DOCKER.format(python=sys.executable))
    (bindir / "docker").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bindir}:/usr/bin:/bin")
    monkeypatch.setenv("FAKE_DOCKER_CALLS", str(tmp_path / "calls"))
    monkeypatch.setenv("AIRFLOW_MPI_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("AIRFLOW_MPI_BUILDS", raising=False)
    main = tmp_path / "cache" / "bin" / "mainkey"
    main.mkdir(parents=True)
    (main / "kubelet").write_text("binary")
    monkeypatch.setattr(build, "build", lambda **kw: main)
    monkeypatch.setattr(node_image, "ensure_docker", lambda: None)

    def refused(name, **kw):
        raise AssertionError(f"built add-on {name}")

    monkeypatch.setattr(build, "build_addon", refused)
    return tmp_path / "calls"


def _calls(path: Path) -> list[list[str]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_the_demo_s_build_and_node_build_no_add_on(fake_docker, capsys):
    assert cli.main(["build"]) == 0  # scripts/demo: `python -m localcluster build`
    node = node_container.NodeCluster("demo")  # airflowstack.kube.open_cluster(real_node=True)
    assert node.addons == ()
    node.start(timeout=30)
    calls = _calls(fake_docker)
    (docker_build,) = [c for c in calls if c[:2] == ["buildx", "build"]]
    assert docker_build[docker_build.index("--target") + 1] == "node"
    listing = json.loads(Path(f"{fake_docker}.built").read_text())
    assert "bin/kubelet" in listing and not [p for p in listing if p.startswith("kueue/")]
    (run,) = [c for c in calls if c[0] == "run"]
    assert "--mount" not in run and not [a for a in run if "_BIN_DIR=" in a]
    err = capsys.readouterr().err
    assert "#199 [node 2/5]" not in err  # the docker build's output is in its log only
    assert "#199 [node 2/5]" in (build.cache_root() / "logs" / "build-node-image.log").read_text()
    assert ["tag"] not in [c[:1] for c in calls]  # airflow-mpi/kube:local (docker compose's) stays as it is
    assert yaml.safe_load(node.kubeconfig_path.read_text())["clusters"][0]["cluster"]["server"] == (
        "https://127.0.0.1:16443"
    )
    with pytest.raises(
        ClusterError, match=r"no build of training-operator mounted.*addons=\['training-operator'\]"
    ):
        node.switch_api("v1", controllers=("training-operator",))


def test_a_node_whose_cluster_asks_for_add_ons_gets_them_mounted(fake_docker, monkeypatch, tmp_path):
    built = {name: tmp_path / "cache" / "bin" / f"{name}-key" for name in build.ADDONS}
    monkeypatch.setattr(build, "build_addon", lambda name, **kw: built[name])
    node = node_container.NodeCluster("it", kueue=True, addons=("training-operator",))
    assert node.addons == ("kueue", "training-operator")
    node.start(timeout=30)
    tag = node_image.image_tag(build.build(), {})
    (run,) = [c for c in _calls(fake_docker) if c[0] == "run"]
    assert run[run.index(tag) + 1 :][:1] == ["--api-version=v2beta1"]
    for name, variable in (("kueue", "KUEUE"), ("training-operator", "TRAINING_OPERATOR")):
        assert f"type=bind,src={built[name]},dst=/opt/localcluster/{name},readonly" in run
        assert f"AIRFLOW_MPI_{variable}_BIN_DIR=/opt/localcluster/{name}" in run
    state = json.loads((node.state_dir / "state.json").read_text())
    assert state["kueue_bin_dir"] == str(built["kueue"])  # build.prune() keeps what a running node mounts
    with pytest.raises(ValueError, match=r"unknown add-on\(s\) \['nope'\]"):
        node_container.NodeCluster("x", addons=("nope",))


def test_the_compose_image_has_kueue_jobset_and_trainer_inside(fake_docker, monkeypatch, tmp_path):
    """docker-compose.yaml's kube service runs `serve --kueue --controller trainer` with no host build to mount:
    `node image --compose` bakes those add-ons' builds into the Dockerfile's last stage and tags it as compose's."""
    built = {}
    for name in ("jobset", "kueue", "trainer"):
        built[name] = tmp_path / "cache" / "bin" / f"{name}-key"
        built[name].mkdir()
        (built[name] / name).write_text("binary")
    monkeypatch.setattr(build, "build_addon", lambda name, **kw: built[name])
    assert cli.main(["node", "image", "--compose"]) == 0
    tag = node_image.build_image(compose=True)  # the tests' stack: the same image, not built again
    assert tag != node_image.image_tag(build.build(), {})
    calls = _calls(fake_docker)
    (docker_build,) = [c for c in calls if c[:2] == ["buildx", "build"]]
    assert docker_build[docker_build.index("--target") + 1] == "with-addons"
    listing = json.loads(Path(f"{fake_docker}.built").read_text())
    assert {"jobset/jobset", "kueue/kueue", "trainer/trainer"} <= set(listing)
    assert ["tag", tag, node_image.COMPOSE_TAG] in calls
    # the Dockerfile's stages copy and name exactly these add-ons (gobuild builds them, prebuilt and with-addons copy)
    dockerfile = node_image.DOCKERFILE.read_text()
    stage = dockerfile[dockerfile.index("FROM node AS with-addons") :]
    for name in node_image.COMPOSE_ADDONS:
        assert f"COPY {name}/ /out/{name}/" in dockerfile
        assert f"{build.addon_variable(name)}=/opt/localcluster/{name}" in stage
        assert f"--addon {name}" in dockerfile or f"--{name}" in dockerfile


def test_add_ons_build_beside_the_main_build(fake_go, monkeypatch, capsys):
    """scripts/test starts `build --addons-only` beside the main build: it builds only the add-ons, and the main
    build's lock (held here as that other process would hold it) does not make it wait."""
    import fcntl

    monkeypatch.setattr(build, "build", lambda **kw: pytest.fail("the main build ran"))
    (fake_go / "bin").mkdir(parents=True)
    with open(build.lock_path(fake_go / "bin" / "mainkey"), "w") as main_lock:
        fcntl.flock(main_lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        monkeypatch.setattr(fcntl, "flock", _refuse_waiting(fcntl.flock))
        assert cli.main(["build", "--addons-only", "--addon", "fake"]) == 0
    assert build.is_built(build.addon_dir("fake"), build.ADDONS["fake"].tools)
    assert capsys.readouterr().out.splitlines()[0] == str(build.addon_dir("fake"))


def _refuse_waiting(flock):
    """``fcntl.flock`` that fails where a build would wait for a lock another process holds."""

    def flock_without_waiting(fd, operation):
        if not operation & 4:  # LOCK_NB
            pytest.fail("a build waited for another build's lock")
        return flock(fd, operation)

    return flock_without_waiting


def test_addons_only_needs_an_add_on(fake_go, capsys):
    with pytest.raises(SystemExit):
        cli.main(["build", "--addons-only"])
    assert "--addons-only needs --kueue or --addon" in capsys.readouterr().err
