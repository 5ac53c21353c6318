"""What one night's page shows, read from the files the night left behind.

Only reads ``report.json`` (and ``diagnostics.json`` for the pool's accounting); every key is
optional, so a report from an older or newer night still renders, with less in it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from skillopt.atomicio import read_json_object
from skillopt_sleep.edit_ids import edit_id
from skillopt_sleep.html.docdiff import DocDiff, proposal_diffs
from skillopt_sleep.html.svgchart import CurvePoint
from skillopt_sleep.night_end import RunStatus

__all__ = [
    "STATUS_ORDER",
    "Edit",
    "Lenient",
    "NightView",
    "SpendRow",
    "TaskRow",
    "Trial",
    "as_float",
    "as_int",
    "curve_points",
    "edit_stories",
    "lenient",
    "night_view",
    "pvalue",
    "score",
    "seconds",
    "signed",
    "spend_rows",
    "summary_lines",
    "task_rows",
]

STATUS_ORDER = {"regressed": 0, "improved": 1}


class Lenient(dict[str, Any]):
    """A report mapping where a key the night did not write reads as ``None``.

    The templates use strict undefined checks to catch their own typos; a key missing from
    ``report.json`` (an older or newer night) is not a typo, and renders as a dash.
    """

    def __missing__(self, key: str) -> None:
        return None


def lenient(value: Any) -> Any:
    if isinstance(value, dict):
        return Lenient({str(k): lenient(v) for k, v in value.items()})
    if isinstance(value, list):
        return [lenient(v) for v in value]
    return value


def score(value: Any) -> str:
    number = as_float(value)
    return "—" if number is None else f"{number:.3f}"


def signed(value: Any) -> str:
    number = as_float(value)
    return "—" if number is None else f"{number:+.3f}"


def pvalue(value: Any) -> str:
    number = as_float(value)
    return "—" if number is None else f"{number:.3g}"


def seconds(value: Any) -> str:
    number = as_float(value)
    if number is None:
        return "—"
    return f"{number * 1000:.1f} ms" if number < 1 else f"{number:.2f} s"


def as_float(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if math.isfinite(value) else None


def as_int(value: Any) -> int:
    return int(value) if isinstance(value, int | float) and not isinstance(value, bool) else 0


@dataclass(frozen=True, slots=True, kw_only=True)
class TaskRow:
    task: str
    task_id: str
    baseline: str
    candidate: str
    change: str
    status: str  # improved | regressed | unchanged | ...


@dataclass(frozen=True, slots=True, kw_only=True)
class Trial:
    name: str
    kind: str
    fold: str
    verdict: str
    note: str
    action: str
    baseline: str
    candidate: str
    edits: tuple[str, ...]
    p_improve: str
    p_regress: str
    alpha: str
    mean_delta: str
    min_delta: str
    method: str
    rule: str
    reasons: tuple[str, ...]
    counts: str
    n_pairs: int
    validated_on: tuple[str, ...]
    per_task: tuple[TaskRow, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class Edit:
    content: str
    target: str
    op: str
    anchor: str
    rationale: str
    verdict: str  # kept | rejected | untested | not kept
    motivated_by: tuple[str, ...]
    trials: tuple[Trial, ...]
    ident: str = ""  # a kept edit's id (`adopt --edit ID`)


@dataclass(frozen=True, slots=True, kw_only=True)
class SpendRow:
    name: str
    calls: int
    tokens: int
    failed: int
    retries: int
    cache_hits: int
    p50: str
    p95: str
    max: str
    note: str = ""
    cached_tokens: int = 0  # prompt tokens the provider served from its prompt cache
    no_decision: int = 0  # calls that changed no decision (the ledger's, by stage only)


@dataclass(frozen=True, slots=True, kw_only=True)
class NightView:
    report: Mapping[str, Any]
    title: str
    summary: tuple[str, ...]
    curve: tuple[CurvePoint, ...]
    tasks: tuple[TaskRow, ...]
    edits: tuple[Edit, ...]
    trials: tuple[Trial, ...]
    diffs: tuple[DocDiff, ...]
    spend: Mapping[str, Any]
    ledger: Mapping[str, Any]
    by_stage: tuple[SpendRow, ...]
    by_member: tuple[SpendRow, ...]
    by_role: tuple[SpendRow, ...]
    pool_note: str
    kept: int = 0
    rejected: int = 0
    untested: int = 0
    notes: tuple[str, ...] = field(default_factory=tuple)


def _name(intents: Mapping[str, Any], task_id: Any) -> str:
    return str(intents.get(str(task_id)) or task_id)


def task_rows(deltas: Sequence[Mapping[str, Any]], intents: Mapping[str, Any]) -> list[TaskRow]:
    rows = []
    for d in deltas:
        base, cand = as_float(d.get("baseline")), as_float(d.get("candidate"))
        change = cand - base if base is not None and cand is not None else None
        status = str(d.get("status") or "")
        if not status and change is not None:
            status = "improved" if change > 0 else "regressed" if change < 0 else "unchanged"
        rows.append(
            TaskRow(
                task=_name(intents, d.get("task_id")),
                task_id=str(d.get("task_id", "")),
                baseline=score(base),
                candidate=score(cand),
                change=signed(change),
                status=status or "unknown",
            )
        )
    return sorted(rows, key=lambda r: STATUS_ORDER.get(r.status, 2))


def _trial(t: Mapping[str, Any], intents: Mapping[str, Any]) -> Trial:
    d = t.get("decision") or {}
    a = d.get("arithmetic") or {}
    counts = a.get("counts") or {}
    per_task = [
        {**p, "status": "improved" if (as_float(p.get("delta")) or 0) > 0 else
         "regressed" if (as_float(p.get("delta")) or 0) < 0 else "unchanged"}
        for p in a.get("per_task") or []
    ]  # fmt: skip
    edits = t.get("applied") or t.get("edits") or []
    return Trial(
        name=str(t.get("name", "")),
        kind=str(t.get("kind", "")),
        fold="—" if t.get("fold") is None else str(t.get("fold")),
        verdict=str(t.get("verdict") or ("not measured" if not d else d.get("action", ""))),
        note=str(t.get("note") or ""),
        action=str(d.get("action") or "not measured"),
        baseline=score(d.get("baseline")),
        candidate=score(d.get("candidate")),
        edits=tuple(str(e.get("content", "")) for e in edits),
        p_improve=pvalue(a.get("p_improve")),
        p_regress=pvalue(a.get("p_regress")),
        alpha=pvalue(a.get("alpha")),
        mean_delta=signed(a.get("mean_delta")),
        min_delta=signed(a.get("min_delta")),
        method=str(a.get("method") or ""),
        rule=str(a.get("rule") or ""),
        reasons=tuple(str(r) for r in a.get("reasons") or []),
        counts=", ".join(f"{v} {k}" for k, v in counts.items()) if counts else "",
        n_pairs=as_int(a.get("n_pairs")),
        validated_on=tuple(_name(intents, v) for v in a.get("validated_on") or []),
        per_task=tuple(task_rows(per_task, intents)),
    )


def _edit_verdicts(r: Mapping[str, Any]) -> dict[str, str]:
    verdicts: dict[str, str] = {}
    for e in r.get("rejected_edits") or []:
        verdicts[str(e.get("content", ""))] = "rejected"
    for c in r.get("untested_edits") or []:
        verdicts[str((c.get("edit") or c).get("content", ""))] = "untested"
    for e in r.get("accepted_edits") or []:
        verdicts[str(e.get("content", ""))] = "kept"
    return verdicts


def edit_stories(r: Mapping[str, Any]) -> list[Edit]:
    """Each distinct edit with what motivated it and every trial that measured it alone."""
    intents = r.get("task_intents") or {}
    verdicts = _edit_verdicts(r)
    first: dict[str, Mapping[str, Any]] = {}
    trials: dict[str, list[Trial]] = {}
    motivated: dict[str, set[str]] = {}
    for t in r.get("trials") or []:
        if t.get("kind") not in ("single", "leave_one_out") or not t.get("edits"):
            continue
        edit = t["edits"][0]
        content = str(edit.get("content", ""))
        first.setdefault(content, edit)
        trials.setdefault(content, []).append(_trial(t, intents))
        motivated.setdefault(content, set()).update(str(m) for m in t.get("motivated_by") or [])
    for e in (*(r.get("accepted_edits") or []), *(r.get("rejected_edits") or [])):
        first.setdefault(str(e.get("content", "")), e)
    for c in r.get("untested_edits") or []:
        edit = c.get("edit") or {}
        first.setdefault(str(edit.get("content", "")), edit)
        motivated.setdefault(str(edit.get("content", "")), set()).update(c.get("seen") or [])
    order = {"kept": 0, "rejected": 1, "untested": 2}
    kept_ids = {str(e.get("content", "")): str(e.get("id") or edit_id(e))
                for e in r.get("accepted_edits") or []}  # fmt: skip
    stories = [
        Edit(
            content=content,
            target=str(edit.get("target", "")),
            op=str(edit.get("op", "")),
            anchor=str(edit.get("anchor") or ""),
            rationale=str(edit.get("rationale") or ""),
            verdict=verdicts.get(content, "not kept"),
            motivated_by=tuple(sorted(_name(intents, m) for m in motivated.get(content, ()))),
            trials=tuple(trials.get(content, ())),
            ident=kept_ids.get(content, ""),
        )
        for content, edit in first.items()
    ]
    return sorted(stories, key=lambda e: order.get(e.verdict, 3))


def curve_points(chart: Sequence[Mapping[str, Any]]) -> list[CurvePoint]:
    return [
        CurvePoint(
            night=as_int(p.get("night")),
            baseline=as_float(p.get("baseline", p.get("score"))),
            candidate=as_float(p.get("candidate")),
            kept=as_int(p.get("accepted")),
            rejected=as_int(p.get("rejected")),
            untested=as_int(p.get("untested")),
        )
        for p in chart
    ]


def _spend_row(
    name: str, s: Mapping[str, Any], note: str = "", ledger: Mapping[str, Any] | None = None
) -> SpendRow:
    tokens = as_int(s.get("estimated_tokens")) or (
        as_int(s.get("prompt_tokens")) + as_int(s.get("completion_tokens"))
    )
    return SpendRow(
        name=name,
        calls=as_int(s.get("calls")),
        tokens=tokens,
        failed=as_int(s.get("failed")),
        retries=as_int(s.get("retries")),
        cache_hits=as_int(s.get("cache_hits")),
        p50=seconds(s.get("latency_p50")),
        p95=seconds(s.get("latency_p95")),
        max=seconds(s.get("latency_max")),
        note=note,
        cached_tokens=as_int((ledger or s).get("cached_tokens")),
        no_decision=as_int((ledger or {}).get("no_decision")),
    )


def spend_rows(
    spend: Mapping[str, Any], pool: Mapping[str, Any], ledger: Mapping[str, Any] | None = None
) -> tuple[list[SpendRow], list[SpendRow], list[SpendRow]]:
    """By stage, by member and by role; stages the pool did not account get the call count
    from the night's own spend summary (no latency then). A stage's provider-cached tokens
    and calls that changed no decision come from the night's ledger."""
    stages = dict(pool.get("by_stage") or {})
    for stage, calls in (spend.get("calls_by_stage") or {}).items():
        stages.setdefault(stage, {"calls": calls})
    lines = (ledger or {}).get("stages") or {}
    members = pool.get("members") or {}
    by_member = []
    for name, s in sorted((pool.get("by_member") or {}).items()):
        health = members.get(name) or {}
        note = f"breaker {health['breaker']}" if health.get("breaker") else ""
        failures = s.get("failures") or {}
        if failures:
            note = "; ".join([note, *(f"{k}: {v}" for k, v in failures.items())]).strip("; ")
        by_member.append(_spend_row(str(name), s, note))
    return (
        [_spend_row(str(k), v, ledger=lines.get(k)) for k, v in sorted(stages.items())],
        by_member,
        [_spend_row(str(k), v) for k, v in sorted((pool.get("by_role") or {}).items())],
    )


