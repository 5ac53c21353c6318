"""The agent-CLI members (claude, codex, copilot): the member (``member.py``), one flavor per
CLI (``claude.py``, ``codex.py``, ``copilot.py``), what they share (``common.py``), the
per-call home (``home.py``), the subprocess and its tree (``process.py``, ``proctree.py``)
and the recording tool shims (``tool_shims.py``)."""
