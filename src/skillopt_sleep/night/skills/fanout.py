"""One night, many skills: each of the project's skills learns on its own tasks.

:meth:`Fanout.plan` finds the project's skills (:mod:`skillopt_sleep.skills.discover`) and
routes the night's learnable tasks (:mod:`skillopt_sleep.skills.route`); the managed skill
and memory keep the tasks no project skill claimed. Each skill with at least
``skills.min_tasks`` tasks then runs the same learning a night runs (cross-fitted rounds,
the final paired check), with its own held-out tasks only, memory read-only, in a run
directory of its own (``<run>/skills/<name>/...``: its rollouts, checkpoints and trials, so
a killed night resumes it too). Before them, :mod:`.shared` looks for memory rules the
tasks of two or more groups need; every group's night starts from that memory. Every
skill and the managed night run at once (:meth:`Fanout.alongside`), on the night's one
spend-capped pool: each skill's learning spends from the night's budget (its calls left,
its budget check, the reserve held back for a final check). A skill with too few
tasks is reported as skipped; a skill whose learning fails is reported as failed, never
sinking the other skills. Accepted skills are staged as per-skill proposals (``fanout``),
versioned in the skill store, and adopted only by name (``adopt --skill``) or ``--all``.
"""

from __future__ import annotations

import math
import os
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio

from skillopt.errors import (
    BudgetExceededError,
    RefusedError,
    RunFailedError,
    SkillOptError,
    WaitingForAnswersError,
)
from skillopt.logging import get_logger
from skillopt.types import GateAction, RolloutResult, TaskRecord
from skillopt_sleep.config import SleepConfig
from skillopt_sleep.night.learn.decision import Decision
from skillopt_sleep.night.learn.rounds import consolidate
from skillopt_sleep.night.night_state import Night
from skillopt_sleep.night.quiet.probe import draw_rollouts
from skillopt_sleep.night.skills.shared_memory import SharedMemory
from skillopt_sleep.night_end import PartStatus
from skillopt_sleep.replay import Docs
from skillopt_sleep.rundir import RunDir, RunStatus
from skillopt_sleep.skills.discover import Discovery, ProjectSkill, discover_skills
from skillopt_sleep.skills.route import MANAGED, Routing, route_tasks
from skillopt_sleep.skills.skill_progress import SkillProgress
from skillopt_sleep.staging import (
    Proposal,
    ProposalKind,
    SkillStore,
    sha256_file,
    staged_text,
)

if TYPE_CHECKING:
    from skillopt_sleep.night.quiet.recorded import Asked, Quiet

__all__ = ["Fanout", "SkillNight", "adoptable_skills", "empty_decision", "preview_routes"]

SKILLS_DIR = "skills"

_log = get_logger(__name__)


def empty_decision(start: Docs) -> Decision:
    """The managed night's decision when every task went to one of the project's skills."""
    return Decision(
        accepted=False, action=GateAction.REJECT, baseline=math.nan, candidate=math.nan,
        final=None, docs=start, applied=[], rejected=[], nothing_to_learn=True,
    )  # fmt: skip


@dataclass(kw_only=True)
class SkillNight:
    """One project skill's part of the night."""

    skill: ProjectSkill
    tasks: list[TaskRecord]
    # a quiet night's skills are no_edits, with the reason saying so (:meth:`Fanout.settle_quiet`)
    status: PartStatus = PartStatus.PENDING
    reason: str = ""
    decision: Decision | None = None
    run_dir: Path | None = None
    store_version: int | None = None
    staged: bool = False
    # every answer the skill's night drew, by job key: the shared memory step reads them
    # back instead of paying for them again (:mod:`.shared`)
    answers: dict[str, RolloutResult] = field(default_factory=dict)

    @property
    def adopted_skill(self) -> str:
        """The skill's text once tonight's proposal for it is adopted (what it reads now
        when nothing is staged)."""
        d = self.decision
        return staged_text(self.skill.text, d.docs.skill) if d and d.accepted else self.skill.text

    def row(self, routing: Routing) -> dict[str, Any]:
        d = self.decision
        ids = {t.id for t in self.tasks}
        hinted = sum(1 for r in routing.routes if r.task_id in ids and "loaded" in r.why)
        return {
            "name": self.skill.name,
            "path": str(self.skill.path),
            "tasks": len(self.tasks),
            "routed_by_hint": hinted,
            "routed_by_match": len(self.tasks) - hinted,
            "status": self.status.value,
            "reason": self.reason,
            "gate_action": d.action.value if d else "",
            "baseline": _finite(d.baseline) if d else None,
            "candidate": _finite(d.candidate) if d else None,
            "accepted_edits": [e.content for e in d.applied] if d and d.accepted else [],
            "rejected_edits": len(d.rejected) if d else 0,
            "staged": self.staged,
            "store_version": self.store_version,
            "run_dir": str(self.run_dir) if self.run_dir else None,
        }


