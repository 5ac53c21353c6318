"""The mock world model behind real HTTP: a reply function for the fake model server.

HTTP members see only the prompt text, so this reads our own templates back (the sections
the night renders: skill, project notes, task, judge and reflect blocks) and answers as
:class:`skillopt.backends.mock.World` would. Used by the HTTP end-to-end tests and the
night benchmark (``python tests/support/world_http.py --latency 0.3`` serves it).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import hashlib
import json
import re
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from skillopt.backends.mock import World
from support.fake_model_server import FakeModelServer, Request
from support.mining_replies import ENTRY, answer

WORLD = World()


def _between(text: str, start: str, end: str) -> str:
    """The text between two of our template's fixed headings (documents may hold others)."""
    head = text.find(start)
    if head < 0:
        return ""
    head += len(start)
    tail = text.find(end, head)
    return text[head : tail if tail >= 0 else len(text)].strip()


def _task(intent: str) -> dict[str, Any]:
    return {"id": hashlib.sha256(intent.encode()).hexdigest()[:12], "intent": intent, "tags": []}


def world_reply(request: Request) -> str:
    """The default world's answer to ``request``."""
    return reply_in(WORLD, request)


@dataclass
class SwitchingWorld:
    """A world the test can change between nights (the team changed its mind)."""

    world: World = WORLD

    def reply(self, request: Request) -> str:
        return reply_in(self.world, request)


def reply_in(world: World, request: Request) -> str:
    """What ``world`` answers to ``request`` (mining, an attempt, a judge, a reflection)."""
    text = request.user_text
    if ENTRY.search(text):  # mining: the mock world has no recurring request to find
        return answer(text, lambda entry: [])
    if "# Project notes" in text:
        skill = _between(text, "\n# Skill\n\n", "\n\n# Project notes\n\n")
        memory = _between(text, "\n\n# Project notes\n\n", "\n\n# Task\n\n")
        intent = text.split("\n\n# Task\n\n", 1)[1].split("\n\n")[0].strip()
        return world.answer(_task(intent), skill, memory, 0)
    if "# What a good answer does" in text:
        intent = _between(text, "# What the user asked\n\n", "\n\n# What a good answer does")
        response = text.split("# The answer\n\n", 1)[1].split("\n\nReply with one JSON")[0]
        score, reason = world.judge(_task(intent), response)
        return json.dumps({"score": score, "reason": reason})
    if "# Failed tasks" in text or "# Attempt groups" in text:
        target = re.search(r"You maintain the (\w+) document", text)
        budget = re.search(r"at most (\d+)", text)
        which = target.group(1) if target else "skill"
        doc = _between(text, f"# Current {which}\n\n", "\n\n# The other document")
        other = _between(
            text, "# The other document (read-only here)\n\n", "\n\n# The user's standing"
        )
        intents = re.findall(r"^- asked: (.*)$", text, re.M)
        intents += re.findall(r"^## Task: (.*)$", text, re.M)
        skill, memory = (doc, other) if which == "skill" else (other, doc)
        edits = world.proposals(
            [_task(i.strip()) for i in intents],
            skill=skill,
            memory=memory,
            target=which,
            budget=int(budget.group(1)) if budget else 4,
        )
        return json.dumps(edits)
    return "ok"


def spawn(latency: float, timeline: Path | None = None) -> tuple[subprocess.Popen[str], int]:
    """This server in a process of its own (its CPU is not the caller's): process, port.
    ``timeline``: on SIGTERM it writes there every request's arrival (``time.time()``)."""
    extra = ["--timeline", str(timeline)] if timeline else []
    proc = subprocess.Popen(
        [sys.executable, __file__, "--latency", str(latency), *extra],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    return proc, int(proc.stdout.readline().split()[1])


def main(argv: list[str] | None = None) -> None:
    """Serve the world over HTTP in its own process; prints ``PORT <n>``."""
    parser = argparse.ArgumentParser(description="world-model fake server")
    parser.add_argument("--latency", type=float, default=0.0)
    parser.add_argument("--timeline", type=Path, help="on SIGTERM, write arrival times here")
    args = parser.parse_args(argv)
    server = FakeModelServer(latency=args.latency, reply_fn=world_reply)

    def dump_and_exit() -> None:
        arrivals = sorted(r.received for r in server.requests)
        args.timeline.write_text(json.dumps(arrivals))
        raise SystemExit(0)

    async def run() -> None:
        if args.timeline:
            asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, dump_and_exit)
        await server.serve()
        sys.stdout.write(f"PORT {server.port}\n")
        sys.stdout.flush()
        await asyncio.Event().wait()

    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(run())


if __name__ == "__main__":
    main()
