"""What a chaos run prints: the figures, each failure with the kills around it, and a verdict."""

from __future__ import annotations

import itertools
import statistics
from collections import Counter

from chaos.checks import Finding
from chaos.harness import Report
from chaos.killer import Kill
from chaos.snapshot import DROPPED

SHOWN = 25  # findings printed per category (all of them go to --json)


def longest_gap(successes: list[float], end: float) -> tuple[float, float, float]:
    """The longest stretch of the load with no acknowledged request: (length, from, to)."""
    points = [0.0, *sorted(successes)]
    points.append(max(end, points[-1]))
    best = (0.0, 0.0, 0.0)
    for a, b in itertools.pairwise(points):
        if b - a > best[0]:
            best = (b - a, a, b)
    return best


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))] if ordered else 0.0


def _kills_near(kills: list[Kill], start: float, end: float, before: float = 5.0) -> str:
    near = [k for k in kills if start - before <= k.at <= end + 1.0]
    if not near:
        earlier = [k for k in kills if k.at < start]
        if earlier:
            k = earlier[-1]
            return f"no kill near it (last before: #{k.number} {k.target} t={k.at:.2f}s)"
        return "no kill before it"
    return "kills near it: " + ", ".join(f"#{k.number} {k.target} t={k.at:.2f}s" for k in near)


def _errors_by_cause(report: Report) -> list[str]:
    """Every 5xx by its answer and the kill before it (within a minute): what to fix where."""
    causes: Counter[tuple[str, str]] = Counter()
    for r in report.requests:
        for a in r.attempts:
            if a.status is None or a.status < 500:
                continue
            before = [k for k in report.kills if a.start - 60 <= k.at <= a.end]
            after = f"after a {before[-1].target} kill" if before else "with no kill before it"
            body = " ".join((a.error or "").split())[:90]
            causes[(f"{a.status}{' plain text' if a.plain_text else ''} {body!r}", after)] += 1
    return [
        f"  5xx x{n}: {answer} {after}"
        for (answer, after), n in sorted(causes.items(), key=lambda c: -c[1])
    ]


def _findings(
    title: str, findings: list[Finding], kills: list[Kill], causes: Counter[str] | None = None
) -> list[str]:
    if not findings:
        return [f"{title}: 0"]
    lines = [f"{title}: {len(findings)}"]
    for cause, n in (causes or Counter()).most_common():
        lines.append(f"  cause x{n}: {cause}")
    for f in findings[:SHOWN]:
        near = f" [{_kills_near(kills, *f.window)}]" if f.window is not None else ""
        lines.append(f"  - {f.text}{near}")
        if f.cause:
            lines.append(f"      diagnosis: {f.cause}")
        lines += [f"      {d}" for d in f.details]
    if len(findings) > SHOWN:
        lines.append(f"  ... and {len(findings) - SHOWN} more (--json has them all)")
    return lines


