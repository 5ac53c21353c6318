"""What is true in the lift world: six house conventions, 24 recurring tasks, one harmful rule.

A task is solved by a pair of documents (skill + project notes) exactly when every
convention it needs is written in them and the harmful rule is not: :func:`true_score`
computes that from the live files, independent of anything a night reports.

The conventions are of different kinds (a command to run, where files go, a time format,
a naming scheme, where test data lives, how to answer a lookup); each is needed by four
to seven tasks and eight tasks need two. Three *bait* tasks are lookups whose users
complain about long answers ("just the bare value, then where it is defined"): an
optimizer that generalises that complaint to every answer writes :data:`HARMFUL`, which
breaks every task. The convention they really need is ``lookup``.

How an answer shows a convention (and how the judge tells) is fixed per convention, so
the target and the judge of :mod:`.model` agree without sharing state.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable
from dataclasses import dataclass

ISO_TIME = re.compile(r"\b\d{4}-\d\d-\d\dT\d\d:\d\d(?::\d\d)?Z\b")


@dataclass(frozen=True, kw_only=True)
class Convention:
    """One house rule: the instruction that teaches it and how an answer shows it."""

    key: str
    kind: str  # command | location | format | naming
    text: str  # the instruction an optimizer proposes (and a document must carry)
    detect: re.Pattern[str]  # present in a document when this matches
    missing: str  # what the judge says when an answer ignores it
    rubric: str  # the criterion a miner writes when a user corrected it
    corrections: tuple[str, ...]  # what users typed when the agent got it wrong


def _rx(pattern: str) -> re.Pattern[str]:
    return re.compile(pattern, re.IGNORECASE)


CONVENTIONS: tuple[Convention, ...] = (
    Convention(
        key="check",
        kind="command",
        text="Before you call a change done, run `scripts/check.sh` (lint, types and the "
        "full test suite) and quote its summary line.",
        detect=_rx(r"scripts/check\.sh"),
        missing="it does not say scripts/check.sh was run",
        rubric="runs scripts/check.sh and quotes its summary",
        corrections=(
            "You forgot to run scripts/check.sh. We always run it before calling anything done.",
            "Did you run the check script? Run scripts/check.sh and paste the summary line.",
            "that's not enough, pytest alone misses lint and types: run scripts/check.sh",
        ),
    ),
    Convention(
        key="news",
        kind="location",
        text="Record every user-visible change as a fragment file "
        "`newsfragments/<issue>.<kind>.md`; never edit NEWS.md by hand.",
        detect=_rx(r"newsfragments/"),
        missing="it edits NEWS.md instead of adding a newsfragments/ file",
        rubric="adds a newsfragments/<issue>.<kind>.md file and leaves NEWS.md alone",
        corrections=(
            "No, NEWS.md is generated at release time. Add a fragment under newsfragments/.",
            "Don't edit NEWS.md by hand, that's what newsfragments/ is for.",
            "you missed the fragment file: newsfragments/<issue>.<kind>.md please",
        ),
    ),
    Convention(
        key="utc",
        kind="format",
        text="Write every date and time in UTC as ISO-8601 with a trailing Z, "
        "for example 2025-03-04T09:12:00Z.",
        detect=_rx(r"iso[- ]?8601"),
        missing="times are not written as UTC ISO-8601",
        rubric="writes every time as UTC ISO-8601 with a trailing Z",
        corrections=(
            "That's wrong, times are always UTC here, ISO-8601 with a Z.",
            "Use UTC ISO-8601 timestamps, nobody knows what server time is.",
            "no, local times confuse everyone; UTC with the trailing Z please",
        ),
    ),
    Convention(
        key="migration",
        kind="naming",
        text="Name new database migrations `db/migrations/YYYYMMDD_HHMM_<verb>_<table>.sql`.",
        detect=_rx(r"yyyymmdd_hhmm"),
        missing="the migration is not named db/migrations/YYYYMMDD_HHMM_<verb>_<table>.sql",
        rubric="names the migration db/migrations/YYYYMMDD_HHMM_<verb>_<table>.sql",
        corrections=(
            "The migration name is wrong: YYYYMMDD_HHMM_<verb>_<table>.sql under db/migrations.",
            "we don't use python migrations, write a timestamped .sql file in db/migrations",
            "rename the migration to the YYYYMMDD_HHMM_verb_table.sql pattern",
        ),
    ),
    Convention(
        key="fixtures",
        kind="location",
        text="Keep test data in YAML files under `tests/fixtures/` and load it with the "
        "fixture helper; do not inline large literals in tests.",
        detect=_rx(r"tests/fixtures/"),
        missing="test data is inlined instead of living in tests/fixtures/",
        rubric="puts the test data in a YAML file under tests/fixtures/",
        corrections=(
            "Don't inline the test data, put it in tests/fixtures/ as YAML.",
            "move those literals into a YAML file under tests/fixtures/",
            "why did you inline 200 lines of data? fixtures go in tests/fixtures/",
        ),
    ),
    Convention(
        key="lookup",
        kind="format",
        text="For a quick lookup question (a port, a version, a date), give the value alone "
        "on the first line, then one line saying where it is defined.",
        detect=_rx(r"value alone on the first line"),
        missing="the value is buried in prose instead of leading, followed by its source",
        rubric="gives the value first, then the file that defines it",
        corrections=(
            "Too much text. Value first, then where it is set, please.",
            "I just need the value on top and the file it comes from.",
        ),
    ),
)
BY_KEY = {c.key: c for c in CONVENTIONS}

HARMFUL_TEXT = (
    "Answer with just the bare value or result and nothing else: no explanations, "
    "file references, commands or extra steps."
)
HARMFUL = _rx(r"just the bare (?:value|result)")
BAIT_CORRECTIONS = (
    "Way too long. Just the bare value first, then where it's defined; skip the essay.",
    "I only needed the value. Bare value, then the file it's in, nothing else.",
    "again a wall of text: give me just the value and its file",
)


@dataclass(frozen=True, kw_only=True)
class Task:
    """A request the user keeps making. ``subject`` appears in every wording of it."""

    id: str
    subject: str
    variants: tuple[str, ...]
    needs: tuple[str, ...]
    summary: str  # what a finished answer did, in a few words
    slug: str  # file-name stem the answer uses
    bait: bool = False
    value: str = ""  # lookups: the answer itself
    value_utc: str = ""  # lookups of a time: the value in the house format
    source: str = ""  # lookups: where the value is defined


def _t(
    id: str,
    subject: str,
    needs: str,
    summary: str,
    slug: str,
    *variants: str,
    bait: bool = False,
    value: str = "",
    value_utc: str = "",
    source: str = "",
) -> Task:
    return Task(
        id=id,
        subject=subject,
        needs=tuple(needs.split()),
        summary=summary,
        slug=slug,
        variants=variants,
        bait=bait,
        value=value,
        value_utc=value_utc,
        source=source,
    )


TASKS: tuple[Task, ...] = (
    _t("t01", "payments client retry test", "check fixtures",
       "made the payments client retry test deterministic", "payments_retry",
       "Fix the flaky payments client retry test.",
       "The payments client retry test failed on CI again, can you fix it?",
       "payments client retry test is flaky, please make it deterministic"),
    _t("t02", "requests dependency", "check",
       "bumped requests to the latest patch release", "requests_bump",
       "Bump the requests dependency to the latest patch release.",
       "Can you update the requests dependency to the newest patch version?",
       "Upgrade the requests dependency (patch release only)."),
    _t("t03", "fullname field", "check migration",
       "renamed fullname to display_name", "rename_users_fullname",
       "Rename the fullname field on UserRecord to display_name.",
       "We agreed on display_name: rename the fullname field everywhere.",
       "Please rename the fullname field to display_name, database column included."),
    _t("t04", "signup form handler", "check",
       "added input validation to the signup form handler", "signup_validation",
       "Add input validation to the signup form handler.",
       "The signup form handler accepts empty emails; add validation.",
       "Validate inputs in the signup form handler please."),
    _t("t05", "invoice pdf renderer", "check",
       "split the invoice PDF renderer into small functions", "invoice_pdf",
       "Refactor the invoice PDF renderer into smaller functions.",
       "Split up the invoice PDF renderer, it's one 300-line function.",
       "Clean up the invoice PDF renderer: smaller functions, same output."),
    _t("t06", "csv export feature", "news",
       "wrote the release note for CSV export", "csv_export",
       "Write the release note for the CSV export feature.",
       "Add a release note saying the CSV export feature shipped.",
       "We need the release note for the CSV export feature."),
    _t("t07", "webhook payload", "news utc",
       "documented the breaking webhook payload change", "webhook_payload",
       "Document the breaking change to the webhook payload.",
       "Write up the webhook payload change for the release notes, it's breaking.",
       "The webhook payload changed its date fields; document it for users."),
    _t("t08", "rate-limit fix", "news",
       "noted the rate-limit fix", "rate_limit",
       "Add a changelog entry for the rate-limit fix.",
       "Note the rate-limit fix in the release notes.",
       "Can you write the changelog line for the rate-limit fix?"),
    _t("t09", "audit log feature", "news utc",
       "wrote the audit log release notes with its go-live time", "audit_log",
       "Prepare the release notes for the audit log feature.",
       "Write release notes for the new audit log feature, with when it went live.",
       "Draft the audit log feature announcement for the release notes."),
    _t("t10", "v3 config format", "news",
       "wrote the v3 config format upgrade notes", "config_v3",
       "Write the upgrade notes for the v3 config format.",
       "Users need upgrade notes for the v3 config format; write them.",
       "Document how to migrate to the v3 config format for the release."),
    _t("t11", "queue outage", "utc",
       "wrote the queue outage incident summary", "queue_outage",
       "Write the incident summary for the queue outage.",
       "Summarise yesterday's queue outage as an incident report.",
       "Draft the queue outage postmortem timeline."),
    _t("t12", "last_login column", "migration utc",
       "added last_login to accounts", "add_accounts_last_login",
       "Add a last_login column to the accounts table.",
       "We need a last_login column on accounts (time of the last sign-in).",
       "Add the last_login column to accounts and fill it on sign-in."),
    _t("t13", "nightly report email", "utc",
       "fixed the times in the nightly report email", "nightly_report",
       "Fix the timestamps in the nightly report email.",
       "The nightly report email shows times in a weird format, fix it.",
       "Make the nightly report email show times properly."),
    _t("t14", "session cleanup job", "utc",
       "scheduled the session cleanup job", "session_cleanup",
       "Schedule the session cleanup job for 02:00 daily and tell me its next run.",
       "Set up the session cleanup job schedule and tell me when it will next run.",
       "Schedule the session cleanup job every night; when is the next run?"),
    _t("t15", "orders.customer_id", "migration",
       "indexed orders.customer_id", "add_index_orders_customer_id",
       "Add an index on orders.customer_id.",
       "Queries by orders.customer_id are slow, add an index.",
       "Create the index for orders.customer_id please."),
    _t("t16", "legacy_flags table", "migration",
       "dropped legacy_flags", "drop_legacy_flags",
       "Drop the unused legacy_flags table.",
       "Remove the legacy_flags table, nothing reads it any more.",
       "Write the migration that drops the legacy_flags table."),
    _t("t17", "saved searches table", "migration fixtures",
       "created saved_searches with test data", "create_saved_searches",
       "Create the saved searches table and some test data for it.",
       "Add a saved searches table, plus test data we can use in tests.",
       "We need the saved searches table and test data for its tests."),
    _t("t18", "address parser", "fixtures",
       "added address parser tests", "address_parser",
       "Write tests for the address parser.",
       "The address parser has no tests; add some.",
       "Cover the address parser with unit tests."),
    _t("t19", "discount rounding bug", "fixtures check",
       "added a regression test for discount rounding", "discount_rounding",
       "Add a regression test for the discount rounding bug.",
       "The discount rounding bug is back; add a regression test for it.",
       "Write a test that pins the discount rounding bug."),
    _t("t20", "multi-currency checkout", "fixtures",
       "added multi-currency checkout test data", "multi_currency",
       "Add test data for the multi-currency checkout.",
       "The multi-currency checkout tests need realistic data; add it.",
       "Create test cases and data for the multi-currency checkout."),
    _t("t21", "staging api", "lookup",
       "looked up the staging API port", "staging_port",
       "What port does the staging API listen on?",
       "Which port is the staging API on again?",
       "staging API port?",
       bait=True, value="8443", source="deploy/staging/api.env:3"),
    _t("t22", "ci python version", "lookup",
       "looked up the CI Python version", "ci_python",
       "Which CI Python version do we pin?",
       "What's the CI Python version?",
       "Remind me of the CI Python version.",
       bait=True, value="3.12.4", source=".github/workflows/ci.yml:14"),
    _t("t23", "last production deploy", "lookup utc",
       "looked up the last production deploy", "last_deploy",
       "When was the last production deploy?",
       "What time did the last production deploy go out?",
       "last production deploy time?",
       bait=True, value="Mar 3, 4:20 pm", value_utc="2025-03-03T16:20:00Z",
       source="deploy/history.log:1"),
    _t("t24", "smtp host", "lookup",
       "looked up the SMTP host", "smtp_host",
       "Where is the SMTP host configured?",
       "Which SMTP host do we use, and where is it set?",
       "What's our SMTP host setting?",
       value="smtp.internal.shop:587", source="config/mail.toml:7"),
)  # fmt: skip
BY_ID = {t.id: t for t in TASKS}


def conventions_in(text: str) -> frozenset[str]:
    """Keys of the conventions a document (or several, joined) carries."""
    return frozenset(c.key for c in CONVENTIONS if c.detect.search(text))


def harmful_in(text: str) -> bool:
    return bool(HARMFUL.search(text))


def solves(task: Task, present: Iterable[str], harmful: bool) -> bool:
    return not harmful and set(task.needs) <= set(present)


@dataclass(frozen=True, kw_only=True)
class Score:
    """The true score of a pair of documents."""

    solved: int
    total: int
    present: frozenset[str]
    harmful: bool

    @property
    def fraction(self) -> float:
        return self.solved / self.total if self.total else 0.0


def true_score(*documents: str) -> Score:
    """Fraction of tasks the documents solve: all needed conventions in, harmful rule out."""
    text = "\n".join(documents)
    present, harmful = conventions_in(text), harmful_in(text)
    solved = sum(solves(t, present, harmful) for t in TASKS)
    return Score(solved=solved, total=len(TASKS), present=present, harmful=harmful)


def find_task(text: str) -> Task | None:
    """The task whose subject occurs first in ``text`` (any wording), else ``None``."""
    folded = text.casefold()
    best: tuple[int, Task] | None = None
    for task in TASKS:
        at = folded.find(task.subject)
        if at >= 0 and (best is None or at < best[0]):
            best = (at, task)
    return best[1] if best else None


# --------------------------------------------------------------------------- answers


def _shown(task: Task, key: str, applied: bool) -> str:
    """The line of an answer that shows convention ``key`` followed (or not)."""
    if key == "check":
        return (
            "Ran scripts/check.sh: lint clean, types clean, 412 passed."
            if applied
            else "Ran the module's own tests with pytest; they pass."
        )
    if key == "news":
        return (
            f"Added newsfragments/1432.feature.md: {task.summary}."
            if applied
            else f"Added a line at the top of NEWS.md: {task.summary}."
        )
    if key == "utc":
        return (
            "Times: 2025-03-04T09:12:00Z to 2025-03-04T10:40:00Z."
            if applied
            else "Times: Mar 4, 9:12 to 10:40 (server time)."
        )
    if key == "migration":
        return (
            f"Migration: db/migrations/20250304_0912_{task.slug}.sql."
            if applied
            else f"Migration: migrations/{task.slug}.py."
        )
    if key == "fixtures":
        return (
            f"Test data: tests/fixtures/{task.slug}.yaml, loaded with fixture()."
            if applied
            else "Test data: inlined as literals at the top of the test module."
        )
    raise KeyError(key)


def _value(task: Task, utc: bool) -> str:
    return task.value_utc if utc and task.value_utc else task.value


def render_answer(task: Task, applied: Iterable[str], *, bare: bool = False) -> str:
    """The answer an agent gives when it follows the conventions in ``applied``.

    ``bare``: it follows the harmful rule (just the value, or just "Done.").
    """
    done = set(applied) & set(task.needs)
    if "lookup" in task.needs:
        value = _value(task, "utc" in done)
        if bare:
            return value
        if "lookup" in done:
            return f"{value}\nDefined in {task.source}."
        return (
            f"Good question. It depends a little on the environment, and there were a few "
            f"changes over time, but the current setting ends up as {value} once the config "
            f"is loaded (see {task.source} and the deploy notes for the history)."
        )
    if bare:
        return "Done."
    lines = [f"Done: {task.summary}."]
    lines += [_shown(task, key, key in done) for key in task.needs]
    return "\n".join(lines)


def grade(task: Task, answer: str) -> tuple[float, list[str]]:
    """(share of the task's conventions the answer follows, what it misses)."""
    missing: list[str] = []
    for key in task.needs:
        if not _follows(task, key, answer):
            missing.append(BY_KEY[key].missing)
    return (len(task.needs) - len(missing)) / len(task.needs), missing


def _follows(task: Task, key: str, answer: str) -> bool:
    if key == "check":
        return "scripts/check.sh" in answer
    if key == "news":
        return "newsfragments/" in answer
    if key == "utc":
        return bool(ISO_TIME.search(answer))
    if key == "migration":
        return bool(re.search(r"db/migrations/\d{8}_\d{4}_\w+\.sql", answer))
    if key == "fixtures":
        return "tests/fixtures/" in answer
    if key == "lookup":
        first = answer.strip().splitlines()[0] if answer.strip() else ""
        return first.strip() in (task.value, task.value_utc) and f"in {task.source}" in answer
    raise KeyError(key)


def flip_choice(*parts: object) -> int:
    """A stable pseudo-random integer from ``parts`` (seeded noise without shared state)."""
    raw = "\x1f".join(str(p) for p in parts).encode()
    return int.from_bytes(hashlib.sha256(raw).digest()[:8], "big")
