"""Rules the project's skills share: one memory step, gated on the tasks of every skill.

On a night with the project's own skills (:mod:`.fanout`) each skill learns on its own
tasks with the memory read-only, so a rule the tasks of several skills need would land in
one skill's document (where the other skills never see it) or nowhere. After every
group's night (each project skill, and the managed skill with the tasks nobody claimed),
:func:`share_memory` looks for such rules:

1. **When** (no call): each group says which of its tasks still fail under the documents
   it would stage (its final check's scores, else its rollouts'). Fewer than two groups
   with a failing task: nothing could be shared, and nothing is spent.
2. **Rollouts**: every task of every group under its own group's skill (as it would be
   staged) and tonight's memory (the managed night's accepted memory, else the live one).
   Answers the groups' nights drew already are read back, not paid again.
3. **One memory step** (:func:`.crossfit.learn_target`, target memory, one round): the
   tasks of all groups dealt into folds; each fold's reflection sees the rollouts of the
   other folds, whichever skill they belong to; each edit alone on its held-out tasks,
   then the union on every task.
4. **Final check** (:func:`.rounds.paired_check`): the new memory against tonight's on
   every task of every group, paired per task and sample. It is kept only when the tasks
   it improved belong to two groups or more: a rule only one skill's tasks need belongs in
   that skill, whose own night proposes it there.
5. **Kept**: the memory edits join the managed night's decision (the memory proposal),
   and the report names the skills whose tasks they helped (``shared_memory``).

Each task runs under its own group's skill throughout (:class:`EachTaskItsSkill`), so
the gate measures exactly the documents a user would run after adopting everything
tonight stages. The step works in ``<run>/shared/`` (its rollouts, checkpoints, trials),
so a killed night resumes it as it resumes a skill's.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from skillopt.errors import BudgetExceededError, SkillOptError
from skillopt.logging import get_logger
from skillopt.types import EditRecord, EditTarget, GateDecision, RolloutResult, TaskRecord
from skillopt_sleep.night.crossfit import Measured, learn_target, make_folds, measure
from skillopt_sleep.night.decision import Decision
from skillopt_sleep.night.fanout import Fanout
from skillopt_sleep.night.gate_modes import GREEDY, OFF
from skillopt_sleep.night.rounds import paired_check
from skillopt_sleep.night.running import Night
from skillopt_sleep.night.trials import Trial
from skillopt_sleep.replay import Docs, Job, Replayer
from skillopt_sleep.rundir import RunStatus
from skillopt_sleep.skills.route import MANAGED

__all__ = ["SHARED_DIR", "EachTaskItsSkill", "Group", "SharedMemory", "share_memory"]

SHARED_DIR = "shared"

_log = get_logger(__name__)


@dataclass(frozen=True, slots=True, kw_only=True)
class Group:
    """One group of tonight's tasks and the skill they run under once staged."""

    name: str  # a project skill's name; MANAGED for the managed skill
    tasks: tuple[TaskRecord, ...]
    skill: str
    failing: frozenset[str]


@dataclass(kw_only=True)
class SharedMemory:
    """What the shared step did (the report's ``shared_memory``)."""

    status: str = "not_needed"  # not_needed|accepted|rejected|no_edits|failed|budget_reached
    reason: str = ""
    groups: list[str] = field(default_factory=list)  # the groups whose tasks it measured
    helped: list[str] = field(default_factory=list)  # groups with a task it improved
    edits: list[EditRecord] = field(default_factory=list)
    baseline: float | None = None
    candidate: float | None = None
    calls: int = 0

    def to_dict(self) -> dict[str, Any]:
        return {
            "status": self.status,
            "reason": self.reason,
            "groups": [g or "managed" for g in self.groups],
            "helped": [g or "managed" for g in self.helped],
            "accepted_edits": [e.content for e in self.edits],
            "baseline": self.baseline,
            "candidate": self.candidate,
            "calls": self.calls,
        }


