"""Agent CLIs (claude, codex, copilot) as pool members.

:class:`CliBackend` runs one CLI per call in a fresh temp working directory, with the
per-CLI flags and environment from its flavor (``claude.py``, ``codex.py``, ``copilot.py``),
a hard timeout that kills the process group, bounded output, and typed errors. It never retries:
the pool does. ``build_cli_member(cfg)`` is what the backend factory calls.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import anyio

from skillopt.backends.base import Backend, Completion, CompletionRequest, Role, Usage
from skillopt.backends.cli.claude import ClaudeFlavor
from skillopt.backends.cli.codex import CodexFlavor
from skillopt.backends.cli.common import (
    CallPlan,
    CliFlavor,
    CliKind,
    CliSpec,
    ParsedReply,
    output_cap,
)
from skillopt.backends.cli.copilot import CopilotFlavor
from skillopt.backends.cli.home import call_home
from skillopt.backends.cli.process import ProcessResult, run_process, tail
from skillopt.backends.cli.tool_shims import LOG_NAME, install_shims, read_calls
from skillopt.backends.reply_cap import cli_reply_cap
from skillopt.config import ClaudeCliMember, CodexCliMember, CopilotCliMember
from skillopt.errors import BackendError, ConfigError, RetryableBackendError
from skillopt.logging import get_logger

__all__ = [
    "FLAVORS",
    "TOOLS_LOG_DIR",
    "CliBackend",
    "CliMemberConfig",
    "CliRun",
    "attempt_with_tools",
    "build_cli_member",
    "render_prompt",
    "resolve_executable",
    "spec_from_config",
]

# The pool's member config of an agent CLI, by kind.
CliMemberConfig = ClaudeCliMember | CodexCliMember | CopilotCliMember

_log = get_logger(__name__)

TOOLS_LOG_DIR = "tools-log"  # under CallPlan.scratch, outside the agent's workspace

FLAVORS: dict[CliKind, CliFlavor] = {
    CliKind.CLAUDE: ClaudeFlavor(),
    CliKind.CODEX: CodexFlavor(),
    CliKind.COPILOT: CopilotFlavor(),
}


@dataclass(frozen=True, slots=True, kw_only=True)
class CliRun:
    """A finished call: the parsed reply plus the raw process output (for transcripts)."""

    reply: ParsedReply
    process: ProcessResult
    argv: tuple[str, ...]
    tools_called: tuple[str, ...] = ()


def resolve_executable(kind: CliKind, executable: str | None, path: str | None) -> str:
    """The configured executable, else ``kind`` on PATH. No guessing of version-manager dirs."""
    wanted = executable or kind.value
    found = shutil.which(wanted, path=path)
    if found is None:
        where = "executable" if executable else "PATH"
        raise ConfigError(f"{kind.value} CLI not found ({wanted!r} via {where})", key="executable")
    return os.path.abspath(found)


def render_prompt(request: CompletionRequest) -> str:
    """One prompt text for a CLI (they take a single message). Redaction is the stack's
    (:class:`~skillopt.backends.wrappers.RedactingCompleter`), not the member's."""
    messages = request.as_messages()
    if len(messages) == 1:
        return messages[0].content
    parts = []
    for message in messages:
        label = {"system": "Instructions", "assistant": "Assistant"}.get(message.role, "User")
        parts.append(f"## {label}\n\n{message.content}")
    return "\n\n".join(parts)