def _finite(value: float) -> float | None:
    return value if math.isfinite(value) else None


def _learned(d: Decision) -> PartStatus:
    """How a skill whose learning ran to its end stands."""
    if d.accepted:
        return PartStatus.ACCEPTED
    return PartStatus.NO_EDITS if not d.applied and not d.rejected else PartStatus.REJECTED


@dataclass(kw_only=True)
class Fanout:
    night: Night
    memory: str
    night_no: int
    managed_tasks: list[TaskRecord]
    discovery: Discovery = field(default_factory=Discovery)
    routing: Routing = field(default_factory=Routing)
    skills: list[SkillNight] = field(default_factory=list)
    shared: SharedMemory | None = None  # the rules the skills share (:mod:`.shared`)
    shared_dir: Path | None = None  # its run directory

    @property
    def start_memory(self) -> str:
        """The memory every group's night starts from: the live one, with the rules the
        skills share when tonight found some (:mod:`.shared`)."""
        return self.shared.memory if self.shared is not None and self.shared.memory else self.memory

    @classmethod
    def plan(
        cls, night: Night, learn: Sequence[TaskRecord], *, memory: str, night_no: int
    ) -> Fanout:
        """Find the project's skills and route ``learn`` between them and the managed skill."""
        cfg = night.cfg
        if not cfg.skills.fanout:
            return cls(night=night, memory=memory, night_no=night_no, managed_tasks=list(learn))
        discovery = discover_skills(cfg, night.project)
        usable, skipped = adoptable_skills(cfg, night.project, discovery.skills)
        routing = route_tasks(learn, usable)
        fan = cls(night=night, memory=memory, night_no=night_no, discovery=discovery,
                  routing=routing, managed_tasks=routing.tasks_of(MANAGED))  # fmt: skip
        for skill in usable:
            tasks = routing.tasks_of(skill.name)
            sn = SkillNight(skill=skill, tasks=tasks)
            if len(tasks) < cfg.skills.min_tasks:
                sn.status = PartStatus.SKIPPED
                sn.reason = (
                    f"{len(tasks)} task(s) tonight; at least {cfg.skills.min_tasks} are needed "
                    "to hold some out (skills.min_tasks)"
                )
            fan.skills.append(sn)
        for skill, why in skipped:
            fan.skills.append(
                SkillNight(skill=skill, tasks=[], status=PartStatus.SKIPPED, reason=why)
            )
        if fan.skills:
            running = [s.skill.name for s in fan.skills if s.status is PartStatus.PENDING]
            night.progress.note(
                f"{len(fan.skills)} project skill(s) found; learning on "
                f"{', '.join(running) or 'none'}; {len(fan.managed_tasks)} task(s) stay with "
                "the managed skill"
            )
        return fan

    def learning(self) -> dict[str, int]:
        """Each skill that learns tonight and its task count (for the spend estimate)."""
        return {s.skill.name: len(s.tasks) for s in self.skills if s.status is PartStatus.PENDING}

    @property
    def any_accepted(self) -> bool:
        return any(s.status is PartStatus.ACCEPTED for s in self.skills)

    def _groups(
        self, tasks: Sequence[TaskRecord], managed: Docs, memory: str, *, after: bool
    ) -> list[Asked]:
        from skillopt_sleep.night.quiet.recorded import Asked

        claimed = {t.id for s in self.skills for t in s.tasks}
        groups = [Asked(name=MANAGED, docs=managed,
                        tasks=tuple(t for t in tasks if t.id not in claimed))]  # fmt: skip
        # `auto_adopt = true` adopts the managed proposal only: a skill's stays staged, and
        # its tasks run under its present text tomorrow (the user may adopt it by name)
        skills_adopted = after and self.night.cfg.auto_adopt is not True
        groups += [
            Asked(name=s.skill.name, tasks=tuple(s.tasks),
                  docs=Docs(skill=s.adopted_skill if skills_adopted else s.skill.text,
                            memory=memory))
            for s in self.skills
            if s.tasks and s.status is not PartStatus.SKIPPED
        ]  # fmt: skip
        return groups

    def asked(self, tasks: Sequence[TaskRecord], start: Docs) -> list[Asked]:
        """Tonight's tasks (``tasks``: every one gathered, the test split too) by the
        question each group's night asks of them: the managed skill's and the test split
        under the live documents ``start``, each learning skill's under its own document
        and the live memory (the documents :meth:`_learn` starts from when the shared step
        keeps nothing; a skipped skill's tasks are not measured tonight)."""
        return self._groups(tasks, start, start.memory, after=False)

    def asked_after(self, tasks: Sequence[TaskRecord], managed: Decision) -> list[Asked]:
        """:meth:`asked` once what tonight stages is adopted: the managed night's documents
        (``managed``, which carry the shared memory edits), each skill's accepted one (its
        present one under ``auto_adopt = true``, which leaves the skills' proposals staged)."""
        return self._groups(tasks, managed.docs, managed.docs.memory, after=True)

    def decisions(self) -> list[Decision | None]:
        """Each learning skill's decision (``None`` where its night made none)."""
        return [s.decision for s in self.skills if s.tasks and s.status is not PartStatus.SKIPPED]

    def settle_quiet(self, quiet: Quiet) -> None:
        """A quiet night: every learning skill had nothing to learn, by the records (no
        night of its own ran, no run directory of its own was made)."""
        for sn in self.skills:
            if sn.status is not PartStatus.PENDING:
                continue
            sn.decision, sn.status = quiet.decisions[sn.skill.name], PartStatus.NO_EDITS
            stuck = sum(1 for s in sn.decision.start_scores.values() if s < 1.0)
            sn.reason = (
                f"quiet night: every one of its {len(sn.tasks)} task(s) already passes under "
                if not stuck
                else f"quiet night: {len(sn.tasks) - stuck} of its {len(sn.tasks)} task(s) "
                f"already pass, and {stuck} failed under every document tried, under "
            ) + (
                "it and the live memory (the answers recorded on earlier nights): nothing to learn"
            )

    async def alongside(
        self, main: Callable[[list[TaskRecord]], Awaitable[Decision]], start: Docs
    ) -> Decision:
        """The managed night (``main`` on the tasks no project skill claimed) with every
        pending skill at once. ``main``'s exception is raised as it is (the skills are
        cancelled, resumable); the skills' own failures become their rows."""
        pending = [s for s in self.skills if s.status is PartStatus.PENDING]
        if not pending:
            return await self._managed(main, start)
        box: dict[str, Any] = {}
        async with anyio.create_task_group() as tg:
            for sn in pending:
                tg.start_soon(self._learn, sn)
            try:
                box["decision"] = await self._managed(main, start)
            except Exception as exc:
                box["error"] = exc
                tg.cancel_scope.cancel()
        if "error" in box:
            raise box["error"]
        decision: Decision = box["decision"]
        return decision

    async def _managed(
        self, main: Callable[[list[TaskRecord]], Awaitable[Decision]], start: Docs
    ) -> Decision:
        if self.managed_tasks or not self.skills:
            return await main(self.managed_tasks)
        why = "every task went to one of the project's own skills: none for the managed skill"
        self.night.no_edit_reasons.append(why)
        self.night.progress.note(why)
        return empty_decision(start)

    def _child(self, sn: SkillNight) -> Night:
        """A night of its own for the skill: its own run directory and gate, memory
        read-only, every call through the parent's spend cap."""
        night = self.child_night(
            self.night.run.path / SKILLS_DIR / sn.skill.name, sn.skill.name,
            skill_path=sn.skill.path, evolve_skill=True,
        )  # fmt: skip
        sn.run_dir = night.run.path
        return night

    def child_night(self, root: Path, label: str, *, skill_path: Path, evolve_skill: bool) -> Night:
        """A night inside tonight's (run directory ``root``, resumed when it has one),
        learning one document: the skill (``evolve_skill``) or else the memory. Its
        learning spends from the parent's budget (the calls left, the budget check, the
        reserve held back for a final check); every call goes through the parent's spend
        cap and cost ledger, and is counted as the child's own too."""
        parent = self.night
        cfg = parent.cfg.model_copy(
            update={
                "night": parent.cfg.night.model_copy(
                    update={"evolve_skill": evolve_skill, "evolve_memory": not evolve_skill}
                ),
                "skill_path": skill_path,
            }
        )
        earlier = RunDir.list_runs(root)
        resumed = bool(earlier)
        now = parent.clock()
        if earlier:
            run = RunDir.open(earlier[-1])
            run.mark_resumed(now, pid=os.getpid())
        else:
            run = RunDir.create(
                root, now=now, project=str(parent.project),
                project_key=parent.run.journal.project_key,
                config=cfg.snapshot(), config_hash=cfg.fingerprint(), dry_run=parent.dry_run,
            )  # fmt: skip
        child = Night(
            config=cfg, project=parent.project, pool=parent.spend, run=run, clock=parent.clock,
            progress=SkillProgress(parent.progress, label), dry_run=parent.dry_run,
            resumed=resumed, probe=draw_rollouts, budget=parent.learning.budget,
        )  # fmt: skip
        child.replayer.costs = parent.replayer.costs  # one ledger for the night
        # what the night drew already (the quiet plan's re-check) is read back, not paid twice
        child.replayer.done.update(parent.replayer.done)
        if resumed:
            child.replayer.preload(run.read_rollouts())
        return child

    async def _learn(self, sn: SkillNight) -> None:
        """One skill's learning; how it ended goes into its row, never out as an error."""
        child = self._child(sn)
        start = Docs(skill=sn.skill.text, memory=self.start_memory)
        if self.shared is not None:  # its first rollouts, when the shared step drew them
            child.replayer.done.update(self.shared.answers)
        try:
            sn.decision = await consolidate(
                child.learning, tasks=sn.tasks, start=start, rotation=self.night_no
            )
        except BudgetExceededError as exc:
            sn.status, sn.reason = (
                PartStatus.BUDGET_REACHED,
                f"{exc}; it stopped during {child.stage}",
            )
        except WaitingForAnswersError as exc:  # handoff: it resumes with the night
            sn.status, sn.reason = PartStatus.WAITING, str(exc)
        except RunFailedError as exc:
            sn.status, sn.reason = PartStatus.FAILED, f"{exc.stage}: {exc.cause}"
        except SkillOptError as exc:
            sn.status, sn.reason = PartStatus.FAILED, f"{type(exc).__name__}: {exc}"
        except Exception as exc:  # a bug in one skill's night must not sink the others
            _log.exception("skills.learn_failed", skill=sn.skill.name)
            sn.status, sn.reason = PartStatus.FAILED, f"{type(exc).__name__}: {str(exc)[:300]}"
        else:
            d = sn.decision
            sn.status = _learned(d)
            if d.nothing_to_learn and child.no_edit_reasons:
                sn.reason = child.no_edit_reasons[-1]
            sn.reason = d.budget_stop or sn.reason
        if self.night.spend.exhausted and sn.status is PartStatus.FAILED:
            sn.status = PartStatus.BUDGET_REACHED
        sn.answers = child.replayer.done
        child.run.write_json("trials.json", {"trials": [t.to_dict() for t in child.trials]})
        finished = {PartStatus.FAILED: RunStatus.FAILED, PartStatus.WAITING: RunStatus.WAITING}
        child.run.finish(
            finished.get(sn.status, RunStatus.COMPLETE), child.clock(),
            outcome=sn.status.value, reason=sn.reason,
        )  # fmt: skip
        child.progress.close()
        self.night.progress.note(
            f"your skill {sn.skill.name}: {sn.status.value.replace('_', ' ')} on {len(sn.tasks)} "
            f"task(s), {child.spend.calls} model call(s)" + (f" ({sn.reason})" if sn.reason else "")
        )
        _log.info(
            "skills.learned", skill=sn.skill.name, status=sn.status.value, tasks=len(sn.tasks)
        )

    def whole_night(self, managed: Decision) -> Decision:
        """``managed`` with its baseline and candidate taken over every learnable task of
        the night (each group's scores weighted by its task count), so the report and the
        learning curve speak for the tasks routed to the project's skills too."""
        parts = [(len(self.managed_tasks), managed)] if self.managed_tasks else []
        parts += [(len(s.tasks), s.decision) for s in self.skills if s.decision is not None]
        parts = [(n, d) for n, d in parts if n and math.isfinite(d.baseline)]
        if not parts or parts == [(len(self.managed_tasks), managed)]:
            return managed
        total = sum(n for n, _ in parts)

        def weighted(value: Callable[[Decision], float]) -> float:
            return math.fsum(n * value(d) for n, d in parts) / total

        managed.baseline = weighted(lambda d: d.baseline)
        live = self.shared.start_scores if self.shared is not None else {}
        if live:  # the groups started from the shared memory: the live documents' scores
            managed.baseline = math.fsum(live.values()) / len(live)
        managed.candidate = weighted(lambda d: d.candidate if d.accepted else d.baseline)
        return managed

    def outcome_groups(self) -> list[tuple[Docs, dict[str, float]]]:
        """Each project skill's tasks with their scores under the live documents they ran
        under tonight (the skill's own and the live memory): what the archive records as
        their outcomes, as it does the managed skill's."""
        live = self.shared.start_scores if self.shared is not None else {}
        out: list[tuple[Docs, dict[str, float]]] = []
        for sn in self.skills:
            if sn.decision is None or not sn.decision.start_scores:
                continue
            scores = {t: live.get(t, s) for t, s in sn.decision.start_scores.items()}
            out.append((Docs(skill=sn.skill.text, memory=self.memory), scores))
        return out

    def rollout_rows(self) -> list[dict[str, Any]]:
        """Every rollout the project skills' nights recorded (their run directories)."""
        rows: list[dict[str, Any]] = []
        for path in self.run_dirs():
            rows.extend(RunDir.open(path).read_rollouts())
        return rows

    def run_dirs(self) -> list[Path]:
        dirs = [sn.run_dir for sn in self.skills if sn.run_dir is not None]
        return dirs + ([self.shared_dir] if self.shared_dir is not None else [])

    def proposals(self, store: SkillStore, *, run_id: str, night_no: int) -> list[Proposal]:
        """Each accepted skill's staged document, versioned in the store."""
        out: list[Proposal] = []
        for sn in self.skills:
            if sn.status is not PartStatus.ACCEPTED or sn.decision is None:
                continue
            text = staged_text(sn.skill.text, sn.decision.docs.skill)
            if text == sn.skill.text:
                continue
            if sha256_file(sn.skill.path) != sn.skill.sha256:
                sn.reason = f"{sn.skill.path} changed while the night ran; not staged (rerun)"
                self.night.notes.append(f"{sn.skill.name}: {sn.reason}")
                continue
            version = store.add_version(sn.skill.name, text, run_id=run_id, night=night_no)
            sn.store_version, sn.staged = version.number, True
            out.append(
                Proposal(
                    name=sn.skill.name, live_path=sn.skill.path, text=text,
                    kind=ProposalKind.SKILL, live_sha256=sn.skill.sha256,
                    store_version=version.number, fanout=True,
                )
            )  # fmt: skip
        return out

    def report(self) -> dict[str, Any]:
        """The report's per-skill rows, each task's route and why, what was left out."""
        if not self.skills and not self.discovery.skipped:
            return {}
        return {
            "skills": [s.row(self.routing) for s in self.skills],
            "skill_routing": self.routing.to_list(),
            "skills_left_out": [{"skill": n, "why": w} for n, w in self.discovery.skipped],
            "memory_files": [str(p) for p in self.discovery.memory],
            "managed_tasks": len(self.managed_tasks),
            "shared_memory": self.shared.to_dict() if self.shared is not None else None,
        }


