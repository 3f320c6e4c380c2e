"""The model boundary: every model call, token count and window the gateway asks for.

    Models (facade.py)                 what callers use; its backend chosen once, when built
     ├── LitellmBackend (litellm_backend.py)   litellm in this process: the only importer
     ├── ModelPool (pool.py)           model processes (host.py), each with a LitellmBackend,
     │                                 spoken to over a pipe (wire.py)
     └── ScriptedBackend (scripted.py) answers from a script: the offline `echo` model, tests

A streamed call may offer tools (`ModelCall.tools`); the tool calls the model
asks for come back as `ToolCall` values (tool_calls.py reads them out of either
API's answer).

The backends share one protocol (backend.py) and the plain values of types.py;
providers.py is the table of providers that keep conversation state.
Nothing here imports litellm until a call, count or window needs it.
"""

from gateway.models.facade import Models
from gateway.models.types import (
    Charge,
    Message,
    ModelCall,
    ModelSettings,
    ResponseChain,
    ToolCall,
    Usage,
)

__all__ = [
    "Charge",
    "Message",
    "ModelCall",
    "ModelSettings",
    "Models",
    "ResponseChain",
    "ToolCall",
    "Usage",
]
