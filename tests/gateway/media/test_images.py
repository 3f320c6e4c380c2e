"""Images: decoded whatever they claim, refused before decoding when too large, scaled, clean."""

from __future__ import annotations

import io

import pytest
from PIL import Image

from gateway.errors import MediaTooLarge, UnreadableMedia
from gateway.media.images import convert
from tests.support.media_files import bomb_png_header, jpeg_with_exif, pdf, png, truncated_jpeg

PIXELS = 50_000_000


def test_a_large_photo_is_scaled_to_the_long_side_and_loses_its_metadata() -> None:
    picture = convert(jpeg_with_exif(3000, 2000), PIXELS, 1568)
    assert (picture.width, picture.height) == (1568, 1045)
    assert picture.mime == "image/jpeg"
    with Image.open(io.BytesIO(picture.data)) as decoded:
        assert decoded.size == (1568, 1045)
        assert not decoded.getexif()
    assert b"SecretCam" not in picture.data and b"where I live" not in picture.data


def test_a_photo_taken_sideways_is_turned_upright_and_scaled() -> None:
    exif = Image.Exif()
    exif[0x0112] = 6  # Orientation: shown turned 90° clockwise
    out = io.BytesIO()
    Image.new("RGB", (3000, 2000), (10, 120, 200)).save(out, "JPEG", exif=exif.tobytes())
    picture = convert(out.getvalue(), PIXELS, 1568)
    assert (picture.width, picture.height) == (1045, 1568)
    with Image.open(io.BytesIO(picture.data)) as decoded:
        assert decoded.size == (1045, 1568)
        assert not decoded.getexif()  # not turned a second time by whoever shows it


def test_a_transparent_image_stays_png_and_a_small_one_keeps_its_size() -> None:
    picture = convert(png(40, 30, (1, 2, 3, 128)), PIXELS, 1568)
    assert picture.mime == "image/png"
    assert (picture.width, picture.height) == (40, 30)


def test_a_20000_pixel_square_is_refused_from_its_header_alone() -> None:
    header = bomb_png_header(20_000, 20_000)
    assert len(header) < 1_000
    with pytest.raises(MediaTooLarge, match="20000×20000 pixels"):
        convert(header, PIXELS, 1568)


def test_a_truncated_jpeg_is_unreadable() -> None:
    with pytest.raises(UnreadableMedia, match="damaged or truncated"):
        convert(truncated_jpeg(), PIXELS, 1568)


def test_a_file_that_only_claims_to_be_an_image_is_unreadable() -> None:
    with pytest.raises(UnreadableMedia, match="not an image"):
        convert(pdf("not a picture"), PIXELS, 1568)
