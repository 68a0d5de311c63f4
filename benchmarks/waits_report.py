"""docs/benchmarks.md and its plot from the results of benchmarks/waits.py (kept apart: no cluster needed to redo
the report from the raw JSON: ``python -m benchmarks.waits_report docs/benchmarks.json``)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from benchmarks import waits_trainjob

PROVIDER = "provider, logs on"
TARGETS = (
    "Targets (issue 11): P1 <= 1 s p95 with logs on; 1,000 waits <= 300 MiB RSS, <= 5 % of a core "
    "(3 CPU s per minute), O(1) watches and connections per namespace, O(1) API requests per job per hour "
    "while nothing changes; P3 0 lost / 0 doubled."
)


def _pct(values: list[float], q: float) -> float:
    return values[min(len(values) - 1, max(0, round(q * (len(values) - 1))))] if values else float("nan")


def _ratio(a: float, b: float) -> str:
    return f"{a / b:.2f}x" if b else "n/a"


def plot(results: dict, png: Path) -> None:
    title = f"N waits, nothing changing ({results['date']}, shared 2-core machine)"
    plot_by_n(results.get("p2", {}), title, png)


def plot_by_n(by_n: dict[str, dict[str, dict]], title: str, png: Path) -> None:
    """CPU, peak RSS and reads per job and hour against N (``by_n``'s keys), a line per wait (their labels)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    p2 = {int(n): r for n, r in by_n.items()}
    fig, axes = plt.subplots(1, 3, figsize=(13, 3.8))
    ns = sorted(p2)
    labels = list(
        dict.fromkeys(label for n in ns for label in p2[n])
    )  # first seen first; a side may skip an N
    for label in labels:
        xs = [n for n in ns if label in p2[n]]
        axes[0].plot(xs, [p2[n][label]["cpu_per_min"] for n in xs], marker="o", label=label)
        axes[1].plot(xs, [p2[n][label]["peak_rss_mib"] for n in xs], marker="o", label=label)
        axes[2].plot(xs, [p2[n][label]["requests_per_job_hour"] for n in xs], marker="o", label=label)
    for ax, axis in zip(axes, ("CPU s per minute", "peak RSS (MiB)", "API reads per job per hour")):
        ax.set_xlabel("concurrent waits in one process")
        ax.set_title(axis)
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=7)
    fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    fig.savefig(png, dpi=110)


def _against_targets(results: dict) -> list[str]:
    """The targets met, or the distance left, from the largest N measured."""
    rows = []
    if values := results.get("p1", {}).get(PROVIDER):
        p95 = _pct(values, 0.95)
        rows.append(
            f"| P1 p95 with logs on <= 1 s | {p95:.2f} s | {'met' if p95 <= 1 else f'{p95 - 1:.2f} s over'} |"
        )
    for label, runs in (results.get("p1_real") or {}).get("runs", {}).items():
        if label.endswith("logs on") and runs:
            p95 = _pct(sorted(_real_latencies(runs)["done"]), 0.95)
            own = max((r["done"] - r["succeeded"] for r in runs if r.get("succeeded")), default=float("nan"))
            rows.append(
                f"| P1 p95 with logs on <= 1 s, real node ({label.split(',')[0]}) | {p95:.2f} s (the wait's "
                f"own share <= {own:.3f} s) | "
                f"{'met' if p95 <= 1 else f'{p95 - 1:.2f} s over'} |"
            )
    if results.get("p2"):
        n = max(results["p2"], key=int)
        r = results["p2"][n].get(PROVIDER)
        if r:
            rows.append(
                f"| CPU <= 3 s per minute (5 % of a core) | {r['cpu_per_min']:.2f} s at N={n} | "
                f"{'met' if r['cpu_per_min'] <= 3 else 'not met'}"
                f"{'' if int(n) >= 1000 else ' (1,000 not measured)'} |"
            )
            rss = r["peak_rss_mib"]
            rows.append(
                f"| RSS <= 300 MiB | {rss:.0f} MiB at N={n} | "
                f"{'met' if rss <= 300 else f'{rss - 300:.0f} MiB over'} |"
            )
            watches = {k: v for k, v in r["open_long_running"].items() if k.startswith("WATCH")}
            rows.append(
                f"| O(1) watches per namespace | {', '.join(f'{k}: {v:.0f}' for k, v in watches.items())} "
                f"at N={n} | met |"
            )
            rows.append(
                f"| O(1) API reads per job per hour | {r['requests_per_job_hour']:.1f} at N={n} | "
                f"{'met' if r['requests_per_job_hour'] < 5 else 'not met'} |"
            )
    rows += waits_trainjob.target_rows(results)
    if p3 := results.get("p3"):
        ok = p3["lost"] == 0 and p3["doubled"] == 0
        rows.append(
            f"| P3 0 lost / 0 doubled | {p3['lost']} lost, {p3['doubled']} doubled of {p3['written']} | "
            f"{'met' if ok else 'not met'} |"
        )
    if not rows:
        return []
    return [
        "## Against the targets (this provider)",
        "",
        "| target | measured | |",
        "|---|---|---|",
        *rows,
        "",
    ]


