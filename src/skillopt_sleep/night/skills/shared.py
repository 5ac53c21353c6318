"""Rules the project's skills share: one memory step, gated on the tasks of every skill.

On a night with the project's own skills (:mod:`.fanout`) each skill learns on its own
tasks with the memory read-only, so a rule the tasks of several skills need would land in
one skill's document (where the other skills never see it), in each of them, or nowhere.
Before the skills' nights start, :func:`share_memory` looks for such rules over the tasks
of every group (each project skill that learns tonight, and the managed skill with the
tasks nobody claimed):

1. **Rollouts**: every task of every group under its own group's live skill and the live
   memory (:class:`EachTaskItsSkill`), as many samples as the noise probe says
   (:func:`skillopt_sleep.night.quiet.probe.draw_rollouts`: one each when the model answers
   consistently tonight, else K): the rollouts each group's night draws first, which then
   read them back instead of paying for them again.
2. **When**: fewer than two groups with a failing task: nothing could be shared, and the
   step ends there (it cost nothing the groups' nights would not have spent).
3. **One memory step** (:func:`skillopt_sleep.night.learn.crossfit.learn_step`, target
   memory, one round): the tasks of all groups dealt into folds; each fold's reflection sees
   the rollouts of the other folds, whichever skill they belong to; each edit alone on its
   held-out tasks, then the union on every task. An edit is kept only when the held-out
   tasks it improved belong to two groups or more: a rule one group's tasks need belongs in
   that group's skill, whose own night proposes it there.
4. **Final check** (:func:`skillopt_sleep.night.learn.rounds.paired_check`): the memory with
   the kept edits against the live memory, on every task of every group, paired per task and
   sample, and again kept only when the tasks it improved belong to two groups or more.
5. **Kept**: every group's night starts from that memory (still read-only for the
   skills), so no skill learns the shared rule again; the memory edits are staged in the
   memory proposal with the managed night's own, and the report names the groups whose
   tasks they helped (``shared_memory``).

The step works in ``<run>/shared/`` (its rollouts, checkpoints, trials), so a killed
night resumes it as it resumes a skill's.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace

from skillopt.errors import BudgetExceededError, SkillOptError
from skillopt.logging import get_logger
from skillopt.types import EditRecord, EditTarget, GateDecision, RolloutResult, TaskRecord
from skillopt_sleep.night.learn.crossfit import apply_to, learn_step
from skillopt_sleep.night.learn.decision import Decision
from skillopt_sleep.night.learn.folds import make_folds
from skillopt_sleep.night.learn.gate_modes import OFF
from skillopt_sleep.night.learn.rounds import paired_check
from skillopt_sleep.night.learn.samples import Measured
from skillopt_sleep.night.learn.trials import Trial
from skillopt_sleep.night.night_state import Night
from skillopt_sleep.night.quiet.probe import draw_rollouts
from skillopt_sleep.night.skills.fanout import Fanout
from skillopt_sleep.night.skills.shared_memory import SharedMemory
from skillopt_sleep.night_end import PartStatus
from skillopt_sleep.replay import Docs, Job, Replayer
from skillopt_sleep.rundir import RunStatus
from skillopt_sleep.skills.route import MANAGED

__all__ = ["SHARED_DIR", "EachTaskItsSkill", "Group", "fold_in", "share_memory"]

SHARED_DIR = "shared"

_log = get_logger(__name__)


@dataclass(frozen=True, slots=True, kw_only=True)
class Group:
    """One group of tonight's tasks and the skill they run under."""

    name: str  # a project skill's name; MANAGED for the managed skill
    tasks: tuple[TaskRecord, ...]
    skill: str


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


