"""How a night ended is said in two enums (:mod:`skillopt_sleep.night_end`) by every record."""

from __future__ import annotations

import importlib
import inspect
import pkgutil
from datetime import UTC, datetime
from enum import Enum

import skillopt
import skillopt_sleep
from skillopt_sleep.night_end import NightResult, PartStatus, RunStatus
from skillopt_sleep.state import NightEntry

NOW = datetime(2026, 11, 25, 3, 0, tzinfo=UTC)
# Words only a night's end uses: an enum holding one of them restates RunStatus/NightResult.
_ENDINGS = {"complete", "aborted", "no_tasks", "budget_reached"}


def _enums() -> list[type[Enum]]:
    found = []
    for package in (skillopt, skillopt_sleep):
        for info in pkgutil.walk_packages(package.__path__, package.__name__ + "."):
            if info.name.endswith("__main__"):
                continue
            module = importlib.import_module(info.name)
            found += [
                obj
                for obj in vars(module).values()
                if inspect.isclass(obj) and issubclass(obj, Enum) and obj.__module__ == info.name
            ]
    return found


def test_only_the_two_enums_say_how_a_night_ended() -> None:
    saying = {e for e in _enums() if {str(m.value) for m in e} & _ENDINGS}
    # PartStatus, beside them, says how a part of a night (a project skill, the shared step) ended
    assert saying == {RunStatus, NightResult, PartStatus}


def test_a_history_entry_speaks_in_the_same_two() -> None:
    for word, member in (("complete", RunStatus.COMPLETE), ("no_tasks", NightResult.NO_TASKS)):
        entry = NightEntry.model_validate(
            {"night": 1, "run_id": "r1", "started_at": NOW.isoformat(), "status": word}
        )
        assert entry.status is member
        assert entry.model_dump(mode="json")["status"] == word
