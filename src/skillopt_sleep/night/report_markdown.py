"""The night's human report (``report.md``), rendered from the machine report (``report.json``).

Pure functions over plain data, so the two can never disagree. The Markdown is written for
someone who has never seen the project: it says what happened in one paragraph first, then
shows the evidence (score chart across nights, gate trials, edits, per-task changes).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from skillopt.redact import sanitize
from skillopt_sleep.night_end import NightResult, PartStatus, RunStatus

__all__ = [
    "BAR_WIDTH",
    "cell",
    "fmt",
    "mode_banner",
    "render_markdown",
    "score_chart",
    "skills_section",
]

BAR_WIDTH = 30


def cell(value: Any, limit: int = 120) -> str:
    """Text safe inside a Markdown table cell: one line, pipes and backticks escaped."""
    text = " ".join(sanitize(str(value)).split())
    if len(text) > limit:
        text = text[: limit - 1] + "…"
    return text.replace("\\", "\\\\").replace("|", "\\|").replace("`", "'").replace("<", "&lt;")


def fmt(score: Any) -> str:
    return "—" if score is None else f"{float(score):.3f}"


def _curve_table(points: Sequence[Mapping[str, Any]]) -> list[str]:
    rows = [p for p in points if "accepted" in p]
    if not rows:
        return []
    out = [
        "| Night | Adopted docs | Staged docs | Kept | Rejected | Untested | Tasks |",
        "|---|---|---|---|---|---|---|",
    ]
    for p in rows:
        out.append(
            f"| {p.get('night')} | {fmt(p.get('baseline'))} | {fmt(p.get('candidate'))} | "
            f"{p.get('accepted', 0)} | {p.get('rejected', 0)} | {p.get('untested', 0)} | "
            f"{p.get('tasks', 0)} |"
        )
    return [*out, ""]


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


def _budget_stop(r: Mapping[str, Any], *, decided: bool) -> str:
    """What a night stopped by its spend cap did not get to, and which cap to raise."""
    spend = r.get("spend") or {}
    which = str(spend.get("budget_reached") or "calls")
    cap = spend.get(f"max_{which}")
    used = spend.get(which)
    when = "" if decided else ", before any decision (nothing was staged)"
    short = isinstance(used, int) and isinstance(cap, int) and used < cap
    why = "its spend cap could not cover what was left" if short else "its spend cap was reached"
    return (
        f"The night stopped early because {why}{when}: {which} "
        f"{used if used is not None else '?'} of {cap or '?'} (raise `budget.max_{which}` to "
        "let a night finish)."
    )


def _ended_early(r: Mapping[str, Any]) -> str | None:
    """The summary of a night that failed or had nothing to learn from, else None."""
    if r.get("status") == RunStatus.FAILED:
        return (
            f"**This night failed** during `{cell(r.get('failed_stage', '?'))}`: "
            f"{cell(r.get('reason', ''), 400)}. Nothing was staged and the harvest cursor did "
            "not move"
            + (
                ", and the next night resumes this one, keeping every call that answered."
                if r.get("resumable")
                else ", so the next night retries the same sessions."
            )
            + " The diagnostics file has the per-endpoint errors."
        )
    if r.get("result") == "no_tasks":
        why = (r.get("harvest") or {}).get("why_nothing") or (
            "none of them held a task it could replay and judge"
        )
        return (
            f"skillopt read {r.get('n_sessions', 0)} new session(s) and had no task to learn "
            f"from tonight: {cell(why, 600)}"
        )
    return None


def _what_was_read(r: Mapping[str, Any], *, off: bool) -> str:
    """What the night read and how it held its tasks out."""
    tasks = r.get("tasks", {})
    recalled = tasks.get("recalled", 0)
    origin = f", {recalled} of them recalled from earlier nights" if recalled else ""
    read = (
        "skillopt read the tasks file" if tasks.get("source") == "tasks_file"
        else f"skillopt read **{r.get('n_sessions', 0)}** new agent session(s)"
    )  # fmt: skip
    return (
        f"{read} and worked on **{tasks.get('total', 0)}** recurring task(s){origin}. "
        + ("With the gate off no task was held out: the optimizer reflected once per "
           "document over every task's answers" if off else
           f"Each of the {tasks.get('learnable', 0)} learnable tasks was held out once: the "
           f"tasks were split into {tasks.get('folds', 0)} folds, and an edit proposed from "
           "some folds was checked only on a fold its reflection never saw")
        + (f"; {tasks.get('test')} task(s) were kept for a final test." if tasks.get("test")
           else ".")
    )  # fmt: skip


def _edits_said(r: Mapping[str, Any], *, off: bool, budget: bool) -> str:
    """What the optimizer proposed and the gate kept."""
    n_prop = len({e.get("content") for e in r.get("proposed_edits", [])})
    n_acc = len(r.get("accepted_edits", []))
    n_untested = len(r.get("untested_edits", []))
    if off and n_acc:
        return (
            f"The optimizer proposed {n_acc} edit(s) that applied; with the gate off every "
            "one was kept, **none validated**."
        )
    if n_prop:
        return (
            f"The optimizer proposed {n_prop} distinct edit(s) to the skill/memory; the "
            f"validation gate kept **{n_acc}**"
            + (f", and {n_untested} could not be tested tonight (no held-out task exercised "
               "them: they are carried to a later night)" if n_untested else "")
            + "."
        )  # fmt: skip
    if budget:
        return "The spend cap was reached before the optimizer proposed any edit."
    reasons = "; ".join(r.get("no_edit_reasons", [])[:2])
    return f"No edit was proposed ({cell(reasons, 300) or 'no reason recorded'})."


def _summary(r: Mapping[str, Any]) -> str:
    early = _ended_early(r)
    if early is not None:
        return early
    off = r.get("gate_mode") == "off"  # one reflection per document, nothing held out
    parts = [_what_was_read(r, off=off)]
    parts += [line for line in (_skills_summary(r),) if line]
    budget = r.get("result") == NightResult.BUDGET_REACHED
    parts.append(_edits_said(r, off=off, budget=budget))
    decision = cell(r.get("gate_action") or "")
    if decision or not budget:
        parts.append(
            f"Measured on every learnable task, the score went from "
            f"**{fmt(r.get('baseline'))}** to **{fmt(r.get('candidate'))}** "
            f"({_metric(r.get('metric', 'mixed'))}); decision: "
            f"**{decision or 'none (the night stopped before a decision)'}**."
        )
    if budget:
        parts.append(_budget_stop(r, decided=bool(decision)))
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
        ident = f"`{cell(e['id'])}` " if e.get("id") else ""
        out.append(
            f"- {ident}**{cell(e.get('target', ''))}/{cell(e.get('op', ''))}**: "
            f"{cell(e.get('content', ''), 300)}{anchor}{why}"
        )
    return [*out, ""]


def _watched(watched: Sequence[Mapping[str, Any]]) -> list[str]:
    """Adopted learned lines and the corrections on their requests before and after."""
    if not watched:
        return []
    out = [
        "## Adopted lines, watched",
        "",
        "Each adopted learned line, and the sessions since that asked what it was meant to "
        "fix: how many, and how many the user corrected the agent in, before and after it "
        "was adopted. A correction after adoption flags the line.",
        "",
        "| Line | Adopted | Before: corrections / sessions | After: corrections / sessions "
        "| Last correction after |",
        "|---|---|---|---|---|",
    ]
    for w in watched:
        before, after = w.get("before") or {}, w.get("after") or {}
        flag = "**flagged** " if w.get("contradicted") else ""
        out.append(
            f"| {flag}`{cell(w.get('edit_id', ''))}` {cell(w.get('line', ''), 120)} | "
            f"night {w.get('night')}, {cell(str(w.get('adopted_at') or '')[:10])} | "
            f"{before.get('corrections', 0)} / {before.get('sessions', 0)} | "
            f"{after.get('corrections', 0)} / {after.get('sessions', 0)} | "
            f"{cell(str(after.get('last_correction') or '—')[:10])} |"
        )
    flagged = [w for w in watched if w.get("contradicted")]
    if flagged:
        out += ["", str(flagged[0].get("flag", ""))]
    tonight = [w for w in flagged if w.get("tonight")]
    if tonight:
        out += ["", "Tonight, the removal of each flagged line went through the gate:", ""]
    for w in tonight:
        done = w["tonight"]
        out.append(
            f"- `{cell(w.get('edit_id', ''))}` **{cell(done.get('removal', ''))}**: "
            f"{cell(done.get('why', ''), 300)}"
        )
    return [*out, ""]


def _trials(trials: Sequence[Mapping[str, Any]]) -> list[str]:
    if not trials:
        return []
    out = [
        "## Gate trials",
        "",
        "Each single trial measures one edit on its held-out fold against the best documents "
        "so far, paired per task and sample; the union checks the kept edits together on "
        "every task; the final check compares the night's documents with the live ones.",
        "",
        "| Trial | Target | Edits tried | Baseline | Candidate | p | Decision |",
        "|---|---|---|---|---|---|---|",
    ]
    for t in trials:
        d = t.get("decision") or {}
        decision = d.get("action", "—") if d else (t.get("note") or "not measured")
        p = (d.get("arithmetic") or {}).get("p_improve")
        edits = "; ".join(
            cell(e.get("content", ""), 50) for e in t.get("applied") or t.get("edits", [])
        )
        out.append(
            f"| {cell(t.get('name', ''))} | {cell(t.get('target', ''))} | {edits or '—'} | "
            f"{fmt(d.get('baseline'))} | {fmt(d.get('candidate'))} | "
            f"{'—' if p is None else f'{float(p):.3g}'} | {cell(decision)} |"
        )
    out += [
        "",
        "Decisions: `accept_new_best` = a significant paired gain (p at most 1 - confidence) "
        "and no held-out task significantly worse; `reject` = not that; `untested` = no "
        "held-out task changed at all (carried to a later night, not a tie); "
        "`reject_unverified` = it would pass, but it was measured on a task its reflection "
        "saw.",
    ]
    return [*out, ""]


def _edit_stories(r: Mapping[str, Any]) -> list[str]:
    """Per distinct edit: what motivated it, where it was tested, how those tasks moved."""
    singles = [t for t in r.get("trials", []) if t.get("kind") == "single" and t.get("edits")]
    if not singles:
        return []
    intents = r.get("task_intents", {})
    accepted = {e.get("content") for e in r.get("accepted_edits", [])}
    stories: dict[str, list[Mapping[str, Any]]] = {}
    for t in singles:
        stories.setdefault(str(t["edits"][0].get("content", "")), []).append(t)
    out = ["## Every edit, one by one", ""]
    for content, trials in stories.items():
        verdicts = [t.get("verdict", "") for t in trials]
        overall = "kept" if content in accepted else "rejected"
        if content not in accepted and set(verdicts) <= {"untested", "not_run"}:
            overall = "untested (carried to a later night)"
        out.append(f"- **{cell(content, 200)}** — {overall}")
        motivated = sorted({m for t in trials for m in t.get("motivated_by", [])})
        if motivated:
            names = "; ".join(cell(intents.get(m, m), 60) for m in motivated[:4])
            more = f" (+{len(motivated) - 4} more)" if len(motivated) > 4 else ""
            out.append(f"  - motivated by failures of: {names}{more}")
        for t in trials:
            out.append(f"  - {_tested(t, intents)}")
    return [*out, ""]


def _tested(trial: Mapping[str, Any], intents: Mapping[str, str]) -> str:
    d = trial.get("decision")
    if not d:
        return f"fold {trial.get('fold')}: {cell(trial.get('note') or 'not measured', 200)}"
    a = d.get("arithmetic") or {}
    moved = ", ".join(
        f"{cell(intents.get(p['task_id'], p['task_id']), 40)} {fmt(p['baseline'])}→"
        f"{fmt(p['candidate'])}"
        for p in a.get("per_task", [])
        if p.get("delta")
    )
    reasons = "; ".join(a.get("reasons", [])) or a.get("rule", "")
    return (
        f"fold {trial.get('fold')}: {trial.get('verdict')} on {len(a.get('validated_on', []))} "
        f"held-out task(s), mean delta {float(a.get('mean_delta') or 0):+.3f}, "
        f"p={float(a.get('p_improve', 1)):.3g}"
        + (f"; moved: {moved}" if moved else "; no task moved")
        + (f" ({cell(reasons, 200)})" if reasons and trial.get("verdict") != "accepted" else "")
    )


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


def _archive(r: Mapping[str, Any]) -> list[str]:
    a = r.get("archive") or {}
    h = r.get("harvest") or {}
    if not a:
        return []
    out = [
        "## Task archive",
        "",
        f"- {a.get('tasks', 0)} task(s) archived: {a.get('active', 0)} active "
        f"({a.get('failing', 0)} still failing), {a.get('retired', 0)} retired (solved for "
        "long enough, or no longer asked for; kept, not replayed)",
        f"- tonight: {(r.get('tasks') or {}).get('new', 0)} new, "
        f"{(r.get('tasks') or {}).get('recalled', 0)} recalled from earlier nights",
        f"- sessions harvested so far: {a.get('harvested_sessions', 0)}; waiting for later "
        f"nights (backlog): {h.get('backlog', a.get('backlog', 0))}",
    ]
    if a.get("pending_edits"):
        out.append(f"- edits carried to a later night (untested so far): {a['pending_edits']}")
    retired = (r.get("archive_changes") or {}).get("retired") or []
    if retired:
        out.append(f"- retired tonight: {len(retired)}")
    superseded = (r.get("archive_changes") or {}).get("superseded") or []
    if superseded:
        out.append(
            f"- superseded tonight: {len(superseded)} (newer sessions contradict them: kept, "
            "never replayed)"
        )
        out += [f"  - {cell(m.get('task_id'), 80)}: {cell(m.get('why'), 300)}" for m in superseded]
    out += [f"- {cell(n, 300)}" for n in a.get("supersessions") or []]
    out += [f"- {cell(n, 300)}" for n in h.get("notes", [])]
    return [*out, ""]


def _estimated(spend: Mapping[str, Any]) -> str:
    """Tokens a member did not report (the copilot CLI reports none) are counted from text
    length: say how many of the total are such estimates."""
    estimated = int(spend.get("estimated_tokens") or 0)
    if not estimated:
        return ""
    return f", {estimated} of them estimated (a member reported no usage)"


def _ledger(ledger: Mapping[str, Any]) -> list[str]:
    """What the calls bought: cache hits apart from calls, the provider-cached share of the
    prompt tokens, calls that changed no decision, and a line per stage."""
    if not ledger:
        return []
    share = ledger.get("cached_share")
    cached = f" ({share:.0%} of prompt tokens)" if isinstance(share, int | float) else ""
    out = [
        f"- repeated requests answered from the response cache (no call): "
        f"{ledger.get('cache_hits', 0)}; prompt tokens served from the provider's prompt "
        f"cache: {ledger.get('cached_tokens', 0)}{cached}",
        f"- calls that changed no decision: {ledger.get('no_decision', 0)} (repeat samples of "
        "a task whose samples in that stage all scored alike)",
        f"- calls that could not change a decision: {ledger.get('repeats', 0)} (on a model the "
        "noise probe judged consistent, a task asked again under documents the night already "
        "had its answer for)",
    ]
    if ledger.get("read_backs"):  # only a consistent night reads back (skillopt_sleep.stand_in)
        out.append(
            f"- calls saved by reading back: {ledger.get('saved', 0)} ({ledger['read_backs']} "
            "samples that were no decision's candidate took the answer the night already had "
            "for their task and documents, each judged in its own sample)"
        )
    stages = ledger.get("stages") or {}
    if stages:
        out += [
            "",
            "| stage | calls | cache hits | tokens | cached tokens | no decision | repeats |",
            "|---|---:|---:|---:|---:|---:|---:|",
            *(
                f"| {cell(name, 40)} | {row.get('calls', 0)} | {row.get('cache_hits', 0)} | "
                f"{row.get('tokens', 0)} | {row.get('cached_tokens', 0)} | "
                f"{row.get('no_decision', 0)} | {row.get('repeats', 0)} |"
                for name, row in stages.items()
            ),
            "",
        ]
    return out


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
        f"- tokens: {s.get('tokens', 0)}{_estimated(s)} (cap: calls "
        f"{s.get('max_calls') or 'none'}, tokens {s.get('max_tokens') or 'none'})",
    ]
    out += _ledger(r.get("ledger") or {})
    if r.get("estimate"):
        out.append(f"- estimated before the night: {cell(r['estimate'], 300)}")
    if s.get("budget_reached"):
        out.append(f"- **budget reached** ({s['budget_reached']}): the night stopped cleanly")
    if r.get("resumed"):
        out.append(f"- resumed after an interruption; {r.get('reused_rollouts', 0)} finished "
                   "rollouts were reused")  # fmt: skip
    return [*out, ""]


def _skills_summary(r: Mapping[str, Any]) -> str:
    """One sentence on the project's own skills, when the night fanned out to them."""
    rows = r.get("skills") or []
    if not rows:
        return ""
    routed = sum(int(row.get("tasks", 0)) for row in rows)
    staged = [cell(row.get("name")) for row in rows if row.get("staged")]
    return (
        f"{routed} of the tasks went to {len(rows)} of your own skills, each learning and "
        f"gated on its own tasks (see \"Your skills\"); what follows is about the "
        f"{r.get('managed_tasks', 0)} task(s) left to the managed skill and memory."
        + (f" Staged for your skills: **{', '.join(staged)}** (`skillopt-sleep adopt --skill "
           "NAME`)." if staged else "")
    )  # fmt: skip


