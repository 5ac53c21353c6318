"""``claude -p`` (Claude Code) as a pool member.

The prompt goes on stdin; output is JSONL (``stream-json``: init, assistant/user turns, then one
``result`` object) whose final ``is_error`` (not ``subtype``) says whether the call failed;
errors are printed on *stdout*. Environment switches:
no non-essential traffic (telemetry, feature flags), no auto-update, no internal retries
(``CLAUDE_CODE_MAX_RETRIES=0``). With a custom provider the call runs ``--bare`` (no hooks,
plugins, CLAUDE.md discovery or keychain) and authenticates with the provider key only.
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
    ParsedReply,
    classify,
    parse_json_lines,
    provider_key,
)
from skillopt.backends.cli.home import default_home, user_home
from skillopt.backends.cli.process import ProcessResult, tail
from skillopt.errors import BackendError, RetryableBackendError

__all__ = ["QUIET_ENV", "ClaudeFlavor"]

QUIET_ENV = {
    "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
    "DISABLE_AUTOUPDATER": "1",
    "DISABLE_TELEMETRY": "1",
    "DISABLE_ERROR_REPORTING": "1",
    "CLAUDE_CODE_MAX_RETRIES": "0",
}


class ClaudeFlavor:
    kind = CliKind.CLAUDE
    home_env = "CLAUDE_CONFIG_DIR"
    prompt_on_stdin = True

    def argv(self, spec: CliSpec, plan: CallPlan) -> list[str]:
        # stream-json gives the step trace (tool uses and results) and ends with the result
        args = [spec.executable, "-p", "--output-format", "stream-json", "--verbose"]
        args.append("--no-session-persistence")
        if spec.provider_base_url:
            args.append("--bare")
        model = plan.model or spec.model
        if model:
            args += ["--model", model]
        if plan.tools:
            # shell access limited to the workspace's tool shims and file reads
            args += ["--tools", "Bash,Read", "--allowedTools", "Bash,Read"]
        elif plan.writable:
            args += ["--tools", "Bash,Read,Edit,Write", "--allowedTools", "Bash,Read,Edit,Write"]
        elif plan.schema is not None:
            args += ["--tools", "Read", "--allowedTools", "Read"]
        else:
            args += ["--tools", ""]
        if plan.schema is not None:
            args += ["--json-schema", json.dumps(plan.schema)]
        args += list(spec.extra_args)
        return args

    def env(self, spec: CliSpec, environ: Mapping[str, str], home: Path | None) -> dict[str, str]:
        env = dict(environ)
        env.update(QUIET_ENV)
        if home is not None:
            env[self.home_env] = str(home)
        if spec.provider_base_url:
            base = spec.provider_base_url.rstrip("/")
            env["ANTHROPIC_BASE_URL"] = base[:-3] if base.endswith("/v1") else base
            env.pop("ANTHROPIC_AUTH_TOKEN", None)
            key = provider_key(spec, environ)
            if key is not None:
                env["ANTHROPIC_API_KEY"] = key
            else:  # a keyless gateway: do not leak the user's own key to it
                env.pop("ANTHROPIC_API_KEY", None)
        env.update(dict(spec.extra_env))
        return env

    def keep(self, home: Path | None, environ: Mapping[str, str]) -> dict[str, Path]:
        if home is None and not environ.get(self.home_env):
            # the default layout keeps .claude.json beside ~/.claude, not inside it
            source = user_home(environ) / ".claude"
            state = user_home(environ) / ".claude.json"
        else:
            source = home or default_home(environ, self.home_env, ".claude")
            state = source / ".claude.json"
        return {
            ".credentials.json": source / ".credentials.json",
            "settings.json": source / "settings.json",
            ".claude.json": state,
        }

    def watcher(self, spec: CliSpec) -> Callable[[str], BackendError | None] | None:
        return None

    def parse(self, spec: CliSpec, plan: CallPlan, result: ProcessResult) -> ParsedReply:
        final: dict[str, Any] | None = None
        for event in parse_json_lines(result.stdout):
            if event.get("type") == "result":
                final = event
        if final is None:
            if result.returncode != 0:
                raise classify(
                    result.stdout + "\n" + result.stderr, spec=spec, exit_code=result.returncode
                )
            raise RetryableBackendError(
                "claude printed no JSON result",
                kind="malformed_output",
                member=spec.name,
                cause=tail(result.stdout + "\n" + result.stderr),
            )
        text = final.get("result") if isinstance(final.get("result"), str) else ""
        if final.get("is_error") or result.returncode != 0:
            status = final.get("api_error_status")
            raise classify(
                str(text or final.get("subtype") or result.stderr),
                spec=spec,
                status=status if isinstance(status, int) else None,
                exit_code=result.returncode,
            )
        usage = _obj(final.get("usage"))
        structured = final.get("structured_output")
        return ParsedReply(
            text=str(text),
            prompt_tokens=_prompt_tokens(usage),
            completion_tokens=_int(usage.get("output_tokens")),
            cached_tokens=_int(usage.get("cache_read_input_tokens")) or 0,
            structured=structured if isinstance(structured, dict) else None,
            extras={"num_turns": final.get("num_turns"), "cost_usd": final.get("total_cost_usd")},
        )


def _prompt_tokens(usage: dict[str, Any]) -> int | None:
    """Anthropic counts cache reads and cache writes apart from ``input_tokens``; the prompt
    is all three (the cache reads are then reported as its cached part)."""
    fresh = _int(usage.get("input_tokens"))
    if fresh is None:
        return None
    cached = (
        _int(usage.get(k)) or 0 for k in ("cache_read_input_tokens", "cache_creation_input_tokens")
    )
    return fresh + sum(cached)


def _int(value: object) -> int | None:
    return value if isinstance(value, int) else None


def _obj(value: object) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}
