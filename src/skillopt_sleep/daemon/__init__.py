"""The long-running ``skillopt-sleep daemon`` (the only package that imports APScheduler).

- :mod:`.service` — the daemon itself: scheduling, catch-up, nights under one task group,
  SIGHUP reload (only the ``daemon`` command runs it);
- :mod:`.cron` — the trigger maths: one cron trigger per project and its next fire;
- :mod:`.settings` — the ``[daemon]`` settings (pure data and validation; the config reads it);
- :mod:`.state` — ``daemon-state.json``, what catch-up needs across restarts;
- :mod:`.health` — what ``status`` shows: next wake, the running daemon, the last outcome.

The package face imports nothing, so reading the settings never loads the scheduler.
"""
