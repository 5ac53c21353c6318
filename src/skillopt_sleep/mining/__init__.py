"""Mining: session digests become the judgeable tasks a night learns from.

- :mod:`.heuristic` — the deterministic, offline miner (a candidate per session, merged by intent);
- :mod:`.batch` — the LLM miner: a batch mined through the task archive's cache, so a session
  is paid for once;
- :mod:`.groups` — sessions of one request are one entry; entries packed into calls, token-bound;
- :mod:`.joint` — one call for several entries: the shared prompt, its reply read entry by entry;
- :mod:`.llm` — what the model says of one entry (the reply schema) and the tasks it makes (up
  to 3 a session);
- :mod:`.tasks_file` — the reviewable ``tasks.json`` written by ``harvest --output`` and read by
  ``once --tasks-file``.

The package face imports nothing: callers import the module they need (the LLM miner pulls in
pydantic and the backends, which a heuristic-only night does not pay for).
"""
