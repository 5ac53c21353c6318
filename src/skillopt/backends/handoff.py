"""The handoff member: no model is called; the user's own agent answers the prompts.

For users with no API key and no unattended agent CLI (``[pool] kind = "handoff"`` or
``skillopt-sleep once --handoff``). How one sitting goes:

1. Every request reaching this member has passed the redaction wrapper, like every
   outbound prompt. Its id is a hash of its role, stage, full text and sample id
   (:func:`prompt_id`): the same night asks the same prompt under the same id again.
2. When ``answers/<id>.md`` exists in the handoff directory, its text is the reply: a
   completed call, like a model's. An answer that is empty, larger than a model's reply
   to the request could be (:func:`answer_cap`, read no further), not UTF-8, or fails the
   request's own format check is moved aside to ``answers/<id>.rejected.md`` and the
   prompt is pending again, with the problem said.
3. Otherwise the prompt is recorded as pending and :class:`AnswerPendingError` is raised
   (fatal: never retried, never held against a member's health). The night collects every
   call of the stage, then stops as waiting for answers (see
   :mod:`skillopt_sleep.night.night_state`).
4. On close the sitting writes ``PROMPTS.md`` (numbered, for a person or an agent) and
   ``pending.json`` (for tools) when prompts are pending; a sitting that answered from files
   and left nothing pending removes them.
5. Waiting mode (``wait`` > 0, ``once --handoff --wait``): instead of step 3's error the call
   stays open. The prompts waiting now are written at once (``pending.json`` then names this
   process under ``live``, from the night's start, so the MCP tools know a night is there to
   take the answers), and
   each waiting call looks for its answer file every ``poll`` seconds (``anyio.sleep``: no
   busy loop) and returns it as a model's reply; a rejected answer is set aside and the call
   waits again. When no answer has landed for ``wait`` seconds while prompts wait, every
   waiting call (and every later one) ends as in step 3: the night stops with exit 75 as
   without waiting, and nothing is lost. A cancelled call leaves its prompt pending, so step
   4 writes it and the next run resumes.

The answers stay in ``answers/``: a resumed night reads the same ones again, so it ends as
it would have with a model that gave those replies.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, NoReturn

import anyio

from skillopt.atomicio import atomic_write_text
from skillopt.backends.base import EARLIER_PROBLEM, Completion, CompletionRequest, Usage
from skillopt.backends.reply_cap import http_reply_cap
from skillopt.errors import AnswerPendingError, CorruptStateError, ReplyFormatError
from skillopt.logging import get_logger
from skillopt.redact import sanitize

__all__ = [
    "ANSWERS_DIR",
    "ASKED_AGAIN",
    "PENDING_NAME",
    "PROMPTS_NAME",
    "HandoffBackend",
    "PendingPrompt",
    "answer_cap",
    "answer_path",
    "build_handoff_member",
    "pending_failures",
    "prompt_id",
    "read_pending",
    "write_answer",
]

_log = get_logger(__name__)

PROMPTS_NAME = "PROMPTS.md"
PENDING_NAME = "pending.json"
ANSWERS_DIR = "answers"
_ID = re.compile(r"^[0-9a-f]{16}$")
ASKED_AGAIN = "asked again:"  # how the problem of a prompt that re-asks an earlier one starts
_PROBLEM_CHARS = 500  # of an earlier answer's problem, as said beside the prompt
POLL_SECONDS = 0.5  # waiting mode: how often a waiting call looks for its answer file


def prompt_id(request: CompletionRequest) -> str:
    """A stable id: sha256 of (role, stage, full request text, sample id), 16 hex digits.

    The stage is part of it so a fresh sample the gate asks for again in a later stage
    (same prompt, same sample id) is a prompt of its own, as it is a call of its own."""
    digest = hashlib.sha256()
    parts = (request.role.value, request.stage, request.text_for_key(), str(request.sample_id))
    for part in parts:
        data = part.encode("utf-8")
        digest.update(len(data).to_bytes(8, "big"))
        digest.update(data)
    return digest.hexdigest()[:16]


def answer_path(directory: Path, pid: str) -> Path:
    """Where the answer to prompt ``pid`` goes (``pid`` checked: no path tricks)."""
    if not _ID.match(pid):
        raise ValueError(f"not a prompt id: {pid!r}")
    return directory / ANSWERS_DIR / f"{pid}.md"


@dataclass(frozen=True, slots=True, kw_only=True)
class PendingPrompt:
    """One prompt waiting for its answer, as ``pending.json`` lists it."""

    id: str
    role: str
    stage: str
    format: str  # "json": reply with one JSON value, as the prompt describes; "text"
    max_output_tokens: int
    sample: int  # >0: another independent sample of a prompt asked before
    system: str
    prompt: str
    answer_file: str  # relative to the handoff directory
    problem: str = ""  # why the answer file that was there was not taken
    schema: dict[str, Any] | None = None  # the JSON schema a "json" answer follows, if any

    @staticmethod
    def of(request: CompletionRequest, pid: str, problem: str = "") -> PendingPrompt:
        if request.messages:
            turns = [m for m in request.messages if m.role != "system"]
            text = "\n\n".join(f"[{m.role}]\n{m.content}" for m in turns)
        else:
            text = request.prompt
        return PendingPrompt(
            id=pid,
            role=request.role.value,
            stage=request.stage,
            format="json" if request.json_mode or request.reply_schema else "text",
            max_output_tokens=request.max_output_tokens,
            sample=request.sample_id,
            system=request.system_message(),
            prompt=text,
            answer_file=f"{ANSWERS_DIR}/{pid}.md",
            problem=problem,
            schema=request.reply_schema.schema if request.reply_schema is not None else None,
        )


_TEXT_FIELDS = ("id", "role", "stage", "format", "system", "prompt", "answer_file", "problem")
_NUMBER_FIELDS = ("max_output_tokens", "sample")


def read_pending(directory: Path) -> list[PendingPrompt]:
    """The prompts ``pending.json`` lists ([] when there is none).

    Raises :class:`CorruptStateError` (naming the file and what to do) when it is not the
    list a night writes: it is read by tools and agents, and may have been edited."""
    path = directory / PENDING_NAME
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return []
    except (OSError, ValueError) as exc:
        raise _damaged(path, f"unreadable ({exc})") from exc
    rows = data.get("prompts") if isinstance(data, dict) else None
    if not isinstance(rows, list):
        raise _damaged(path, "no list of prompts")
    return [_pending_row(path, number, row) for number, row in enumerate(rows, 1)]


def _pending_row(path: Path, number: int, row: object) -> PendingPrompt:
    if not isinstance(row, dict):
        raise _damaged(path, f"prompt {number} is not an object")
    for name in _TEXT_FIELDS:
        if not isinstance(row.get(name, ""), str):
            raise _damaged(path, f"prompt {number}: {name} is not text")
    for name in _NUMBER_FIELDS:
        value = row.get(name, 0)
        if not isinstance(value, int) or isinstance(value, bool):
            raise _damaged(path, f"prompt {number}: {name} is not a whole number")
    if not _ID.match(str(row.get("id", ""))):
        raise _damaged(path, f"prompt {number}: not a prompt id: {str(row.get('id'))[:40]!r}")
    fields = {name: row.get(name, "") for name in _TEXT_FIELDS}
    numbers = {name: row.get(name, 0) for name in _NUMBER_FIELDS}
    return PendingPrompt(**fields, **numbers)


def _damaged(path: Path, reason: str) -> CorruptStateError:
    return CorruptStateError(
        str(path),
        f"{reason}; it is the list a handoff night writes: run the night's command again "
        "to write it anew (your answers in answers/ are kept)",
    )


def write_answer(directory: Path, pid: str, text: str) -> Path:
    """Write the answer to prompt ``pid`` (atomically); returns its path."""
    path = answer_path(directory, pid)
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(path, text if text.endswith("\n") else text + "\n")
    return path


def pending_failures(accounting: Mapping[str, Any]) -> int:
    """Calls of a pool's accounting that ended waiting for an answer (0 without handoff)."""
    failures = accounting.get("total", {}).get("failures", {})
    return int(failures.get(AnswerPendingError.error_class_name, 0))


