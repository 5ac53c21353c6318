"""Pool configs for the benchmarks: one OpenAI-compatible member per fake-server URL."""

from __future__ import annotations

from typing import Any


def openai_pool(
    urls: list[str], concurrency: int, *, member: dict[str, Any] | None = None, **sections: Any
) -> dict[str, Any]:
    """A ``[pool]`` table: members ``m0..mN`` serving both roles.

    ``member`` adds fields to every member; ``sections`` adds top-level pool tables
    (``retry``, ``breaker``, ``cache``).
    """
    names = [f"m{i}" for i in range(len(urls))]
    members = [
        {
            "kind": "openai",
            "name": name,
            "base_url": url,
            "model": "bench",
            "timeout": 30,
            "max_concurrency": concurrency,
            **(member or {}),
        }
        for name, url in zip(names, urls, strict=True)
    ]
    return {"members": members, "roles": {"target": names, "optimizer": names}, **sections}
