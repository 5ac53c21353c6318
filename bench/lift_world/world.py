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

How an answer shows a convention (and how the judge tells) is fixed per convention
(``applied`` / ``ignored`` / ``proof``), so the target and the judge of :mod:`.model`
agree without sharing state. All of it is one :class:`World` value, :data:`LIFT`; the
module-level names (``TASKS``, ``true_score``, ...) are that world's.
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
    applied: str = ""  # the answer line that follows it ({slug}, {summary} filled in)
    ignored: str = ""  # the answer line that ignores it
    proof: re.Pattern[str] | None = None  # the judge: an answer follows it when this matches


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
        applied="Ran scripts/check.sh: lint clean, types clean, 412 passed.",
        ignored="Ran the module's own tests with pytest; they pass.",
        proof=_rx(r"scripts/check\.sh"),
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
        applied="Added newsfragments/1432.feature.md: {summary}.",
        ignored="Added a line at the top of NEWS.md: {summary}.",
        proof=_rx(r"newsfragments/"),
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
        applied="Times: 2025-03-04T09:12:00Z to 2025-03-04T10:40:00Z.",
        ignored="Times: Mar 4, 9:12 to 10:40 (server time).",
        proof=ISO_TIME,
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
        applied="Migration: db/migrations/20250304_0912_{slug}.sql.",
        ignored="Migration: migrations/{slug}.py.",
        proof=_rx(r"db/migrations/\d{8}_\d{4}_\w+\.sql"),
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
        applied="Test data: tests/fixtures/{slug}.yaml, loaded with fixture().",
        ignored="Test data: inlined as literals at the top of the test module.",
        proof=_rx(r"tests/fixtures/"),
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
LONG_LOOKUP = "Good question. It depends"  # how a lookup answered at length starts
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
class Bait:
    """A harmful generalisation some tasks' corrections tempt an optimizer into.

    Its bait tasks really need the convention ``lure``; their users complain in words
    (``corrections``) that, generalised to every answer, become ``text``, which breaks
    every task. A reflection shown a bait task whose answer carries ``tell`` (the lure
    ignored) proposes ``text`` first.
    """

    key: str
    text: str
    detect: re.Pattern[str]
    lure: str
    tell: str
    corrections: tuple[str, ...]
    why: str  # the rationale a reflection gives ({n}: how many bait tasks failed)


BARE = Bait(
    key="bare",
    text=HARMFUL_TEXT,
    detect=HARMFUL,
    lure="lookup",
    tell=LONG_LOOKUP,
    corrections=BAIT_CORRECTIONS,
    why="users asked for just the value in {n} failed lookups; the same applies to every answer",
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
    bait: str = ""  # key of the Bait its corrections tempt ("" for none)
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
    bait: str = "",
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
       bait="bare", value="8443", source="deploy/staging/api.env:3"),
    _t("t22", "ci python version", "lookup",
       "looked up the CI Python version", "ci_python",
       "Which CI Python version do we pin?",
       "What's the CI Python version?",
       "Remind me of the CI Python version.",
       bait="bare", value="3.12.4", source=".github/workflows/ci.yml:14"),
    _t("t23", "last production deploy", "lookup utc",
       "looked up the last production deploy", "last_deploy",
       "When was the last production deploy?",
       "What time did the last production deploy go out?",
       "last production deploy time?",
       bait="bare", value="Mar 3, 4:20 pm", value_utc="2025-03-03T16:20:00Z",
       source="deploy/history.log:1"),
    _t("t24", "smtp host", "lookup",
       "looked up the SMTP host", "smtp_host",
       "Where is the SMTP host configured?",
       "Which SMTP host do we use, and where is it set?",
       "What's our SMTP host setting?",
       value="smtp.internal.shop:587", source="config/mail.toml:7"),
)  # fmt: skip


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