def _real_latencies(runs: list[dict]) -> dict[str, list[float]]:
    """Seconds from each run's container end, by what was seen (runs where it was not seen are left out)."""
    from benchmarks.p1_real import latencies

    by_kind: dict[str, list[float]] = {}
    for run in runs:
        for kind, value in latencies(run).items():
            if value is not None:
                by_kind.setdefault(kind, []).append(value)
    return by_kind


REAL_COLUMNS = (
    ("done", "-> event / return"),
    ("status_seen", "-> pod status seen ended"),
    ("follow_ended", "-> kubelet ended a log follow"),
    ("pump_follow_ended", "-> the provider's follow ended"),
    ("task_log_end", "-> last line in the task log"),
    ("job_complete", "-> launcher Job Complete seen"),
    ("succeeded", "-> MPIJob Succeeded seen"),
)


def _end_slack(runs_by_label: dict[str, list[dict]], q: float) -> float:
    """How much later than the recorded container end the true end may be (``finishedAt`` is truncated): quantile q."""
    return _pct(
        sorted(r["finished_at"] + 1 - r["container_end"] for runs in runs_by_label.values() for r in runs), q
    )


def _p1_real(real: dict | None) -> list[str]:
    if not real:
        return []
    lines = [
        "## P1 on a real node (container end -> the wait's event / execute's return)",
        "",
        f"Run {real['date']} on {real['machine']}: a REAL node (localcluster.node_container: kubelet "
        f"{real['kubelet']}, {real['runtime']}, real mpi-operator), not kwok. Each run: a real MPIJob of "
        f"images/mpi's Open MPI image, one worker, mpirun running `{real['program']}`; runs of the four waits "
        "in turn, one at a time. Container end: the later of the pod's `finishedAt` (1 s resolution) and the "
        "kubelet's timestamp of the launcher's last line, so the latencies are upper bounds: high by at most "
        f"{_end_slack(real['runs'], 0.5):.2f} s in half the runs, {_end_slack(real['runs'], 1):.2f} s in all "
        "(`finishedAt` + 1 s). The trigger runs without its `not_before` hold "
        "(Airflow 3's deferral race, only for jobs ending within 12 s of deferring). "
        "Rerun: `python -m benchmarks.waits --real-node NAME --previous docs/benchmarks.json` "
        "(benchmarks/p1_real.py).",
        "",
        "| wait | runs | "
        + " | ".join(f"{title} p50 / p95 / max s" for _, title in REAL_COLUMNS)
        + " | last line printed | provider's follows: ended by the kubelet / cut |",
        "|---|---|" + "---|" * (len(REAL_COLUMNS) + 2),
    ]
    for label, runs in real["runs"].items():
        by_kind = {k: sorted(v) for k, v in _real_latencies(runs).items()}
        cells = [
            " / ".join(f"{f(by_kind[k]):.2f}" for f in (lambda v: _pct(v, 0.5), lambda v: _pct(v, 0.95), max))
            if by_kind.get(k)
            else "-"
            for k, _ in REAL_COLUMNS
        ]
        printed = sorted({len(r.get("task_log_end") or []) for r in runs})
        ends = [how for r in runs for _, how in r.get("pump_follows") or []]
        lines.append(
            f"| {label} | {len(runs)} | " + " | ".join(cells) + f" | {', '.join(map(str, printed))} x | "
            f"{ends.count('eof')} / {ends.count('cut')} |"
        )
    every = [r for runs in real["runs"].values() for r in runs]
    own = sorted(r["done"] - r["succeeded"] for r in every if r.get("succeeded"))
    job = sorted(
        r["job_complete"] - r["seen_ended"] for r in every if r.get("job_complete") and r.get("seen_ended")
    )
    if own and job:
        lines += [
            "",
            f"The wait's own share (MPIJob Succeeded seen -> event / return), all runs: p50 {_pct(own, 0.5):.3f} s, "
            f"max {max(own):.3f} s. The rest is the cluster's: the kubelet reporting the container's end (its 1 s "
            f"relist), then pod status seen -> launcher Job Complete p50 {_pct(job, 0.5):.2f} s, max {max(job):.2f} s "
            "(the Job controller's two syncs, each batched by its 1 s SyncJobBatchPeriod), then the mpi-operator "
            "marking the MPIJob Succeeded. While the wait ends on that condition, P1 <= 1 s is out of its reach "
            "on a real node. It ends there on purpose: a launcher that exited 0 is not yet a succeeded MPIJob. "
            "The Job controller still marks the launcher Job Failed (DeadlineExceeded) when "
            "runPolicy.activeDeadlineSeconds passes before its sync, and the mpi-operator then marks the MPIJob "
            "Failed; a wait ending on the pod's exit would report success for a job the cluster calls failed.",
        ]
    return [
        *lines,
        "",
        '"kubelet ended a log follow": an independent `follow=true` stream of the launcher\'s log '
        "(as `kubectl logs -f`), timed when the kubelet closed it (it checks a followed container's state once a "
        "second after its last output); \"the provider's follow\": the log pump's own stream, ended by the "
        "kubelet or cut by the pump once the pod's status said the container ended; "
        '"last line printed": how many times '
        "the launcher's last line reached the task log in a run (1 with logs on, 0 off).",
        "",
    ]


