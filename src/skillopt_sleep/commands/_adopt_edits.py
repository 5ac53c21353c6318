"""``adopt --edit ID``: some of a night's kept edits, checked again before they are adopted
(:mod:`skillopt_sleep.adopt_subset`). The plan and what the check may cost are said before
any model call; the calls it made are said after.

:func:`adopt_subset` is the whole action (lock, recovery, plan, check, adoption) for the CLI
and the dashboard (``serve``) alike; they differ only in where they say things.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from skillopt.errors import AdoptionError, ConfigError, LockHeldError
from skillopt.progress import Progress
from skillopt_sleep.commands._common import (
    EXIT_FAILED,
    EXIT_OK,
    EXIT_REFUSED,
    emit_json,
    known_errors,
    load_config,
    refuse,
    run_async,
    say,
)

__all__ = ["SubsetOutcome", "adopt_edits", "adopt_subset"]


@dataclass(frozen=True, slots=True, kw_only=True)
class SubsetOutcome:
    plan: Any  # adopt_subset.SubsetPlan
    check: Any  # adopt_subset.SubsetCheck
    result: Any  # adopt.AdoptResult, None when the check did not pass

    def to_dict(self) -> dict[str, Any]:
        plan, check, result = self.plan, self.check, self.result
        data: dict[str, Any] = {
            "ok": result is not None,
            "run_dir": str(plan.run_dir),
            "edits": list(plan.ids),
            "left_out": list(plan.left_out),
            "estimate": {"calls_at_least": plan.calls_at_least,
                         "calls_at_most": plan.calls_at_most},
            "check": check.to_dict(),
            "adopted": [a.to_dict() for a in result.adopted] if result else [],
        }  # fmt: skip
        if not result:
            data.update(error="subset_rejected", message=check.why())
        return data


async def adopt_subset(
    cfg: Any,
    project: Path,
    run_dir: Path | None,
    ids: Sequence[str],
    *,
    progress: Progress,
    on_plan: Callable[[list[Any], Any], None] = lambda recovered, plan: None,
) -> SubsetOutcome:
    """Check the chosen kept edits against the live documents and adopt them if they pass,
    under the project lock. ``on_plan`` hears the recovered adoptions and the plan (with
    its cost) before any model call."""
    from skillopt_sleep.adopt_subset import adopt_checked, plan_subset
    from skillopt_sleep.commands._runs import latest_with_proposal, recover_adoptions
    from skillopt_sleep.lock import project_lock
    from skillopt_sleep.rundir import utc_now

    if cfg.pool is None:
        raise ConfigError("checking edits needs model endpoints: add a [pool] section", key="pool")
    async with project_lock(cfg.state_path(), project, command="adopt"):
        recovered = recover_adoptions(cfg, project)
        run_dir = run_dir or latest_with_proposal(cfg, project)
        if run_dir is None:
            raise ConfigError("no night has a proposal waiting: nothing to choose from")
        plan = plan_subset(cfg, project, Path(run_dir), list(ids), now=utc_now())
        on_plan(recovered, plan)
        check, night = await _check(cfg, project, plan, progress)
        result = adopt_checked(cfg, project, plan, check, night) if check.passed else None
    return SubsetOutcome(plan=plan, check=check, result=result)


def adopt_edits(args: argparse.Namespace) -> int:
    from skillopt_sleep.commands._runs import say_recovered
    from skillopt_sleep.night_progress import default_progress

    def on_plan(recovered: list[Any], plan: Any) -> None:
        say_recovered([] if args.json else recovered)
        if not args.json:
            say(plan.cost_line())

    try:
        cfg, project = load_config(args)
        outcome: SubsetOutcome = run_async(
            lambda: adopt_subset(
                cfg, project, args.run, args.edit,
                progress=default_progress(sys.stderr), on_plan=on_plan,
            )
        )  # fmt: skip
    except LockHeldError as exc:
        return refuse(args, "lock_held", f"a night or another adoption holds the lock: {exc}")
    except AdoptionError as exc:
        return refuse(args, "adoption_failed", str(exc), EXIT_FAILED)
    except known_errors() as exc:
        return refuse(args, type(exc).__name__, str(exc), EXIT_REFUSED)
    plan, check, result = outcome.plan, outcome.check, outcome.result
    if args.json:
        emit_json(outcome.to_dict())
    else:
        say(f"the check made {check.calls} model call(s) ({check.tokens} tokens)")
        if result is None:
            say(f"not adopted: {check.why()}")
        for a in result.adopted if result else ():
            say(f"adopted {a.name} -> {a.live_path} (edits {', '.join(plan.ids)})")
    return EXIT_OK if result else EXIT_REFUSED


async def _check(cfg: Any, project: Path, plan: Any, progress: Progress) -> Any:
    from skillopt.backends.open import open_completer
    from skillopt_sleep.adopt_subset import check_subset

    async with open_completer(cfg.pool, executor=cfg.night.executor) as pool:
        return await check_subset(cfg, project, plan, pool=pool, progress=progress)
