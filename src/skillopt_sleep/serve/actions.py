"""What the dashboard's buttons do, each through the same function as its command:
``adopt`` (:func:`~skillopt_sleep.commands._runs.adopt_pending`), ``adopt --edit``
(:func:`~skillopt_sleep.commands._adopt_edits.adopt_subset`), ``versions restore``
(:func:`skillopt_sleep.versions.restore`) and ``once`` (the project lock, the recovery of
half-done adoptions, :func:`~skillopt_sleep.night.entry.run_night`).

Each returns the :data:`~skillopt_sleep.serve.jobs.Action` a job runs; ``message`` in its
result is the line the job's page ends with.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from skillopt_sleep.config import SleepConfig
from skillopt_sleep.serve.jobs import Action, Job, JobProgress

__all__ = ["adopt_all", "adopt_chosen", "restore_version", "start_night"]


def adopt_all(cfg: SleepConfig, project: Path, run_dir: Path) -> Action:
    async def act(job: Job) -> dict[str, Any]:
        from skillopt_sleep.commands._runs import adopt_pending, recover_adoptions

        for recovery in recover_adoptions(cfg, project):
            job.lines.append(f"note: {recovery.describe()}")
        result = adopt_pending(cfg, project, run_dir, None, every=True)
        if result is None:
            return {"ok": True, "adopted": [], "message": "nothing to adopt: no proposal waits"}
        names = ", ".join(f"{a.name} -> {a.live_path}" for a in result.adopted)
        return {"ok": True, **result.to_dict(), "message": f"adopted {names}"}

    return act


def adopt_chosen(cfg: SleepConfig, project: Path, run_dir: Path, ids: Sequence[str]) -> Action:
    async def act(job: Job) -> dict[str, Any]:
        from skillopt_sleep.commands._adopt_edits import adopt_subset

        def on_plan(recovered: list[Any], plan: Any) -> None:
            job.lines.extend(f"note: {r.describe()}" for r in recovered)
            job.lines.append(plan.cost_line())

        outcome = await adopt_subset(
            cfg, project, run_dir, ids, progress=JobProgress(job), on_plan=on_plan
        )
        data = outcome.to_dict()
        check = outcome.check
        said = f"the check made {check.calls} model call(s) ({check.tokens} tokens); "
        if outcome.result is None:
            return {**data, "message": said + f"not adopted: {check.why()}"}
        return {**data, "message": said + f"adopted edits {', '.join(outcome.plan.ids)}"}

    return act


def restore_version(cfg: SleepConfig, project: Path, skill: str, number: int) -> Action:
    async def act(job: Job) -> dict[str, Any]:
        from skillopt_sleep import versions

        result = versions.restore(cfg, project, skill, number)
        where = ", ".join(str(a.live_path) for a in result.adopted)
        return {"ok": True, **result.to_dict(), "message": f"restored {skill} v{number} -> {where}"}

    return act


def start_night(cfg: SleepConfig, project: Path) -> Action:
    async def act(job: Job) -> dict[str, Any]:
        from skillopt_sleep.commands._runs import recover_adoptions
        from skillopt_sleep.lock import project_lock
        from skillopt_sleep.night.entry import run_night

        async with project_lock(cfg.state_path(), project, command="serve night"):
            for recovery in recover_adoptions(cfg, project):  # the night reads the live files
                job.lines.append(f"note: {recovery.describe()}")
            # Someone clicked and watches the job's page: like `once`, fail at once with the
            # reason when every endpoint refuses, rather than wait out the outage patience.
            outcome = await run_night(
                cfg, project=project, progress=JobProgress(job), foreground=True
            )
        data = outcome.to_dict()
        message = f"night {outcome.run_id}: {outcome.result.value}"
        if outcome.reason:
            message += f" ({outcome.reason})"
        return {**data, "message": message}

    return act
