"""The one error hierarchy of skillopt.

Foreign exceptions (openai, httpx2, OSError, pydantic) are mapped to these at the
boundary with ``raise ... from``, so callers only ever catch our types. Every exception
class in ``skillopt`` and ``skillopt_sleep`` is drawn here (a test walks the packages);
the one defined elsewhere names its module. Private control-flow signals (``_Name``) that
never leave their module are not errors and stay out::

    SkillOptError
    ├── ConfigError                 bad file, bad value, unknown key (names the key path)
    ├── DataError                   malformed input we read (tasks file, transcript, state file)
    │   ├── CorruptStateError       a state/checkpoint file exists but cannot be trusted
    │   └── BrokenTree              a Pi session's entries form no tree (harvest.pi; a ValueError)
    ├── BackendError                a model call failed; carries member, status, cause
    │   ├── RetryableBackendError   429/408/409/5xx, timeout, connection, empty reply
    │   │   ├── BackendTimeoutError
    │   │   └── ReplyTooLargeError  the reply passed its byte cap; the rest was never read
    │   └── FatalBackendError       will not get better by retrying
    │       ├── BackendAuthError        401/403, CLI "not logged in"
    │       ├── BackendRequestError     400/404/422, unsupported model
    │       ├── QuotaExhaustedError     429 "insufficient_quota": the account is out of credit
    │       ├── ContentFilterError      the provider refused the content
    │       └── AnswerPendingError      handoff mode: the prompt waits for an answer file
    ├── NoHealthyMemberError        every member of a role is open-circuited or unusable
    ├── BudgetExceededError         the night/run spend cap was reached
    ├── ReplyFormatError            a model reply did not match the expected schema
    ├── RunFailedError              a run learned nothing it can trust; names the stage and cause
    ├── WaitingForAnswersError      handoff mode: a stage's prompts were written; answer, resume
    ├── LockHeldError               another process holds the project lock
    ├── StorageError                our own files cannot be written: disk full, permission denied
    ├── AdoptionError               writing the live files failed; every file touched was restored
    └── RefusedError                the user must act first (unreviewed tasks, changed live file)
        └── SelectionRequiredError  a night proposes several skills: the user names which to adopt
"""

from __future__ import annotations

__all__ = [
    "AdoptionError",
    "AnswerPendingError",
    "BackendAuthError",
    "BackendError",
    "BackendRequestError",
    "BackendTimeoutError",
    "BudgetExceededError",
    "ConfigError",
    "ContentFilterError",
    "CorruptStateError",
    "DataError",
    "FatalBackendError",
    "LockHeldError",
    "NoHealthyMemberError",
    "QuotaExhaustedError",
    "RefusedError",
    "ReplyFormatError",
    "ReplyTooLargeError",
    "RetryableBackendError",
    "RunFailedError",
    "SelectionRequiredError",
    "SkillOptError",
    "StorageError",
    "WaitingForAnswersError",
]


class SkillOptError(Exception):
    """Root of every error skillopt raises on purpose."""


class ConfigError(SkillOptError):
    """A configuration file or value is invalid. ``key`` is the dotted key path."""

    def __init__(self, message: str, *, key: str | None = None, source: str | None = None) -> None:
        self.key = key
        self.source = source
        where = ""
        if source:
            where += f"{source}: "
        if key:
            where += f"{key}: "
        super().__init__(f"{where}{message}")


class DataError(SkillOptError):
    """Input data we read is malformed."""


class CorruptStateError(DataError):
    """A persisted state or checkpoint file is unreadable; never silently reset."""

    def __init__(self, path: str, reason: str) -> None:
        self.path = path
        self.reason = reason
        super().__init__(f"{path}: {reason}")


class BackendError(SkillOptError):
    """A model call failed.

    ``member`` names the pool member, ``status`` the HTTP status or CLI exit code when
    there is one, ``cause`` a short redacted description. Never carries credentials.
    """

    retryable: bool = False

    def __init__(
        self,
        message: str,
        *,
        member: str = "",
        status: int | None = None,
        cause: str = "",
        retry_after: float | None = None,
    ) -> None:
        self.member = member
        self.status = status
        self.cause = cause or message
        self.retry_after = retry_after
        parts = [message]
        if member:
            parts.append(f"member={member}")
        if status is not None:
            parts.append(f"status={status}")
        super().__init__(" ".join(parts))

    @property
    def error_class(self) -> str:
        """A short stable label for accounting ("rate_limit", "timeout", ...)."""
        return type(self).__name__


class RetryableBackendError(BackendError):
    """Worth another try, possibly on another member."""

    retryable = True

    def __init__(self, message: str, *, kind: str = "retryable", **kw: object) -> None:
        self.kind = kind
        super().__init__(message, **kw)  # type: ignore[arg-type]

    @property
    def error_class(self) -> str:
        return self.kind