class CliBackend:
    """One CLI member. Safe to call concurrently up to ``spec.max_concurrency``."""

    def __init__(
        self,
        spec: CliSpec,
        *,
        environ: Mapping[str, str] | None = None,
        scratch_root: Path | None = None,
    ) -> None:
        if os.sep in spec.executable and not os.path.isabs(spec.executable):
            spec = replace(spec, executable=os.path.abspath(spec.executable))
        self.spec = spec
        self.flavor = FLAVORS[spec.kind]
        self._environ = dict(os.environ if environ is None else environ)
        self._scratch_root = scratch_root
        self._limiter = anyio.CapacityLimiter(spec.max_concurrency)
        self._home: Path | None = None
        self._own_home = False
        self.last_error: BackendError | None = None

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def model(self) -> str:
        return self.spec.model

    @property
    def limiter(self) -> anyio.CapacityLimiter:
        return self._limiter

    def home(self) -> Path | None:
        """The member's own config/login dir when isolated (created on first use)."""
        if not self.spec.isolated_home:
            return None
        if self._home is None:
            if self.spec.home_dir is not None:
                self._home = self.spec.home_dir
                self._home.mkdir(parents=True, exist_ok=True)
            else:
                self._home = Path(tempfile.mkdtemp(prefix=f"skillopt-{self.spec.kind}-home-"))
                self._own_home = True
        return self._home

    async def complete(self, request: CompletionRequest) -> Completion:
        started = time.monotonic()
        tools = tuple(request.metadata.get("tools") or ())
        outputs = request.metadata.get("tool_outputs") or {}
        # the reply's shape, for the CLIs that take one (claude --json-schema, codex
        # --output-schema); a harness caller may still hand one in the metadata
        schema = (
            request.reply_schema.schema
            if request.reply_schema is not None
            else request.metadata.get("json_schema")
        )
        prompt = render_prompt(request)
        with _CallDirs(self._scratch_root) as (cwd, scratch):
            if tools:
                shims = install_shims(cwd, scratch / TOOLS_LOG_DIR, tools, outputs)
                prompt = f"{prompt}\n\n{shims.hint()}"
            plan = CallPlan(
                prompt=prompt,
                cwd=cwd,
                scratch=scratch,
                tools=tools,
                schema=schema if isinstance(schema, dict) else None,
                max_output_bytes=cli_reply_cap(
                    request.max_output_tokens, self.spec.max_output_bytes
                ),
            )
            run = await self.run(plan, time_limit=request.timeout)
        reply = run.reply
        if reply.structured is not None and not reply.text.strip():
            # the CLI validated the object against the schema and printed no text
            reply = replace(reply, text=json.dumps(reply.structured))
        if not reply.text.strip():
            error = RetryableBackendError(
                f"{self.spec.kind} CLI returned an empty answer",
                kind="empty",
                member=self.name,
                cause=tail(run.process.stderr) or "empty answer",
            )
            self.last_error = error
            raise error
        if reply.prompt_tokens is not None and reply.completion_tokens is not None:
            usage = Usage(
                prompt_tokens=reply.prompt_tokens,
                completion_tokens=reply.completion_tokens,
                cached_tokens=min(reply.cached_tokens, reply.prompt_tokens),
            )
        else:
            usage = Usage.estimate(prompt, reply.text)
        raw: dict[str, Any] = {"cli": self.spec.kind.value, "returncode": run.process.returncode}
        if reply.structured is not None:
            raw["structured"] = reply.structured
        return Completion(
            text=reply.text,
            usage=usage,
            member=self.name,
            latency=time.monotonic() - started,
            tools_called=run.tools_called,
            raw=raw,
        )

    async def run(self, plan: CallPlan, *, time_limit: float | None = None) -> CliRun:
        """Run one call as planned (the harness uses this with its own workspace)."""
        spec = self.spec
        limit = time_limit if time_limit is not None else spec.timeout
        started = time.monotonic()
        keep = self.flavor.keep(self.home(), self._environ)
        try:
            with call_home(keep, root=self._scratch_root) as home:
                argv = self.flavor.argv(spec, plan)
                env = self.flavor.env(spec, self._environ, home)
                tools_bin = plan.cwd / "tools"
                if plan.tools and tools_bin.is_dir():
                    env["PATH"] = f"{tools_bin}:{env.get('PATH', '')}"
                async with self._limiter:
                    started = time.monotonic()
                    result = await run_process(
                        argv,
                        cwd=plan.cwd,
                        env=env,
                        time_limit=limit,
                        stdin_text=plan.prompt if self.flavor.prompt_on_stdin else None,
                        max_output_bytes=output_cap(spec, plan),
                        stdout_watcher=self.flavor.watcher(spec),
                        member=spec.name,
                    )
                    reply = self.flavor.parse(spec, plan, result)
        except BackendError as exc:
            self.last_error = exc
            _log.warning(
                "cli_call_failed",
                member=spec.name,
                cli=spec.kind.value,
                error_class=exc.error_class,
                status=exc.status,
                cause=exc.cause[-500:],
                seconds=round(time.monotonic() - started, 3),
            )
            raise
        called: tuple[str, ...] = ()
        if plan.tools:
            called = tuple(name for name, _ in read_calls(plan.scratch / TOOLS_LOG_DIR / LOG_NAME))
        _log.debug(
            "cli_call",
            member=spec.name,
            cli=spec.kind.value,
            returncode=result.returncode,
            seconds=round(result.elapsed, 3),
            tools_called=list(called),
        )
        return CliRun(reply=reply, process=result, argv=tuple(argv), tools_called=called)

    async def aclose(self) -> None:
        if self._own_home and self._home is not None:
            shutil.rmtree(self._home, ignore_errors=True)
            self._home = None