class HandoffBackend:
    """A pool member that answers from files and records what it cannot answer."""

    def __init__(
        self,
        *,
        name: str,
        directory: Path,
        resume_command: str = "",
        wait: float = 0.0,
        poll: float = POLL_SECONDS,
    ) -> None:
        self._name = name
        self.directory = directory
        self.resume_command = resume_command
        self.pending: dict[str, PendingPrompt] = {}
        self.answered = 0
        self.wait = wait  # seconds with no answer landing before giving up; 0: never wait
        self._poll = poll
        self._progress = 0.0  # when an answer last landed (or the waiting began)
        self._gave_up = False
        self._published = False

    @property
    def name(self) -> str:
        return self._name

    @property
    def model(self) -> str:
        return "handoff"

    async def complete(self, request: CompletionRequest) -> Completion:
        pid = prompt_id(request)
        path = answer_path(self.directory, pid)
        problem = _asked_again(request)
        while not isinstance(found := self._take(request, pid, path), str):
            if found is not None:
                problem = found.problem
            if self.wait <= 0 or self._gave_up:
                self._pend(request, pid, problem)
            await self._await_answer(request, pid, problem)
        text = found
        self.answered += 1
        if self.wait > 0 and self.pending.pop(pid, None) is not None:
            self._progress = anyio.current_time()
            self._publish()
        reply = text.strip()
        return Completion(
            text=reply,
            usage=Usage.estimate(request.text_for_key(), reply),
            member=self._name,
            latency=0.0,
        )

    @staticmethod
    def _take(request: CompletionRequest, pid: str, path: Path) -> str | _Rejected | None:
        """The answer file's text; ``None`` when there is none; a rejected one set aside.

        At most :func:`answer_cap` bytes are read: a larger file is refused unread, as a
        model's reply over its cap is (it would be counted as millions of tokens)."""
        cap = answer_cap(request.max_output_tokens)
        try:
            with path.open("rb") as handle:
                data = handle.read(cap + 1)
        except FileNotFoundError:
            return None
        problem = _problem(request, data, cap, f"{ANSWERS_DIR}/{path.name}")
        if not problem:
            return data.decode("utf-8")
        os.replace(path, path.with_suffix(".rejected.md"))
        _log.warning("handoff.answer_rejected", prompt_id=pid, problem=problem)
        return _Rejected(problem)

    async def _await_answer(self, request: CompletionRequest, pid: str, problem: str) -> None:
        """Waiting mode: list the prompt, sleep one poll; give up after ``wait`` idle seconds."""
        now = anyio.current_time()
        if not self.pending:
            self._progress = now  # the idle clock starts when the first prompt waits
        listed = self.pending.get(pid)
        if listed is None or listed.problem != problem:
            self.pending[pid] = PendingPrompt.of(request, pid, problem)
            self._publish()
        if now - self._progress >= self.wait:
            self._gave_up = True
            _log.info("handoff.wait_expired", waited_s=round(now - self._progress, 1))
            return
        await anyio.sleep(self._poll)

    def announce(self) -> None:
        """Waiting mode, as the night starts: name this process in ``pending.json`` (no
        prompt yet), so an agent asking for the next prompt knows a night will ask one."""
        self.pending.clear()
        self._publish()

    def _publish(self) -> None:
        """Waiting mode: write the prompts waiting now, with this process named as live."""
        self._published = True
        self._write(live={"pid": os.getpid(), "patience_s": self.wait})

    def _pend(self, request: CompletionRequest, pid: str, problem: str = "") -> NoReturn:
        self.pending[pid] = PendingPrompt.of(request, pid, problem)
        raise AnswerPendingError(
            f"prompt {pid} waits for {ANSWERS_DIR}/{pid}.md" + (f" ({problem})" if problem else ""),
            prompt_id=pid,
            problem=problem,
            member=self._name,
        )

    async def aclose(self) -> None:
        """Write this sitting's pending prompts, or clear the files of an earlier one."""
        if self.pending:
            self._write()
        elif self.answered or self._published:
            for name in (PROMPTS_NAME, PENDING_NAME):
                (self.directory / name).unlink(missing_ok=True)

    def _write(self, live: dict[str, Any] | None = None) -> None:
        prompts = sorted(self.pending.values(), key=lambda p: (p.stage, p.id))
        (self.directory / ANSWERS_DIR).mkdir(parents=True, exist_ok=True)
        doc: dict[str, Any] = {
            "version": 1,
            "resume": self.resume_command,
            "answers_dir": ANSWERS_DIR,
            "prompts": [asdict(p) for p in prompts],
        }
        if live is not None:
            doc["live"] = live
        atomic_write_text(self.directory / PENDING_NAME, json.dumps(doc, indent=2) + "\n")
        atomic_write_text(self.directory / PROMPTS_NAME, _markdown(prompts, self.resume_command))
        _log.info("handoff.pending_written", prompts=len(prompts), directory=str(self.directory))


