"""The exec harness: an agent CLI run on one task in a workspace with the skill installed
(``rollout.py``), the workspace (``workspace.py``) and the step traces (``trace.py``)."""