@dataclass(kw_only=True)
class EachTaskItsSkill(Replayer):
    """A replayer that runs each task under its own group's skill (``skills``: task id to
    skill text), whatever skill the job names: the memory is what the step varies."""

    skills: Mapping[str, str] = field(default_factory=dict)

    async def run(self, jobs: Sequence[Job]) -> list[RolloutResult]:
        own = [
            replace(j, docs=Docs(skill=self.skills.get(j.task.id, j.docs.skill),
                                 memory=j.docs.memory))
            for j in jobs
        ]  # fmt: skip
        return await super().run(own)


def _failing_after(decision: Decision) -> frozenset[str]:
    """The group's tasks that still fail under the documents it would stage."""
    final = decision.final
    if decision.accepted and final is not None:
        return frozenset(
            d.task_id for d in final.task_deltas if d.candidate is not None and d.candidate < 1.0
        )
    return frozenset(t for t, s in decision.start_scores.items() if not s >= 1.0)


def groups_of(fan: Fanout, managed: Decision, start: Docs) -> list[Group]:
    """Every group whose night measured its tasks tonight."""
    out: list[Group] = []
    if fan.managed_tasks and managed.start_scores:
        skill = managed.docs.skill if managed.accepted else start.skill
        out.append(Group(name=MANAGED, tasks=tuple(fan.managed_tasks), skill=skill,
                         failing=_failing_after(managed)))  # fmt: skip
    for sn in fan.skills:
        if sn.decision is None or not sn.decision.start_scores:
            continue
        out.append(Group(name=sn.skill.name, tasks=tuple(sn.tasks), skill=sn.best_skill,
                         failing=_failing_after(sn.decision)))  # fmt: skip
    return out


def _placeholder(groups: Sequence[Group]) -> str:
    """What a reflection of this step is shown as "the skill": each task ran under its own."""
    names = ", ".join(g.name or "the managed skill" for g in groups)
    return (
        f"(Each task below ran under its own skill: {names}. This step edits only the "
        "project memory, which the tasks of every skill read: propose the rules that tasks "
        "of several skills need.)"
    )


def _helped(final: GateDecision, groups: Sequence[Group]) -> list[str]:
    better = {
        d.task_id for d in final.task_deltas
        if d.baseline is not None and d.candidate is not None and d.candidate > d.baseline + 1e-9
    }  # fmt: skip
    return [g.name for g in groups if better & {t.id for t in g.tasks}]


async def share_memory(
    night: Night, fan: Fanout, managed: Decision, start: Docs, *, rotation: int
) -> SharedMemory:
    """Look for a memory rule the tasks of two or more groups need (see the module
    docstring); when one passes, ``managed`` carries it (its docs, applied edits)."""
    shared = SharedMemory()
    fan.shared = shared
    if night.cfg.gate.mode == OFF or not night.cfg.night.evolve_memory or not fan.skills:
        return shared
    groups = groups_of(fan, managed, start)
    shared.groups = [g.name for g in groups]
    if sum(bool(g.failing) for g in groups) < 2:
        shared.reason = "fewer than two skills have a task still failing: nothing to share"
        return shared
    memory = managed.docs.memory if managed.accepted else start.memory
    child = fan.child_night(
        night.run.path / SHARED_DIR, "shared memory", skill_path=night.cfg.live_skill_path(
            night.project), evolve_skill=False,
    )  # fmt: skip
    before = night.spend.calls
    try:
        await _learn(child, fan, groups, managed, Docs(skill=_placeholder(groups), memory=memory),
                     shared, rotation=rotation)  # fmt: skip
    except BudgetExceededError as exc:
        shared.status, shared.reason = "budget_reached", f"{exc}; it stopped during {child.stage}"
    except SkillOptError as exc:
        shared.status, shared.reason = "failed", f"{type(exc).__name__}: {exc}"
    except Exception as exc:  # a bug here must not sink the skills' learning
        _log.exception("shared.failed")
        shared.status, shared.reason = "failed", f"{type(exc).__name__}: {str(exc)[:300]}"
    shared.calls = night.spend.calls - before
    child.run.write_json("trials.json", {"trials": [t.to_dict() for t in child.trials]})
    ended = RunStatus.FAILED if shared.status == "failed" else RunStatus.COMPLETE
    child.run.finish(ended, child.clock(), outcome=shared.status, reason=shared.reason)
    child.progress.close()
    night.progress.note(
        f"rules your skills share: {shared.status.replace('_', ' ')} on the tasks of "
        f"{len(groups)} group(s), {shared.calls} model call(s)"
        + (f" ({shared.reason})" if shared.reason else "")
    )
    _log.info("shared.done", status=shared.status, helped=shared.helped, calls=shared.calls)
    return shared


