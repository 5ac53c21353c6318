"""An adopted version that does worse than the one it replaced: the night proposes the restore.

1. **The replaced version** (:func:`replaced_documents`). The newest adoption of a night's
   managed skill or memory (whole, or an ``adopt --edit`` subset) whose files the live
   documents still hold byte for byte; the documents before it are the adoption's backups
   (a document it did not change is the live one). An adoption that created a file has
   nothing to restore.
2. **Screen** (no call). The archive's judged samples of tonight's learnable tasks under
   both versions and tonight's models (:mod:`.quiet.recorded`): on the tasks with samples under
   both, the live version must pass fewer of them than the replaced one did, or nothing
   happens (and nothing is spent).
3. **Gate.** The replaced documents against the live ones on those tasks, paired per task
   and sample and sampled adaptively like any comparison (:func:`skillopt.gate.
   compare_adaptive`, decided by :func:`skillopt.gate.decide_paired`). Where a version's
   recorded answers of a task always agreed, on as many samples as a steady task needs
   (two at least), they are read from the archive, never asked again: a new sample could
   only repeat them. Elsewhere the gate draws new samples (sample ids above any recorded):
   the screen chose these tasks by the recorded samples, and a test on the samples that
   chose it would find the deficit it was shown.
4. **Stage.** When the gate accepts, the night's decision is the restore: its documents
   are staged whole, as ``versions restore`` would write them, for the user to adopt
   (never auto-adopted), and the night learns nothing on top of a version it proposes to
   replace. When it rejects, the night goes on as any other.
5. **Once per adoption.** The trial is named after the adoption it questions
   (:func:`trial_name`). A later night that finds a restore trial of the same adoption does
   not test it again: a rejected restore could only be asked again until chance passes
   it, and a staged one the user did not adopt is declined. A newer adoption is a new
   question.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from skillopt.atomicio import read_json_object
from skillopt.errors import SkillOptError
from skillopt.gate import PairedSamples, compare_adaptive, decide_paired
from skillopt.types import GateDecision, RolloutResult, TaskRecord
from skillopt_sleep.adopt import subset_dirs
from skillopt_sleep.adopt_journal import read_backup, receipts
from skillopt_sleep.night.learn.decision import Decision
from skillopt_sleep.night.learn.pairs import clear_pass
from skillopt_sleep.night.learn.trials import Trial
from skillopt_sleep.night.night_state import Night
from skillopt_sleep.night.outcome import Live
from skillopt_sleep.night.quiet.questions import answer_key, task_hash
from skillopt_sleep.night.quiet.recorded import noise_estimates, steady_samples
from skillopt_sleep.replay import Docs, Job
from skillopt_sleep.rundir import RunDir
from skillopt_sleep.staging import load_manifest
from skillopt_sleep.state import runs_dir
from skillopt_sleep.tasks.records import Question

__all__ = ["Replaced", "propose_restore", "replaced_documents", "trial_name"]


@dataclass(frozen=True, slots=True, kw_only=True)
class Replaced:
    """The documents an adoption replaced, and which night's adoption it was."""

    docs: Docs
    run: Path
    adopted_at: str


def _adoption_receipts(run: Path) -> list[tuple[Path, list[dict[str, object]]]]:
    """Each adoption of the run's managed documents (not its per-skill proposals), with
    the folder that holds its receipts and backups."""
    try:
        fanout = {e.name for e in load_manifest(run).entries if e.fanout}
    except SkillOptError:
        fanout = set()
    found = [(run, [r for r in receipts(run) if r.get("name") not in fanout])]
    found += [(folder, receipts(folder)) for folder in subset_dirs(run)]
    return [(folder, group) for folder, group in found if group]


def replaced_documents(night: Night, live: Live) -> Replaced | None:
    """The documents the newest adoption the live files still hold replaced (step 1)."""
    paths = {str(live.skill_path): "skill", str(live.memory_path): "memory"}
    shas = {"skill": live.skill_sha, "memory": live.memory_sha}
    newest: tuple[str, Path, Path, list[dict[str, object]]] | None = None
    for run in RunDir.list_runs(runs_dir(night.cfg.state_path(), night.project)):
        if run == night.run.path:
            continue
        for folder, group in _adoption_receipts(run):
            mine = [r for r in group if str(r.get("live_path")) in paths]
            at = max((str(r.get("adopted_at") or "") for r in mine), default="")
            if mine and (newest is None or at > newest[0]):
                newest = (at, run, folder, mine)
    if newest is None:
        return None
    at, run, folder, group = newest
    texts = {"skill": live.skill, "memory": live.memory}
    for r in group:
        which = paths[str(r["live_path"])]
        if r.get("sha256_after") != shas[which]:
            return None  # the live file moved on
        backup = read_backup(folder, r)  # None: the adoption created it, or a forged receipt
        if backup is None:
            return None
        try:
            texts[which] = backup.decode("utf-8")
        except UnicodeDecodeError:
            return None
    docs = Docs(skill=texts["skill"], memory=texts["memory"])
    return Replaced(docs=docs, run=run, adopted_at=at)


def _screen(night: Night, tasks: Sequence[TaskRecord], live: Docs, old: Docs) -> list[str]:
    """The tasks both versions have samples of, when the live one passed fewer (step 2)."""
    now, then = noise_estimates(night, tasks, live), noise_estimates(night, tasks, old)
    both = [t.id for t in tasks if now[t.id].samples and then[t.id].samples]
    if not both:
        return []
    rate_now = sum(now[t].passes / now[t].samples for t in both)
    rate_then = sum(then[t].passes / then[t].samples for t in both)
    return both if rate_now < rate_then else []