def skills_section(r: Mapping[str, Any]) -> list[str]:
    """The project's own skills: what each learned tonight, or why it was not tried."""
    rows = r.get("skills") or []
    if not rows:
        return []
    out = [
        "## Your skills",
        "",
        f"Each skill learned on the tasks routed to it ({r.get('managed_tasks', 0)} task(s) "
        "stayed with the managed skill); adopt one with `skillopt-sleep adopt --skill NAME`.",
        "",
        "| skill | tasks (hint / match) | result | before | after | why |",
        "|---|---|---|---|---|---|",
    ]
    for row in rows:
        out.append(
            f"| {cell(row.get('name'))} | {row.get('tasks', 0)} ({row.get('routed_by_hint', 0)} "
            f"/ {row.get('routed_by_match', 0)}) | {cell(row.get('status'))}"
            + (" (staged)" if row.get("staged") else "")
            + f" | {fmt(row.get('baseline'))} | {fmt(row.get('candidate'))} | "
            f"{cell(row.get('reason') or row.get('gate_action') or '', 200)} |"
        )
    out += shared_lines(r.get("shared_memory") or {})
    routes = [x for x in r.get("skill_routing") or [] if x.get("skill")]
    if routes:
        out += ["", "Routed tasks:", ""]
        out += [f"- {cell(x.get('task_id'))} -> {cell(x.get('skill'))}: {cell(x.get('why'), 200)}"
                for x in routes]  # fmt: skip
    return [*out, ""]


