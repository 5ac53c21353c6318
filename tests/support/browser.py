"""Headless Chromium driven over the DevTools protocol on a pipe (no port, no network).

Chromium reads protocol messages from fd 3 and writes them to fd 4 when started with
``--remote-debugging-pipe``; each message is JSON ended by a NUL byte. A tiny Python
``exec`` shim puts our two pipe ends on those numbers. Enough of the protocol for the report
tests: open a page, collect console errors, exceptions and failed requests, evaluate an
expression, take a screenshot.
"""

from __future__ import annotations

import base64
import fcntl
import json
import os
import select
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--no-default-browser-check",
    "--disable-extensions",
    "--hide-scrollbars",
    "--remote-debugging-pipe",
)
PATIENCE = 60.0
# Put the two pipe ends on fds 3 and 4, then become Chromium (dash cannot name fds above 9).
_ON_FDS_3_AND_4 = (
    "import os, sys; os.dup2(int(sys.argv[1]), 3); os.dup2(int(sys.argv[2]), 4); "
    "os.execv(sys.argv[3], sys.argv[3:])"
)  # a guard against a hung browser; every wait returns on its event


def find_chromium() -> str | None:
    override = os.environ.get("SKILLOPT_CHROMIUM")
    if override:
        return override if Path(override).exists() else None
    for name in ("chromium", "chromium-browser", "google-chrome", "chrome"):
        found = shutil.which(name)
        if found:
            return found
    return None


@dataclass
class PageLoad:
    url: str
    console_errors: list[str] = field(default_factory=list)
    failed_requests: list[str] = field(default_factory=list)
    requests: list[str] = field(default_factory=list)


class Browser:
    def __init__(self, proc: subprocess.Popen[bytes], to_browser: int, from_browser: int) -> None:
        self.proc = proc
        self._out = to_browser
        self._in = from_browser
        self._buffer = b""
        self._next_id = 0
        self._events: list[dict[str, Any]] = []
        self._targets: dict[str, str] = {}

    def _read_message(self) -> dict[str, Any]:
        while b"\0" not in self._buffer:
            ready, _, _ = select.select([self._in], [], [], PATIENCE)
            if not ready:
                raise TimeoutError("chromium sent nothing")
            chunk = os.read(self._in, 1 << 20)
            if not chunk:
                raise ConnectionError(f"chromium closed the pipe (exit {self.proc.poll()})")
            self._buffer += chunk
        raw, self._buffer = self._buffer.split(b"\0", 1)
        message: dict[str, Any] = json.loads(raw)
        return message

    def send(self, method: str, params: dict[str, Any] | None = None,
             session: str | None = None) -> dict[str, Any]:  # fmt: skip
        self._next_id += 1
        message: dict[str, Any] = {"id": self._next_id, "method": method, "params": params or {}}
        if session:
            message["sessionId"] = session
        os.write(self._out, json.dumps(message).encode() + b"\0")
        while True:
            reply = self._read_message()
            if reply.get("id") == self._next_id:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                result: dict[str, Any] = reply.get("result", {})
                return result
            self._events.append(reply)

    def wait_event(self, method: str, session: str) -> dict[str, Any]:
        while True:
            for i, event in enumerate(self._events):
                if event.get("method") == method and event.get("sessionId") == session:
                    return self._events.pop(i)
            self._events.append(self._read_message())

    def drain_events(self, session: str) -> list[dict[str, Any]]:
        mine = [e for e in self._events if e.get("sessionId") == session]
        self._events = [e for e in self._events if e.get("sessionId") != session]
        return mine

    def open(self, url: str, *, width: int = 1200, height: int = 900) -> tuple[str, PageLoad]:
        """A new tab at ``url``, loaded; returns its session and what happened loading it."""
        target = self.send("Target.createTarget", {"url": "about:blank"})["targetId"]
        session = self.send("Target.attachToTarget", {"targetId": target, "flatten": True})[
            "sessionId"
        ]
        self._targets[session] = target
        for domain in ("Page", "Runtime", "Log", "Network"):
            self.send(f"{domain}.enable", session=session)
        self.send(
            "Emulation.setDeviceMetricsOverride",
            {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": False},
            session,
        )
        self.send("Page.navigate", {"url": url}, session)
        self.wait_event("Page.loadEventFired", session)
        self.evaluate(session, "1")  # one round trip: late console events arrive before it
        return session, self._collect(url, session)

    def _collect(self, url: str, session: str) -> PageLoad:
        load = PageLoad(url=url)
        for event in self.drain_events(session):
            method, params = event.get("method"), event.get("params", {})
            if method == "Runtime.consoleAPICalled" and params.get("type") in ("error", "assert"):
                load.console_errors.append(json.dumps(params.get("args")))
            elif method == "Runtime.exceptionThrown":
                load.console_errors.append(json.dumps(params.get("exceptionDetails")))
            elif method == "Log.entryAdded" and params.get("entry", {}).get("level") == "error":
                load.console_errors.append(str(params["entry"].get("text")))
            elif method == "Network.loadingFailed":
                load.failed_requests.append(json.dumps(params))
            elif method == "Network.requestWillBeSent":
                load.requests.append(str(params.get("request", {}).get("url")))
        return load

    def close(self, session: str) -> None:
        self.send("Target.closeTarget", {"targetId": self._targets.pop(session)})
        self.drain_events(session)

    def evaluate(self, session: str, expression: str) -> Any:
        result = self.send(
            "Runtime.evaluate", {"expression": expression, "returnByValue": True}, session
        )
        return result.get("result", {}).get("value")

    def screenshot(self, session: str, clip: dict[str, float] | None = None) -> bytes:
        params: dict[str, Any] = {"format": "png", "captureBeyondViewport": clip is not None}
        if clip is not None:
            params["clip"] = {**clip, "scale": 1}
        return base64.b64decode(self.send("Page.captureScreenshot", params, session)["data"])


@contextmanager
def chromium(executable: str) -> Iterator[Browser]:
    """A headless Chromium with its own throwaway profile, stopped on exit."""
    read_end, to_browser = os.pipe()
    from_browser, write_end = os.pipe()
    # The child's ends must not sit on 3 or 4 themselves, or the shell would close them.
    to_read, to_write = (fcntl.fcntl(fd, fcntl.F_DUPFD, 10) for fd in (read_end, write_end))
    os.close(read_end)
    os.close(write_end)
    with tempfile.TemporaryDirectory(prefix="skillopt-chromium-") as profile:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-c",
                _ON_FDS_3_AND_4,
                str(to_read),
                str(to_write),
                executable,
                *FLAGS,
                f"--user-data-dir={profile}",
                "about:blank",
            ],
            pass_fds=(to_read, to_write),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        os.close(to_read)
        os.close(to_write)
        browser = Browser(proc, to_browser, from_browser)
        try:
            yield browser
        finally:
            with suppress(OSError, ConnectionError, TimeoutError, RuntimeError):
                browser.send("Browser.close")
            os.close(to_browser)
            os.close(from_browser)
            try:
                proc.wait(timeout=PATIENCE)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
