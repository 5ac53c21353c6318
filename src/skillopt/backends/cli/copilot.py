"""GitHub Copilot CLI as a pool member.

Run silent with JSONL session events (``-s --output-format json``), the prompt on stdin (never
in argv, where ``ps`` shows it), no auto-update, no built-in MCP servers, no custom instructions.
With a custom provider it runs offline in BYOK mode (``COPILOT_PROVIDER_*``).

Copilot has no switch for its own retries (a 500 costs ~15 s of backoff). Its event stream
reports each failed model call at once (``model.call_failure``), so we stop the process on the
first one and let the pool decide: one retry layer, and failures surface in well under a second.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from skillopt.backends.cli.common import (
    CallPlan,
    CliKind,
    CliSpec,
    FailureClass,
    ParsedReply,
    classify,
    make_error,
    parse_json_lines,
    provider_key,
)
from skillopt.backends.cli.home import default_home
from skillopt.backends.cli.process import ProcessResult, tail
from skillopt.errors import BackendError, RetryableBackendError

__all__ = ["READ_TOOLS", "SHELL_TOOLS", "CopilotFlavor"]

READ_TOOLS = ("view", "grep", "glob")
SHELL_TOOLS = ("bash", "read_bash", "stop_bash", *READ_TOOLS)


class CopilotFlavor:
    kind = CliKind.COPILOT
    home_env = "COPILOT_HOME"
    prompt_on_stdin = True

    def argv(self, spec: CliSpec, plan: CallPlan) -> list[str]:
        args = [
            spec.executable,
            "-s",
            "--output-format",
            "json",
            "--stream",
            "off",
            "--no-color",
            "--no-auto-update",
            "--no-custom-instructions",
            "--disable-builtin-mcps",
        ]
        model = plan.model or spec.model
        if model:
            args += ["--model", model]
        # what the model may even see: a file viewer for plain calls, a shell for tool-aware
        # attempts, everything (with permission) only when the task writes files
        if plan.writable:
            args.append("--allow-all-tools")
        elif plan.tools:
            args += ["--allow-all-tools", "--available-tools", *SHELL_TOOLS]
        else:
            args += ["--available-tools", *READ_TOOLS]
        args += list(spec.extra_args)
        return args

    def env(self, spec: CliSpec, environ: Mapping[str, str], home: Path | None) -> dict[str, str]:
        env = dict(environ)
        env["COPILOT_AUTO_UPDATE"] = "false"
        if home is not None:
            env[self.home_env] = str(home)
        if spec.provider_base_url:
            env["COPILOT_OFFLINE"] = "true"
            env["COPILOT_PROVIDER_BASE_URL"] = spec.provider_base_url
            key = provider_key(spec, environ)
            if key is not None:
                env["COPILOT_PROVIDER_API_KEY"] = key
            if spec.model:
                env["COPILOT_MODEL"] = spec.model
        env.update(dict(spec.extra_env))
        return env

    def keep(self, home: Path | None, environ: Mapping[str, str]) -> dict[str, Path]:
        source = home or default_home(environ, self.home_env, ".copilot")
        return {"config.json": source / "config.json"}  # the login; no MCP config

    def watcher(self, spec: CliSpec) -> Callable[[str], BackendError | None] | None:
        def watch(line: str) -> BackendError | None:
            if '"model.call_failure"' not in line and '"session.error"' not in line:
                return None
            try:
                event = json.loads(line)
            except ValueError:
                return None
            return _event_error(spec, event)

        return watch

    def parse(self, spec: CliSpec, plan: CallPlan, result: ProcessResult) -> ParsedReply:
        events = parse_json_lines(result.stdout)
        answer = ""
        exit_code: int | None = None
        for event in events:
            error = _event_error(spec, event)
            if error is not None:
                raise error
            etype = event.get("type")
            data = _obj(event.get("data"))
            if etype == "assistant.message":
                content = data.get("content")
                if isinstance(content, str) and content.strip():
                    answer = content  # the last non-empty message is the final answer
            elif etype == "result" and isinstance(event.get("exitCode"), int):
                exit_code = event["exitCode"]
        if result.returncode != 0 or (exit_code or 0) != 0:
            raise classify(
                result.stderr + "\n" + result.stdout[-2000:], spec=spec, exit_code=result.returncode
            )
        if not events:
            raise RetryableBackendError(
                "copilot printed no JSON events",
                kind="malformed_output",
                member=spec.name,
                cause=tail(result.stdout + "\n" + result.stderr),
            )
        return ParsedReply(text=answer)


def _event_error(spec: CliSpec, event: dict[str, Any]) -> BackendError | None:
    etype = event.get("type")
    data = _obj(event.get("data"))
    status = data.get("statusCode") if isinstance(data.get("statusCode"), int) else None
    if etype == "model.call_failure":
        kind = str(data.get("failureKind") or "")
        cause = f"model call failed: status={status} kind={kind} {data.get('message') or ''}"
        if status is None:
            return make_error(FailureClass.RETRYABLE, spec=spec, cause=cause, kind="connection")
        return classify(cause, spec=spec, status=status)
    if etype == "session.error":
        message = str(data.get("message") or data.get("errorType") or "session error")
        if data.get("errorType") == "authentication":
            return make_error(FailureClass.AUTH, spec=spec, cause=message, status=status)
        return classify(message, spec=spec, status=status)
    return None


def _obj(value: object) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}
