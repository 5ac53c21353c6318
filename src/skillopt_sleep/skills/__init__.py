"""One night, many skills: find the project's own skills, route each task to the skill it
exercised. The learning on each skill is the night's (:mod:`skillopt_sleep.night.skills.fanout`)."""

from skillopt_sleep.skills.discover import Discovery, ProjectSkill, discover_skills
from skillopt_sleep.skills.route import Route, Routing, route_tasks

__all__ = [
    "Discovery",
    "ProjectSkill",
    "Route",
    "Routing",
    "discover_skills",
    "route_tasks",
]
