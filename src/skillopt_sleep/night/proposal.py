"""Staging an accepted night: the skill store's new version, the proposal, auto-adopt.

:func:`conclude` stages only a complete, accepted, non-dry night, and only when the live
files still hold the bytes the night read (their pins). The proposal's manifest is
written last; a night killed after it was adopted keeps the proposal as adopted.
"""

from __future__ import annotations

from pathlib import Path

from skillopt.errors import RefusedError, SkillOptError
from skillopt_sleep.night.course import Course, Staged
from skillopt_sleep.night.learn.decision import Decision
from skillopt_sleep.night.night_state import Night
from skillopt_sleep.night.outcome import Live
from skillopt_sleep.night.skills.fanout import Fanout
from skillopt_sleep.staging import (
    RECEIPTS_NAME,
    Proposal,
    ProposalKind,
    SkillStore,
    load_manifest,
    scaffold_skill,
    sha256_file,
    staged_text,
    write_proposal,
)
from skillopt_sleep.state import project_dir

__all__ = ["auto_adopt", "conclude", "stage_proposal"]


def conclude(night: Night, course: Course, live: Live, night_no: int) -> Staged | None:
    """Stage an accepted night's documents (not a dry run), then auto-adopt if configured;
    ``None`` when there is nothing to stage."""
    decision = course.decision
    staged_skills = bool(course.fanout and course.fanout.any_accepted)
    if not (course.committed and (course.accepted or staged_skills) and not night.dry_run
            and decision):  # fmt: skip
        return None
    if (night.run.path / RECEIPTS_NAME).exists():
        # Staged and adopted before a kill: the proposal stands as it was adopted.
        return Staged(proposal_dir=night.run.path / "proposal")
    night.begin("stage")
    try:
        proposal_dir = stage_proposal(night, live, decision, night_no, course.fanout)
    except (RefusedError, SkillOptError, OSError) as exc:
        night.end_after_decision("stage", status="failed")
        return Staged(failure=str(exc))
    night.end_after_decision("stage")
    adopted = auto_adopt(night) if night.cfg.auto_adopt and not decision.restore else []
    return Staged(proposal_dir=proposal_dir, adopted=tuple(adopted))


def stage_proposal(
    night: Night, live: Live, decision: Decision, night_no: int, fanout: Fanout | None = None
) -> Path:
    """Version the accepted documents and write the proposal (manifest last)."""
    run = night.run
    for path, pinned in ((live.skill_path, live.skill_sha), (live.memory_path, live.memory_sha)):
        if sha256_file(path) != pinned:
            raise RefusedError(
                f"{path}: the live file changed while the night ran; nothing was staged "
                "(run the night again)"
            )
    store = SkillStore(project_dir(night.cfg.state_path(), night.project))
    proposals = []
    if decision.restore:  # a replaced version, whole, as `versions restore` writes it
        skill, memory = decision.docs.skill, decision.docs.memory
    else:
        skill = staged_text(live.skill, decision.docs.skill)
        memory = staged_text(live.memory, decision.docs.memory)
    if skill != live.skill or live.skill_seeded:
        name = live.skill_path.parent.name or "skill"
        text = scaffold_skill(skill, name=name, project=night.project)
        version = store.add_version(name, text, run_id=run.run_id, night=night_no)
        run.update(versions={**run.journal.versions, name: version.number})
        proposals.append(
            Proposal(
                name=name,
                live_path=live.skill_path,
                text=text,
                kind=ProposalKind.SKILL,
                live_sha256=live.skill_sha,
                store_version=version.number,
            )
        )
    if memory != live.memory:
        proposals.append(
            Proposal(
                name=live.memory_path.stem or "memory",
                live_path=live.memory_path,
                text=memory,
                kind=ProposalKind.MEMORY,
                live_sha256=live.memory_sha,
            )
        )
    for proposal in fanout.proposals(store, run_id=run.run_id, night_no=night_no) if fanout else ():
        run.update(versions={**run.journal.versions, proposal.name: proposal.store_version})
        proposals.append(proposal)
    write_proposal(run.path, proposals, run_id=run.run_id)
    run.save()
    return run.path / "proposal"


def auto_adopt(night: Night) -> list[str]:
    """Adopt the proposal when configured; a refusal is a note, never a lost night."""
    from skillopt_sleep.adopt import adopt

    roots = [str(r) for r in night.cfg.adopt_roots(night.project)]
    try:
        entries = load_manifest(night.run.path).entries
        # per-skill proposals only when asked for by name: auto_adopt = "all"
        select = [e.name for e in entries if night.cfg.auto_adopt == "all" or not e.fanout]
        if not select:
            return []
        result = adopt(night.run.path, skill_roots=roots, select=select)
    except SkillOptError as exc:
        night.notes.append(f"auto-adopt refused: {exc}")
        return []
    paths = [a.live_path for a in result.adopted]
    night.notes.append(f"auto-adopted: {', '.join(paths)}")
    return paths
