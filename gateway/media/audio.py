"""Voice messages: transcribed through the model boundary (litellm's transcription call).

Only with GATEWAY_TRANSCRIPTION_MODEL set; otherwise a voice message reaches the
model by name, and the user is told once how it could be turned on.
"""

from __future__ import annotations

from gateway.errors import MediaTooLarge, ModelError, UnreadableMedia
from gateway.media.documents import cut
from gateway.media.download import megabytes
from gateway.models import Charge, Models

NOT_ENABLED = (
    "voice messages are not transcribed here (the operator can turn it on with "
    "GATEWAY_TRANSCRIPTION_MODEL)"
)


class Transcriber:
    """Turns a voice message's bytes into text, capped at `max_chars`."""

    def __init__(
        self, models: Models, model: str | None, max_bytes: int, max_chars: int, timeout: float
    ) -> None:
        self.models, self.model = models, model
        self.max_bytes, self.max_chars, self.timeout = max_bytes, max_chars, timeout

    @property
    def enabled(self) -> bool:
        return self.model is not None

    async def transcribe(self, data: bytes, name: str, charge: Charge | None = None) -> str:
        """The transcript; MediaError when it is too long to send or the model failed.
        Its usage is counted for `charge`."""
        assert self.model is not None
        if len(data) > self.max_bytes:
            raise MediaTooLarge(f"over the {megabytes(self.max_bytes)} a transcription takes")
        try:
            text = await self.models.transcribe(self.model, data, name, self.timeout, charge)
        except ModelError as exc:
            raise UnreadableMedia(f"could not be transcribed: {exc.user_text}") from None
        return cut(text.strip(), self.max_chars)