def shared_lines(shared: Mapping[str, Any]) -> list[str]:
    """What the memory step for the rules the skills share did (``shared_memory``)."""
    status = shared.get("status")
    if not status or status == PartStatus.NOT_NEEDED:
        return []
    helped = ", ".join(cell(g) for g in shared.get("helped") or []) or "none"
    edits = "; ".join(cell(e, 200) for e in shared.get("accepted_edits") or [])
    if status == PartStatus.ACCEPTED:
        line = (
            f"Rules your skills share, staged in memory (every skill reads it; gated on the "
            f"tasks of {', '.join(cell(g) for g in shared.get('groups') or [])}, helped "
            f"{helped}): {edits}."
        )
    else:
        line = (
            f"Rules your skills share: {cell(status).replace('_', ' ')}"
            + (f" ({cell(shared.get('reason'), 200)})" if shared.get("reason") else "")
            + "."
        )
    return ["", line]


def mode_banner(mode: str) -> str:
    """The warning for a night whose gate did not validate its edits fully ("" if it did)."""
    if mode == "greedy":
        return (
            "Gate mode **greedy**: each edit had to help on tasks its reflection never saw, "
            "but the documents were not checked against your live ones at the end; the "
            "scores are not a measured gain."
        )
    if mode == "off":
        return (
            "Gate mode **off**: every edit that applied was kept without any validation; "
            "review the proposal before you adopt it."
        )
    return ""


