"""Tasks that nights learn from: the per-project task archive (SQLite) and its records."""