def groups_of(fan: Fanout, start: Docs) -> list[Group]:
    """Every group that learns tonight: the managed skill (when it has tasks) and each
    project skill with enough tasks."""
    out = [Group(name=MANAGED, tasks=tuple(fan.managed_tasks), skill=start.skill)]
    out += [
        Group(name=sn.skill.name, tasks=tuple(sn.tasks), skill=sn.skill.text)
        for sn in fan.skills
        if sn.status is PartStatus.PENDING
    ]
    return [g for g in out if g.tasks]


def _placeholder(groups: Sequence[Group]) -> str:
    """What a reflection of this step is shown as "the skill": each task ran under its own."""
    names = ", ".join(g.name or "the managed skill" for g in groups)
    return (
        f"(Each task below ran under its own skill: {names}. This step edits only the "
        "project memory, which the tasks of every skill read: propose the rules that tasks "
        "of several skills need.)"
    )


def _improved(decision: GateDecision | None) -> set[str]:
    if decision is None:
        return set()
    return {
        d.task_id for d in decision.task_deltas
        if d.baseline is not None and d.candidate is not None and d.candidate > d.baseline + 1e-9
    }  # fmt: skip


def _groups_with(tasks: set[str], groups: Sequence[Group]) -> list[str]:
    return [g.name for g in groups if tasks & {t.id for t in g.tasks}]


async def share_memory(night: Night, fan: Fanout, start: Docs, *, rotation: int) -> SharedMemory:
    """Look for memory rules the tasks of two or more groups need (see the module
    docstring); ``memory`` of the result is what every group's night starts from."""
    shared = SharedMemory(memory=start.memory)
    fan.shared = shared
    if night.cfg.gate.mode == OFF or not night.cfg.night.evolve_memory:
        return shared
    groups = groups_of(fan, start)
    if sum(g.name != MANAGED for g in groups) < 1 or len(groups) < 2:
        return shared
    shared.groups = [g.name for g in groups]
    child = fan.child_night(
        night.run.path / SHARED_DIR, "shared memory",
        skill_path=night.cfg.live_skill_path(night.project), evolve_skill=False,
    )  # fmt: skip
    fan.shared_dir = child.run.path
    before = night.spend.calls
    try:
        await _learn(child, fan, groups, start, shared, rotation=rotation)
    except BudgetExceededError as exc:
        shared.status, shared.reason = (
            PartStatus.BUDGET_REACHED,
            f"{exc}; it stopped during {child.stage}",
        )
    except SkillOptError as exc:
        shared.status, shared.reason = PartStatus.FAILED, f"{type(exc).__name__}: {exc}"
    except Exception as exc:  # a bug here must not sink the skills' learning
        _log.exception("shared.failed")
        shared.status, shared.reason = PartStatus.FAILED, f"{type(exc).__name__}: {str(exc)[:300]}"
    if shared.status is not PartStatus.ACCEPTED:
        shared.memory = start.memory
    shared.answers = child.replayer.done
    shared.calls = night.spend.calls - before
    child.run.write_json("trials.json", {"trials": [t.to_dict() for t in child.trials]})
    ended = RunStatus.FAILED if shared.status is PartStatus.FAILED else RunStatus.COMPLETE
    child.run.finish(ended, child.clock(), outcome=shared.status.value, reason=shared.reason)
    child.progress.close()
    night.progress.note(
        f"rules your skills share: {shared.status.value.replace('_', ' ')} on the tasks of "
        f"{len(groups)} group(s), {shared.calls} model call(s)"
        + (f" ({shared.reason})" if shared.reason else "")
    )
    _log.info("shared.done", status=shared.status.value, helped=shared.helped, calls=shared.calls)
    return shared


