"""One night over a project with three skills of its own, every model call over real HTTP
(the fake model server on 127.0.0.1 playing the mock world), run and adopted through the
real CLI processes: `once` stages one proposal per skill, `adopt --skill` applies exactly
the skills it names."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from skillopt.backends.mock import World
from support.fake_model_server import FakeModelServer
from support.sleep_setup import openai_members, write_config
from support.three_skills import SHARED_SESSIONS, SKILLS, skill_text, three_skills_project
from support.world_http import world_reply

RULES = {r.key: r.text for r in World().rules}


def _http_pool(server: FakeModelServer) -> str:
    members = openai_members(server, ("m1", "m2"), key_env="SKILLOPT_TEST_FAKE_KEY", timeout=10)
    roles = """
[pool.roles]
target = ["m1", "m2"]
optimizer = ["m1", "m2"]

[pool.retry]
max_attempts = 2
base_delay = 0.0
max_delay = 0.0
"""
    return members + roles


def _sleep(config: Path, project: Path, *argv: str) -> tuple[int, Any]:
    """``python -m skillopt_sleep ARGV --json`` as a real process."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("SKILLOPT_SLEEP__")}
    env.update(HOME=str(config.parent), SKILLOPT_TEST_FAKE_KEY="test-key-not-secret")
    done = subprocess.run(
        [sys.executable, "-m", "skillopt_sleep", *argv, "--json",
         "--config", str(config), "--project", str(project)],
        capture_output=True, text=True, env=env, timeout=300, check=False,
    )  # fmt: skip
    assert done.stdout.strip(), done.stderr[-3000:]
    return done.returncode, json.loads(done.stdout)


@pytest.mark.slow
def test_three_skills_learn_over_http_and_adopt_by_name(tmp_path: Path) -> None:
    setup = three_skills_project(tmp_path)
    before = {name: skill_text(setup, name) for name in SKILLS}
    with FakeModelServer(reply_fn=world_reply) as server:
        config = write_config(setup, pool=_http_pool(server))
        code, night = _sleep(config, setup.project, "once")
        requests = list(server.requests)
    # the skills' proposals are what this night stages (the managed skill's two held-out
    # tasks, one consistent pair each, cannot make a significant gain on their own)
    assert code == 0 and night["result"] == "accepted", night
    assert {r.member for r in requests} == {"m1", "m2"}
    for name in SKILLS:  # every skill's own document went over the wire
        assert any(f"\n# {name}\n" in r.user_text for r in requests), name
    report = json.loads((Path(night["run_dir"]) / "report.json").read_text())
    rows = {row["name"]: row for row in report["skills"]}
    for name, rule in (("code-search", "cite"), ("bug-fixing", "tests"),
                       ("git-commits", "commits")):  # fmt: skip
        assert rows[name]["status"] == "accepted" and rows[name]["staged"], rows[name]
        assert RULES[rule] in rows[name]["accepted_edits"]
    assert {name: skill_text(setup, name) for name in SKILLS} == before  # staged only

    code, listed = _sleep(config, setup.project, "adopt")
    assert code == 2 and set(SKILLS) <= set(listed["available"]), listed
    assert {name: skill_text(setup, name) for name in SKILLS} == before
    code, adopted = _sleep(config, setup.project, "adopt", "--skill", "code-search",
                           "--skill", "git-commits")  # fmt: skip
    assert code == 0, adopted
    assert {a["name"] for a in adopted["adopted"]} == {"code-search", "git-commits"}
    assert RULES["cite"] in skill_text(setup, "code-search")
    assert RULES["commits"] in skill_text(setup, "git-commits")
    assert skill_text(setup, "bug-fixing") == before["bug-fixing"]
    code, versions = _sleep(config, setup.project, "versions", "--skill", "code-search")
    assert code == 0 and [v["adopted"] for v in versions["versions"]] == [True], versions


@pytest.mark.slow
def test_a_rule_all_three_skills_need_is_staged_in_memory_over_http(tmp_path: Path) -> None:
    setup = three_skills_project(tmp_path, SHARED_SESSIONS)
    with FakeModelServer(reply_fn=world_reply) as server:
        config = write_config(setup, pool=_http_pool(server))
        code, night = _sleep(config, setup.project, "once")
    # the skills' proposals are what this night stages (the managed skill's two held-out
    # tasks, one consistent pair each, cannot make a significant gain on their own)
    assert code == 0 and night["result"] == "accepted", night
    report = json.loads((Path(night["run_dir"]) / "report.json").read_text())
    assert report["shared_memory"]["status"] == "accepted", report["shared_memory"]
    for row in report["skills"]:
        assert RULES["changelog"] not in row["accepted_edits"], row
    code, adopted = _sleep(config, setup.project, "adopt", "--all")
    assert code == 0, adopted
    memory = setup.config.live_memory_path(setup.project).read_text()
    assert RULES["changelog"] in memory
    assert all(RULES["changelog"] not in skill_text(setup, name) for name in SKILLS)
