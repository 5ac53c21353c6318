"""Adopting some of a night's kept edits (``adopt --edit ID``), checked again first.

Edits that passed the night's final check together may not pass apart: one may only have
helped alongside another. So a subset is measured before it is adopted:

1. **Plan** (:func:`plan_subset`, no model call). The night's kept edits by id
   (:mod:`skillopt_sleep.edit_ids`); every id asked for must be one of them, and the
   night's proposal of the managed skill / memory must still be pending. The live
   documents are read as the night read them (:func:`.night.live.read_documents`) and must
   still hold the bytes the night pinned. The subset is applied to them in the night's
   order (:func:`.night.learn.agree.apply_learned`); the tasks are the night's learnable tasks
   that stayed with the managed skill. The plan says what the check may cost.
2. **Check** (:func:`check_subset`). The night's final check
   (:func:`.night.learn.rounds.paired_check`): the subset's documents against the live ones on
   every task, paired per task and sample, under the same gate. It runs as a small run of
   its own in ``<night>/subsets/<id>/`` (journal, rollouts), its replayer preloaded with
   the night's rollouts, so the live documents' samples the night already drew are read
   back, not paid for again.
3. **Adopt** (:func:`adopt_checked`), only when the check accepts: the subset's documents
   are staged in the check's folder exactly as a night stages (skill store version, pinned
   proposal) and adopted transactionally (:func:`skillopt_sleep.adopt.adopt`). The night's
   own managed proposals then count as settled (``subset.json``). A rejected subset changes
   nothing; the caller says why.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from skillopt.atomicio import atomic_write_json
from skillopt.backends.base import Pool
from skillopt.errors import RefusedError, SkillOptError
from skillopt.progress import Progress
from skillopt.types import EditRecord, GateDecision, ReferenceKind, Split, TaskRecord
from skillopt_sleep.adopt import SUBSET_FILE, SUBSETS_DIR, AdoptResult, adopt, adopted_names
from skillopt_sleep.config import SleepConfig
from skillopt_sleep.edit_ids import edit_id
from skillopt_sleep.night.learn.agree import apply_learned
from skillopt_sleep.night.learn.crossfit import ADOPT
from skillopt_sleep.night.learn.decision import Decision
from skillopt_sleep.night.learn.rounds import paired_check
from skillopt_sleep.night.live import read_documents
from skillopt_sleep.night.night_state import Night
from skillopt_sleep.night.outcome import Live
from skillopt_sleep.night.proposal import stage_proposal
from skillopt_sleep.replay import Docs, Job, calls_per_sample
from skillopt_sleep.rundir import RunDir, RunStatus, utc_now
from skillopt_sleep.staging import load_manifest, sha256_file

__all__ = ["SubsetCheck", "SubsetPlan", "adopt_checked", "check_subset", "plan_subset"]


@dataclass(frozen=True, slots=True, kw_only=True)
class SubsetPlan:
    """What a subset check measures, and what it may cost, before any model call."""

    run_dir: Path
    night: int
    ids: tuple[str, ...]
    chosen: tuple[EditRecord, ...]
    left_out: tuple[str, ...]  # ids of the night's kept edits not chosen
    tasks: tuple[TaskRecord, ...]
    live: Live
    start: Docs
    docs: Docs
    settles: tuple[str, ...]  # the night's proposals this adoption stands in for
    calls_at_least: int
    calls_at_most: int

    def cost_line(self) -> str:
        return (
            f"checking {len(self.chosen)} of the night's {len(self.chosen) + len(self.left_out)} "
            f"kept edit(s) against the live documents on {len(self.tasks)} task(s), as the "
            f"night's final check: {self.calls_at_least} to {self.calls_at_most} model "
            "call(s) (samples the night already drew are read back, not paid again)"
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class SubsetCheck:
    """The check's gate decision, what it spent, and its folder."""

    decision: GateDecision | None
    calls: int
    tokens: int
    folder: Path
    failure: str = ""

    @property
    def passed(self) -> bool:
        return self.decision is not None and self.decision.accepted and not self.failure

    def why(self) -> str:
        """Why the subset was not adopted (empty when it passed)."""
        if self.failure:
            return f"the check could not finish: {self.failure}"
        d = self.decision
        if d is None or d.accepted:
            return ""
        blocked = " (a task got significantly worse)" if d.blocked_by_regression else ""
        return (
            f"the chosen edits alone did not pass the gate ({d.action.value}{blocked}: "
            f"{d.candidate:.3f} against {d.baseline:.3f} for the live documents, "
            f"p = {_p(d)}); nothing was changed"
        )

    def to_dict(self) -> dict[str, Any]:
        d = self.decision
        return {
            "passed": self.passed,
            "action": d.action.value if d else "",
            "baseline": d.baseline if d else None,
            "candidate": d.candidate if d else None,
            "p_improve": d.arithmetic.get("p_improve") if d else None,
            "calls": self.calls,
            "tokens": self.tokens,
            "folder": str(self.folder),
            "why": self.why(),
        }