def skill_lines(r: Mapping[str, Any]) -> list[str]:
    """The gate mode and model advisories, and one line per project skill of the night."""
    mode = r.get("gate_mode") or "strict"
    out = [f"Gate mode {mode}: the edits were not fully validated."] if mode != "strict" else []
    out += [f"Advisory: {a}." for a in r.get("advisories") or []]
    for row in r.get("skills") or []:
        staged = (
            " Staged: adopt with skillopt-sleep adopt --skill NAME." if row.get("staged") else ""
        )
        out.append(
            f"Your skill {row.get('name')}: {row.get('status')} on {as_int(row.get('tasks'))} "
            f"task(s), {score(row.get('baseline'))} -> {score(row.get('candidate'))}"
            + (f" ({row.get('reason')})" if row.get("reason") else "")
            + "."
            + staged
        )
    return out


def summary_lines(r: Mapping[str, Any]) -> list[str]:
    tasks = r.get("tasks") or {}
    out = []
    if r.get("status") == RunStatus.FAILED:
        out.append(
            f"This night failed during {r.get('failed_stage') or 'a stage'}: "
            f"{r.get('reason') or 'no reason recorded'}. Nothing was staged."
        )
    elif r.get("result") == "no_tasks":
        why = (r.get("harvest") or {}).get("why_nothing") or "no replayable task was found"
        out.append(f"No task to learn from tonight: {why}.")
    else:
        read = (
            "Read the tasks file" if tasks.get("source") == "tasks_file"
            else f"Read {as_int(r.get('n_sessions'))} new session(s)"
        )  # fmt: skip
        out.append(
            f"{read} and worked on "
            f"{as_int(tasks.get('total'))} task(s) ({as_int(tasks.get('recalled'))} recalled from "
            f"earlier nights), split into {as_int(tasks.get('folds'))} fold(s) so every edit was "
            "judged on tasks its reflection never saw."
        )
        out.append(
            f"Score on every learnable task: {score(r.get('baseline'))} with the adopted "
            f"documents, {score(r.get('candidate'))} with tonight's; gate decision: "
            f"{r.get('gate_action') or 'none'}."
        )
    out += skill_lines(r)
    if r.get("leaked"):
        out.append("Not validated: the held-out tasks overlapped the training ones.")
    if r.get("accepted") and not r.get("dry_run"):
        out.append(
            "The improved documents are staged, not live: review the diff below, then run "
            "skillopt-sleep adopt."
        )
    elif r.get("dry_run"):
        out.append("Dry run: nothing was staged.")
    else:
        out.append("Your live skill and memory files were not changed.")
    return out