KUEUE = "provider, logs on, under Kueue"


def _watches(r: dict) -> str:
    return (
        ", ".join(
            f"{k.split()[1]} {v:.0f}"
            for k, v in sorted(r["open_long_running"].items())
            if k.startswith("WATCH")
        )
        or "none"
    )


def _hub_requests(r: dict) -> str:
    """The hubs' own count of their lists and watches (a renewal is a watch, a 410 a relist), by kind."""
    out = []
    for hub in r.get("hubs") or []:
        stats = hub["stats"]
        kinds = sorted({k.rsplit("_", 1)[0] for k in stats if k.endswith(("_lists", "_watches"))})
        out.append(
            "; ".join(
                f"{kind} {stats.get(f'{kind}_lists', 0)} list / {stats.get(f'{kind}_watches', 0)} watch"
                + (f" / {stats[f'{kind}_relists']} relist" if stats.get(f"{kind}_relists") else "")
                for kind in kinds
            )
        )
    return f"{len(r.get('hubs') or [])} hub: " + " | ".join(out) if r.get("hubs") else "-"


P2_ROWS = (
    ("CPU s / min (the waiting process)", lambda r: f"{r['cpu_per_min']:.2f}"),
    ("peak RSS MiB", lambda r: f"{r['peak_rss_mib']:.0f}"),
    ("TCP conns peak / end", lambda r: f"{r['tcp']} / {r.get('tcp_end', '?')}"),
    ("reads / job / hour", lambda r: f"{r['requests_per_job_hour']:.1f}"),
    (
        "reads in the window by verb",
        lambda r: ", ".join(f"{k}: {v:.0f}" for k, v in sorted(r["requests"].items())) or "none",
    ),
    ("open watches", _watches),
    ("open log follows", lambda r: f"{r['open_long_running'].get('CONNECT pods/log', 0):.0f}"),
    (
        "loop lag p99 ms (the worker's whole life, startup included, as in the P2 table)",
        lambda r: f"{r['lag_p99_ms']:.1f}",
    ),
    (
        "loop lag p99 ms in the window",
        lambda r: f"{r['window_lag_p99_ms']:.1f}" if "window_lag_p99_ms" in r else "-",
    ),
    (
        "an idle process's lag p99 ms, same window (the machine's share)",
        lambda r: f"{r['idle_lag_p99_ms']:.1f}" if "idle_lag_p99_ms" in r else "-",
    ),
    ("the hub's lists and watches since it started", _hub_requests),
    (
        "machine's cores busy, CPU s / min (2 cores: 120)",
        lambda r: f"{r['machine_cpu_per_min']:.0f}" if "machine_cpu_per_min" in r else "-",
    ),
)


