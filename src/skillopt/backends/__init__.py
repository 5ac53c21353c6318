"""Model backends: the pool and its members (HTTP, CLI, mock)."""