def _opening(r: Mapping[str, Any]) -> list[str]:
    """The title, the summary and the learning curve."""
    title = cell(r.get("project_name") or r.get("project", "project"), 80)
    return [
        f"# Night {r.get('night', '?')} for {title}",
        "",
        f"Run `{cell(r.get('run_id', ''))}` · started {cell(r.get('started_at', ''))} · "
        f"finished {cell(r.get('ended_at', ''))} · status **{cell(r.get('status', ''))}**"
        + (" · **dry run**" if r.get("dry_run") else "")
        + (" · demo" if r.get("demo") else ""),
        "",
        "## In short",
        "",
        *[f"> {line}\n" for line in (mode_banner(str(r.get("gate_mode") or "")),) if line],
        *[f"> {cell(w, 400)}\n" for w in r.get("advisories") or ()],
        _summary(r),
        "",
        "## Learning curve",
        "",
        "Each night starts from the documents you had adopted; the bar is their score on that "
        "night's tasks (the average over tasks of how well the agent's answers met each task, "
        "1.0 = every task fully met). Tonight's bar is the score of the documents it staged "
        "(or of the unchanged ones). A rising curve is the agent getting better at your work.",
        "",
        score_chart(r.get("chart", [])),
        "",
        *_curve_table(r.get("chart", [])),
    ]


