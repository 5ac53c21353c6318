"""One night of learning, one module per job.

- :mod:`.run`: :func:`~.run.run_night`, the entry point (run directory, resume or abort, the stack)
- :mod:`.stages`: the driver, the night as its list of stages
- :mod:`.gather_tasks`: the first stage, pending sessions and recalled tasks -> tonight's tasks
- :mod:`.rounds`: the learning stages (rounds of cross-fitted learning, the final check)
- :mod:`.crossfit`: one target document in one round
- :mod:`.outcome`: what a night returns and how it fails
- :mod:`.report_markdown`: ``report.md`` from ``report.json``

Nothing is imported here, so importing one module does not load the whole night.
"""
