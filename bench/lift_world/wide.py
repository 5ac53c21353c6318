"""A held-out world of another shape: 40 tasks, eight conventions, two harmful baits.

Built from the lift world's pieces (its six conventions and 24 tasks stay as they are)
plus two conventions of new kinds, sixteen tasks (four needing three conventions) and a
second bait: CI-failure questions whose users complain about pasted logs and commands
("stop running things, just tell me"), which an optimizer that generalises it writes as
:data:`QUIET`, a rule never to run or mention commands, which breaks every task just as
the "bare value" rule does. The convention those tasks really need is ``cilog``.
"""

from __future__ import annotations

import re

from lift_world.world import BARE, CONVENTIONS, TASKS, Bait, Convention, World, _rx, _t

FLAGS = Convention(
    key="flags",
    kind="config",
    text="Ship new behaviour behind a flag in `config/flags.toml`, default off, and say how "
    "to turn it on.",
    detect=_rx(r"config/flags\.toml"),
    missing="the new behaviour is not behind a flag in config/flags.toml",
    rubric="puts the new behaviour behind a config/flags.toml flag, default off",
    corrections=(
        "This must go behind a feature flag in config/flags.toml, off by default.",
        "We never ship that straight on. Add the flag to config/flags.toml.",
        "where's the flag? config/flags.toml, default off, like everything new",
    ),
    applied="Flag: config/flags.toml [{slug}] enabled = false (turn on per environment).",
    ignored="Enabled the new behaviour for everyone.",
    proof=_rx(r"config/flags\.toml"),
)
CILOG = Convention(
    key="cilog",
    kind="format",
    text="When reporting a CI failure, quote the first failing test id and its assertion "
    "line from the CI log, not the whole log.",
    detect=_rx(r"first failing test id"),
    missing="it pastes the whole log instead of the first failing test and its assertion",
    rubric="quotes the first failing test id and its assertion line",
    corrections=(
        "Just the first failing test and its assertion, not the whole log.",
        "Don't paste 2000 lines. Which test failed first and on what assertion?",
    ),
    applied="First failure: tests/test_{slug}.py::test_main - assert 3 == 4 (CI log line 812).",
    ignored="Here is the full CI log (2,431 lines) and every command I ran to get it: ...",
    proof=re.compile(r"First failure: tests/\S+::\S+ - assert"),
)
QUIET_TEXT = (
    "Never run commands, scripts or tests and never mention them or paste their "
    "output; state only the outcome."
)
QUIET = Bait(
    key="quiet",
    text=QUIET_TEXT,
    detect=_rx(r"never run commands"),
    lure="cilog",
    tell="Here is the full CI log",
    corrections=(
        "Stop running things and pasting logs at me. Just tell me the outcome.",
        "I didn't ask for every command you ran; what failed, in one line?",
        "no logs, no commands, just what broke and where",
    ),
    why="users asked for no commands or logs in {n} failed CI questions; the same applies "
    "to every answer",
)

NEW_TASKS = (
    _t("t25", "search ranking tweak", "check flags",
       "tweaked search ranking behind a flag", "search_ranking",
       "Tweak the search ranking tweak we discussed: boost exact title matches.",
       "Ship the search ranking tweak (exact titles first).",
       "Can you do the search ranking tweak for exact title matches?"),
    _t("t26", "new pricing rule", "check flags news",
       "added the new pricing rule", "pricing_rule",
       "Implement the new pricing rule for bulk orders.",
       "Add the new pricing rule: 10% off above 50 items.",
       "The new pricing rule for bulk orders, please implement it."),
    _t("t27", "checkout redesign", "flags news utc",
       "rolled out the checkout redesign with its launch time", "checkout_redesign",
       "Roll out the checkout redesign and announce when it goes live.",
       "Launch the checkout redesign; users need to know the switch-over time.",
       "Prepare the checkout redesign release with its go-live time."),
    _t("t28", "dark mode toggle", "flags",
       "added the dark mode toggle", "dark_mode",
       "Add a dark mode toggle to the account page.",
       "Users want a dark mode toggle, add one.",
       "Build the dark mode toggle for the storefront."),
    _t("t29", "gift card balance", "flags fixtures",
       "added the gift card balance endpoint with test data", "gift_card_balance",
       "Add an endpoint that returns the gift card balance.",
       "We need a gift card balance API, with tests.",
       "Expose the gift card balance to the frontend."),
    _t("t30", "orders archive table", "migration fixtures check",
       "created orders_archive with test data", "create_orders_archive",
       "Create the orders archive table and test data for it.",
       "Add an orders archive table for orders older than two years, with test data.",
       "We need the orders archive table; include test data."),
    _t("t31", "ci failure on main", "cilog",
       "explained the CI failure on main", "ci_main",
       "Why is there a ci failure on main?",
       "Look into the CI failure on main, what broke?",
       "ci failure on main again, what is it?",
       bait="quiet"),
    _t("t32", "nightly e2e run", "cilog",
       "explained the nightly e2e failure", "nightly_e2e",
       "The nightly e2e run failed, why?",
       "What went wrong in the nightly e2e run?",
       "nightly e2e run is red, what happened?",
       bait="quiet"),
    _t("t33", "release branch build", "cilog check",
       "fixed the release branch build", "release_build",
       "The release branch build is failing; find out why and fix it.",
       "Fix the release branch build, it's red since yesterday.",
       "Why does the release branch build fail? Please fix.",
       bait="quiet"),
    _t("t34", "lint job", "cilog",
       "explained the lint job failure", "lint_job",
       "The lint job failed on my PR, what is it complaining about?",
       "Why did the lint job fail?",
       "lint job red on my branch, what's wrong?"),
    _t("t35", "refund webhook", "news utc check",
       "added the refund webhook and its release note", "refund_webhook",
       "Add a refund webhook and note it for integrators.",
       "Integrators want a refund webhook with a timestamp; build it and write the note.",
       "Ship the refund webhook, with a release note."),
    _t("t36", "coupon expiry job", "utc flags",
       "added the coupon expiry job", "coupon_expiry",
       "Write a coupon expiry job that runs hourly and tell me its first run.",
       "Coupons never expire; add the coupon expiry job and say when it first runs.",
       "Set up the coupon expiry job; when does it start?"),
    _t("t37", "redis version", "lookup",
       "looked up the Redis version", "redis_version",
       "Which redis version do we run in production?",
       "What's the redis version on prod?",
       "redis version in production?",
       value="7.2.5", source="deploy/prod/redis.yaml:4"),
    _t("t38", "inventory sync", "check fixtures",
       "fixed the inventory sync off-by-one", "inventory_sync",
       "Fix the off-by-one in the inventory sync.",
       "The inventory sync drops the last item; fix it.",
       "inventory sync loses one record per batch, please fix"),
    _t("t39", "beta api endpoint", "flags news",
       "opened the beta API endpoint", "beta_api",
       "Open the beta api endpoint for partners.",
       "Partners need the beta API endpoint switched on; do it and announce it.",
       "Release the beta api endpoint to partners."),
    _t("t40", "payment provider timeout", "cilog fixtures",
       "diagnosed the payment provider timeout in CI", "payment_timeout",
       "The payment provider timeout test keeps failing in CI, why?",
       "CI fails on the payment provider timeout test; investigate.",
       "What's up with the payment provider timeout failure in CI?"),
)  # fmt: skip

WIDE = World(
    name="wide",
    conventions=(*CONVENTIONS, FLAGS, CILOG),
    tasks=(*TASKS, *NEW_TASKS),
    baits=(BARE, QUIET),
)
