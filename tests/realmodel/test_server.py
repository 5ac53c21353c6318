"""The real model's server speaks what the night and the trainer rely on: a reply in the shape
``response_format`` asks for (the grammar enforces it, as llama.cpp's own server does),
``usage`` tokens, a ceiling on a reply's tokens, clear 400s, and a count of its own that
matches what it reported. Short replies only: each test takes a few seconds."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from typing import Any

import pytest

from support.real_model import MODEL_NAME, RealModelServer

pytestmark = [pytest.mark.realmodel, pytest.mark.slow]

VERDICT = {
    "type": "object",
    "properties": {"verdict": {"enum": ["pass", "fail"]}, "score": {"type": "integer"}},
    "required": ["verdict", "score"],
    "additionalProperties": False,
}


def ask(server: RealModelServer, **body: Any) -> tuple[int, dict[str, Any]]:
    """POST a chat completion; the status and the JSON body, error or not."""
    messages = [
        {"role": "system", "content": "You grade answers. Reply in JSON."},
        {"role": "user", "content": "Question: 2+2? Answer: 4. Grade it."},
    ]
    payload = {"model": MODEL_NAME, "messages": messages, "temperature": 0} | body
    request = urllib.request.Request(
        f"{server.url}/chat/completions",
        data=json.dumps(payload).encode(),
        headers={"content-type": "application/json"},
    )
    try:
        with urllib.request.urlopen(request, timeout=300) as reply:
            return reply.status, json.load(reply)
    except urllib.error.HTTPError as error:
        return error.code, json.load(error)


def test_json_schema_reply_has_the_schema_shape(real_model: RealModelServer) -> None:
    shape = {"name": "verdict", "strict": True, "schema": VERDICT}
    status, body = ask(real_model, response_format={"type": "json_schema", "json_schema": shape})
    assert status == 200, body
    verdict = json.loads(body["choices"][0]["message"]["content"])
    assert set(verdict) == {"verdict", "score"}
    assert verdict["verdict"] in ("pass", "fail") and isinstance(verdict["score"], int)


def test_a_strings_max_length_ends_it(real_model: RealModelServer) -> None:
    """``maxLength`` is enforced as llama.cpp's server enforces it: the string ends there,
    and the reply is whole JSON, not cut mid-string by the token cap."""
    schema = {
        "type": "object",
        "properties": {"reason": {"type": "string", "maxLength": 40}},
        "required": ["reason"],
        "additionalProperties": False,
    }
    shape = {"name": "reason", "strict": True, "schema": schema}
    messages = [{"role": "user", "content": "Explain in at least three long paragraphs why "
                 "tests matter. Reply as JSON with a reason."}]  # fmt: skip
    status, body = ask(real_model, messages=messages,
                       response_format={"type": "json_schema", "json_schema": shape})  # fmt: skip
    assert status == 200, body
    reply = json.loads(body["choices"][0]["message"]["content"])
    assert len(reply["reason"]) <= 40


def test_usage_and_the_servers_count_agree(real_model: RealModelServer) -> None:
    before = real_model.stats()
    replies = [ask(real_model, max_tokens=8), ask(real_model, max_completion_tokens=4)]
    served = real_model.stats().since(before)
    assert [status for status, _ in replies] == [200, 200]
    usages = [body["usage"] for _, body in replies]
    assert served.requests == served.answered == 2
    assert served.prompt_tokens == sum(u["prompt_tokens"] for u in usages) > 0
    assert served.completion_tokens == sum(u["completion_tokens"] for u in usages)
    # a request's token budget is a ceiling
    assert 0 < usages[0]["completion_tokens"] <= 8 and 0 < usages[1]["completion_tokens"] <= 4
    assert all(u["total_tokens"] == u["prompt_tokens"] + u["completion_tokens"] for u in usages)


@pytest.mark.parametrize(
    ("body", "says"),
    [
        ({"response_format": {"type": "yaml"}}, "unsupported response_format"),
        ({"response_format": {"type": "json_schema", "json_schema": {}}}, "schema"),
        ({"messages": []}, "messages"),
        ({"stream": True}, "streaming"),
    ],
)
def test_a_bad_request_is_a_clear_400_and_counted(
    real_model: RealModelServer, body: dict[str, Any], says: str
) -> None:
    before = real_model.stats()
    status, reply = ask(real_model, **body)
    assert status == 400
    assert says in reply["error"]["message"]
    served = real_model.stats().since(before)
    assert (served.requests, served.rejected, served.tokens) == (1, 1, 0)