@dataclass(frozen=True, slots=True)
class _Rejected:
    problem: str


def answer_cap(max_output_tokens: int) -> int:
    """The most bytes an answer file may hold: what an HTTP member would read of a reply
    to the same request (:func:`skillopt.backends.reply_cap.http_reply_cap`)."""
    return http_reply_cap(max_output_tokens)


def _problem(request: CompletionRequest, data: bytes, cap: int, name: str) -> str:
    """Why an answer cannot be taken ("" when it can)."""
    if len(data) > cap:
        return (
            f"{name} is larger than the {cap}-byte cap for a reply of at most about "
            f"{request.max_output_tokens} tokens: write only the reply, shorter"
        )
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return f"{name} is not UTF-8 text"
    if not text.strip():
        return "the answer file is empty"
    for check in (request.check_reply, request.check_answer):
        if check is None:
            continue
        try:
            check(text.strip())
        except ReplyFormatError as exc:
            return f"not in the expected format: {exc}"
    return ""


def _asked_again(request: CompletionRequest) -> str:
    """Why this prompt exists, when it asks again because an earlier answer could not be
    used: said where the user looks (the waiting lines, ``PROMPTS.md``, ``pending.json``)."""
    earlier = sanitize(str(request.metadata.get(EARLIER_PROBLEM) or ""))[:_PROBLEM_CHARS]
    if not earlier:
        return ""
    return f"{ASKED_AGAIN} the answer to the prompt before it could not be used ({earlier})"


