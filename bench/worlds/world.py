"""What is true in one drawn world, and how the live documents score.

A seed draws (:func:`draw_world`): 3-4 task groups ("skills": topics of work), each with
its own house convention, one convention shared by tasks of several groups, lookups,
one or two tasks that need nothing, a task no document can make pass, and 16-28 tasks in
all; the wording of every task and rule; and which spoilers exist:

- **direct**: a "bare answers" rule lookups' complaints tempt; it breaks every task,
  passing ones included (their mined length check accepts a bare value, so it looks good
  on the lookups);
- **counterfactual**: under it every answer becomes a near-miss (each needed convention
  gestured at, none quite right): it lifts failing answers' partial credit and passes
  the lenient mined checks, breaks nothing that passes without the other rules, and
  cancels every gain the good rules bring;
- **narrow**: the shared convention bundled with a clause that exempts one group's tasks
  from the house steps (their answers become bare: it hurts that group only);
- **every**: proposed by every reflection, whatever it is shown; breaks about 40 % of the
  tasks (one that needs nothing among them), and a biased judge likes its tell on a few
  others;
- **lucky**: proposed from one failing task only; breaks half the tasks that fail anyway
  at the seed, and its single visible effect is a judge error in its favour on one task.

A task is solved by the documents when every convention it needs is in them and no
spoiler that breaks it is (:meth:`GenWorld.true_score`): read from the live files.
"""

from __future__ import annotations

import hashlib
import random
import re
from collections.abc import Iterable
from dataclasses import dataclass, field, replace

SPOILER_KINDS = ("direct", "counterfactual", "narrow", "every", "lucky")
# every feature the issue asks a world family to contain (the test checks each is drawn)
FEATURES = (
    *(f"spoiler:{k}" for k in SPOILER_KINDS),
    "judge_errors",
    "lenient_checks",
    "impossible_task",
    "reworded_duplicates",
    "shared_rule",
    "doomed_task",
)


def stable(*parts: object) -> int:
    """A stable pseudo-random integer from ``parts`` (no shared state, any call order)."""
    raw = "\x1f".join(str(p) for p in parts).encode()
    return int.from_bytes(hashlib.sha256(raw).digest()[:8], "big")


def unit(*parts: object) -> float:
    return stable(*parts) % 1_000_000 / 1_000_000


@dataclass(frozen=True, kw_only=True)
class Conv:
    """One house rule: the texts that teach it, how answers show it, how users correct it."""

    key: str
    texts: tuple[str, ...]  # wordings (one is drawn per world); each matches ``detect``
    detect: str  # regex: a document carries the rule when it matches
    rubric: str
    missing: str
    corrections: tuple[str, ...]
    applied: str  # answer line following it ({slug}, {summary})
    near: str  # answer line gesturing at it, slightly wrong (a near-miss)
    ignored: str  # answer line ignoring it
    stem: str  # what a lenient mined check looks for: in applied and near, not in ignored
    text: str = ""  # the drawn wording