def night_view(run_dir: Path) -> NightView:
    r = read_json_object(run_dir / "report.json")
    diagnostics = read_json_object(run_dir / "diagnostics.json")
    pool = diagnostics.get("pool") or {}
    pool_note = str(pool.get("error") or "") if isinstance(pool, dict) else ""
    ledger = r.get("ledger") or {}
    by_stage, by_member, by_role = spend_rows(r.get("spend") or {}, pool, ledger)
    intents = r.get("task_intents") or {}
    project = r.get("project_name") or r.get("project") or "project"
    return NightView(
        report=lenient(r),
        title=f"Night {r.get('night', '?')} for {project}",
        summary=tuple(summary_lines(r)) if r else ("This run left no report.json.",),
        curve=tuple(curve_points(r.get("chart") or [])),
        tasks=tuple(task_rows(r.get("task_deltas") or [], intents)),
        edits=tuple(edit_stories(r)),
        trials=tuple(_trial(t, intents) for t in r.get("trials") or []),
        diffs=tuple(proposal_diffs(run_dir)),
        spend=lenient(r.get("spend") or {}),
        ledger=lenient(ledger),
        by_stage=tuple(by_stage),
        by_member=tuple(by_member),
        by_role=tuple(by_role),
        pool_note=pool_note,
        kept=len(r.get("accepted_edits") or []),
        rejected=len(r.get("rejected_edits") or []),
        untested=len(r.get("untested_edits") or []),
        notes=tuple(str(n) for n in r.get("notes") or []),
    )
