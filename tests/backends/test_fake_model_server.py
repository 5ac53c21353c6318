"""The fake model server other tests rely on: routes, scripting, stats, process mode."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import httpx2
import pytest

from support.fake_model_server import Connection, FakeModelServer, Reply, Request, error_rate_rule

SERVER = Path(__file__).resolve().parents[1] / "support" / "fake_model_server.py"


async def test_routes_scripts_and_stats() -> None:
    with FakeModelServer() as server:
        server.script("m", Reply(status=429, headers={"retry-after": "3"}), Reply(text="scripted"))
        async with httpx2.AsyncClient(base_url=server.base) as client:
            chat = {"model": "x", "messages": [{"role": "user", "content": "hey"}]}
            limited = await client.post("/m/v1/chat/completions", json=chat)
            scripted = await client.post("/m/v1/chat/completions", json=chat)
            echoed = await client.post("/m/v1/chat/completions", json=chat)
            resp = await client.post("/v1/responses", json={"model": "x", "input": "plain"})
            azure = await client.post(
                "/az/openai/deployments/d1/chat/completions?api-version=1", json=chat
            )
            streaming = await client.post("/v1/chat/completions", json={**chat, "stream": True})
            missing = await client.post("/nope", json={})
            stats = (await client.get("/_stats")).json()
    assert limited.status_code == 429 and limited.headers["retry-after"] == "3"
    assert scripted.json()["choices"][0]["message"]["content"] == "scripted"
    assert echoed.json()["choices"][0]["message"]["content"] == "echo: hey"
    assert echoed.json()["usage"] == {
        "prompt_tokens": 11,
        "completion_tokens": 7,
        "total_tokens": 18,
    }
    assert resp.json()["output"][0]["content"][0]["text"] == "echo: plain"
    assert azure.status_code == 200 and server.requests_for("az")[0].route == "azure_chat"
    assert streaming.status_code == 400 and missing.status_code == 404
    routes = {(r["member"], r["route"]): r["count"] for r in stats["routes"]}
    assert routes[("m", "chat")] == 3 and routes[("", "responses")] == 1


async def test_malformed_and_dropped_replies() -> None:
    with FakeModelServer() as server:
        server.script("", Reply(malformed=True), Reply(drop=True))
        async with httpx2.AsyncClient(base_url=server.base) as client:
            bad = await client.post("/v1/chat/completions", json={"messages": []})
            with pytest.raises(httpx2.RemoteProtocolError):
                await client.post("/v1/chat/completions", json={"messages": []})
    with pytest.raises(ValueError):
        bad.json()


async def test_extra_routes_can_be_added() -> None:
    async def pong(conn: Connection, request: Request) -> None:
        await conn.send_json(200, {"member": request.member, "body": request.body})

    with FakeModelServer() as server:
        server.add_route("ping", r"^(?P<prefix>.*?)/ping$", pong)
        async with httpx2.AsyncClient(base_url=server.base) as client:
            reply = await client.post("/who/ping", json={"a": 1})
    assert reply.json() == {"member": "who", "body": {"a": 1}}
    assert server.total("who") == 1


def test_error_rate_rule_is_seeded() -> None:
    request = Request(
        member="", route="chat", path="/", query={}, headers={}, body={}, raw_body=b"", arrived=0
    )
    rule_a, rule_b = error_rate_rule(0.3, seed=4), error_rate_rule(0.3, seed=4)
    seq_a = [rule_a(request) is not None for _ in range(200)]
    seq_b = [rule_b(request) is not None for _ in range(200)]
    assert seq_a == seq_b and 30 < sum(seq_a) < 90


def test_process_mode_prints_its_port_and_serves() -> None:
    proc = subprocess.Popen(
        [sys.executable, str(SERVER), "--latency", "0"], stdout=subprocess.PIPE, text=True
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line.startswith("PORT ")
        port = int(line.split()[1])
        with httpx2.Client(base_url=f"http://127.0.0.1:{port}") as client:
            reply = client.post("/v1/chat/completions", json={"messages": []})
            assert reply.status_code == 200
            assert client.get("/_stats").json()["routes"][0]["count"] == 1
    finally:
        proc.terminate()
        proc.wait(10)