async def _learn(
    child: Night, fan: Fanout, groups: Sequence[Group], start: Docs, shared: SharedMemory,
    *, rotation: int,
) -> None:  # fmt: skip
    cfg = child.cfg
    tasks = [t for g in groups for t in g.tasks]
    parent = child.replayer
    child.replayer = EachTaskItsSkill(
        pool=parent.pool, marker=parent.marker, record=parent.record, evidence=parent.evidence,
        progress=parent.progress, costs=fan.night.replayer.costs, done=dict(parent.done),
        skills={t.id: g.skill for g in groups for t in g.tasks},
    )  # fmt: skip
    base = Docs(skill=_placeholder(groups), memory=start.memory)
    child.begin("rollouts")
    rolled: Measured = await draw_rollouts(child, tasks, base)
    child.check_degenerate("rollouts", rolled.results, tasks=tasks)
    child.end("rollouts", rollouts=len(rolled.results))
    child.check_budget("rollouts")
    shared.start_scores = rolled.task_means()
    failing = {t for t, v in shared.start_scores.items() if not v >= 1.0}
    if len(_groups_with(failing, groups)) < 2:
        shared.reason = "fewer than two skills have a failing task: nothing to share"
        return
    folds = make_folds(tasks, n_folds=cfg.night.folds, seed=cfg.night.seed, rotation=rotation)
    child.begin("memory")
    step = await learn_step(
        child.learning, round_no=1, targets=(EditTarget.MEMORY,), tasks=tasks, best=base,
        base=rolled, folds=folds,
    )  # fmt: skip
    child.end("memory", accepted=len(step.accepted))
    keep = [e for e in step.accepted if len(_single_helped(child, e, groups)) >= 2]
    if not keep:
        shared.status = PartStatus.REJECTED if step.proposed else PartStatus.NO_EDITS
        shared.reason = (
            "no memory edit helped the held-out tasks of two skills or more"
            if step.accepted else "no memory edit passed the gate on its held-out tasks"
        )  # fmt: skip
        return
    best = apply_to(base, keep, EditTarget.MEMORY)[0]
    child.begin("final")
    final = await paired_check(child.learning, tasks, base, best)
    child.trials.append(
        Trial(name="final", kind="final", round=1, target="memory", edits=keep, applied=keep,
              unmatched=[], decision=final,
              note="the memory with the shared rules against the live one, on every task of "
              "every skill, each under its own skill, paired per task and sample")
    )  # fmt: skip
    child.end("final", accepted=final.accepted)
    shared.baseline, shared.candidate = _finite(final.baseline), _finite(final.candidate)
    shared.helped = _groups_with(_improved(final), groups)
    if not final.accepted or len(shared.helped) < 2:
        shared.status = PartStatus.REJECTED
        shared.reason = (
            f"the final check on every task: {final.action.value}" if not final.accepted
            else "on every task it helped only "
            f"{', '.join(h or 'the managed skill' for h in shared.helped) or 'none'}"
        )  # fmt: skip
        return
    shared.status, shared.edits, shared.memory = PartStatus.ACCEPTED, keep, best.memory


def _single_helped(child: Night, edit: EditRecord, groups: Sequence[Group]) -> list[str]:
    """The groups whose held-out tasks ``edit``'s own trial improved."""
    improved: set[str] = set()
    for trial in child.trials:
        if trial.kind == "single" and edit in trial.edits:
            improved |= _improved(trial.decision)
    return _groups_with(improved, groups)


def fold_in(shared: SharedMemory, managed: Decision, start: Docs) -> Decision:
    """The managed night's decision carrying the shared memory edits (staged with it): it
    started from the shared memory, so its documents hold them already."""
    if shared.status is not PartStatus.ACCEPTED:
        return managed
    kept = managed.applied if managed.accepted else []
    managed.docs = Docs(skill=managed.docs.skill if managed.accepted else start.skill,
                        memory=managed.docs.memory)  # fmt: skip
    managed.applied = list(dict.fromkeys([*shared.edits, *kept]))
    managed.rejected = [e for e in managed.rejected if e not in managed.applied]
    managed.accepted, managed.nothing_to_learn = True, False
    managed.start_scores = {
        t: shared.start_scores[t] for t in managed.start_scores if t in shared.start_scores
    }
    return managed


def _finite(value: float) -> float | None:
    return value if math.isfinite(value) else None
