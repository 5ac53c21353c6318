"""``codex exec`` as a pool member.

Flags that matter (each observed, see docs/cli-backends.md): the prompt comes on stdin via ``-``
(an open stdin would hang codex, so we always close it); ``analytics.enabled=false`` avoids a
5 s metrics flush; ``--disable plugins`` avoids a git/GitHub sync at start-up;
``--disable unbounded_connection_retries`` stops an endless reconnect loop when the server is
down; a custom provider gets ``request_max_retries=0``/``stream_max_retries=0`` so the pool is
the only retry layer. ``--json`` events give usage and errors; ``-o`` gives the final message.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from pathlib import Path

from skillopt.backends.cli.common import (
    CallPlan,
    CliKind,
    CliSpec,
    ParsedReply,
    classify,
    output_cap,
    parse_json_lines,
    provider_key,
)
from skillopt.backends.cli.home import default_home
from skillopt.backends.cli.process import ProcessResult, tail
from skillopt.errors import BackendError, ReplyTooLargeError, RetryableBackendError

__all__ = ["CODEX_KEEP", "LAST_MESSAGE", "PROVIDER_ID", "SCHEMA_FILE", "CodexFlavor"]

PROVIDER_ID = "skillopt"
CODEX_KEEP = ("auth.json", "config.toml", "installation_id", "skills")  # not AGENTS.md
LAST_MESSAGE = "last_message.txt"
SCHEMA_FILE = "output_schema.json"


class CodexFlavor:
    kind = CliKind.CODEX
    home_env = "CODEX_HOME"
    prompt_on_stdin = True

    def argv(self, spec: CliSpec, plan: CallPlan) -> list[str]:
        sandbox = "workspace-write" if (plan.writable or plan.tools) else "read-only"
        args = [
            spec.executable,
            "exec",
            "--skip-git-repo-check",
            "--ephemeral",
            "--color",
            "never",
            "--json",
            "--sandbox",
            sandbox,
            "-C",
            str(plan.cwd),
            "-c",
            "analytics.enabled=false",
            "--disable",
            "plugins",
            "--disable",
            "unbounded_connection_retries",
            # no background daemon outliving the call, no login-shell snapshot, no state db:
            # hermetic, and ~25% less CPU per call
            "--disable",
            "daemon_auto_start",
            "--disable",
            "shell_snapshot",
            "--disable",
            "sqlite",
        ]
        if spec.provider_base_url:
            prefix = f"model_providers.{PROVIDER_ID}"
            settings = [
                f"model_provider={PROVIDER_ID}",
                f"{prefix}.name={PROVIDER_ID}",
                f"{prefix}.base_url={spec.provider_base_url}",
                f"{prefix}.wire_api=responses",
                f"{prefix}.request_max_retries=0",
                f"{prefix}.stream_max_retries=0",
            ]
            if spec.provider_key_env:
                settings.append(f"{prefix}.env_key={spec.provider_key_env}")
            for setting in settings:
                args += ["-c", setting]
        model = plan.model or spec.model
        if model:
            args += ["-m", model]
        args += ["-o", str(plan.scratch / LAST_MESSAGE)]
        if plan.schema is not None:
            schema_path = plan.scratch / SCHEMA_FILE
            schema_path.write_text(json.dumps(plan.schema), encoding="utf-8")
            args += ["--output-schema", str(schema_path)]
        args += list(spec.extra_args)
        args.append("-")  # read the prompt from stdin
        return args

    def env(self, spec: CliSpec, environ: Mapping[str, str], home: Path | None) -> dict[str, str]:
        provider_key(spec, environ)  # codex reads the variable itself; fail early when unset
        env = dict(environ)
        if home is not None:
            env[self.home_env] = str(home)
        env.update(dict(spec.extra_env))
        return env

    def keep(self, home: Path | None, environ: Mapping[str, str]) -> dict[str, Path]:
        source = home or default_home(environ, self.home_env, ".codex")
        return {name: source / name for name in CODEX_KEEP}

    def watcher(self, spec: CliSpec) -> Callable[[str], BackendError | None] | None:
        return None

    def parse(self, spec: CliSpec, plan: CallPlan, result: ProcessResult) -> ParsedReply:
        events = parse_json_lines(result.stdout)
        errors: list[str] = []
        messages: list[str] = []
        usage: dict[str, int] = {}
        turn_failed = turn_completed = False
        for event in events:
            etype = event.get("type")
            if etype == "item.completed":
                item = event.get("item") or {}
                # item.type == "error" is codex's non-fatal notice (e.g. unknown model metadata)
                if item.get("type") == "agent_message" and isinstance(item.get("text"), str):
                    messages.append(item["text"])
            elif etype == "error" and isinstance(event.get("message"), str):
                errors.append(event["message"])
            elif etype == "turn.failed":
                turn_failed = True
                message = (event.get("error") or {}).get("message")
                if isinstance(message, str) and message not in errors:
                    errors.append(message)
            elif etype == "turn.completed":
                turn_completed = True
                if isinstance(event.get("usage"), dict):
                    usage = {k: v for k, v in event["usage"].items() if isinstance(v, int)}
        # Top-level ``error`` events also carry codex's own retry notices ("Reconnecting...
        # 1/5"), which precede a turn that may still complete: they fail the call only when
        # the turn did not complete.
        if result.returncode != 0 or turn_failed or (errors and not turn_completed):
            text = "\n".join(errors) or _stderr_errors(result.stderr) or result.stdout
            raise classify(text, spec=spec, exit_code=result.returncode)
        text = _read_last_message(plan.scratch / LAST_MESSAGE, plan, spec)
        if not text.strip() and messages:
            text = messages[-1]
        if not events and not text:
            raise RetryableBackendError(
                "codex produced no JSON events and no last message",
                kind="malformed_output",
                member=spec.name,
                cause=tail(result.stdout + "\n" + result.stderr),
            )
        structured = _as_object(text) if plan.schema is not None else None
        return ParsedReply(
            text=text,
            prompt_tokens=usage.get("input_tokens"),
            completion_tokens=usage.get("output_tokens"),
            cached_tokens=usage.get("cached_input_tokens", 0),  # part of input_tokens
            structured=structured,
        )


def _read_last_message(path: Path, plan: CallPlan, spec: CliSpec) -> str:
    """The file codex writes its last message to, read no further than the call's cap."""
    if not path.is_file():
        return ""
    cap = output_cap(spec, plan)
    with path.open("rb") as handle:
        data = handle.read(cap + 1)
    if len(data) > cap:
        raise ReplyTooLargeError(cap, member=spec.name)
    return data.decode("utf-8", "replace")


def _stderr_errors(stderr: str) -> str:
    """Codex prints banners and warnings to stderr; keep the error lines, else the tail."""
    lines = [ln for ln in stderr.splitlines() if ln.strip()]
    picked = [ln for ln in lines if ln.startswith(("ERROR", "Error", "error"))]
    return "\n".join(picked or lines[-5:])


def _as_object(text: str) -> dict[str, object] | None:
    try:
        value = json.loads(text)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None
