"""A rule two singles found significantly worse tonight is not tested a third time.

Reflections re-propose an over-eager rule step after step (the mock world's "one bare
line" here is proposed for both documents in every round). Its first two tests reject it
as significantly worse; from then on it is rejected without a test, which saves every
call of those tests and changes no decision.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, ClassVar

from skillopt.backends.base import Role
from skillopt.backends.mock import MockBackend, World
from skillopt.backends.pool import BackendPool, MemberSpec
from skillopt_sleep.config import SleepConfig
from skillopt_sleep.demo import prepare_demo
from skillopt_sleep.night.entry import run_night
from skillopt_sleep.night.learn.trials import HARMFUL_EARLIER


class EagerWorld(World):
    """Proposes the harmful rule with every proposal, for either document, and the
    ``tests`` rule only from the 13th reflection on (round 3: three folds for each of the
    two documents a round), so a third round runs."""

    asked: ClassVar[list[int]] = [0]  # the world's dataclass is frozen: count in a list

    def proposals(
        self,
        failures: Sequence[Mapping[str, Any]],
        *,
        skill: str,
        memory: str,
        target: str,
        budget: int,
    ) -> list[dict[str, str]]:
        self.asked[0] += 1
        # World is a slotted dataclass: zero-argument super() does not reach it
        edits = World.proposals(self, failures, skill=skill, memory=memory, target=target,
                                budget=budget)  # fmt: skip
        if self.asked[0] <= 12:  # rounds 1-2: three folds for each document
            tests = next(r for r in self.rules if r.key == "tests")
            edits = [e for e in edits if e["content"] != tests.text]
        harmful = next(r for r in self.rules if r.harmful)
        if harmful.key not in self.present((skill, memory)) and all(
            e["content"] != harmful.text for e in edits
        ):
            edits.append({"op": "add", "content": harmful.text, "anchor": "",
                          "rationale": "keep answers short"})  # fmt: skip
        return edits[: max(0, budget)]


async def _night(tmp: Path) -> dict[str, Any]:
    demo = prepare_demo(tmp)
    data = demo.config.model_dump(mode="json")
    data["night"].update({"rounds": 3})
    cfg = SleepConfig.model_validate(data)
    EagerWorld.asked[0] = 0
    backend = MockBackend(world=EagerWorld())
    members = [MemberSpec(backend=backend)]
    async with BackendPool({Role.TARGET: members, Role.OPTIMIZER: members}) as pool:
        outcome = await run_night(cfg, project=demo.project, pool=pool)
    return json.loads((outcome.run_dir / "report.json").read_text())


async def test_a_rule_found_worse_twice_is_rejected_without_a_third_test(
    tmp_path: Path,
) -> None:
    report = await _night(tmp_path)
    harmful = next(r for r in World().rules if r.harmful).text
    singles = [t for t in report["trials"] if t["kind"] == "single"
               and any(e["content"] == harmful for e in t["edits"])]  # fmt: skip
    tested = [t for t in singles if t["decision"] is not None]
    skipped = [t for t in singles if t["note"] == HARMFUL_EARLIER]
    assert len(tested) == 2, [t["name"] for t in singles]
    assert all(t["decision"]["arithmetic"]["harmful"] for t in tested)
    assert all(t["decision"]["arithmetic"]["mean_delta"] < 0 for t in tested)
    assert skipped and all(t["verdict"] == "rejected" for t in skipped)
    assert len(singles) == len(tested) + len(skipped)
    # the rule is never staged, and the night still keeps its good edits
    assert report["accepted"] and all(harmful not in e["content"] for e in report["accepted_edits"])
    assert any(e["content"] == harmful for e in report["rejected_edits"])
