"""Issue 32 item 12: a damaged ``pending.json`` gets a clear error naming the file and what to
do, from the helpers and from the MCP tools over a real stdio session, never a raw
``JSONDecodeError``/``TypeError``/``AttributeError``."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest
from mcp.client.session import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client

from skillopt.backends.handoff import PENDING_NAME
from skillopt.errors import CorruptStateError
from skillopt_sleep.demo import prepare_demo
from skillopt_sleep.handoff import handoff_dir, live_night, next_prompt, take_answer
from support.sleep_setup import write_config

ROW = {"id": "0123456789abcdef", "role": "target", "stage": "rollout", "format": "text",
       "max_output_tokens": 300, "sample": 0, "system": "", "prompt": "Fix it.",
       "answer_file": "answers/0123456789abcdef.md", "problem": ""}  # fmt: skip
SRC = Path(__file__).resolve().parents[2] / "src"
CALLS = (("handoff_next", {}), ("handoff_answer", {"id": ROW["id"], "answer": "hi"}))
DAMAGED = {
    "not JSON": "{garbage",
    "a list": "[]",
    "no prompts": "{}",
    "prompts not a list": '{"prompts": "abc"}',
    "a prompt not an object": '{"prompts": [1]}',
    "a field missing its type": json.dumps({"prompts": [{**ROW, "sample": "one"}]}),
    "a path for an id": json.dumps({"prompts": [{**ROW, "id": "../../etc/passwd"}]}),
    "an id not text": json.dumps({"prompts": [{**ROW, "id": 7}]}),
}


@pytest.mark.parametrize("text", DAMAGED.values(), ids=DAMAGED.keys())
def test_a_damaged_list_is_named_with_what_to_do(tmp_path: Path, text: str) -> None:
    (tmp_path / PENDING_NAME).write_text(text)
    for read in (lambda: next_prompt(tmp_path), lambda: take_answer(tmp_path, ROW["id"], "hi")):
        with pytest.raises(CorruptStateError) as caught:
            read()
        assert str(tmp_path / PENDING_NAME) in str(caught.value)
        assert "run the night's command again" in str(caught.value)


def test_a_sound_list_is_still_served(tmp_path: Path) -> None:
    (tmp_path / PENDING_NAME).write_text(json.dumps({"prompts": [ROW], "live": {"pid": True}}))
    assert next_prompt(tmp_path)["id"] == ROW["id"] and live_night(tmp_path) is None


@pytest.mark.slow
async def test_the_mcp_tools_answer_a_damaged_list_with_a_clear_error(tmp_path: Path) -> None:
    setup = prepare_demo(tmp_path)
    config = write_config(setup, pool='[pool]\nkind = "handoff"\n')
    where = handoff_dir(setup.config, setup.project)
    where.mkdir(parents=True)
    (where / PENDING_NAME).write_text('{"prompts": [1]}')
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "skillopt_sleep", "mcp", "--config", str(config), "--project",
              str(setup.project)],
        env={"PYTHONPATH": os.pathsep.join([str(SRC), os.environ.get("PYTHONPATH", "")])},
        cwd=str(setup.project),
    )  # fmt: skip
    with (tmp_path / "server.log").open("w") as errlog:
        async with (
            stdio_client(params, errlog=errlog) as (read, write),
            ClientSession(read, write) as session,
        ):
            await session.initialize()
            for tool, arguments in CALLS:
                result = await session.call_tool(tool, arguments)
                text = " ".join(getattr(c, "text", "") for c in result.content)
                assert result.is_error and "prompt 1 is not an object" in text, text
                assert "run the night's command again" in text
