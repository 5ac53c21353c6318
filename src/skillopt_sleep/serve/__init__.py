"""``skillopt-sleep serve``: a local dashboard over every project of the state directory.

The pages are the report's own (:mod:`skillopt_sleep.html`: the same views and templates,
extended with forms), and the buttons run the commands' own functions (adopt, adopt a
subset of edits, restore a version, start a night) after a confirmation page.

- :mod:`.guard`: loopback only, the per-launch token, Host and Origin checks (CSRF).
- :mod:`.projects`: the projects of the state directory.
- :mod:`.jobs`: actions in flight, in the server's task group, with their progress.
- :mod:`.actions`: what each button does.
- :mod:`.app`: the routes.
- :mod:`.server`: binding, the token, uvicorn.
"""