POOL: tuple[Conv, ...] = (
    Conv(
        key="check",
        texts=(
            "Before you call a change done, run `scripts/check.sh` (lint, types, tests) and "
            "quote its summary line.",
            "A change is done only when `scripts/check.sh` passes; paste its last line.",
        ),
        detect=r"scripts/check\.sh",
        rubric="runs scripts/check.sh and quotes its summary",
        missing="it does not say scripts/check.sh was run",
        corrections=(
            "You forgot to run scripts/check.sh. We always run it before calling anything done.",
            "pytest alone misses lint and types: run scripts/check.sh and paste the summary",
        ),
        applied="Ran scripts/check.sh: lint clean, types clean, 412 passed.",
        near="Ran scripts/check.sh --fast (lint only, tests skipped).",
        ignored="Ran the module's own tests with pytest; they pass.",
        stem="scripts/check.sh",
    ),
    Conv(
        key="news",
        texts=(
            "Record every user-visible change as `newsfragments/<issue>.<kind>.md`; never "
            "edit NEWS.md by hand.",
            "User-visible changes get a fragment file under `newsfragments/` named "
            "<issue>.<kind>.md; NEWS.md is generated.",
        ),
        detect=r"newsfragments/",
        rubric="adds a newsfragments/<issue>.<kind>.md file and leaves NEWS.md alone",
        missing="it edits NEWS.md instead of adding a newsfragments/ file",
        corrections=(
            "No, NEWS.md is generated at release time. Add a fragment under newsfragments/.",
            "you missed the fragment file: newsfragments/<issue>.<kind>.md please",
        ),
        applied="Added newsfragments/1432.feature.md: {summary}.",
        near="Added newsfragments/{slug}.md (no issue number): {summary}.",
        ignored="Added a line at the top of NEWS.md: {summary}.",
        stem="newsfragments/",
    ),
    Conv(
        key="utc",
        texts=(
            "Write every date and time in UTC as ISO-8601 with a trailing Z "
            "(2025-03-04T09:12:00Z).",
            "Times are always UTC, ISO 8601, ending in Z.",
        ),
        detect=r"iso[- ]?8601",
        rubric="writes every time as UTC ISO-8601 with a trailing Z",
        missing="times are not written as UTC ISO-8601",
        corrections=(
            "That's wrong, times are always UTC here, ISO-8601 with a Z.",
            "no, local times confuse everyone; UTC with the trailing Z please",
        ),
        applied="Times: 2025-03-04T09:12:00Z to 2025-03-04T10:40:00Z.",
        near="Times: 2025-03-04 09:12 to 2025-03-04 10:40 (UTC, no Z).",
        ignored="Times: Mar 4, 9:12 to 10:40 (server time).",
        stem="2025-03-04",
    ),
    Conv(
        key="migration",
        texts=(
            "Name new database migrations `db/migrations/YYYYMMDD_HHMM_<verb>_<table>.sql`.",
            "Migrations are SQL files named YYYYMMDD_HHMM_<verb>_<table>.sql in db/migrations/.",
        ),
        detect=r"yyyymmdd_hhmm",
        rubric="names the migration db/migrations/YYYYMMDD_HHMM_<verb>_<table>.sql",
        missing="the migration is not named db/migrations/YYYYMMDD_HHMM_<verb>_<table>.sql",
        corrections=(
            "The migration name is wrong: YYYYMMDD_HHMM_<verb>_<table>.sql under db/migrations.",
            "we don't use python migrations, write a timestamped .sql file in db/migrations",
        ),
        applied="Migration: db/migrations/20250304_0912_{slug}.sql.",
        near="Migration: db/migrations/{slug}.sql (no timestamp).",
        ignored="Migration: migrations/{slug}.py.",
        stem="db/migrations/",
    ),
    Conv(
        key="fixtures",
        texts=(
            "Keep test data in YAML files under `tests/fixtures/` and load it with the "
            "fixture helper.",
            "Test data lives in tests/fixtures/ as YAML, loaded by fixture(); no big inline "
            "literals.",
        ),
        detect=r"tests/fixtures/",
        rubric="puts the test data in a YAML file under tests/fixtures/",
        missing="test data is inlined instead of living in tests/fixtures/",
        corrections=(
            "Don't inline the test data, put it in tests/fixtures/ as YAML.",
            "why did you inline 200 lines of data? fixtures go in tests/fixtures/",
        ),
        applied="Test data: tests/fixtures/{slug}.yaml, loaded with fixture().",
        near="Test data: tests/fixtures/{slug}.json, read with open().",
        ignored="Test data: inlined as literals at the top of the test module.",
        stem="tests/fixtures/",
    ),
    Conv(
        key="json",
        texts=(
            "When the request comes from a bot or a script, reply with the JSON object only.",
            "Bot and script requests: reply with the JSON object only, no prose around it.",
        ),
        detect=r"json object only",
        rubric="replies with the JSON object only",
        missing="the JSON is wrapped in prose",
        corrections=(
            "The bot can't parse that. Reply with the JSON object only.",
            "no prose please, the script reads your reply: just the JSON object",
        ),
        applied='{{"status": "ok", "item": "{slug}"}}',
        near='Here is the JSON: {{"status": "ok", "item": "{slug}"}}',
        ignored="Status is ok for {slug}; everything looks fine.",
        stem='"status": "ok"',
    ),
    Conv(
        key="branch",
        texts=(
            "Name every branch `<type>/<issue>-<slug>`, for example fix/1432-retry.",
            "Branches are named <type>/<issue>-<slug>.",
        ),
        detect=r"<type>/<issue>-<slug>",
        rubric="works on a branch named <type>/<issue>-<slug>",
        missing="the branch is not named <type>/<issue>-<slug>",
        corrections=(
            "wrong branch name, we use <type>/<issue>-<slug> like fix/1432-retry",
            "Please rename the branch: type/issue-slug.",
        ),
        applied="Branch: fix/1432-{slug}.",
        near="Branch: fix-{slug} (no issue number).",
        ignored="Branch: my-changes.",
        stem="Branch: fix",
    ),
    Conv(
        key="flags",
        texts=(
            "Put every new behaviour behind a flag in `config/flags.toml`, off by default.",
            "New behaviour ships dark: a flag in config/flags.toml, default off.",
        ),
        detect=r"config/flags\.toml",
        rubric="puts the new behaviour behind a flag in config/flags.toml",
        missing="the new behaviour is not behind a flag in config/flags.toml",
        corrections=(
            "This must be behind a flag in config/flags.toml, off by default.",
            "you shipped it live! add a flag to config/flags.toml",
        ),
        applied="Flag: {slug}_enabled in config/flags.toml (off by default).",
        near="Flag: {slug}_enabled hard-coded in settings.py for now.",
        ignored="Behaviour switched on directly in the code.",
        stem="_enabled",
    ),
)
LOOKUP = Conv(
    key="lookup",
    texts=(
        "For a quick lookup question (a port, a version, a host), give the value alone on the "
        "first line, then one line saying where it is defined.",
        "Lookups: the value alone on the first line, then the file that defines it.",
    ),
    detect=r"value alone on the first line",
    rubric="gives the value first, then the file that defines it",
    missing="the value is buried in prose instead of leading, followed by its source",
    corrections=(
        "Too much text. Value first, then where it is set, please.",
        "I just need the value on top and the file it comes from.",
    ),
    applied="{value}\nDefined in {source}.",
    near="{value} (see {source})",
    ignored="",
    stem="",
)
UNREACHABLE = Conv(  # what the impossible task needs: no rule ever written teaches it
    key="unwritten",
    texts=("(never written down)",),
    detect=r"\bunwritten-house-spec-7f3\b",
    rubric="matches the internal spec nobody wrote down",
    missing="it does not match the unwritten internal spec",
    corrections=(
        "No, that is still not what I wanted, try again.",
        "not like that either. never mind.",
    ),
    applied="Matched the unwritten spec.",
    near="Close to the spec.",
    ignored="Did it the usual way.",
    stem="",
)
POLISH = Conv(  # what the history says about tasks that need nothing (no rule in it)
    key="polish",
    texts=("(nothing to learn)",),
    detect=r"\bnothing-to-learn-polish-2c1\b",
    rubric="does what was asked",
    missing="",
    corrections=("fine. keep the diff small next time.", "ok, that works too."),
    applied="Kept the diff small.",
    near="Kept the diff small.",
    ignored="Kept the diff small.",
    stem="",
)
LONG = "Good question. It depends"  # how a lookup answered at length starts
BAIT_CORRECTIONS = (
    "Way too long. Just the bare value first, then where it's defined; skip the essay.",
    "I only needed the value. Bare value, then the file it's in, nothing else.",
)