def render(report: Report) -> str:
    p = report.params
    requests = report.requests
    acked = report.acked
    unacked = [r for r in requests if not r.acked]
    rejected = [r for r in unacked if r.rejected]
    statuses = report.statuses
    fives = {k: n for k, n in statuses.items() if k[:1] == "5" and "plain" not in k}
    plain = sum(n for k, n in statuses.items() if "plain-text" in k)
    transport = {k: n for k, n in statuses.items() if not k[:1].isdigit()}
    fours = {k: n for k, n in statuses.items() if k[:1] == "4"}
    latencies = [r.acked_at - r.first_at for r in acked if r.acked_at is not None]
    gap, gap_from, gap_to = longest_gap(report.successes, max(p.duration, report.load_ended_at))
    by_kind = Counter(r.kind for r in acked)
    lines = [
        f"chaos: seed {p.seed}, {p.duration:.0f}s of load, {p.agents} agents, {p.clients} clients,"
        f" a kill every ~{p.kill_interval:g}s of {', '.join(p.targets) or 'nothing'}",
        f"code: {report.code}",
        f"system: `python -m o_devtools.supervisor` in {report.base}, up in"
        f" {report.startup_seconds:.1f}s"
        + (f"; env {' '.join(f'{k}={v}' for k, v in p.env.items())}" if p.env else ""),
        f"requests sent: {len(requests)}; acknowledged: {len(acked)}"
        f" ({', '.join(f'{k} {n}' for k, n in sorted(by_kind.items()))});"
        f" unacknowledged: {len(unacked)} (of them rejected with a 4xx: {len(rejected)});"
        f" attempts: {sum(len(r.attempts) for r in requests)}",
        f"5xx answers: {sum(fives.values())}"
        + (
            f" ({', '.join(f'{k} x{n}' for k, n in sorted(fives.items()))}; plain text: {plain})"
            if fives
            else ""
        )
        + (f"; other 4xx: {fours}" if fours else "")
        + (
            f"; no answer: {', '.join(f'{k} x{n}' for k, n in sorted(transport.items()))}"
            if transport
            else ""
        ),
        f"longest unavailability: {gap:.1f}s (no request acknowledged from t={gap_from:.2f}s"
        f" to t={gap_to:.2f}s; {_kills_near(report.kills, gap_from, gap_to, 30.0)})",
        f"acknowledged latency (first attempt to ack): p50 {_percentile(latencies, 0.5):.2f}s,"
        f" p99 {_percentile(latencies, 0.99):.2f}s, max {max(latencies, default=0.0):.2f}s",
    ]
    lines += _errors_by_cause(report)
    per_target = Counter(k.target for k in report.kills if k.pid is not None)
    recoveries = [k.recovery for k in report.kills if k.recovery is not None]
    lines.append(
        f"kills: {sum(per_target.values())}"
        f" ({', '.join(f'{t} {per_target[t]}' for t in p.targets if per_target[t]) or '-'});"
        f" recovery median {statistics.median(recoveries) if recoveries else 0:.1f}s,"
        f" max {max(recoveries, default=0):.1f}s"
    )
    for name, restarts in report.supervisor_restarts.items():
        if restarts is not None:
            who = "the supervisor" if restarts else "the harness (the supervisor did not)"
            lines.append(f"  {name} restarted by {who}")
    lines += [f"  {k.describe()}" for k in report.kills]
    active = f"{report.still_active} runs still active" if report.still_active else "no run active"
    lines.append(f"quiet: {active} after {report.quiet_seconds:.1f}s")
    if report.template is not None:
        lines.append(
            f"imports: {len(report.imported_ids)} agents found of the import names; the"
            f" template's blocks {sorted(report.template.blocks)}, history of"
            f" {len(report.template.history)} messages"
        )
    if report.proposals:
        shown = ", ".join(f"{k} {n}" for k, n in sorted(report.proposals.items()))
        lines.append(f"proposals: {shown}")
    if report.folders:
        lines.append(f"uploads: to {len(report.folders)} folders, one per agent, attached to it")
    v = report.verdicts
    if v is not None:
        what_lost = ", ".join(f"{k} {n}" for k, n in v.lost_by_what.items())
        what_dup = ", ".join(f"{k} {n}" for k, n in v.duplicated_by_what.items())
        kills = report.kills
        lost_title = f"LOST{f' ({what_lost})' if what_lost else ''}"
        dup_title = f"DUPLICATED{f' ({what_dup})' if what_dup else ''}"
        lines += _findings(lost_title, v.lost, kills, v.causes("lost"))
        lines += _findings(dup_title, v.duplicated, kills, v.causes("duplicated"))
        lines += _findings("STUCK runs", v.stuck, kills, v.causes("stuck"))
        lines += _findings(
            "VERSION problems (blocks, evolution chains)", v.versions, kills, v.causes("versions")
        )
        lines += _findings(
            "partial (unacknowledged, happened in part; not a failure)",
            v.partial,
            kills,
            v.causes("partial"),
        )
        if v.acked_error_stop:
            lines.append(
                f"acknowledged with a stop reason other than end_turn: {v.acked_error_stop}"
            )
    if report.rebuild is not None:
        rb = report.rebuild
        lines.append(
            f"rebuild: exit {rb.code} in {rb.seconds:.1f}s;"
            f" differences after it: {len(report.differences)}"
            + (f" (ignored fields: {', '.join(DROPPED)})" if DROPPED else "")
        )
        if rb.code != 0:
            lines += ["  " + line for line in rb.output.strip().splitlines()[-15:]]
        kinds = Counter(d.kind for d in report.differences)
        for kind, n in kinds.most_common(10):
            lines.append(f"  x{n} {kind}")
        for d in report.differences[:SHOWN]:
            lines.append(f"  - {d.describe()}")
        if len(report.differences) > SHOWN:
            lines.append(f"  ... and {len(report.differences) - SHOWN} more")
    for note in report.notes:
        lines.append(f"note: {note}")
    for error in report.errors:
        lines.append(f"HARNESS ERROR: {error}")
    failures = ", ".join(f"{k} {n}" for k, n in report.failures.items())
    verdict = "PASS" if report.ok else "FAIL"
    lines.append(f"RESULT: {verdict} ({failures})")
    if not report.ok:
        lines.append(f"data dir kept: {report.base} (system.log: the supervisor and services)")
    return "\n".join(lines)
