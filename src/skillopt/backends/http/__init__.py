"""The HTTP members (OpenAI and Azure through the openai SDK, ``member.py``) and what only
they use: Entra ID tokens (``entra.py``), the shared client's transport (``transport.py``)
and reply cap (``cap.py``), the lean SDK import (``openai_import.py``) and the per-member,
per-role request settings (``request_settings.py``)."""