async def _learn(
    child: Night, fan: Fanout, groups: Sequence[Group], managed: Decision, base: Docs,
    shared: SharedMemory, *, rotation: int,
) -> None:  # fmt: skip
    cfg = child.cfg
    tasks = [t for g in groups for t in g.tasks]
    skills = {t.id: g.skill for g in groups for t in g.tasks}
    parent = child.replayer
    child.replayer = EachTaskItsSkill(
        pool=parent.pool, marker=parent.marker, record=parent.record, evidence=parent.evidence,
        progress=parent.progress, costs=fan.night.replayer.costs, skills=skills,
        done={**fan.night.replayer.done, **{k: v for s in fan.skills for k, v in s.answers.items()},
              **parent.done},
    )  # fmt: skip
    child.begin("rollouts")
    samples = max(cfg.night.dream_rollouts, cfg.gate.samples_per_task)
    rolled: Measured = await measure(child, tasks, base, samples=samples, phase="rollout")
    child.check_degenerate("rollouts", rolled.results, tasks=tasks)
    child.end("rollouts", rollouts=len(rolled.results))
    child.check_budget("rollouts")
    folds = make_folds(tasks, n_folds=cfg.night.folds, seed=cfg.night.seed, rotation=rotation)
    child.begin("memory")
    step = await learn_target(
        child, round_no=1, target=EditTarget.MEMORY, tasks=tasks, best=base, base=rolled,
        folds=folds,
    )  # fmt: skip
    child.end("memory", accepted=len(step.accepted))
    if not step.accepted:
        shared.status = "no_edits" if not step.proposed else "rejected"
        shared.reason = "no memory edit passed the gate on the tasks it was held out for"
        return
    if cfg.gate.mode == GREEDY:
        shared.helped = _helped_measured(rolled, step.measured, groups)
        shared.baseline, shared.candidate = rolled.mean(), step.measured.mean()
    else:
        child.begin("final")
        final = await paired_check(child, tasks, base, step.best)
        child.trials.append(
            Trial(name="final", kind="final", round=1, target="memory", edits=step.accepted,
                  applied=step.accepted, unmatched=[], decision=final,
                  note="tonight's memory with the shared rules against it, on every task of "
                  "every skill, each under its own skill, paired per task and sample")
        )  # fmt: skip
        child.end("final", accepted=final.accepted)
        shared.baseline, shared.candidate = _finite(final.baseline), _finite(final.candidate)
        if not final.accepted:
            shared.status = "rejected"
            shared.reason = f"the final check on every task: {final.action.value}"
            return
        shared.helped = _helped(final, groups)
    if len(shared.helped) < 2:
        shared.status = "rejected"
        shared.reason = (
            f"it helped the tasks of {', '.join(h or 'the managed skill' for h in shared.helped)}"
            " only: a rule one skill needs belongs in that skill"
        )
        return
    shared.status, shared.edits = "accepted", list(step.accepted)
    kept = managed.applied if managed.accepted else []
    managed.docs = Docs(skill=managed.docs.skill, memory=step.best.memory)
    managed.applied = list(dict.fromkeys([*kept, *step.accepted]))
    managed.rejected = [e for e in managed.rejected if e not in managed.applied]
    managed.accepted, managed.nothing_to_learn = True, False


def _helped_measured(before: Measured, after: Measured, groups: Sequence[Group]) -> list[str]:
    old, new = before.task_means(), after.task_means()
    better = {t for t, v in new.items() if math.isfinite(v) and v > old.get(t, math.nan)}
    return [g.name for g in groups if better & {t.id for t in g.tasks}]


def _finite(value: float) -> float | None:
    return value if math.isfinite(value) else None
