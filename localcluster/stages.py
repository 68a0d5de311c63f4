"""kwok Stages (kwok.x-k8s.io/v1alpha1) that play the kubelet for pods on the simulated nodes.

Node stages are kwok's own (node-initialize, node-heartbeat-with-lease, read from the kwok module at build
time).  Pod stages are ours: they implement the behaviours documented in ``localcluster/behaviour.py``.
Each pod matches at most one stage at a time (selectors are mutually exclusive), so nothing is random.

Pod life: Pending (scheduled) --ready--> Running --(run duration)--> Succeeded | Failed | restarted in place;
deletion: Running/Pending --terminate--> Failed (137) --remove--> gone (once finalizers are cleared).

Every write names the pod's uid, as a kubelet's do. kwok keys its work by namespace/name and plays a stage on the
snapshot it matched, by name: a stage matched on a deleted pod and played late wrote to the pod's successor of the
same name (an mpi-operator's worker-0 after an eviction: the new worker turned Failed 137 without ever being
deleted, and the MPIJob neither replaced it nor failed; CI 2026-12-07). So each status patch carries the snapshot's
``metadata.uid`` (the API server refuses a patch that changes it: 422, which kwok does not retry), and the removal
first writes an annotation the same way, then deletes: a successor is left alone.
"""

from __future__ import annotations

import textwrap

from . import behaviour as b

API_VERSION = "kwok.x-k8s.io/v1alpha1"

# a pod owned by a Job (not one of a JobSet's other replicated jobs: a TrainJob's `node` pods run sshd until the
# JobSet ends), or labelled launcher by the mpi-operator / training-operator
_LAUNCHER_JQ = (
    '((((.metadata.ownerReferences // []) | any(.kind == "Job"))'
    f' and (((.metadata.labels // {{}})["{b.JOBSET_REPLICATED_JOB}"] // "{b.JOBSET_LAUNCHER}")'
    f' == "{b.JOBSET_LAUNCHER}"))'
    ' or ((.metadata.labels // {})["training.kubeflow.org/job-role"] == "launcher")'
    ' or ((.metadata.labels // {})["training.kubeflow.org/replica-type"] == "launcher"))'
)
#: the pod's effective lifecycle: the LIFECYCLE label, else "succeed" for launchers and "run" for the rest
LIFECYCLE_JQ = (
    f'((.metadata.labels // {{}})["{b.LIFECYCLE}"]'
    f' // (if {_LAUNCHER_JQ} then "{b.SUCCEED}" else "{b.RUN}" end))'
)
#: what happens when the run duration is over: succeed | fail | restart | run
ACTION_JQ = (
    f'{LIFECYCLE_JQ} as $lc | if $lc == "{b.FAIL}" then'
    f' ((.metadata.annotations // {{}})["{b.SUCCEED_AFTER_RESTARTS}"]) as $n'
    " | ([(.status.containerStatuses // [])[] | .restartCount] | max // 0) as $rc"
    ' | if ($n != null) and ($rc >= ($n | tonumber)) then "succeed"'
    ' elif .spec.restartPolicy == "Never" then "fail" else "restart" end'
    " else $lc end"
)

_NOT_DELETING = {"key": ".metadata.deletionTimestamp", "operator": "DoesNotExist"}
_DELETING = {"key": ".metadata.deletionTimestamp", "operator": "Exists"}
_NOT_MARKED = {"key": f'.metadata.annotations["{b.REMOVING}"]', "operator": "DoesNotExist"}
_READY_TRUE = {
    "key": '.status.conditions.[] | select( .type == "Ready" ) | .status',
    "operator": "In",
    "values": ["True"],
}


def _phase(*phases: str) -> dict:
    return {"key": ".status.phase", "operator": "In", "values": list(phases)}


def _ms(duration: str) -> int:
    units = {"ms": 1, "s": 1000, "m": 60000}
    for unit in ("ms", "s", "m"):
        if duration.endswith(unit):
            return int(float(duration[: -len(unit)]) * units[unit])
    raise ValueError(duration)


def _run_delay() -> dict:
    return {
        "durationMilliseconds": _ms(b.DEFAULT_RUN_DURATION),
        "durationFrom": {"jq": {"expression": f'.metadata.annotations["{b.RUN_DURATION}"]'}},
    }


