"""Files the media tests share, made here: images, a damaged one, a bomb's header, PDFs."""

from __future__ import annotations

import io
import struct
import zlib

from PIL import Image


def png(width: int = 64, height: int = 48, color: tuple[int, ...] = (200, 30, 30)) -> bytes:
    out = io.BytesIO()
    Image.new("RGB" if len(color) == 3 else "RGBA", (width, height), color).save(out, "PNG")
    return out.getvalue()


def noisy_png(width: int, height: int) -> bytes:
    """A PNG that does not compress (random pixels): its size follows its pixel count."""
    import os

    image = Image.frombytes("RGB", (width, height), os.urandom(width * height * 3))
    out = io.BytesIO()
    image.save(out, "PNG", compress_level=1)
    return out.getvalue()


def jpeg_with_exif(width: int = 3000, height: int = 2000) -> bytes:
    image = Image.new("RGB", (width, height), (10, 120, 200))
    exif = Image.Exif()
    exif[0x010F] = "SecretCam"  # Make
    exif[0x9286] = "where I live"  # UserComment
    out = io.BytesIO()
    image.save(out, "JPEG", exif=exif.tobytes(), quality=80)
    return out.getvalue()


def bomb_png_header(width: int = 20_000, height: int = 20_000) -> bytes:
    """A PNG's signature and header claiming `width` × `height`, and one tiny IDAT:
    a few hundred bytes that would decode to gigabytes."""

    def chunk(kind: bytes, body: bytes) -> bytes:
        crc = zlib.crc32(kind + body) & 0xFFFFFFFF
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", crc)

    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    idat = zlib.compress(b"\x00" * 1024)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", idat)


def truncated_jpeg() -> bytes:
    whole = jpeg_with_exif(400, 300)
    return whole[: len(whole) // 2]


def pdf(*pages: str) -> bytes:
    """A PDF whose pages show `pages` in Helvetica, its cross-reference table exact."""
    objects = [b"<< /Type /Catalog /Pages 2 0 R >>"]
    kids = " ".join(f"{4 + 2 * i} 0 R" for i in range(len(pages)))
    objects.append(f"<< /Type /Pages /Kids [{kids}] /Count {len(pages)} >>".encode())
    objects.append(b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>")
    for i, text in enumerate(pages):
        content = f"BT /F1 12 Tf 72 720 Td ({text}) Tj ET".encode()
        objects.append(
            f"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents {5 + 2 * i} 0 R "
            "/Resources << /Font << /F1 3 0 R >> >> >>".encode()
        )
        objects.append(b"<< /Length %d >>\nstream\n" % len(content) + content + b"\nendstream")
    out = bytearray(b"%PDF-1.4\n")
    offsets = []
    for number, body in enumerate(objects, start=1):
        offsets.append(len(out))
        out += b"%d 0 obj\n" % number + body + b"\nendobj\n"
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1)
    out += b"".join(b"%010d 00000 n \n" % offset for offset in offsets)
    out += b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (
        len(objects) + 1,
        xref,
    )
    return bytes(out)