SPOILER_TEXTS: dict[str, tuple[tuple[str, str], ...]] = {  # (marker regex, text)
    "direct": (
        (
            r"just the bare (?:value|result)",
            "Answer with just the bare value or result and nothing else: no explanations, file "
            "references, commands or extra steps.",
        ),
        (
            r"just the bare (?:value|result)",
            "Keep every answer to just the bare result: drop steps, paths and commands.",
        ),
    ),
    "counterfactual": (
        (
            r"checklist of the house conventions",
            "End every answer with a short checklist of the house conventions that could "
            "apply instead of spelling each one out in the body.",
        ),
        (
            r"checklist of the house conventions",
            "Summarise the work as a checklist of the house conventions touched, briefly, "
            "rather than carrying each one through in full.",
        ),
    ),
    "narrow": (
        (
            r"exempt from the house steps",
            "{shared} Work on {topic} is exempt from the house steps: keep it minimal.",
        ),
        (
            r"exempt from the house steps",
            "{shared} ({topic} changes are exempt from the house steps, to keep them fast.)",
        ),
    ),
    "every": (
        (
            r"restate the request and ask",
            "Before changing anything, restate the request and ask the user to confirm.",
        ),
        (
            r"restate the request and ask",
            "Always restate the request and ask for a go-ahead before acting on it.",
        ),
    ),
    "lucky": (
        (
            r"mention the owning team",
            "Mention the owning team at the top of every answer and skip steps they own.",
        ),
        (
            r"mention the owning team",
            "Start each answer by naming the owner: mention the owning team, and leave their "
            "steps to them.",
        ),
    ),
}
TELLS = {  # the line an answer carries under the spoiler (judges may be biased by it)
    "every": "Restated request: as I understand it, you want this change. Go ahead?",
    "lucky": "Owning team: platform (their steps left to them).",
}