def _plan_ids(
    night: Night, tasks: Sequence[TaskRecord], arms: Sequence[Docs]
) -> tuple[list[dict[str, Mapping[int, float]]], dict[str, int]]:
    """Per arm, the recorded samples the gate may read (a task's, when they all agreed
    under that version); per task, the first sample id no recorded sample has (step 3)."""
    readable: list[dict[str, Mapping[int, float]]] = []
    first_new: dict[str, int] = {t.id: 0 for t in tasks}
    least = max(steady_samples(night), 2)  # one sample always agrees with itself
    for docs in arms:
        found_noise = noise_estimates(night, tasks, docs)
        found: dict[str, Mapping[int, float]] = {}
        for task in tasks:
            recorded = _recorded(night, task, docs)
            first_new[task.id] = max(first_new[task.id], max(recorded, default=-1) + 1)
            est = found_noise[task.id]
            found[task.id] = recorded if est.steady and est.samples >= least else {}
        readable.append(found)
    return readable, first_new


def trial_name(replaced: Replaced) -> str:
    """The restore trial's name: which adoption it questions (step 5)."""
    return f"restore:{replaced.run.name}@{replaced.adopted_at}"


def _tested_before(night: Night, name: str) -> bool:
    """Whether an earlier night already tested the restore ``name`` (step 5)."""
    for run in RunDir.list_runs(runs_dir(night.cfg.state_path(), night.project)):
        if run == night.run.path:
            continue
        rows = read_json_object(run / "trials.json").get("trials")
        if isinstance(rows, list) and any(isinstance(t, dict) and t.get("name") == name
                                          for t in rows):  # fmt: skip
            return True
    return False


def _recorded(night: Night, task: TaskRecord, docs: Docs) -> Mapping[int, float]:
    if night.archive is None:
        return {}
    question = Question(task_id=task.id, task_hash=task_hash(task), docs_hash=docs.key,
                        answer_key=answer_key(night.cfg))  # fmt: skip
    return night.archive.sample_scores(question)


async def propose_restore(night: Night, tasks: Sequence[TaskRecord], live: Live) -> Decision | None:
    """The restore as the night's decision when the gate accepts it (see the module
    docstring); ``None`` (and no call) when there is nothing to restore or the screen
    finds the live version no worse."""
    if not answer_key(night.cfg) or night.archive is None:
        return None
    replaced = replaced_documents(night, live)
    start = Docs(skill=live.skill, memory=live.memory)
    if replaced is None or replaced.docs == start:
        return None
    ids = _screen(night, tasks, start, replaced.docs)
    name = trial_name(replaced)
    if not ids or _tested_before(night, name):  # the screen first: it reads one archive
        return None
    night.begin("restore")
    by_id = {t.id: t for t in tasks}
    readable, first_new = _plan_ids(night, [by_id[t] for t in ids], [start, replaced.docs])
    drawn: list[RolloutResult] = []
    served = [0]  # samples read from the archive instead of asked again

    def sample_id(known: Mapping[int, float], task: str, k: int) -> int:
        """The ``k``-th sample of ``task``: a recorded one while they last, then new ones."""
        ordered = sorted(known)
        return ordered[k] if k < len(ordered) else first_new[task] + k

    async def arm(
        i: int, which: Sequence[str], samples: range
    ) -> tuple[dict[str, list[float]], list[RolloutResult]]:
        docs, known = (replaced.docs, readable[1]) if i else (start, readable[0])
        chosen = {t: [sample_id(known[t], t, k) for k in samples] for t in which}
        jobs = [Job(task=by_id[t], docs=docs, sample_id=s, phase="restore", fresh=True)
                for t in which for s in chosen[t] if s not in known[t]]  # fmt: skip
        results = await night.replayer.run(jobs)
        drawn.extend(results)
        got = {(r.task_id, r.sample_id): night.score(r) for r in results}
        served[0] += sum(s in known[t] for t in which for s in chosen[t])
        out = {t: [known[t].get(s, got.get((t, s), math.nan)) for s in chosen[t]] for t in which}
        return out, results

    paired = await compare_adaptive(arm, ids, config=night.gate, plan=clear_pass(night.gate))
    decision = decide_paired(paired.base, paired.cand, config=night.gate, task_ids=ids,
                             confirm_from=paired.confirm_from, terminal=True)  # fmt: skip
    return _conclude(night, replaced, ids, name, decision, paired, drawn, served[0])


def _conclude(
    night: Night, replaced: Replaced, ids: Sequence[str], name: str, decision: GateDecision,
    paired: PairedSamples[RolloutResult], drawn: Sequence[RolloutResult], served: int,
) -> Decision | None:  # fmt: skip
    """The restore's trial and notes; the night's decision when the gate accepted it."""
    night.check_degenerate("restore", drawn, candidate=True)
    why = (
        f"the version adopted {replaced.adopted_at[:10]} (night run {replaced.run.name}) "
        f"passed fewer of {len(ids)} task(s) than the version it replaced, by the archive's "
        "samples: the replaced version against the live one, paired"
    )
    night.trials.append(
        Trial(name=name, kind="restore", round=0, target="both", edits=[], applied=[],
              unmatched=[], decision=decision, note=why)
    )  # fmt: skip
    night.end("restore", accepted=decision.accepted, drawn=len(drawn), recorded=served)
    night.check_budget("restore")
    if not decision.accepted:
        return None
    night.notes.append(
        f"{why}: the gate accepted the restore; it is staged for you to adopt (never "
        "auto-adopted), and tonight learned nothing on top of the version it would replace"
    )
    return Decision(
        accepted=True, action=decision.action, baseline=decision.baseline,
        candidate=decision.candidate, final=decision, docs=replaced.docs, applied=[],
        rejected=[], restore=True,
        start_scores={t: sum(v) / len(v) for t, v in paired.base.items() if v},
    )  # fmt: skip