class BackendTimeoutError(RetryableBackendError):
    def __init__(self, message: str = "timed out", **kw: object) -> None:
        super().__init__(message, kind="timeout", **kw)


class ReplyTooLargeError(RetryableBackendError):
    """The reply passed its byte cap; the rest was never read (class ``too_large``).
    The caps themselves: :mod:`skillopt.backends.reply_cap`."""

    def __init__(self, cap: int, *, seen: int | None = None, member: str = "") -> None:
        self.cap = cap
        got = f"{seen:,} bytes" if seen is not None else "more"
        super().__init__(
            f"reply larger than its {cap:,}-byte cap",
            kind="too_large",
            member=member,
            cause=f"reply exceeded the {cap:,}-byte cap ({got}); reading stopped "
            "(raise the member's max_reply_bytes if such replies are expected)",
        )


class FatalBackendError(BackendError):
    """Retrying will not help; fail fast."""


class BackendAuthError(FatalBackendError):
    @property
    def error_class(self) -> str:
        return "auth"


class BackendRequestError(FatalBackendError):
    @property
    def error_class(self) -> str:
        return "request"


class QuotaExhaustedError(FatalBackendError):
    """The account's quota or credit is used up (a 429 that waiting will not fix)."""

    @property
    def error_class(self) -> str:
        return "quota"


class ContentFilterError(FatalBackendError):
    @property
    def error_class(self) -> str:
        return "content_filter"


class AnswerPendingError(FatalBackendError):
    """Handoff mode (:mod:`skillopt.backends.handoff`): no model answers; this prompt was
    recorded as pending under ``prompt_id`` and waits for ``answers/<prompt_id>.md``.
    ``problem`` says why an answer file that was there was not taken (empty, bad format)."""

    def __init__(self, message: str = "waiting for an answer", *, prompt_id: str = "",
                 problem: str = "", **kw: object) -> None:  # fmt: skip
        self.prompt_id = prompt_id
        self.problem = problem
        super().__init__(message, **kw)  # type: ignore[arg-type]

    error_class_name = "handoff_pending"

    @property
    def error_class(self) -> str:
        return self.error_class_name


class NoHealthyMemberError(SkillOptError):
    """Every member of a role is unusable (open circuit or misconfigured)."""


class BudgetExceededError(SkillOptError):
    """The configured spend cap (calls or tokens) was reached."""


class ReplyFormatError(SkillOptError):
    """A model reply did not match the schema we asked for. ``raw`` keeps the reply;
    ``problems`` the problem of each attempt when a retry was made."""

    def __init__(self, message: str, *, raw: str = "", problems: tuple[str, ...] = ()) -> None:
        self.raw = raw
        self.problems = problems or (message,)
        super().__init__(message)


class RunFailedError(SkillOptError):
    """A run (a training run or a night) that cannot produce a trustworthy result; names
    the stage and the cause."""

    def __init__(self, stage: str, cause: str) -> None:
        self.stage = stage
        self.cause = cause
        super().__init__(f"{stage}: {cause}")


class WaitingForAnswersError(SkillOptError):
    """Handoff mode: the night stopped after ``stage`` had collected every prompt it could
    ask; ``pending`` of them wait for answers in the handoff directory (``rejected`` of
    those had an answer file that was not usable). The same command resumes the night."""

    def __init__(self, stage: str, pending: int, *, rejected: int = 0) -> None:
        self.stage = stage
        self.pending = pending
        self.rejected = rejected
        bad = f" ({rejected} answer(s) rejected: see PROMPTS.md)" if rejected else ""
        super().__init__(f"{pending} prompt(s) of {stage} wait for answers{bad}")


class LockHeldError(SkillOptError):
    """Another live process holds the lock. ``holder`` describes it (pid, host, since)."""

    def __init__(self, message: str, *, holder: dict[str, object] | None = None) -> None:
        self.holder = holder or {}
        super().__init__(message)


class StorageError(SkillOptError):
    """A file of ours (the state directory, a run's files) cannot be written or read: the
    disk is full, the folder is read-only or not ours. ``what`` says which ("disk full",
    "permission denied", ...), ``path`` where. Nothing is wrong with the data: once the user
    frees space or fixes the permissions, the night resumes (exit code 2 at the CLI)."""

    def __init__(self, what: str, path: str, *, writing: bool = True) -> None:
        self.what = what
        self.path = path
        verb = "writing" if writing else "at"
        super().__init__(
            f"{what} {verb} {path}: free some space or fix the permissions, then run the "
            "command again (an interrupted night resumes)"
        )


class AdoptionError(SkillOptError):
    """Writing the live files failed; every file touched was restored."""


class RefusedError(SkillOptError):
    """The operation is refused until the user acts (exit code 2 at the CLI)."""


class SelectionRequiredError(RefusedError):
    """A night proposes several skills: the user names the ones to adopt (``names``)."""

    def __init__(self, message: str, *, names: tuple[str, ...]) -> None:
        self.names = names
        super().__init__(message)