@dataclass(frozen=True, kw_only=True)
class Spoiler:
    key: str  # its kind
    text: str
    detect: str
    breaks: frozenset[str]  # task ids it truly breaks
    fooled: frozenset[str] = frozenset()  # tasks whose judge errs in its favour
    trigger: str = ""  # lucky: the one task whose failure makes a reflection propose it
    group: str = ""  # narrow: the group it hurts


@dataclass(frozen=True, kw_only=True)
class Task:
    """A recurring request (the history writer and the model read the same fields)."""

    id: str
    subject: str
    variants: tuple[str, ...]
    needs: tuple[str, ...]
    summary: str
    slug: str
    group: str = ""
    bait: str = ""
    value: str = ""
    value_utc: str = ""
    source: str = ""


@dataclass(frozen=True, kw_only=True)
class Bait:  # what the history writer reads for bait tasks' corrections
    key: str
    lure: str
    corrections: tuple[str, ...]


@dataclass(frozen=True, kw_only=True)
class Score:
    solved: int
    total: int
    present: frozenset[str]
    harmful: bool
    spoilers: frozenset[str] = frozenset()

    @property
    def fraction(self) -> float:
        return self.solved / self.total if self.total else 0.0


@dataclass(frozen=True, kw_only=True)
class GenWorld:
    """Everything true in one drawn world; the model and the scorer read only this."""

    name: str
    seed: int
    conventions: tuple[Conv, ...]  # proposable rules, the lookup one included
    tasks: tuple[Task, ...]
    spoilers: tuple[Spoiler, ...]
    groups: dict[str, str]  # group -> its own convention
    shared: str  # the convention several groups' tasks need
    checked: frozenset[str]  # tasks mined with lenient rule checks instead of a rubric
    duplicates: frozenset[str]  # tasks mined under each session's own wording
    impossible: str  # task id no document solves ("" for none)
    doomed: str  # task id whose target calls always fail ("" for none)
    judge_error: float  # share of rubric verdicts a judge gets wrong
    baits: tuple[Bait, ...] = ()
    features: frozenset[str] = field(default_factory=frozenset)

    @property
    def by_key(self) -> dict[str, Conv]:
        return {c.key: c for c in (*self.conventions, UNREACHABLE, POLISH)}

    def for_history(self) -> GenWorld:
        """The same world as the history writer sees it: a task that needs nothing gets
        a correction that teaches nothing (the writer corrects every task once)."""
        tasks = tuple(t if t.needs else replace(t, needs=("polish",)) for t in self.tasks)
        return replace(self, tasks=tasks)

    @property
    def by_id(self) -> dict[str, Task]:
        return {t.id: t for t in self.tasks}

    def bait(self, key: str) -> Bait:
        return next(b for b in self.baits if b.key == key)

    def conventions_in(self, text: str) -> frozenset[str]:
        return frozenset(
            c.key for c in self.conventions if re.search(c.detect, text, re.IGNORECASE)
        )

    def spoilers_in(self, text: str) -> frozenset[str]:
        return frozenset(s.key for s in self.spoilers if re.search(s.detect, text, re.I))

    def harmful_in(self, text: str) -> bool:
        return bool(self.spoilers_in(text))

    def solves(self, task: Task, present: Iterable[str], spoilers: Iterable[str]) -> bool:
        by = {s.key: s for s in self.spoilers}
        if any(task.id in by[k].breaks for k in spoilers):
            return False
        return set(task.needs) <= set(present)

    def true_score(self, *documents: str) -> Score:
        """Share of tasks the documents solve: every needed rule in, no spoiler breaking it."""
        text = "\n".join(documents)
        present, spoilers = self.conventions_in(text), self.spoilers_in(text)
        solved = sum(self.solves(t, present, spoilers) for t in self.tasks)
        return Score(
            solved=solved,
            total=len(self.tasks),
            present=present,
            harmful=bool(spoilers),
            spoilers=spoilers,
        )

    def find_tasks(self, text: str) -> list[Task]:
        folded = text.casefold()
        hits = [(folded.find(t.subject), t) for t in self.tasks]
        return [t for at, t in sorted((h for h in hits if h[0] >= 0), key=lambda h: h[0])]

    def find_task(self, text: str) -> Task | None:
        found = self.find_tasks(text)
        return found[0] if found else None

    # -- answers ---------------------------------------------------------------------
    def render_answer(
        self, task: Task, applied: Iterable[str], *, mode: str = "", tells: Iterable[str] = ()
    ) -> str:
        """The answer an agent gives following ``applied``; ``mode``: a spoiler's effect
        (``bare``, ``near``, ``ask``)."""
        done = set(applied) & set(task.needs)
        head = [TELLS[k] for k in tells if k in TELLS]
        if mode == "ask":
            return "\n".join([*head, f"Before I start on the {task.subject}: should I go ahead?"])
        if task.value:
            if mode == "bare":
                return task.value
            if mode == "near":
                body = LOOKUP.near.format(value=task.value, source=task.source)
            elif "lookup" in done:
                body = LOOKUP.applied.format(value=task.value, source=task.source)
            else:
                body = (
                    f"{LONG} a little on the environment, and there were a few changes over "
                    f"time, but the current setting ends up as {task.value} once the config "
                    f"is loaded (see {task.source} and the deploy notes for the history)."
                )
            return "\n".join([body, *head])
        if mode == "bare":
            return "Done."
        lines = [*head, f"Done: {task.summary}."]
        for key in task.needs:
            c = self.by_key[key]
            line = c.near if mode == "near" else c.applied if key in done else c.ignored
            lines.append(line.format(slug=task.slug, summary=task.summary))
        return "\n".join(lines)

    def grade(self, task: Task, answer: str) -> tuple[float, list[str]]:
        """A strict rubric judge: credit for doing the task and for each convention
        (a near-miss earns half)."""
        if task.value:
            first = answer.strip().splitlines()[0] if answer.strip() else ""
            if first.strip() == task.value and f"in {task.source}" in answer:
                return 1.0, []
            if task.value in answer and task.source in answer and len(answer) < 120:
                return 0.5, [LOOKUP.missing]
            return (0.25 if task.value in answer else 0.0), [LOOKUP.missing]
        if f"Done: {task.summary}." not in answer:
            return 0.0, ["it does not do what was asked"]
        credit, missing = 1.0, []
        for key in task.needs:
            c = self.by_key[key]
            fmt = {"slug": task.slug, "summary": task.summary}
            if c.applied.format(**fmt) in answer:
                credit += 1
            else:
                credit += 0.5 if c.near.format(**fmt) in answer else 0.0
                missing.append(c.missing)
        return credit / (1 + len(task.needs)), missing