@dataclass(frozen=True, kw_only=True)
class World:
    """Conventions, the tasks that need them and the baits: everything true in one world.

    The lift world is :data:`LIFT`; ``bench/lift_variants.py`` builds others of different
    shape from the same pieces, and the history writer and the model take one of these.
    """

    name: str
    conventions: tuple[Convention, ...]
    tasks: tuple[Task, ...]
    baits: tuple[Bait, ...]

    @property
    def by_key(self) -> dict[str, Convention]:
        return {c.key: c for c in self.conventions}

    @property
    def by_id(self) -> dict[str, Task]:
        return {t.id: t for t in self.tasks}

    def bait(self, key: str) -> Bait:
        return next(b for b in self.baits if b.key == key)

    def conventions_in(self, text: str) -> frozenset[str]:
        """Keys of the conventions a document (or several, joined) carries."""
        return frozenset(c.key for c in self.conventions if c.detect.search(text))

    def harmful_in(self, text: str) -> bool:
        return any(b.detect.search(text) for b in self.baits)

    def true_score(self, *documents: str) -> Score:
        """Share of tasks the documents solve: all needed conventions in, no harmful rule."""
        text = "\n".join(documents)
        present, harmful = self.conventions_in(text), self.harmful_in(text)
        solved = sum(solves(t, present, harmful) for t in self.tasks)
        return Score(solved=solved, total=len(self.tasks), present=present, harmful=harmful)

    def find_tasks(self, text: str) -> list[Task]:
        """Every task whose subject occurs in ``text``, in order of first mention."""
        folded = text.casefold()
        hits = [(folded.find(t.subject), t) for t in self.tasks]
        return [t for at, t in sorted((h for h in hits if h[0] >= 0), key=lambda h: h[0])]

    def find_task(self, text: str) -> Task | None:
        """The task whose subject occurs first in ``text`` (any wording), else ``None``."""
        found = self.find_tasks(text)
        return found[0] if found else None

    def render_answer(self, task: Task, applied: Iterable[str], *, bare: bool = False) -> str:
        """The answer an agent gives when it follows the conventions in ``applied``.

        ``bare``: it follows a harmful rule (just the value, or just "Done.").
        """
        done = set(applied) & set(task.needs)
        if "lookup" in task.needs:
            value = task.value_utc if "utc" in done and task.value_utc else task.value
            if bare:
                return value
            if "lookup" in done:
                return f"{value}\nDefined in {task.source}."
            return (
                f"{LONG_LOOKUP} a little on the environment, and there were a few "
                f"changes over time, but the current setting ends up as {value} once the "
                f"config is loaded (see {task.source} and the deploy notes for the history)."
            )
        if bare:
            return "Done."
        lines = [f"Done: {task.summary}."]
        for key in task.needs:
            line = self.by_key[key].applied if key in done else self.by_key[key].ignored
            lines.append(line.format(slug=task.slug, summary=task.summary))
        return "\n".join(lines)

    def grade(self, task: Task, answer: str) -> tuple[float, list[str]]:
        """(share of the task's conventions the answer follows, what it misses)."""
        keys = [k for k in task.needs if not _follows(self, task, k, answer)]
        missing = [self.by_key[k].missing for k in keys]
        return (len(task.needs) - len(missing)) / len(task.needs), missing


def _follows(world: World, task: Task, key: str, answer: str) -> bool:
    if key == "lookup":
        first = answer.strip().splitlines()[0] if answer.strip() else ""
        return first.strip() in (task.value, task.value_utc) and f"in {task.source}" in answer
    proof = world.by_key[key].proof
    if proof is None:
        raise KeyError(key)
    return bool(proof.search(answer))


def solves(task: Task, present: Iterable[str], harmful: bool) -> bool:
    return not harmful and set(task.needs) <= set(present)


def flip_choice(*parts: object) -> int:
    """A stable pseudo-random integer from ``parts`` (seeded noise without shared state)."""
    raw = "\x1f".join(str(p) for p in parts).encode()
    return int.from_bytes(hashlib.sha256(raw).digest()[:8], "big")


LIFT = World(name="lift", conventions=CONVENTIONS, tasks=TASKS, baits=(BARE,))
BY_KEY = LIFT.by_key
BY_ID = LIFT.by_id
conventions_in = LIFT.conventions_in
harmful_in = LIFT.harmful_in
true_score = LIFT.true_score
find_task = LIFT.find_task
render_answer = LIFT.render_answer
grade = LIFT.grade