def _fence(text: str) -> str:
    """A backtick fence longer than any run of backticks in ``text``."""
    runs = [len(m) for m in re.findall(r"`+", text)]
    return "`" * max(3, max(runs, default=0) + 1)


def _markdown(prompts: list[PendingPrompt], resume: str) -> str:
    again = f"`{resume}`" if resume else "the same command"
    lines = [
        f"# skillopt handoff: {len(prompts)} prompt(s) wait for answers",
        "",
        "No model was called. Answer each prompt below as the model would: write only the",
        "reply (no preamble) to the file named under it, relative to this folder. A `json`",
        "prompt wants exactly the JSON it describes. When every prompt has its answer, run",
        f"{again} again: the night resumes from where it stopped.",
        "",
    ]
    for number, p in enumerate(prompts, 1):
        lines += [
            f"## {number}. `{p.id}` ({p.role}, {p.stage}, reply as {p.format})",
            "",
            f"Answer in: `{p.answer_file}` (at most about {p.max_output_tokens} tokens)",
            "",
        ]
        if p.problem.startswith(ASKED_AGAIN):
            lines += [f"**Asked again**: {p.problem.removeprefix(ASKED_AGAIN).strip()}", ""]
        elif p.problem:
            lines += [f"**The earlier answer was rejected**: {p.problem}", ""]
        for label, text in (("System", p.system), ("Prompt", p.prompt)):
            if text:
                fence = _fence(text)
                lines += [f"{label}:", "", fence, text, fence, ""]
    return "\n".join(lines)


def build_handoff_member(cfg: Any) -> HandoffBackend:
    """The member for a ``handoff`` config (its directory set by the night's command)."""
    if cfg.dir is None:
        from skillopt.errors import ConfigError

        raise ConfigError(
            "the handoff member has no directory: run it through a night "
            "(`skillopt-sleep once --handoff`), which puts it in the project's state",
            key="dir",
        )
    member = HandoffBackend(
        name=cfg.name, directory=Path(cfg.dir), resume_command=cfg.resume, wait=cfg.wait
    )
    if member.wait > 0:
        member.announce()
    return member