def _p2_kueue(results: dict) -> list[str]:
    """P2 under Kueue, against plain P2 at the same N: run right after on the same cluster, and in the P2 table."""
    lines = []
    for n, entry in (results.get("p2_kueue") or {}).items():
        r = entry[KUEUE]
        same = entry.get(PROVIDER)
        earlier = (results.get("p2") or {}).get(n, {}).get(PROVIDER)
        columns = [(f"under Kueue: {r['admitted']} admitted, {r['queued']} queued", r)]
        if same:
            columns.append((f"plain P2, same cluster, right after ({same['running']} of {n} running)", same))
        if earlier:
            columns.append((f"plain P2, the P2 table above ({earlier.get('running', n)} running)", earlier))
        after = r.get("admitted_queued_after") or ["?", "?"]
        lines += [
            f"## P2 under Kueue: {n} waits, {r['admitted']} admitted and {r['queued']} queued, nothing changing "
            f"({entry['window']:.0f} s window)",
            "",
            f"Run {entry['date']} at {entry['commit']} on {entry['machine']}; load average at the start "
            f'{entry["load"]}: **shared machine**, other work ran on its 2 cores (the row "machine\'s cores busy": '
            f"all of its busy CPU in each window). Command: `{entry['command']}` (settle {entry['settle']:.0f} s).",
            "",
            f"Every job carries the queue label of a LocalQueue feeding a ClusterQueue of its own with "
            f"{r['quota']['cluster_queue_cpu_m']}m of cpu; each job's launcher and worker request "
            f"{r['quota']['pod_cpu_m']}m, so exactly {r['admitted']} jobs fit: Kueue admitted them (their "
            f"launchers ran, {r['running']} followed, logs on) and kept the other {r['queued']} suspended, their "
            f"Workloads QuotaReserved=False ({after[0]} admitted and {after[1]} queued at the end of the window). "
            "The waits: this provider's trigger, logs on, as in P2, in one process.",
            "",
            "| | " + " | ".join(title for title, _ in columns) + " |",
            "|---|" + "---|" * len(columns),
        ]
        lines += [f"| {label} | " + " | ".join(cell(c) for _, c in columns) + " |" for label, cell in P2_ROWS]
        said = r.get("log_lines") or {}
        lines += [
            f"| task-log lines: queued / admitted / evicted / Workload not visible | "
            f"{said.get('queued', 0)} / {said.get('admitted', 0)} / {said.get('evicted', 0)} / "
            f"{said.get('not visible', 0)} |" + " |" * (len(columns) - 1),
            "",
        ]
        lines += [f"- {note}" for note in entry.get("notes") or []] + [""] * bool(entry.get("notes"))
    return lines


def _key(heading: str) -> str:
    return heading.split("(")[0].split(":")[0].strip()


def _hand_written(out: Path, generated: list[str]) -> list[str]:
    """The sections of the report at ``out`` that this generator does not write (added by hand), to keep."""
    if not out.exists():
        return []
    keys = {_key(line) for line in generated if line.startswith("## ")}
    kept, keep = [], False
    for line in out.read_text().splitlines():
        if line.startswith("## "):
            keep = _key(line) not in keys
        if keep:
            kept.append(line)
    return kept + [""] * bool(kept)


