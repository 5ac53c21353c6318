"""The scorer a config names: ``env.options.scorer``, a name or a table with its settings.

```toml
[env.options]
scorer = "em"        # exact | em | f1 | numeric | regex | rubric | program
# or, with settings:
[env.options.scorer]
kind = "numeric"
abs_tol = 0.01
```

Every key is checked: a misspelt one is a config error naming ``env.options.scorer.<key>``.
Multiple choice is the ``mcq`` environment's own scoring (it shuffles the options it shows).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from skillopt.config import config_error
from skillopt.errors import ConfigError
from skillopt.trainer.scorers.base import Scorer
from skillopt.trainer.scorers.numeric import NumericScorer
from skillopt.trainer.scorers.pattern import RegexScorer
from skillopt.trainer.scorers.program import NetworkIsolation, ProgramScorer
from skillopt.trainer.scorers.rubric import RubricScorer
from skillopt.trainer.scorers.text import ExactScorer, F1Scorer

__all__ = ["SCORERS", "ScorerSettings", "build_scorer", "scorer_settings"]

ScorerKind = Literal["exact", "em", "f1", "numeric", "regex", "rubric", "program"]
SCORERS: tuple[str, ...] = ("exact", "em", "f1", "numeric", "regex", "rubric", "program")

_KEY = "env.options.scorer"


class ScorerSettings(BaseModel):
    """Settings of every scorer; each scorer reads its own."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    kind: ScorerKind = "em"
    f1_threshold: float = Field(default=0.5, ge=0.0, le=1.0)  # f1: pass at this F1
    abs_tol: float = Field(default=0.0, ge=0.0)  # numeric
    rel_tol: float = Field(default=1e-6, ge=0.0)  # numeric
    pattern: str = ""  # regex: used when an item has no "pattern"
    ignore_case: bool = True  # regex
    search: bool = False  # regex: match anywhere instead of the whole answer
    pass_threshold: float = Field(default=1.0, ge=0.0, le=1.0)  # rubric
    checker: str | list[str] = ""  # program: used when an item has no "checker"
    timeout_s: float = Field(default=60.0, gt=0.0)  # program: the checker's time limit
    isolate_network: NetworkIsolation = NetworkIsolation.AUTO  # program


def scorer_settings(options: Mapping[str, Any], *, default: str) -> ScorerSettings:
    """``options["scorer"]`` (a name or a table) validated; ``default`` when absent."""
    raw = options.get("scorer", default)
    data = {"kind": raw} if isinstance(raw, str) else raw
    if not isinstance(data, Mapping):
        raise ConfigError("must be a scorer name or a table with 'kind'", key=_KEY)
    try:
        return ScorerSettings.model_validate(dict(data))
    except ValidationError as exc:
        raise ConfigError(str(config_error(exc, dict(data), None, {})), key=_KEY) from None


def build_scorer(settings: ScorerSettings, *, data_dir: str = "") -> Scorer:
    kind = settings.kind
    if kind in ("exact", "em"):
        return ExactScorer(normalise=kind == "em")
    if kind == "f1":
        return F1Scorer(threshold=settings.f1_threshold)
    if kind == "numeric":
        return NumericScorer(abs_tol=settings.abs_tol, rel_tol=settings.rel_tol)
    if kind == "regex":
        return RegexScorer(
            pattern=settings.pattern, ignore_case=settings.ignore_case, search=settings.search
        )
    if kind == "rubric":
        return RubricScorer(pass_threshold=settings.pass_threshold)
    checker = settings.checker if isinstance(settings.checker, str) else tuple(settings.checker)
    return ProgramScorer(
        checker=checker,
        data_dir=data_dir,
        timeout_s=settings.timeout_s,
        isolate_network=settings.isolate_network,
    )