def _stage(name: str, selector: list[dict], steps: list[dict], delay: dict | None = None) -> dict:
    spec: dict = {
        "resourceRef": {"apiGroup": "v1", "kind": "Pod"},
        "selector": {"matchExpressions": selector},
        "steps": steps,
    }
    if delay:
        spec["delay"] = delay
    return {"apiVersion": API_VERSION, "kind": "Stage", "metadata": {"name": name}, "spec": spec}


# the uid of the snapshot the stage matched: a write to another pod of the same name is refused
_UID_PRECONDITION = "metadata:\n  uid: {{ .metadata.uid | Quote }}\n"


def _status(template: str) -> list[dict]:
    """One step: the pod's status from ``template`` (YAML of a PodStatus), if the pod is still the one matched."""
    patch = _UID_PRECONDITION + "status:\n" + textwrap.indent(template, "  ")
    return [{"patch": {"subresource": "status", "template": patch}}]


def _removal() -> list[dict]:
    """Two steps: mark the pod (if it is still the one matched), then delete it (grace 0, by name: kwok's)."""
    mark = _UID_PRECONDITION + f"  annotations:\n    {b.REMOVING}: {{{{ .metadata.uid | Quote }}}}\n"
    return [{"patch": {"template": mark}}, {"delete": True}]


_POD_READY = (
    """
{{ $now := Now }}
conditions:
- lastTransitionTime: {{ $now | Quote }}
  status: "True"
  type: Initialized
- lastTransitionTime: {{ $now | Quote }}
  status: "True"
  type: Ready
- lastTransitionTime: {{ $now | Quote }}
  status: "True"
  type: ContainersReady
{{ range .spec.readinessGates }}
- lastTransitionTime: {{ $now | Quote }}
  status: "True"
  type: {{ .conditionType | Quote }}
{{ end }}
containerStatuses:
{{ range .spec.containers }}
- image: {{ .image | Quote }}
  imageID: {{ printf "sim://%s" .image | Quote }}
  containerID: {{ printf "sim://%s" .name | Quote }}
  name: {{ .name | Quote }}
  ready: true
  started: true
  restartCount: 0
  state:
    running:
      startedAt: {{ $now | Quote }}
{{ end }}
{{ with .spec.initContainers }}
initContainerStatuses:
{{ range . }}
- image: {{ .image | Quote }}
  name: {{ .name | Quote }}
  ready: true
  restartCount: 0
  state:
    terminated:
      exitCode: 0
      finishedAt: {{ $now | Quote }}
      reason: Completed
      startedAt: {{ $now | Quote }}
{{ end }}
{{ end }}
{{ with NodeIPWith .spec.nodeName }}
hostIP: {{ . | Quote }}
hostIPs:
- ip: {{ . | Quote }}
{{ end }}
{{ with PodIPWith .spec.nodeName ( or .spec.hostNetwork false ) ( or .metadata.uid "" )"""
    """ ( or .metadata.name "" ) ( or .metadata.namespace "" ) }}
podIP: {{ . | Quote }}
podIPs:
- ip: {{ . | Quote }}
{{ end }}
phase: Running
startTime: {{ $now | Quote }}
"""
)

# Terminal status shared by succeed / fail / terminate.  EXIT / REASON / MESSAGE / PHASE are substituted in Python.
_POD_TERMINATED = """
{{ $now := Now }}
{{ $root := . }}
{{ $annotations := or .metadata.annotations dict }}
conditions:
- lastTransitionTime: {{ $now | Quote }}
  status: "False"
  reason: PodCompleted
  type: Ready
- lastTransitionTime: {{ $now | Quote }}
  status: "False"
  reason: PodCompleted
  type: ContainersReady
containerStatuses:
{{ range $index, $item := .spec.containers }}
{{ $origin := dict }}
{{ range ( or $root.status.containerStatuses list ) }}{{ if eq .name $item.name }}{{ $origin = . }}{{ end }}{{ end }}
{{ $started := $now }}
{{ with $origin.state }}{{ with .running }}{{ $started = .startedAt }}{{ end }}{{ end }}
- image: {{ $item.image | Quote }}
  imageID: {{ printf "sim://%s" $item.image | Quote }}
  containerID: {{ printf "sim://%s" $item.name | Quote }}
  name: {{ $item.name | Quote }}
  ready: false
  started: false
  restartCount: {{ or $origin.restartCount 0 }}
  {{ with $origin.lastState }}
  lastState: {{ toJson . }}
  {{ end }}
  state:
    terminated:
      exitCode: EXIT
      reason: REASON
      message: MESSAGE
      startedAt: {{ $started | Quote }}
      finishedAt: {{ $now | Quote }}
{{ end }}
phase: PHASE
"""

