"""The night's human report (``report.md``), rendered from the machine report (``report.json``).

Pure functions over plain data, so the two can never disagree. The Markdown is written for
someone who has never seen the project: it says what happened in one paragraph first, then
shows the evidence (score chart across nights, gate trials, edits, per-task changes).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from skillopt.redact import sanitize

BAR_WIDTH = 30


def cell(value: Any, limit: int = 120) -> str:
    """Text safe inside a Markdown table cell: one line, pipes and backticks escaped."""
    text = " ".join(sanitize(str(value)).split())
    if len(text) > limit:
        text = text[: limit - 1] + "…"
    return text.replace("\\", "\\\\").replace("|", "\\|").replace("`", "'").replace("<", "&lt;")


def fmt(score: Any) -> str:
    return "—" if score is None else f"{float(score):.3f}"


def score_chart(points: Sequence[Mapping[str, Any]]) -> str:
    """A text bar chart of the val score per night (``night``, ``score``, ``label``)."""
    if not points:
        return "(no scored nights yet)"
    lines = []
    for p in points:
        score = p.get("score")
        if score is None:
            bar = " " * BAR_WIDTH
            value = "  —  "
        else:
            filled = round(max(0.0, min(1.0, float(score))) * BAR_WIDTH)
            bar = "█" * filled + "·" * (BAR_WIDTH - filled)
            value = f"{float(score):.3f}"
        label = str(p.get("label", ""))
        lines.append(f"night {int(p['night']):>4}  {bar}  {value}  {label}".rstrip())
    return "```\n" + "\n".join(lines) + "\n```"


_METRICS = {
    "hard": "share of tasks fully met",
    "soft": "average partial credit per task",
    "mixed": "a blend of tasks fully met and partial credit",
}


def _metric(name: Any) -> str:
    meaning = _METRICS.get(str(name))
    return f"metric {cell(name)}: {meaning}" if meaning else f"metric {cell(name)}"


def _summary(r: Mapping[str, Any]) -> str:
    status = r.get("status")
    tasks = r.get("tasks", {})
    if status == "failed":
        return (
            f"**This night failed** during `{cell(r.get('failed_stage', '?'))}`: "
            f"{cell(r.get('reason', ''), 400)}. Nothing was staged and the harvest cursor did "
            "not move, so the next night retries the same sessions. The diagnostics file "
            "has the per-endpoint errors."
        )
    if r.get("result") == "no_tasks":
        return (
            f"skillopt read {r.get('n_sessions', 0)} new session(s) and found no task it "
            "could replay and judge, so there was nothing to learn tonight."
        )
    parts = [
        f"skillopt read **{r.get('n_sessions', 0)}** recent agent session(s) and turned them "
        f"into **{tasks.get('total', 0)}** recurring task(s) "
        f"({tasks.get('train', 0)} to learn from, {tasks.get('val', 0)} held out to check "
        f"edits, {tasks.get('test', 0)} kept for a final test)."
    ]
    n_prop = len(r.get("proposed_edits", []))
    n_acc = len(r.get("accepted_edits", []))
    if n_prop:
        parts.append(
            f"The optimizer proposed {n_prop} edit(s) to the skill/memory; the validation "
            f"gate kept **{n_acc}**."
        )
    else:
        reasons = "; ".join(r.get("no_edit_reasons", [])[:2])
        parts.append(f"No edit was proposed ({cell(reasons, 300) or 'no reason recorded'}).")
    parts.append(
        f"On the held-out tasks the score went from **{fmt(r.get('baseline'))}** to "
        f"**{fmt(r.get('candidate'))}** ({_metric(r.get('metric', 'mixed'))}); "
        f"decision: **{r.get('gate_action', 'reject')}**."
    )
    if r.get("result") == "budget_reached":
        parts.append("The night stopped early because its spend cap was reached.")
    if r.get("leaked"):
        parts.append(
            "⚠ **Not validated**: the held-out set overlapped the training set or was "
            "empty, so no edit can be trusted tonight."
        )
    if r.get("accepted"):
        if r.get("dry_run"):
            parts.append("This was a dry run: nothing was staged.")
        else:
            parts.append(
                "The improved documents are **staged, not live**: review them in "
                f"`{cell(r.get('proposal_dir', ''), 300)}` and run `skillopt-sleep adopt` to "
                "use them."
            )
    else:
        parts.append("Your live skill and memory files were not changed.")
    return " ".join(parts)


def _edits(title: str, edits: Sequence[Mapping[str, Any]], note: str = "") -> list[str]:
    if not edits:
        return []
    out = [f"## {title}", ""]
    if note:
        out += [note, ""]
    for e in edits:
        why = f" — _{cell(e.get('rationale', ''), 200)}_" if e.get("rationale") else ""
        anchor = f" (anchor: “{cell(e.get('anchor', ''), 80)}”)" if e.get("anchor") else ""
        out.append(
            f"- **{cell(e.get('target', ''))}/{cell(e.get('op', ''))}**: "
            f"{cell(e.get('content', ''), 300)}{anchor}{why}"
        )
    return [*out, ""]


def _trials(trials: Sequence[Mapping[str, Any]]) -> list[str]:
    if not trials:
        return []
    out = [
        "## Gate trials",
        "",
        "Each trial measures a candidate on the held-out tasks against the best documents "
        "so far (the final check uses fresh samples against tonight's starting point).",
        "",
        "| Trial | Target | Edits tried | Baseline | Candidate | Decision |",
        "|---|---|---|---|---|---|",
    ]
    for t in trials:
        d = t.get("decision") or {}
        decision = d.get("action", "—") if d else (t.get("note") or "not measured")
        edits = "; ".join(
            cell(e.get("content", ""), 50) for e in t.get("applied") or t.get("edits", [])
        )
        out.append(
            f"| {cell(t.get('name', ''))} | {cell(t.get('target', ''))} | {edits or '—'} | "
            f"{fmt(d.get('baseline'))} | {fmt(d.get('candidate'))} | {cell(decision)} |"
        )
    out += [
        "",
        "Decisions: `accept_new_best` = better than the best so far, kept; `reject` = not "
        "better (a tie is a reject); `reject_unverified` = better, but the held-out set could "
        "not be trusted. Rows ending in `.single` try one edit of a rejected batch alone, "
        "`.union` the edits that helped, together.",
    ]
    return [*out, ""]


def _task_changes(r: Mapping[str, Any]) -> list[str]:
    deltas = r.get("task_deltas") or []
    if not deltas:
        return []
    intents = r.get("task_intents", {})
    out = [
        "## Held-out task changes (final check)",
        "",
        "| Task | Baseline | Candidate | Change |",
        "|---|---|---|---|",
    ]
    for d in deltas:
        name = intents.get(d.get("task_id"), d.get("task_id"))
        out.append(
            f"| {cell(name, 80)} | {fmt(d.get('baseline'))} | {fmt(d.get('candidate'))} | "
            f"{cell(d.get('status', ''))} |"
        )
    return [*out, ""]


def _spend(r: Mapping[str, Any]) -> list[str]:
    s = r.get("spend") or {}
    if not s:
        return []
    by_stage = ", ".join(
        f"{k} {v}" for k, v in sorted((s.get("calls_by_stage") or {}).items()) if v
    )
    out = [
        "## Spend",
        "",
        f"- model calls: {s.get('calls', 0)} ({by_stage or 'none'}); failed calls: "
        f"{s.get('failures', 0)}",
        f"- tokens: {s.get('tokens', 0)} (cap: calls {s.get('max_calls') or 'none'}, "
        f"tokens {s.get('max_tokens') or 'none'})",
    ]
    if r.get("estimate"):
        out.append(f"- estimated before the night: {cell(r['estimate'], 300)}")
    if s.get("budget_reached"):
        out.append(f"- **budget reached** ({s['budget_reached']}): the night stopped cleanly")
    if r.get("resumed"):
        out.append(f"- resumed after an interruption; {r.get('reused_rollouts', 0)} finished "
                   "rollouts were reused")  # fmt: skip
    return [*out, ""]


def render_markdown(r: Mapping[str, Any]) -> str:
    """``report.md`` from the ``report.json`` data."""
    title = cell(r.get("project_name") or r.get("project", "project"), 80)
    lines = [
        f"# Night {r.get('night', '?')} for {title}",
        "",
        f"Run `{cell(r.get('run_id', ''))}` · started {cell(r.get('started_at', ''))} · "
        f"finished {cell(r.get('ended_at', ''))} · status **{cell(r.get('status', ''))}**"
        + (" · **dry run**" if r.get("dry_run") else "")
        + (" · demo" if r.get("demo") else ""),
        "",
        "## In short",
        "",
        _summary(r),
        "",
        "## Held-out score across nights",
        "",
        "A score is the average, over the held-out tasks, of how well the agent's answers met "
        "each task (1.0 = every task fully met). Each bar scores the skill and memory a night "
        "ended with: the accepted candidate, or the unchanged documents.",
        "",
        score_chart(r.get("chart", [])),
        "",
    ]
    lines += _edits("Accepted edits", r.get("accepted_edits", []))
    lines += _edits(
        "Rejected by the gate",
        r.get("rejected_edits", []),
        "These were proposed but did not improve the held-out score (or broke other tasks).",
    )
    lines += _edits(
        "Proposed but changed nothing",
        r.get("unmatched_edits", []),
        "Duplicates of existing lines, or anchors that were not found.",
    )
    lines += _trials(r.get("trials", []))
    lines += _task_changes(r)
    if r.get("test") is not None:
        t = r["test"]
        lines += [
            "## Test split",
            "",
            f"{t.get('n', 0)} task(s) never seen by reflection or the gate, scored after the "
            f"decision: **{fmt(t.get('score'))}** with tonight's final documents"
            + (f" (before: {fmt(t.get('before'))})" if t.get("before") is not None else "")
            + ".",
            "",
        ]
    lines += _spend(r)
    notes = r.get("notes", [])
    if notes:
        lines += ["## Notes", "", *[f"- {cell(n, 300)}" for n in notes], ""]
    lines += [
        "## What next",
        "",
        "- `skillopt-sleep status` lists recent nights and pending proposals (give it the "
        "same `--config` and `--project` as the night, if the night had them).",
        "- `skillopt-sleep adopt` copies a staged proposal over the live file, after checking "
        "that the live file has not changed since the night read it (a backup is kept).",
        f"- Details: `trials.json`, `rollouts.jsonl` and `diagnostics.json` in "
        f"`{cell(r.get('run_dir', ''), 300)}`.",
        "",
    ]
    return "\n".join(lines)
