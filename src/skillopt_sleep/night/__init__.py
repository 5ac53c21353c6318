"""One night of learning, one module per job.

Entry and driver:

- :mod:`.entry`: :func:`~.entry.run_night`, the entry point (refuse early, the stack, open or
  resume the run, drive it)
- :mod:`.resume`: which earlier run a night picks up, and what it asks again
- :mod:`.stages`: the driver, the night as its list of stages
- :mod:`.night_state`: :class:`~.night_state.Night`, the running night's state and stage bookkeeping
- :mod:`.course`: how the night has gone so far, filled in stage by stage

The stages:

- :mod:`.gather_tasks`: pending sessions mined and archive tasks recalled -> tonight's tasks
- :mod:`.estimate`: the up-front spend estimate and the per-call token model
- :mod:`.learn`: the learning (rollouts, rounds of cross-fitted learning, the final check:
  :mod:`.learn.rounds`; one target document in one round: :mod:`.learn.crossfit`; a night
  whose model judge cannot be trusted fails at that stage: :mod:`.learn.judging`)
- :mod:`.quiet`: quiet nights, the noise probe, when two measurements ask the same question
- :mod:`.skills`: one night, many skills: each project skill learns on its own tasks
  (:mod:`.skills.fanout`), rules several skills share (:mod:`.skills.shared`)
- :mod:`.proposal`: staging an accepted night (skill store, proposal, auto-adopt)
- :mod:`.archive_exchange`: carried edits in, tonight's harvest and outcomes back to the task
  archive

What it leaves:

- :mod:`.outcome`: what a night returns and how it fails; the live documents as read
- :mod:`.report`: ``report.json``, the history entry and the outcome drawn from it
- :mod:`.report_markdown`: ``report.md`` from ``report.json`` (pure)
- :mod:`.outputs`: the files every night leaves in its run directory

Nothing is imported here, so importing one module does not load the whole night.
"""
