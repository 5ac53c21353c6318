"""Shared fixtures. Tests are offline: only 127.0.0.1 is ever contacted."""

from __future__ import annotations
