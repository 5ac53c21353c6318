"""Errors across a process boundary, as plain data.

Our errors carry keyword attributes (``member``, ``status``, ``retry_after``) that pickling
an exception drops, and an error that arrives as Ray's own wrapper would escape every
``except BackendError`` of the caller. So a failure crosses as ``{"type", "args", "attrs"}``
and is rebuilt as the same class of :mod:`skillopt.errors` (or ``TimeoutError``) on the other
side, with the same message and attributes.
"""

from __future__ import annotations

from typing import Any

from skillopt import errors

__all__ = ["WIRE_ERRORS", "error_from_wire", "error_to_wire"]

#: What crosses as itself; anything else is a bug and surfaces as Ray reports it.
WIRE_ERRORS: tuple[type[BaseException], ...] = (errors.SkillOptError, TimeoutError)

_PLAIN = (str, int, float, bool, type(None))


def error_to_wire(exc: BaseException) -> dict[str, Any]:
    attrs = {k: v for k, v in vars(exc).items() if isinstance(v, _PLAIN)}
    return {"type": type(exc).__name__, "args": [str(a) for a in exc.args], "attrs": attrs}


def _error_class(name: str) -> type[BaseException]:
    if name == "TimeoutError":
        return TimeoutError
    found = getattr(errors, name, None)
    if isinstance(found, type) and issubclass(found, errors.SkillOptError):
        return found
    return errors.SkillOptError


def error_from_wire(data: dict[str, Any]) -> BaseException:
    """The error ``data`` describes, built without its ``__init__`` (which would format the
    message a second time)."""
    cls = _error_class(str(data.get("type", "")))
    exc = cls.__new__(cls)
    BaseException.__init__(exc, *data.get("args", []))
    for key, value in dict(data.get("attrs", {})).items():
        setattr(exc, key, value)
    return exc