def _test_split(r: Mapping[str, Any]) -> list[str]:
    """The test split's score, when the night had one."""
    if r.get("test") is None:
        return []
    t = r["test"]
    return [
        "## Test split",
        "",
        f"{t.get('n', 0)} task(s) never seen by reflection or the gate, scored after the "
        f"decision: **{fmt(t.get('score'))}** with tonight's final documents"
        + (f" (before: {fmt(t.get('before'))})" if t.get("before") is not None else "")
        + ".",
        "",
    ]


def _what_next(r: Mapping[str, Any]) -> list[str]:
    """The commands that come after a night, and where its details are."""
    return [
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


def _set_aside(tasks: Sequence[Mapping[str, Any]], intents: Mapping[str, str]) -> list[str]:
    """The tasks the night could not reach: every decision left them untested."""
    if not tasks:
        return []
    lines = [
        "## Tasks set aside (left untested)",
        "",
        "Their calls kept failing while the other tasks' calls answered, so the night stopped "
        "asking and decided on the rest. Nothing was learned from or about them tonight; the "
        "next night tries them again.",
        "",
    ]
    for t in tasks:
        said = intents.get(str(t["task"]), "")
        intent = f" ({cell(said, 80)})" if said else ""
        lines.append(f"- `{t['task']}`{intent}: {cell(str(t.get('why', '')), 200)}")
    return [*lines, ""]


def render_markdown(r: Mapping[str, Any]) -> str:
    """``report.md`` from the ``report.json`` data."""
    lines = _opening(r)
    lines += _watched(r.get("watched_lines") or [])
    lines += _set_aside(r.get("set_aside") or [], r.get("task_intents") or {})
    accepted = r.get("accepted_edits", [])
    some = (
        "Adopt only some of them with `skillopt-sleep adopt --edit ID` (repeatable): the "
        "subset is checked against your live documents first, as the night's final check."
        if len(accepted) > 1 and r.get("proposal_dir")
        else ""
    )
    lines += _edits("Accepted edits", accepted, some)
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
    lines += skills_section(r)
    lines += _edit_stories(r)
    lines += _trials(r.get("trials", []))
    lines += _task_changes(r)
    lines += _test_split(r)
    lines += _archive(r)
    lines += _spend(r)
    notes = r.get("notes", [])
    if notes:
        lines += ["## Notes", "", *[f"- {cell(n, 300)}" for n in notes], ""]
    lines += _what_next(r)
    return "\n".join(lines)