def _p(decision: GateDecision) -> str:
    p = decision.arithmetic.get("p_improve")
    return "—" if p is None else f"{float(p):.3g}"


def _report(run_dir: Path) -> dict[str, Any]:
    try:
        data = json.loads((run_dir / "report.json").read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise RefusedError(f"{run_dir}: no readable report.json ({exc})") from None
    if not isinstance(data, dict):
        raise RefusedError(f"{run_dir}: report.json is not an object")
    return data


def _choose(
    kept: list[dict[str, Any]], ids: list[str], night: int
) -> tuple[list[EditRecord], list[str]]:
    """The kept edits ``ids`` name (in the night's order), and the ids left out."""
    by_id = {str(e.get("id") or edit_id(e)): e for e in kept}
    wanted = list(dict.fromkeys(i.strip().lower() for i in ids))
    unknown = [i for i in wanted if i not in by_id]
    if unknown:
        listed = ", ".join(by_id) or "none"
        raise RefusedError(
            f"night {night} kept no edit with id {', '.join(unknown)} (its kept edits: "
            f"{listed}; `skillopt-sleep status` lists them)"
        )
    fields = ("target", "op", "content", "anchor", "rationale")
    chosen = [
        EditRecord.from_dict({k: e[k] for k in fields if k in e})
        for i, e in by_id.items()
        if i in wanted
    ]
    return chosen, [i for i in by_id if i not in wanted]


def _tasks(run: RunDir, report: dict[str, Any]) -> list[TaskRecord]:
    """The night's learnable tasks the managed skill and memory learned on."""
    routed = {
        str(r.get("task_id")): str(r.get("skill") or "")
        for r in report.get("skill_routing") or []
        if isinstance(r, dict)
    }
    tasks = [TaskRecord.from_dict(t) for t in run.read_tasks()]
    return [t for t in tasks if t.split is not Split.TEST and not routed.get(t.id)]


def _drawn(run_dir: Path) -> set[str]:
    """The samples the night drew that answered (their replay keys): read back, not paid."""
    return {str(r.get("key")) for r in RunDir.open(run_dir).read_rollouts() if not r.get("error")}


def plan_subset(
    cfg: SleepConfig, project: Path, run_dir: Path, ids: list[str], *, now: datetime
) -> SubsetPlan:
    """What checking edits ``ids`` of the night in ``run_dir`` takes (see the module doc);
    every reason it cannot be done is a :class:`RefusedError`, before any model call."""
    report = _report(run_dir)
    night = int(report.get("night") or 0)
    kept = [e for e in report.get("accepted_edits") or [] if isinstance(e, dict)]
    if not kept:
        raise RefusedError(f"night {night} kept no edit of the managed skill or memory")
    chosen, left_out = _choose(kept, ids, night)
    entries = [e for e in load_manifest(run_dir).entries if not e.fanout]
    done = adopted_names(run_dir)
    if not entries or any(e.name in done for e in entries):
        raise RefusedError(
            f"night {night}'s proposal of the managed skill and memory was already adopted "
            "(or there is none): there is nothing to choose from"
        )
    live, _ = read_documents(cfg, project, run_id=run_dir.name, now=now, record=False)
    pins = {Path(e.live_path): e.live_sha256 for e in entries}
    for path, pinned in pins.items():
        if sha256_file(path) != pinned:
            raise RefusedError(
                f"{path} changed since night {night} read it: its edits were measured "
                "against other documents (run a night again)"
            )
    start = Docs(skill=live.skill, memory=live.memory)
    docs = start
    for edit in chosen:
        docs, _ = apply_learned(docs, [edit], edit.target)
    if docs == start:
        raise RefusedError("the chosen edits change nothing in the live documents")
    tasks = _tasks(RunDir.open(run_dir), report)
    if not tasks:
        raise RefusedError(f"night {night} left no task to check the edits on")
    gate = cfg.gate
    drawn = _drawn(run_dir)
    first = range(ADOPT, ADOPT + gate.samples_per_task)  # the check's first wave

    undrawn = [
        (t, d) for t in tasks for d in (start, docs) for k in first
        if Job(task=t, docs=d, sample_id=k, phase="final", fresh=True).key not in drawn
    ]  # fmt: skip
    # at least: each sample's attempt, and one judge call of a rubric task's (an answer
    # both arms give alike is judged once: the same prompt and sample read back)
    new = [1 for _ in undrawn] + [
        1 for t in {t.id: t for t, _ in undrawn}.values()
        if t.reference_kind is ReferenceKind.RUBRIC
    ]  # fmt: skip
    return SubsetPlan(
        run_dir=run_dir,
        night=night,
        ids=tuple(edit_id(e) for e in chosen),
        chosen=tuple(chosen),
        left_out=tuple(left_out),
        tasks=tuple(tasks),
        live=live,
        start=start,
        docs=docs,
        settles=tuple(e.name for e in entries),
        calls_at_least=sum(new),
        calls_at_most=2 * sum(calls_per_sample(t) for t in tasks) * gate.max_samples_per_task,
    )


async def check_subset(
    cfg: SleepConfig, project: Path, plan: SubsetPlan, *, pool: Pool, progress: Progress
) -> tuple[SubsetCheck, Night]:
    """The night's final check on the subset, as a small run in ``<night>/subsets/``."""
    run = RunDir.create(
        plan.run_dir / SUBSETS_DIR,
        now=utc_now(),
        project=str(project),
        project_key=plan.run_dir.parent.parent.name,
        config=cfg.snapshot(),
        config_hash=cfg.fingerprint(),
        dry_run=False,
    )
    run.update(night=plan.night)
    night = Night(
        config=cfg, project=project, pool=pool, run=run, clock=utc_now, progress=progress,
        dry_run=False, resumed=False,
    )  # fmt: skip
    night.replayer.preload(RunDir.open(plan.run_dir).read_rollouts())
    atomic_write_json(
        run.path / SUBSET_FILE,
        {"night_run": plan.run_dir.name, "edits": list(plan.ids), "settles": list(plan.settles)},
    )
    decision, failure = None, ""
    night.begin("final")
    try:
        decision = await paired_check(
            night.learning, list(plan.tasks), plan.start, plan.docs, offset=ADOPT
        )
    except SkillOptError as exc:
        failure = str(exc)
    night.end("final", accepted=bool(decision and decision.accepted))
    outcome = "accepted" if decision and decision.accepted and not failure else "rejected"
    run.finish(RunStatus.FAILED if failure else RunStatus.COMPLETE, utc_now(),
               outcome=outcome, reason=failure)  # fmt: skip
    check = SubsetCheck(
        decision=decision,
        calls=night.spend.calls,
        tokens=night.spend.tokens,
        folder=run.path,
        failure=failure,
    )
    atomic_write_json(
        run.path / SUBSET_FILE,
        {"night_run": plan.run_dir.name, "edits": list(plan.ids),
         "settles": list(plan.settles), "check": check.to_dict()},
    )  # fmt: skip
    return check, night


def adopt_checked(
    cfg: SleepConfig, project: Path, plan: SubsetPlan, check: SubsetCheck, night: Night
) -> AdoptResult:
    """Stage the passed subset as a night stages, and adopt it (all or nothing)."""
    if not check.passed or check.decision is None:
        raise RefusedError(check.why() or "the subset did not pass its check")
    d = check.decision
    decision = Decision(
        accepted=True, action=d.action, baseline=d.baseline, candidate=d.candidate,
        final=d, docs=plan.docs, applied=list(plan.chosen), rejected=[],
    )  # fmt: skip
    stage_proposal(night, plan.live, decision, plan.night)
    roots = [str(r) for r in cfg.adopt_roots(project)]
    return adopt(check.folder, skill_roots=roots)
