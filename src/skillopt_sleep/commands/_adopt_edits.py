"""``adopt --edit ID``: some of a night's kept edits, checked again before they are adopted
(:mod:`skillopt_sleep.adopt_subset`). The plan and what the check may cost are said before
any model call; the calls it made are said after."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from skillopt.errors import AdoptionError, ConfigError, LockHeldError
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

__all__ = ["adopt_edits"]


def adopt_edits(args: argparse.Namespace) -> int:
    from skillopt_sleep.adopt_subset import adopt_checked, plan_subset
    from skillopt_sleep.commands._runs import (
        latest_with_proposal,
        recover_adoptions,
        say_recovered,
    )
    from skillopt_sleep.lock import project_lock
    from skillopt_sleep.rundir import utc_now

    try:
        cfg, project = load_config(args)
        if cfg.pool is None:
            raise ConfigError("checking edits needs model endpoints: add a [pool] section",
                              key="pool")  # fmt: skip
        with project_lock(cfg.state_path(), project, command="adopt"):
            recovered = recover_adoptions(cfg, project)
            say_recovered([] if args.json else recovered)
            run_dir = args.run or latest_with_proposal(cfg, project)
            if run_dir is None:
                raise ConfigError("no night has a proposal waiting: nothing to choose from")
            plan = plan_subset(cfg, project, Path(run_dir), args.edit, now=utc_now())
            if not args.json:
                say(plan.cost_line())
            check, night = run_async(_check, cfg, project, plan)
            result = adopt_checked(cfg, project, plan, check, night) if check.passed else None
    except LockHeldError as exc:
        return refuse(args, "lock_held", f"a night or another adoption holds the lock: {exc}")
    except AdoptionError as exc:
        return refuse(args, "adoption_failed", str(exc), EXIT_FAILED)
    except known_errors() as exc:
        return refuse(args, type(exc).__name__, str(exc), EXIT_REFUSED)
    data: dict[str, Any] = {
        "ok": result is not None,
        "run_dir": str(plan.run_dir),
        "edits": list(plan.ids),
        "left_out": list(plan.left_out),
        "estimate": {"calls_at_least": plan.calls_at_least, "calls_at_most": plan.calls_at_most},
        "check": check.to_dict(),
        "adopted": [a.to_dict() for a in result.adopted] if result else [],
    }
    if not result:
        data.update(error="subset_rejected", message=check.why())
    if args.json:
        emit_json(data)
    else:
        say(f"the check made {check.calls} model call(s) ({check.tokens} tokens)")
        if result is None:
            say(f"not adopted: {check.why()}")
        for a in result.adopted if result else ():
            say(f"adopted {a.name} -> {a.live_path} (edits {', '.join(plan.ids)})")
    return EXIT_OK if result else EXIT_REFUSED


async def _check(cfg: Any, project: Path, plan: Any) -> Any:
    from skillopt.backends.open import open_completer
    from skillopt_sleep.adopt_subset import check_subset
    from skillopt_sleep.progress import default_progress

    async with open_completer(cfg.pool, executor=cfg.night.executor) as pool:
        return await check_subset(
            cfg, project, plan, pool=pool, progress=default_progress(sys.stderr)
        )