_POD_RESTARTED = """
{{ $now := Now }}
{{ $root := . }}
{{ $annotations := or .metadata.annotations dict }}
containerStatuses:
{{ range $index, $item := .spec.containers }}
{{ $origin := dict }}
{{ range ( or $root.status.containerStatuses list ) }}{{ if eq .name $item.name }}{{ $origin = . }}{{ end }}{{ end }}
{{ $started := $now }}
{{ with $origin.state }}{{ with .running }}{{ $started = .startedAt }}{{ end }}{{ end }}
- image: {{ $item.image | Quote }}
  imageID: {{ printf "sim://%s" $item.image | Quote }}
  containerID: {{ printf "sim://%s-%d" $item.name ( add1 ( or $origin.restartCount 0 ) ) | Quote }}
  name: {{ $item.name | Quote }}
  ready: true
  started: true
  restartCount: {{ add1 ( or $origin.restartCount 0 ) }}
  lastState:
    terminated:
      exitCode: EXIT
      reason: REASON
      message: MESSAGE
      startedAt: {{ $started | Quote }}
      finishedAt: {{ $now | Quote }}
  state:
    running:
      startedAt: {{ $now | Quote }}
{{ end }}
phase: Running
"""

_FAIL_EXIT = f'{{{{ or ( index $annotations "{b.EXIT_CODE}" ) "{b.DEFAULT_EXIT_CODE}" }}}}'
_FAIL_REASON = f'{{{{ or ( index $annotations "{b.REASON}" ) "{b.DEFAULT_REASON}" | Quote }}}}'
_FAIL_MESSAGE = f'{{{{ or ( index $annotations "{b.MESSAGE}" ) "" | Quote }}}}'


def _terminated(exit_code: str, reason: str, message: str, phase: str) -> str:
    return (
        _POD_TERMINATED.replace("EXIT", exit_code)
        .replace("REASON", reason)
        .replace("MESSAGE", message)
        .replace("PHASE", phase)
    )


def pod_stages() -> list[dict]:
    action = lambda value: {"key": ACTION_JQ, "operator": "In", "values": [value]}  # noqa: E731
    return [
        _stage(
            "sim-pod-ready",
            [
                _NOT_DELETING,
                _phase("Pending"),
                {
                    "key": '.status.conditions.[] | select( .type == "Ready" ) | .status',
                    "operator": "NotIn",
                    "values": ["True"],
                },
            ],
            _status(_POD_READY),
            delay={
                "durationMilliseconds": 0,
                "durationFrom": {"jq": {"expression": f'.metadata.annotations["{b.START_DELAY}"]'}},
            },
        ),
        _stage(
            "sim-pod-succeed",
            [_NOT_DELETING, _phase("Running"), _READY_TRUE, action(b.SUCCEED)],
            _status(_terminated("0", '"Completed"', '""', "Succeeded")),
            delay=_run_delay(),
        ),
        _stage(
            "sim-pod-fail",
            [_NOT_DELETING, _phase("Running"), _READY_TRUE, action("fail")],
            _status(_terminated(_FAIL_EXIT, _FAIL_REASON, _FAIL_MESSAGE, "Failed")),
            delay=_run_delay(),
        ),
        _stage(
            "sim-pod-restart",
            [_NOT_DELETING, _phase("Running"), _READY_TRUE, action("restart")],
            _status(
                _POD_RESTARTED.replace("EXIT", _FAIL_EXIT)
                .replace("REASON", _FAIL_REASON)
                .replace("MESSAGE", _FAIL_MESSAGE)
            ),
            delay=_run_delay(),
        ),
        # Deletion of a pod on a node: the kubelet kills the containers and reports a terminal phase ...
        _stage(
            "sim-pod-terminate",
            [_DELETING, _phase("Pending", "Running")],
            _status(_terminated(str(b.KILLED_EXIT_CODE), '"Error"', '""', "Failed")),
        ),
        # ... then removes the pod (the API object goes once finalizers such as the Job controller's are cleared).
        # (its mark ends the match: the mark's own update plays no second removal)
        _stage("sim-pod-remove", [_DELETING, _phase("Succeeded", "Failed"), _NOT_MARKED], _removal()),
    ]