def adoptable_skills(
    cfg: SleepConfig, project: Path, skills: Sequence[ProjectSkill]
) -> tuple[list[ProjectSkill], list[tuple[ProjectSkill, str]]]:
    """Skills a proposal could be adopted for; the rest with the reason."""
    from skillopt_sleep.adopt import check_adoptable

    roots = cfg.adopt_roots(project)
    reserved = {
        cfg.live_skill_path(project).parent.name.casefold(),
        cfg.live_memory_path(project).stem.casefold(),
    }
    usable: list[ProjectSkill] = []
    skipped: list[tuple[ProjectSkill, str]] = []
    for skill in skills:
        if skill.name.casefold() in reserved:
            skipped.append((skill, "its name is the managed skill's or memory's"))
            continue
        try:
            check_adoptable(skill.name, skill.path, roots)
        except RefusedError as exc:
            skipped.append((skill, str(exc)))
            continue
        usable.append(skill)
    return usable, skipped


def preview_routes(
    cfg: SleepConfig, project: Path, learn: Sequence[TaskRecord]
) -> tuple[list[str], Routing]:
    """The project skills a night would fan out to and where each of ``learn`` would go:
    the same discovery and routing as :meth:`Fanout.plan`, without a night (the harvest
    preview). No skills (or ``skills.fanout`` off): every task stays with the managed one."""
    if not cfg.skills.fanout:
        return [], Routing()
    usable, _ = adoptable_skills(cfg, project, discover_skills(cfg, project).skills)
    if not usable:
        return [], Routing()
    return [s.name for s in usable], route_tasks(learn, usable)
