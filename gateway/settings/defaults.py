"""What a process that reads no settings still needs from them: a model process is given
its settings on its first line (`gateway.models.host`) and must not load the settings'
dependencies (pydantic-settings, and Redis's client through the state they check).
`env.py` takes its defaults from here."""

from __future__ import annotations

ECHO_MODEL = "echo"  # the offline model: answers with what it was sent
MODEL_RETRIES = 2  # GATEWAY_MODEL_RETRIES
STREAM_IDLE_TIMEOUT = 30.0  # GATEWAY_STREAM_IDLE_TIMEOUT, seconds