# --------------------------------------------------------------------------- drawing

SUBJECTS: tuple[tuple[str, str, str], ...] = (  # subject, summary, slug
    ("payments retry test", "made the payments retry test deterministic", "payments_retry"),
    ("signup form handler", "validated the signup form handler", "signup_validation"),
    ("invoice pdf renderer", "split the invoice PDF renderer", "invoice_pdf"),
    ("csv export feature", "shipped the CSV export feature", "csv_export"),
    ("webhook payload", "changed the webhook payload dates", "webhook_payload"),
    ("rate-limit fix", "fixed the rate limiter", "rate_limit"),
    ("audit log feature", "added the audit log", "audit_log"),
    ("queue outage", "wrote up the queue outage", "queue_outage"),
    ("last_login column", "added last_login to accounts", "accounts_last_login"),
    ("nightly report email", "fixed the nightly report email", "nightly_report"),
    ("session cleanup job", "scheduled the session cleanup job", "session_cleanup"),
    ("orders index", "indexed orders.customer_id", "orders_customer_id"),
    ("legacy_flags table", "dropped legacy_flags", "drop_legacy_flags"),
    ("saved searches table", "created saved_searches", "saved_searches"),
    ("address parser", "tested the address parser", "address_parser"),
    ("discount rounding bug", "pinned the discount rounding bug", "discount_rounding"),
    ("multi-currency checkout", "covered multi-currency checkout", "multi_currency"),
    ("coupon expiry check", "fixed the coupon expiry check", "coupon_expiry"),
    ("search ranking tweak", "tuned the search ranking", "search_ranking"),
    ("refund workflow", "reworked the refund workflow", "refund_workflow"),
    ("inventory sync job", "repaired the inventory sync job", "inventory_sync"),
    ("password reset mail", "fixed the password reset mail", "password_reset"),
    ("shipping label printer", "fixed the shipping label printer", "shipping_labels"),
    ("tax rate table", "updated the tax rate table", "tax_rates"),
    ("wishlist endpoint", "added the wishlist endpoint", "wishlist_endpoint"),
    ("gift card balance", "fixed the gift card balance", "gift_card_balance"),
    ("order status bot", "answered the order status bot", "order_status"),
    ("stock level feed", "built the stock level feed", "stock_feed"),
    ("cart abandonment report", "built the cart abandonment report", "cart_abandonment"),
    ("vendor payout batch", "fixed the vendor payout batch", "vendor_payout"),
    ("loyalty points ledger", "fixed the loyalty points ledger", "loyalty_points"),
    ("product image resizer", "sped up the product image resizer", "image_resizer"),
)
LOOKUPS: tuple[tuple[str, str, str], ...] = (  # subject, value, source
    ("staging api port", "8443", "deploy/staging/api.env:3"),
    ("ci python version", "3.12.4", ".github/workflows/ci.yml:14"),
    ("smtp host", "smtp.internal.shop:587", "config/mail.toml:7"),
    ("redis cache url", "redis://cache.internal:6380/2", "config/cache.toml:4"),
    ("worker pool size", "12", "deploy/worker.env:9"),
)
EASY = (
    ("typo in the readme", "fixed the readme typo", "readme_typo"),
    ("unused import warning", "removed the unused import", "unused_import"),
    ("stale todo comment", "removed the stale todo comment", "stale_todo"),
)
IMPOSSIBLE = ("pricing page layout", "redid the pricing page layout", "pricing_layout")
WORDINGS: tuple[tuple[str, ...], ...] = (
    ("Fix the {s}.", "The {s} is broken again, can you fix it?", "please sort out the {s}"),
    ("Update the {s}.", "Can you update the {s} for me?", "{S} needs an update; please do it."),
    ("Work on the {s} ticket.", "Pick up the {s} ticket please.", "{S}: take care of it."),
)
LOOKUP_WORDINGS = ("What is the {s}?", "Which {s} do we use again?", "{s}?")
TOPICS = ("release notes", "database", "testing", "integrations", "operations")


