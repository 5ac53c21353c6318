"""Prompt templates shipped with the package, loaded by name.

A template is ``<name>.md`` in this package. Placeholders are ``{{ name }}``; rendering is
strict: every placeholder must be given a value and every value must be used, so a renamed
placeholder fails loudly instead of sending a half-filled prompt. Values are substituted in
one pass, so text inside a value is never re-expanded.
"""

from __future__ import annotations

import re
from functools import cache
from importlib import resources

from skillopt.errors import ConfigError

__all__ = ["load_prompt", "placeholders", "render_prompt"]

_PLACEHOLDER = re.compile(r"\{\{\s*([A-Za-z_][A-Za-z0-9_]*)\s*\}\}")
_NAME = re.compile(r"^[a-z][a-z0-9_]*$")


@cache
def load_prompt(name: str) -> str:
    """The raw text of template ``name`` (without the ``.md`` suffix)."""
    if not _NAME.match(name):
        raise ConfigError(f"invalid prompt name {name!r}", key="prompt")
    resource = resources.files(__name__).joinpath(f"{name}.md")
    try:
        return resource.read_text(encoding="utf-8")
    except FileNotFoundError as exc:
        raise ConfigError(f"no prompt template named {name!r}", key="prompt") from exc


def placeholders(name: str) -> frozenset[str]:
    """The placeholder names template ``name`` uses."""
    return frozenset(_PLACEHOLDER.findall(load_prompt(name)))


def render_prompt(name: str, **values: object) -> str:
    """Fill template ``name``; missing or unused values raise :class:`ConfigError`."""
    template = load_prompt(name)
    wanted = set(_PLACEHOLDER.findall(template))
    missing = sorted(wanted - values.keys())
    unused = sorted(values.keys() - wanted)
    if missing or unused:
        detail = []
        if missing:
            detail.append(f"missing {', '.join(missing)}")
        if unused:
            detail.append(f"unused {', '.join(unused)}")
        raise ConfigError(f"prompt {name!r}: {'; '.join(detail)}", key="prompt")
    return _PLACEHOLDER.sub(lambda m: str(values[m.group(1)]), template)
