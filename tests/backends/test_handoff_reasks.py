"""Issue 32 item 8: an answer the night could not use and asks again for (a reflection's,
a mining prompt's) is not silent in step-by-step mode: the prompt that asks again says
why, in ``pending.json``, ``PROMPTS.md``, the waiting lines and ``handoff_next``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from skillopt.backends.base import CompletionRequest, Role
from skillopt.backends.handoff import (
    PENDING_NAME,
    PROMPTS_NAME,
    HandoffBackend,
    prompt_id,
    write_answer,
)
from skillopt.errors import AnswerPendingError, ReplyFormatError
from skillopt.replies import ask_validated, extract_json_object
from skillopt_sleep.handoff import next_prompt, waiting_lines


def _edits(text: str) -> dict[str, object]:
    found = extract_json_object(text)
    if "edits" not in found:
        raise ReplyFormatError("no edits in the reply")
    return found


async def test_a_prompt_asked_again_says_why_where_the_user_looks(tmp_path: Path) -> None:
    first = CompletionRequest(role=Role.OPTIMIZER, prompt="Propose edits.", stage="reflect")
    write_answer(tmp_path, prompt_id(first), "I would make the skill clearer.")
    member = HandoffBackend(name="handoff", directory=tmp_path, resume_command="again")
    with pytest.raises(AnswerPendingError) as caught:
        await ask_validated(member.complete, first, _edits)
    assert "no JSON object in the reply" in caught.value.problem
    await member.aclose()
    (row,) = json.loads((tmp_path / PENDING_NAME).read_text())["prompts"]
    assert row["id"] != prompt_id(first) and row["sample"] == 1
    assert row["problem"].startswith("asked again:") and "no JSON object" in row["problem"]
    assert "**Asked again**" in (tmp_path / PROMPTS_NAME).read_text()
    said = "\n".join(waiting_lines(tmp_path, "again"))
    assert f"prompt {row['id']} is asked again" in said and "no JSON object" in said
    assert "asked again" in next_prompt(tmp_path)["message"]
