"""No new evidence, no learning: a task the nights could not make pass does not make a
night a learning night again until something about it changes.

A task is *stuck* under its group's documents (the live ones) and tonight's models when

1. no new session brought it tonight (it was recalled from the archive, or it is a tasks
   file's or a demo's task, whose words its hash holds): it was not mined tonight;
2. its recorded samples under those documents all failed, alike (steady);
3. it failed on every recorded sample under every document the nights tried it under,
   those and at least one other: a night learned with its failure in view and measured
   what it proposed on it.

Reflecting again on the same failure under the same documents and models would propose
what was already tried. The memory of it is the archive's sample answers, kept by the
task's hash, the documents' content hash and the answer key (:mod:`.questions`): a changed
document, another model or setting, a reworded task or a new session that mines it again
brings the task back, and one passing sample under any document makes it learnable again.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from skillopt.types import Origin, TaskRecord
from skillopt_sleep.night.night_state import Night
from skillopt_sleep.night.quiet.questions import answer_key, task_hash
from skillopt_sleep.tasks.records import NoiseEstimate, Question

__all__ = ["NEW_EVIDENCE", "stuck_tasks"]

NEW_EVIDENCE = frozenset({Origin.MINED, Origin.DREAM})
"""Where a task comes from when tonight's sessions brought it: it may fail for new reasons."""


def stuck_tasks(
    night: Night,
    tasks: Iterable[TaskRecord],
    live: Mapping[str, NoiseEstimate],
    docs_of: Mapping[str, str],
) -> frozenset[str]:
    """The ids of ``tasks`` stuck under their group's documents (``docs_of``: task id ->
    documents' hash; ``live``: their recorded samples there), by the module's rule."""
    key = answer_key(night.cfg)
    if not key or night.archive is None:
        return frozenset()
    stuck: set[str] = set()
    for task in tasks:
        if task.origin in NEW_EVIDENCE or not live[task.id].steady_fail(1):
            continue
        question = Question(task_id=task.id, task_hash=task_hash(task), docs_hash=docs_of[task.id],
                            answer_key=key)  # fmt: skip
        tried = night.archive.tried(question)
        if tried.documents >= 2 and tried.samples and not tried.passes:
            stuck.add(task.id)
    return frozenset(stuck)