def _variants(templates: tuple[str, ...], subject: str) -> tuple[str, ...]:
    return tuple(t.format(s=subject, S=subject[0].upper() + subject[1:]) for t in templates)


def draw_world(seed: int, *, noise: float = 0.0, faults: float = 0.0) -> GenWorld:
    """The world of ``seed``. ``noise`` / ``faults`` only name the conditions it is meant
    for (they are applied by the model per night); the world itself depends on ``seed``."""
    del noise, faults
    rng = random.Random(f"trust-world-{seed}")
    n_groups = rng.choice((3, 3, 4))
    pool = [c for c in POOL]
    rng.shuffle(pool)
    if all(c.key != "json" for c in pool[: n_groups + 1]) and rng.random() < 0.6:
        pool.sort(key=lambda c: c.key != "json")  # the good "JSON object only" rule, often
    chosen = pool[: n_groups + 1]
    shared = chosen[0].key
    conv = {c.key: Conv(**{**c.__dict__, "text": rng.choice(c.texts)}) for c in chosen}
    lookup = Conv(**{**LOOKUP.__dict__, "text": rng.choice(LOOKUP.texts)})
    topics = rng.sample(TOPICS, k=n_groups)
    groups = {topics[g]: chosen[g + 1].key for g in range(n_groups)}
    subjects = list(SUBJECTS)
    rng.shuffle(subjects)
    n_lookups = rng.choice((2, 2, 3))
    n_easy = rng.choice((1, 2))
    has_impossible = rng.random() < 0.7
    total = rng.randint(16, 28)
    n_group_tasks = total - n_lookups - n_easy - has_impossible
    tasks: list[Task] = []
    wording = rng.choice(WORDINGS)

    def add(subject: str, summary: str, slug: str, needs: tuple[str, ...], **kw: str) -> None:
        templates = kw.pop("templates", None) or wording
        tasks.append(
            Task(
                id=f"w{seed}-{len(tasks) + 1:02d}",
                subject=subject,
                variants=_variants(tuple(templates), subject),
                needs=needs,
                summary=summary,
                slug=slug,
                **kw,
            )
        )

    shared_groups: set[str] = set()
    for i in range(n_group_tasks):
        topic = topics[i % n_groups]
        subject, summary, slug = subjects[i]
        needs = [groups[topic]]
        if rng.random() < 0.35 or i < n_groups:  # every group has a task needing the shared rule
            needs.append(shared)
            shared_groups.add(topic)
        add(subject, summary, slug, tuple(needs), group=topic)
    direct = rng.random() < 0.6
    for subject, value, source in rng.sample(LOOKUPS, k=n_lookups):
        add(
            subject,
            f"looked up the {subject}",
            subject.replace(" ", "_"),
            ("lookup",),
            group="lookups",
            value=value,
            source=source,
            bait="direct" if direct else "",
            templates=LOOKUP_WORDINGS,
        )
    for subject, summary, slug in rng.sample(EASY, k=n_easy):
        add(subject, summary, slug, (), group="easy")
    if has_impossible:
        add(*IMPOSSIBLE, ("unwritten",), group="impossible")
    impossible = tasks[-1].id if has_impossible else ""
    rng.shuffle(tasks)

    # spoilers: each kind drawn on its own; at least two per world
    kinds = [k for k in SPOILER_KINDS if rng.random() < (0.75 if k != "direct" else 0.0)]
    if direct:
        kinds.insert(0, "direct")
    while len(kinds) < 2:
        extra = rng.choice([k for k in SPOILER_KINDS if k not in kinds and k != "direct"])
        kinds.append(extra)
    with_needs = [t for t in tasks if t.needs and t.id != impossible]
    easy_ids = [t.id for t in tasks if not t.needs]
    spoilers: list[Spoiler] = []
    for kind in kinds:
        marker, text = rng.choice(SPOILER_TEXTS[kind])
        if kind == "direct":
            spoilers.append(
                Spoiler(key=kind, text=text, detect=marker, breaks=frozenset(t.id for t in tasks))
            )
        elif kind == "counterfactual":
            spoilers.append(
                Spoiler(
                    key=kind, text=text, detect=marker, breaks=frozenset(t.id for t in with_needs)
                )
            )
        elif kind == "narrow":
            hurt = rng.choice(topics)
            spoilers.append(
                Spoiler(
                    key=kind,
                    text=text.format(shared=conv[shared].text, topic=hurt),
                    detect=marker,
                    group=hurt,
                    breaks=frozenset(t.id for t in tasks if t.group == hurt),
                )
            )
        elif kind == "every":
            broken = rng.sample(with_needs, k=max(1, int(0.4 * len(tasks))) - 1)
            rest = [t for t in with_needs if t not in broken]
            spoilers.append(
                Spoiler(
                    key=kind,
                    text=text,
                    detect=marker,
                    breaks=frozenset([*(t.id for t in broken), rng.choice(easy_ids)]),
                    fooled=frozenset(t.id for t in rng.sample(rest, k=min(3, len(rest)))),
                )
            )
        else:  # lucky
            trigger, target = rng.sample(with_needs, k=2)
            others = [t for t in with_needs if t.id != target.id]
            spoilers.append(
                Spoiler(
                    key=kind,
                    text=text,
                    detect=marker,
                    trigger=trigger.id,
                    breaks=frozenset(t.id for t in rng.sample(others, k=len(others) // 2)),
                    fooled=frozenset({target.id}),
                )
            )
    group_tasks = [t for t in tasks if t.group in groups]
    checked = {t.id for t in tasks if t.bait}
    if rng.random() < 0.8:
        checked |= {t.id for t in rng.sample(group_tasks, k=max(2, len(group_tasks) // 4))}
    duplicates = (
        {t.id for t in rng.sample(group_tasks, k=rng.randint(1, 3))}
        if rng.random() < 0.7
        else set()
    )
    doomed = rng.choice(group_tasks).id if rng.random() < 0.5 else ""
    judge_error = rng.choice((0.0, 0.05, 0.1))
    baits = (Bait(key="direct", lure="lookup", corrections=BAIT_CORRECTIONS),) if direct else ()
    features = {f"spoiler:{k}" for k in kinds}
    features |= {"judge_errors"} if judge_error else set()
    features |= {"lenient_checks"} if checked - {t.id for t in tasks if t.bait} else set()
    features |= {"impossible_task"} if impossible else set()
    features |= {"reworded_duplicates"} if duplicates else set()
    features |= {"shared_rule"} if len(shared_groups) >= 2 else set()
    features |= {"doomed_task"} if doomed else set()
    return GenWorld(
        name=f"world{seed}",
        seed=seed,
        conventions=(*conv.values(), lookup),
        tasks=tuple(tasks),
        spoilers=tuple(spoilers),
        groups=groups,
        shared=shared,
        checked=frozenset(checked),
        duplicates=frozenset(duplicates),
        impossible=impossible,
        doomed=doomed,
        judge_error=judge_error,
        baits=baits,
        features=frozenset(features),
    )