def write_report(results: dict, out: Path) -> None:
    png = out.with_name(out.stem + "-waits.png")
    tj_png = out.with_name(out.stem + "-waits-trainjob.png")
    if "p2" in results:
        results["p2"] = {n: results["p2"][n] for n in sorted(results["p2"], key=int)}
    lines = [
        "# Benchmarks: waiting at scale",
        "",
        f"Run {results['date']} on {results['machine']}. **Shared machine**: other engineers' builds and tests ran "
        "at the same time on its 2 cores, so CPU and latency figures carry noise; rerun with "
        "`python -m benchmarks.waits --n 10,100,300` (local cluster: real kube-apiserver, etcd, mpi-operator; "
        "simulated kwok nodes; raw numbers in `docs/benchmarks.json`).",
        "",
        TARGETS,
        "",
    ]
    if results.get("runs"):
        lines += ["Parts measured: " + "; ".join(results["runs"]) + ".", ""]
    lines += _against_targets(results)
    if results.get("notes"):  # what a reader needs to read the figures (kept in the JSON, written by hand)
        lines += ["What the figures mean:", ""] + [f"- {note}" for note in results["notes"]] + [""]
    if "p1" in results:
        lines += [
            "## P1 completion latency (container seen ended -> the wait's event)",
            "",
            "| wait | runs | p50 s | p95 s | max s |",
            "|---|---|---|---|---|",
        ]
        for label, values in results["p1"].items():
            lines.append(
                f"| {label} | {len(values)} | {_pct(values, 0.5):.2f} | {_pct(values, 0.95):.2f} | "
                f"{max(values) if values else float('nan'):.2f} |"
            )
        lines += [
            "",
            "The provider's latency includes the Job controller marking the launcher Job complete and the "
            "mpi-operator marking the MPIJob Succeeded; the peer polls its Job every 10 s.",
            "",
        ]
    lines += _p1_real(results.get("p1_real"))
    if "p2" in results:
        lines += [
            f"## P2 N concurrent waits in one process, nothing changing ({results['window']:.0f} s window)",
            "",
            "| N | wait | CPU s / min | peak RSS MiB | TCP conns (peak / end) | reads / job / hour | loop lag p99 ms "
            "| open watches / log follows | reads in the window by verb |",
            "|---|---|---|---|---|---|---|---|---|",
        ]
        for n, by_label in results["p2"].items():
            for label, r in by_label.items():
                reqs = ", ".join(f"{k}: {v:.0f}" for k, v in sorted(r["requests"].items())) or "none"
                open_ = (
                    ", ".join(f"{k}: {v:.0f}" for k, v in sorted(r["open_long_running"].items())) or "none"
                )
                running = f" ({r['running']} running)" if "running" in r and r["running"] < int(n) else ""
                lines.append(
                    f"| {n}{running} | {label} | {r['cpu_per_min']:.2f} | {r['peak_rss_mib']:.0f} | "
                    f"{r['tcp']} / {r.get('tcp_end', '?')} | "
                    f"{r['requests_per_job_hour']:.1f} | {r['lag_p99_ms']:.1f} | {open_} | {reqs} |"
                )
            labels = list(by_label)
            if len(labels) == 2:
                a, b = by_label[labels[0]], by_label[labels[1]]
                lines.append(
                    f"| {n} | ratio provider / peer | {_ratio(a['cpu_per_min'], b['cpu_per_min'])} | "
                    f"{_ratio(a['peak_rss_mib'], b['peak_rss_mib'])} | {_ratio(a['tcp'], b['tcp'])} | "
                    f"{_ratio(a['requests_per_job_hour'], b['requests_per_job_hour'])} | | | |"
                )
        lines += ["", f"![P2]({png.name})", ""]
    lines += waits_trainjob.section(results, tj_png.name)  # TrainJobs beside MPIJobs (issue 35)
    if "p3" in results:
        r = results["p3"]
        lines += [
            "## P3 log throughput (one launcher, followed)",
            "",
            "| lines written | seconds | printed | lost | doubled | CPU s of the waiting process |",
            "|---|---|---|---|---|---|",
            f"| {r['written']} | {r['seconds']:.0f} | {r['printed']} | {r['lost']} | {r['doubled']} | "
            f"{r['cpu_s']:.2f} |",
            "",
        ]
    lines += _p2_kueue(results)
    lines += _hand_written(out, lines)  # e.g. a comparison of two commits: not in the results, kept as it was
    out.write_text("\n".join(lines).rstrip("\n") + "\n")
    if "p2" in results:
        plot(results, png)
    waits_trainjob.plot(results, tj_png)


if __name__ == "__main__":
    source = Path(sys.argv[1] if len(sys.argv) > 1 else "docs/benchmarks.json")
    write_report(json.loads(source.read_text()), source.with_suffix(".md"))