class _CallDirs:
    """A fresh working dir and a separate scratch dir for one call; both removed after."""

    def __init__(self, root: Path | None) -> None:
        self._root = root
        self._base: Path | None = None

    def __enter__(self) -> tuple[Path, Path]:
        if self._root is not None:
            self._root.mkdir(parents=True, exist_ok=True)
        self._base = Path(tempfile.mkdtemp(prefix="skillopt-cli-", dir=self._root))
        cwd, scratch = self._base / "work", self._base / "scratch"
        cwd.mkdir()
        scratch.mkdir()
        return cwd, scratch

    def __exit__(self, *exc: object) -> None:
        if self._base is not None:
            shutil.rmtree(self._base, ignore_errors=True)


async def attempt_with_tools(
    backend: Backend,
    prompt: str,
    tools: Sequence[str],
    *,
    outputs: Mapping[str, str] | None = None,
    role: Role = Role.TARGET,
    stage: str = "rollout",
    sample_id: int = 0,
) -> Completion:
    """One attempt in which the agent may run the named shell tools (shims that log calls).

    Works through a CLI member or a pool of them; ``Completion.tools_called`` lists what the
    shims recorded. Never cached: a cached reply could not say which tools ran.
    """
    request = CompletionRequest(
        role=role,
        prompt=prompt,
        stage=stage,
        sample_id=sample_id,
        use_cache=False,
        metadata={"tools": list(tools), "tool_outputs": dict(outputs or {})},
    )
    return await backend.complete(request)


def spec_from_config(cfg: CliMemberConfig) -> CliSpec:
    """Map the pool's member config (kind, executable, model, ...) to a :class:`CliSpec`."""
    kind = CliKind(str(cfg.kind))
    environ_path = os.environ.get("PATH")
    executable = resolve_executable(kind, getattr(cfg, "executable", None), environ_path)
    home_dir = getattr(cfg, "home_dir", None)
    extra_env = getattr(cfg, "extra_env", None) or {}
    return CliSpec(
        kind=kind,
        name=str(getattr(cfg, "name", "") or kind.value),
        executable=executable,
        model=str(getattr(cfg, "model", "") or ""),
        isolated_home=bool(getattr(cfg, "isolated_home", False)),
        home_dir=Path(home_dir).expanduser() if home_dir else None,
        provider_base_url=getattr(cfg, "provider_base_url", None) or None,
        provider_key_env=getattr(cfg, "provider_key_env", None) or None,
        extra_args=tuple(getattr(cfg, "extra_args", ()) or ()),
        extra_env=tuple(sorted(dict(extra_env).items())),
        timeout=float(getattr(cfg, "timeout", None) or 240.0),
        max_concurrency=int(getattr(cfg, "max_concurrency", None) or 2),
        max_output_bytes=getattr(cfg, "max_reply_bytes", None),
    )


def build_cli_member(cfg: CliMemberConfig) -> CliBackend:
    """Build a CLI member from a member config of kind claude / codex / copilot.

    Raises :class:`ConfigError` when the kind is unknown or the executable is not found.
    """
    try:
        spec = spec_from_config(cfg)
    except ValueError as exc:
        raise ConfigError(f"unknown CLI kind {getattr(cfg, 'kind', None)!r}", key="kind") from exc
    return CliBackend(spec)
