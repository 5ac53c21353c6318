"""One night, many skills (finding the skills and routing tasks to them is
:mod:`skillopt_sleep.skills`).

- :mod:`.fanout`: each project skill learns on its own tasks
- :mod:`.shared`: rules several skills need, one memory step before the skills' nights
- :mod:`.shared_memory`: what that step did (:class:`SharedMemory`)
"""
