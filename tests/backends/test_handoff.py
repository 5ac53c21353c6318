"""The handoff member: answers from files, records what it cannot answer, never a model."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from skillopt.backends.base import CompletionRequest, Role
from skillopt.backends.handoff import (
    PENDING_NAME,
    PROMPTS_NAME,
    HandoffBackend,
    answer_path,
    prompt_id,
    read_pending,
    write_answer,
)
from skillopt.config import PoolConfig
from skillopt.errors import AnswerPendingError, ConfigError, ReplyFormatError
from skillopt_sleep.handoff import next_prompt, take_answer, waiting_lines


def _verdict(text: str) -> object:
    try:
        return json.loads(text)["score"]
    except (ValueError, KeyError, TypeError) as exc:
        raise ReplyFormatError(f"no score in the reply: {exc}") from exc


def judge(text: str = "Judge this answer.") -> CompletionRequest:
    return CompletionRequest(
        role=Role.OPTIMIZER, prompt=text, stage="judge", json_mode=True, check_reply=_verdict
    )


def attempt(
    text: str = "Fix the bug.", *, sample: int = 0, stage: str = "rollout"
) -> CompletionRequest:
    return CompletionRequest(
        role=Role.TARGET, prompt=text, system="be brief", sample_id=sample, stage=stage
    )


def test_ids_are_stable_and_tell_samples_and_stages_apart() -> None:
    assert prompt_id(attempt()) == prompt_id(attempt())
    ids = {prompt_id(attempt()), prompt_id(attempt(sample=1)), prompt_id(attempt(stage="trial")),
           prompt_id(attempt("Fix it.")), prompt_id(judge())}  # fmt: skip
    assert len(ids) == 5
    with pytest.raises(ValueError, match="not a prompt id"):
        answer_path(Path("/x"), "../../etc/passwd")


async def test_an_unanswered_prompt_is_pending_and_written_on_close(tmp_path: Path) -> None:
    member = HandoffBackend(
        name="handoff", directory=tmp_path, resume_command="skillopt-sleep once"
    )
    with pytest.raises(AnswerPendingError) as caught:
        await member.complete(attempt())
    pid = prompt_id(attempt())
    assert caught.value.prompt_id == pid and pid in str(caught.value)
    assert caught.value.error_class == "handoff_pending" and not caught.value.retryable
    with pytest.raises(AnswerPendingError):
        await member.complete(judge())
    await member.aclose()
    (first, second) = read_pending(tmp_path)  # ordered by stage, then id
    assert (first.stage, first.format, second.stage, second.format) == (
        "judge",
        "json",
        "rollout",
        "text",
    )
    assert second.system == "be brief" and second.prompt == "Fix the bug."
    assert second.answer_file == f"answers/{pid}.md"
    prompts = (tmp_path / PROMPTS_NAME).read_text()
    assert "## 1. `" in prompts and f"## 2. `{pid}`" in prompts and "skillopt-sleep once" in prompts
    assert json.loads((tmp_path / PENDING_NAME).read_text())["resume"] == "skillopt-sleep once"


async def test_an_answer_file_is_the_reply_and_a_sitting_with_none_left_clears_the_list(
    tmp_path: Path,
) -> None:
    first = HandoffBackend(name="handoff", directory=tmp_path)
    with pytest.raises(AnswerPendingError):
        await first.complete(attempt())
    await first.aclose()
    write_answer(tmp_path, prompt_id(attempt()), "Fixed it; tests pass.")
    second = HandoffBackend(name="handoff", directory=tmp_path)
    done = await second.complete(attempt())
    assert done.text == "Fixed it; tests pass." and done.member == "handoff"
    assert done.usage.estimated and done.usage.completion_tokens > 0
    await second.aclose()
    assert not (tmp_path / PENDING_NAME).exists() and not (tmp_path / PROMPTS_NAME).exists()


@pytest.mark.parametrize(
    ("answer", "problem"),
    [("", "the answer file is empty"), ("a fine answer, I think", "not in the expected format")],
)
async def test_a_bad_answer_is_set_aside_and_asked_again_naming_its_id(
    tmp_path: Path, answer: str, problem: str
) -> None:
    pid = prompt_id(judge())
    path = answer_path(tmp_path, pid)
    path.parent.mkdir(parents=True)
    path.write_text(answer)
    member = HandoffBackend(name="handoff", directory=tmp_path)
    with pytest.raises(AnswerPendingError, match=problem) as caught:
        await member.complete(judge())
    assert caught.value.problem.startswith(problem) and pid in str(caught.value)
    assert not path.exists() and path.with_suffix(".rejected.md").read_text() == answer
    await member.aclose()
    (pending,) = read_pending(tmp_path)
    assert pending.id == pid and pending.problem.startswith(problem)
    said = "\n".join(waiting_lines(tmp_path, "skillopt-sleep once --handoff"))
    assert f"answer {pid} rejected ({problem}" in said and "skillopt-sleep once --handoff" in said
    assert "The earlier answer was rejected" in (tmp_path / PROMPTS_NAME).read_text()
    path.write_text('{"score": 1}')
    assert (
        await HandoffBackend(name="h", directory=tmp_path).complete(judge())
    ).text == '{"score": 1}'


async def test_next_prompt_and_take_answer_serve_the_list_one_at_a_time(tmp_path: Path) -> None:
    member = HandoffBackend(name="handoff", directory=tmp_path, resume_command="again")
    for request in (attempt(), attempt(sample=1)):
        with pytest.raises(AnswerPendingError):
            await member.complete(request)
    await member.aclose()
    served = next_prompt(tmp_path)
    assert (served["number"], served["of"], served["remaining"]) == (1, 2, 2)
    with pytest.raises(ValueError, match="no prompt"):
        take_answer(tmp_path, "0123456789abcdef", "hello")
    with pytest.raises(ValueError, match="empty"):
        take_answer(tmp_path, served["id"], "  \n")
    took = take_answer(tmp_path, served["id"], "first answer")
    assert (
        took["remaining"] == 1
        and answer_path(tmp_path, served["id"]).read_text() == "first answer\n"
    )
    second = next_prompt(tmp_path)
    assert second["id"] != served["id"] and second["number"] == 2
    last = take_answer(tmp_path, second["id"], "second answer")
    assert last["remaining"] == 0 and "run `again`" in last["message"]
    assert next_prompt(tmp_path)["remaining"] == 0


def test_a_handoff_pool_is_one_member_for_both_roles() -> None:
    pool = PoolConfig.model_validate({"kind": "handoff"})
    assert pool.handoff and [m.kind for m in pool.members] == ["handoff"]
    assert pool.roles.target == pool.roles.optimizer == ["handoff"] and not pool.cache.enabled
    with pytest.raises(ValueError, match="unknown pool kind"):
        PoolConfig.model_validate({"kind": "magic"})
    with pytest.raises(ValueError, match="calls no model"):
        PoolConfig.model_validate({"kind": "handoff", "members": [{"kind": "mock", "name": "m"}]})


def test_a_handoff_member_outside_a_night_says_so() -> None:
    from skillopt.backends.factory import build_member

    (member,) = PoolConfig.model_validate({"kind": "handoff"}).members
    with pytest.raises(ConfigError, match="no directory"):
        build_member(member)


def test_the_waiting_exit_code_is_one_number_everywhere() -> None:
    from skillopt_sleep import cli
    from skillopt_sleep.commands import _common
    from skillopt_sleep.night.outcome import EXIT_WAITING

    assert cli.EXIT_WAITING == _common.EXIT_WAITING == EXIT_WAITING == 75
    assert "75 a handoff night waiting for answers" in cli.build_parser().format_help()
