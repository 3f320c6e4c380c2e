"""Images: decoded whatever their declared type, checked for size before decoding, scaled
and re-encoded without their metadata.

Opening an image reads its header only; its pixel count is checked there, so a
small file that claims 20,000 × 20,000 pixels (a decompression bomb) is refused
before a byte of it is decoded. Pillow's own check (a warning, then an error,
at a process-wide limit) is replaced by this one, whose limit is a setting.

Memory: a JPEG is decoded at the smallest scale still at least `max_side`
(`draft`), every image is scaled in place, turned upright only once small, and
not copied again when it already has the mode it is saved in; so the decoded
full-size image is the only large buffer, and only for PNG and the like.
"""

from __future__ import annotations

import base64
import io
from dataclasses import dataclass
from typing import TYPE_CHECKING

from gateway.errors import MediaTooLarge, UnreadableMedia

if TYPE_CHECKING:
    from PIL import Image

JPEG_QUALITY = 85


@dataclass(frozen=True, slots=True)
class Picture:
    """A re-encoded image, ready for a data URL."""

    data: bytes
    mime: str
    width: int
    height: int

    def data_url(self) -> str:
        """The image as a request carries it, and as it is stored."""
        return f"data:{self.mime};base64,{base64.b64encode(self.data).decode('ascii')}"


def convert(data: bytes, max_pixels: int, max_side: int) -> Picture:
    """`data` decoded, its long side scaled to at most `max_side`, as PNG (when it has
    transparency) or JPEG, with no metadata (EXIF, GPS, comments) carried over.

    Pillow is loaded by the first image (most workers' turns carry none)."""
    from PIL import Image, ImageOps, UnidentifiedImageError

    Image.MAX_IMAGE_PIXELS = None  # checked here instead, before `load`
    try:
        with Image.open(io.BytesIO(data)) as image:
            width, height = image.size
            if width * height > max_pixels:
                raise MediaTooLarge(
                    f"{width}×{height} pixels, over the limit of {max_pixels:,} pixels"
                )
            image.draft("RGB", (max_side, max_side))  # JPEG: decode at a reduced scale
            image.load()
            image.thumbnail((max_side, max_side), Image.Resampling.LANCZOS)
            # A photo turned as its camera meant; after scaling, so the small image is turned
            # (the bound is square, so the size is the same either way).
            ImageOps.exif_transpose(image, in_place=True)
            return _encode(image)
    except UnidentifiedImageError:
        raise UnreadableMedia("not an image that can be read") from None
    except (OSError, SyntaxError, ValueError, EOFError):
        raise UnreadableMedia("a damaged or truncated image") from None


def _encode(image: Image.Image) -> Picture:
    transparent = image.mode in ("RGBA", "LA", "PA") or "transparency" in image.info
    mode = "RGBA" if transparent else "RGB"
    clean = image if image.mode == mode else image.convert(mode)
    clean.info = {}  # no ICC profile, EXIF or text chunk travels on
    out = io.BytesIO()
    if transparent:
        clean.save(out, "PNG", optimize=True)
        mime = "image/png"
    else:
        clean.save(out, "JPEG", quality=JPEG_QUALITY)
        mime = "image/jpeg"
    return Picture(out.getvalue(), mime, clean.width, clean.height)
