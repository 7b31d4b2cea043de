"""Media types checked by their leading bytes (``toolboxes/_media.py``): pure functions."""

from __future__ import annotations

import pytest

from toolboxes import IMAGE_TYPES, canonical, class_of, is_textual, mismatch, sniff
from toolboxes._media import file_media_type, sniff_file

SVG = b'<?xml version="1.0"?>\n<!-- a logo -->\n<svg xmlns="http://www.w3.org/2000/svg"><rect/></svg>'


@pytest.mark.parametrize(
    ("media_type", "data"),
    [
        ("image/png", b"\x89PNG\r\n\x1a\n...."),
        ("image/jpeg", b"\xff\xd8\xff\xe0"),
        ("image/gif", b"GIF89a.."),
        ("image/webp", b"RIFF\0\0\0\0WEBPVP8 "),
        ("audio/mpeg", b"ID3\x03"),
        ("audio/mp3", b"\xff\xfb\x90\x00"),
        ("audio/wav", b"RIFF\0\0\0\0WAVEfmt "),
        ("audio/ogg", b"OggS\0"),
        ("audio/aac", b"\xff\xf1\x50\x80"),
        ("audio/flac", b"fLaC\0"),
        ("video/mp4", b"\0\0\0\x18ftypmp42"),
        ("video/webm", b"\x1aE\xdf\xa3"),
        ("video/ogg", b"OggS\0"),
        ("video/avi", b"RIFF\0\0\0\0AVI LIST"),
        ("video/quicktime", b"\0\0\0\x14ftypqt  "),
        ("application/pdf", b"%PDF-1.7"),
        ("application/zip", b"PK\x03\x04"),
        ("application/json", b' {"a": [1]}'),
        ("application/xml", b"<?xml version='1.0'?><a/>"),
        ("text/plain", "héllo".encode()),
        ("text/csv", b"a,b\n"),
        ("text/html", b"<p>hi</p>"),
        ("text/markdown", b"# t"),
        ("text/css", b"a{}"),
        ("image/svg+xml", SVG),
        ("application/octet-stream", b"\x00\x01\x02"),
        ("application/x-unknown", b"anything"),
    ],
)
def test_each_seed_type_matches_its_own_bytes(media_type: str, data: bytes) -> None:
    assert mismatch(media_type, data) is None


@pytest.mark.parametrize(
    ("media_type", "data", "why"),
    [
        ("image/png", b"GIF89a....", "they look like image/gif"),
        ("application/pdf", b"hello", "not application/pdf"),
        ("audio/wav", b"RIFF\0\0\0\0WEBPVP8 ", "look like image/webp"),
        ("application/json", b"{nope", "not JSON"),
        ("text/plain", b"\xff\xfe\x00", "not UTF-8"),
        ("image/svg+xml", b"<html><svg/></html>", "root element"),
        ("image/svg+xml", b"<svg><script>x</script></svg>", "active content"),
        ("image/svg+xml", b'<svg><a href="javascript:alert(1)"/></svg>', "active content"),
        ("image/svg+xml", b'<svg onload="x()"/>', "active content"),
        ("image/svg+xml", b"<svg><foreignObject/></svg>", "active content"),
        ("image/svg+xml", b'<?xml version="1.0"?><!DOCTYPE svg [<!ENTITY a "b">]><svg/>', "root element"),
        ("image/svg+xml", b"<svg><!DOCTYPE x></svg>", "active content"),
    ],
)
def test_content_that_is_not_its_type_is_named(media_type: str, data: bytes, why: str) -> None:
    problem = mismatch(media_type, data)
    assert problem is not None and why in problem


def test_classes_aliases_and_sniffing() -> None:
    assert [
        class_of(t)
        for t in (
            "image/png",
            "image/svg+xml",
            "audio/mp3",
            "video/mp4",
            "application/pdf",
            "image/bmp",
            "audio/x-unknown",
        )
    ] == ["images", "files", "audio", "files", "files", "files", "files"]  # an SVG is a (text) file: seed 000
    assert canonical("Audio/MP3; rate=44100") == "audio/mpeg" and canonical("image/jpg") == "image/jpeg"
    assert is_textual("text/csv") and is_textual("application/ld+json") and not is_textual("application/pdf")
    assert sniff(b"%PDF-1.4") == "application/pdf" and sniff(b"plain") is None
    assert [sniff_file(d) for d in (b"\x89PNG\r\n\x1a\nxx", SVG, b'{"a": 1}', b"words\n", b"\x00\xff")] == [
        "image/png",
        "image/svg+xml",
        "application/json",
        "text/plain",
        "application/octet-stream",
    ]


def test_a_files_type_is_what_a_user_expects_of_its_content_and_name() -> None:
    png = b"\x89PNG\r\n\x1a\n" + b"\x00" * 20
    mov = b"\x00\x00\x00\x14ftypqt  \x00\x00\x02\x00qt  " + b"\x00" * 16
    mp4 = b"\x00\x00\x00\x18ftypmp42\x00\x00\x00\x00mp42isom" + b"\x00" * 16
    cases = [
        (b"a,b\n1,2\n", "data.csv", "text/csv"),
        (b"<p>hi</p>", "page.HTML", "text/html"),
        (b"p { color: red }", "style.css", "text/css"),
        (b"# Title\n", "notes.md", "text/markdown"),
        (b'<?xml version="1.0"?><a/>', "feed.xml", "application/xml"),
        (b"not xml at all", "feed.xml", "text/plain"),  # the name never makes content what it is not
        (b'{"a": 1}', "data.json", "application/json"),
        (b'{"a": 1}', "data", "application/json"),
        (b"words", "readme", "text/plain"),
        (mov, "clip.bin", "video/quicktime"),  # QuickTime by its brand
        (mp4, "clip.mov", "video/quicktime"),  # ... or by its name
        (mp4, "clip.mp4", "video/mp4"),
        (png, "photo.txt", "image/png"),  # the bytes decide
        (b"\x7fELF\x02\x01\x01\x00\xff\xfe", "a.out", None),  # binary of no known type: unsupported
    ]
    for data, name, expected in cases:
        assert file_media_type(data, name) == expected, (name, expected)
    assert sniff_file(b"\x7fELF\x02\x01\x01\x00\xff\xfe") == "application/octet-stream"


def test_only_seed_000s_image_types_are_images() -> None:
    assert IMAGE_TYPES == ("image/png", "image/jpeg", "image/gif", "image/webp")
    assert class_of("image/svg+xml") == "files" and is_textual("image/svg+xml")
