# ruff: noqa: E501  (a table of messages, one conversation a line)
"""Held-out follow-ups for the correction reader (issue 32, item 14), written before the
reader was changed and not tuned to afterwards: each is (the opening request, the user's
next message). Corrections ask for a different output or behaviour than the agent gave;
controls are questions, thanks and new requests that must not read as corrections.

Pi users mostly correct without a leading "no"; OpenCode users often start with one, but
not always: both lists mix the ways people do it.
"""

from __future__ import annotations

PI_CORRECTIONS: tuple[tuple[str, str], ...] = (
    ("summarize the design doc for the team", "please stop with the bullet points, plain sentences"),
    ("give me the user record for id 42 from the fixture", "just the JSON object please, no explanation around it"),
    ("add a created_at field to the event", "I need the UTC timestamp, not local time"),
    ("loop over the uploads and parse each one", "wrap it in a try/except so the loop keeps going"),
    ("write a helper that finds all the .md files", "use pathlib instead of os.path"),
    ("add a private _normalize helper", "drop the docstring, we don't put them on private helpers"),
    ("clean up the parse function", "keep the original function name, rename it back"),
    ("parse the dates in the CSV", "don't add a new dependency for this, use the stdlib"),
    ("explain what the scheduler module does", "shorter. one paragraph max"),
    ("add retry limits to the client", "put the constants at the top of the module instead"),
    ("add a rate limiter for the API calls", "rather than a class, make it a plain function"),
    ("fix the off-by-one in pagination", "I wanted a unified diff, not the whole file"),
    ("add a function that fetches the profile", "make it async, the caller is already in an event loop"),
    ("make the slugify tests pass", "leave the tests alone, only change the implementation"),
    ("log when the cache is cold", "that should be a warning, not an error"),
    ("add the greeting strings to the module", "use double quotes, the formatter will flip them anyway"),
    ("add the tags feature: model, migration, API", "only the migration, skip the model changes for now"),
    ("fix the typo in format_price", "please don't reformat the whole file, just the function I pointed at"),
    ("handle a missing key in lookup()", "return None instead of raising there"),
    ("list the recent invoices in the report", "needs to be sorted by date, newest first"),
    ("build the settings dict for the export", "hmm, I'd prefer snake_case for these keys"),
    ("validate the phone numbers in the form", "can you redo it without the regex? it's unreadable"),
    ("write the commit message for this change", "the commit message should be imperative mood, e.g. 'Add', not 'Added'"),
    ("save the upload and validate it", "swap the order: validation first, then the write"),
)  # fmt: skip

OPENCODE_CORRECTIONS: tuple[tuple[str, str], ...] = (
    ("update the database URL in the config", "no, the other config file — the one under deploy/"),
    ("move the helpers out of views.py", "nope, keep it in the same module"),
    ("point the uploads at the bucket", "no, I meant the staging bucket"),
    ("add some output when the sync finishes", "use the existing logger instead of print"),
    ("add an index on orders.customer_id", "just give me the SQL, I'll run it myself"),
    ("implement the retry loop", "stop adding comments to every line"),
    ("add a way to build a test user", "I want it as a pytest fixture, not a helper function"),
    ("tidy up the filter in reports.py", "change it back to a list comprehension, the loop is noisier"),
    ("call the pricing service from checkout", "make the timeout configurable rather than hard-coded"),
    ("indent the Makefile target", "no, tabs. this repo uses tabs"),
    ("refactor the client module", "please keep the public API unchanged"),
    ("bump the lodash version", "Don't touch package-lock.json"),
    ("implement DELETE /items/:id", "the endpoint needs to return 204, not 200 with an empty body"),
    ("fix the bug and the formatting", "split that into two commits"),
    ("add a storage backend interface", "simpler please — no abstract base class"),
    ("parse the command line options", "write it for Python 3.9, we can't use match statements"),
    ("add get_orders to the repository", "rename it to fetch_orders, get_ is for cached lookups here"),
    ("write a test for the order service", "instead of mocking the db, use the sqlite fixture"),
    ("add the new checkout page", "put it behind the feature flag"),
    ("fix the date parsing bug", "revert the changes to README, only the code"),
    ("print progress while syncing files", "less verbose output, one line per file"),
    ("write a function that averages the scores", "I need it to handle empty input too, it blows up on []"),
    ("add logging to the worker", "no emoji in the log messages please"),
    ("add the GET /users/:id route", "should be a 404 when the user doesn't exist, not 500"),
)  # fmt: skip

CONTROLS: tuple[tuple[str, str], ...] = (
    ("add retries to the HTTP client", "what does the retry decorator do exactly?"),
    ("set up the test suite", "how long does the full test suite take to run?"),
    ("explain the app startup", "where is the config loaded?"),
    ("add the API client", "is there a reason you picked httpx over requests?"),
    ("set up CI for the repo", "which python version does CI use?"),
    ("write the validation for emails", "can you explain the second regex?"),
    ("fix the failing import", "thanks, that works"),
    ("add the missing translation", "great, thank you!"),
    ("rename the env var", "perfect"),
    ("update the changelog", "looks good, merging"),
    ("fix the flaky date test", "nice, the tests pass now"),
    ("patch the null check", "cool. thanks for the quick fix"),
    ("add the export command", "now add a CLI flag for the output path"),
    ("write the parser", "next, write tests for the parser"),
    ("add the --dry-run option", "can you also update the README with the new option"),
    ("finish the import feature", "let's move on to the export feature"),
    ("add type hints to models.py", "add type hints to utils.py as well"),
    ("fix the rounding bug", "please write a changelog entry for this"),
    ("add the settings page", "run the linter and fix what it finds"),
    ("add soft delete to the users table", "now do the same for the orders table"),
    ("add the discount column to the model", "also create a migration for the new column"),
    ("finish the refactor", "make a PR description for these changes"),
    ("fix the healthcheck", "ok, now deploy it to staging"),
    ("make the CSV importer faster", "next task: the CSV importer should skip blank lines"),
)  # fmt: skip
