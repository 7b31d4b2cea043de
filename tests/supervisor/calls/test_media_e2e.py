"""Issue 13 item 5: every media kind is delivered as what it is, asserted from the outside: the official MCP SDK
client talks to ``python -m supervisor`` over stdio, and the tools run in real confined workers.

- bash tools with ``output-media-type`` (the seed's ``generate_chart`` among them): JSON and text as the result's
  data; PNG as image content (seed 000's image types: png, jpeg, gif, webp), an SVG as what it is, an embedded
  text resource; WAV as audio content; MP4, PDF and an octet-stream blob as embedded resources with their
  ``mimeType``;
- ``attach-file`` of non-images (a PDF, an MP3, a text file, CSV, HTML, CSS, Markdown, XML, a QuickTime movie),
  each with the type a user expects, and an opaque binary refused (``UnsupportedFileTypeError``);
- an MCP toolbox server (a Python server made with the SDK, inside a real confined MCP toolbox) returning audio, an
  embedded blob and text resource and a resource link: passed on as such;
- refusals: content that is not what it claims, an SVG with a script, audio past ``context.audio.max_bytes``: each
  dropped with a note, the call's status unchanged.
"""

from __future__ import annotations

import base64
import json
import os
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
import trio
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

from tests._policies import agent, mcp_script_server, system_toolbox, write_policy
from tests.sandbox.test_escapes import _png

pytestmark = pytest.mark.root

REPO = str(Path(__file__).resolve().parents[3])
SVG = b'<?xml version="1.0"?>\n<svg xmlns="http://www.w3.org/2000/svg" width="4" height="4"><rect width="4"/></svg>\n'
EVIL_SVG = b'<svg xmlns="http://www.w3.org/2000/svg"><script>alert(1)</script></svg>\n'
WAV = b"RIFF\x24\x00\x00\x00WAVEfmt \x10\x00\x00\x00\x01\x00\x01\x00\x40\x1f\x00\x00\x80\x3e\x00\x00\x02\x00\x10\x00"
MP4 = b"\x00\x00\x00\x18ftypmp42\x00\x00\x00\x00mp42isom" + b"\x00" * 16
PDF = b"%PDF-1.4\n1 0 obj <<>> endobj\ntrailer <<>>\n%%EOF\n"
BLOB = bytes(range(256))
MP3 = b"ID3\x03\x00\x00\x00\x00\x00\x0f" + b"\x00" * 40
MOV = b"\x00\x00\x00\x14ftypqt  \x00\x00\x02\x00qt  " + b"\x00" * 16
#: attach-file: file name -> (its bytes, the type a user expects, delivered as text)
ATTACHED = {
    "data.csv": (b"a,b\n1,2\n", "text/csv", True),
    "page.html": (b"<!doctype html><p>hi</p>\n", "text/html", True),
    "style.css": (b"p { color: red }\n", "text/css", True),
    "notes.md": (b"# Notes\n", "text/markdown", True),
    "feed.xml": (b'<?xml version="1.0"?><feed/>\n', "application/xml", True),
    "movie.mov": (MOV, "video/quicktime", False),
}

MEDIA_SERVER = textwrap.dedent("""
    import base64
    from mcp.server.mcpserver import MCPServer
    from mcp_types import (AudioContent, BlobResourceContents, CallToolResult, EmbeddedResource, ResourceLink,
                           TextContent, TextResourceContents)

    server = MCPServer("media")
    WAV = base64.b64decode("{wav}")
    PDF = base64.b64decode("{pdf}")

    @server.tool(description="every kind of content")
    def kinds() -> CallToolResult:
        return CallToolResult(content=[
            TextContent(text="here it is"),
            AudioContent(data=base64.b64encode(WAV).decode(), mime_type="audio/wav"),
            EmbeddedResource(resource=BlobResourceContents(uri="file:///reports/q3.pdf", mime_type="application/pdf",
                                                           blob=base64.b64encode(PDF).decode())),
            EmbeddedResource(resource=TextResourceContents(uri="mem://notes.md", mime_type="text/markdown",
                                                           text="# Notes\\nall good\\n")),
            ResourceLink(uri="https://example.com/big.csv", name="big.csv", mime_type="text/csv",
                         description="too big to embed"),
        ])

    server.run("stdio")
""")


def _script(tools: Path, slug: str, media_type: str, run: str) -> None:
    describe = json.dumps(
        {"slug": slug, "description": f"prints {media_type}", "args": [], "output-media-type": media_type}
    )
    path = tools / f"{slug}.sh"
    path.write_text(
        f'#!/bin/bash\nif [ "$1" == "describe" ]; then\n    echo \'{describe}\'\n    exit 0\nfi\n'
        f'cd "$(dirname "$0")"\n{run}\n'
    )
    path.chmod(0o755)


def _policy(root: Path) -> Path:
    tools = root / "tools"
    tools.mkdir()
    for name, data in (
        ("chart.png", _png(3, 2)),
        ("logo.svg", SVG),
        ("evil.svg", EVIL_SVG),
        ("tone.wav", WAV),
        ("clip.mp4", MP4),
        ("doc.pdf", PDF),
        ("blob.bin", BLOB),
        ("big.wav", WAV + b"\x00" * 5000),
    ):
        (tools / name).write_bytes(data)
    _script(tools, "generate_chart", "image/png", "cat chart.png")  # the seed's example
    _script(tools, "report", "application/json", 'echo \'{"total": 3, "rows": [1, 2, 3]}\'')
    _script(tools, "table", "text/csv", "printf 'a,b\\n1,2\\n'")
    _script(tools, "logo", "image/svg+xml", "cat logo.svg")
    _script(tools, "evil", "image/svg+xml", "cat evil.svg")
    _script(tools, "tone", "audio/wav", "base64 tone.wav")  # base64 is decoded
    _script(tools, "clip", "video/mp4", "cat clip.mp4")
    _script(tools, "doc", "application/pdf", "cat doc.pdf")
    _script(tools, "liar", "application/pdf", "echo 'not a pdf'")
    _script(tools, "blob", "application/octet-stream", "cat blob.bin")
    _script(tools, "big", "audio/wav", "cat big.wav")
    files = root / "files"
    files.mkdir()
    for name, data in (("paper.pdf", PDF), ("song.mp3", MP3), ("readme.txt", b"plain words\n"), ("a.out", BLOB)):
        (files / name).write_bytes(data)
    for name, (data, _, _) in ATTACHED.items():
        (files / name).write_bytes(data)
    server = root / "media_server.py"
    server.write_text(MEDIA_SERVER.format(wav=base64.b64encode(WAV).decode(), pdf=base64.b64encode(PDF).decode()))
    server.chmod(0o644)
    system = system_toolbox(
        capabilities=["attach-file"], FileSandbox={"fsbPredicate": {"tag": "DirectoryRecursive", "contents": "./files"}}
    )
    mcp = mcp_script_server("media", server)
    return write_policy(
        root,
        {"tester": agent(toolDirectory="tools", builtinToolboxes=[system], mcpServers=[mcp])},
        context={"audio": {"max_bytes": 4096}},
    )


def _blocks(result: Any) -> list[dict[str, Any]]:
    return [c.model_dump(by_alias=True, exclude_none=True) for c in result.content]


async def test_every_media_kind_reaches_the_sdk_client_as_what_it_is(sandbox_tmp: Path) -> None:
    policy = _policy(sandbox_tmp)
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "supervisor", "--policy", str(policy)],
        env={**os.environ, "PYTHONPATH": REPO},
        cwd=REPO,
    )
    results: dict[str, Any] = {}
    calls = {
        "chart": ("bash_generate_chart", {}),
        "report": ("bash_report", {}),
        "table": ("bash_table", {}),
        "logo": ("bash_logo", {}),
        "evil": ("bash_evil", {}),
        "tone": ("bash_tone", {}),
        "clip": ("bash_clip", {}),
        "doc": ("bash_doc", {}),
        "liar": ("bash_liar", {}),
        "blob": ("bash_blob", {}),
        "big": ("bash_big", {}),
        "paper": ("system_system_attach_file", {"filepath": "./files/paper.pdf"}),
        "song": ("system_system_attach_file", {"filepath": "./files/song.mp3"}),
        "readme": ("system_system_attach_file", {"filepath": "./files/readme.txt"}),
        "mcp": ("mcp_media_kinds", {}),
        **{name: ("system_system_attach_file", {"filepath": f"./files/{name}"}) for name in ATTACHED},
    }
    with trio.fail_after(120):
        async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
            await session.initialize()
            for key, (tool, args) in calls.items():
                results[key] = await session.call_tool(tool, args)
            opaque = await session.call_tool("system_system_attach_file", {"filepath": "./files/a.out"})
    for key, result in results.items():
        assert not result.is_error, (key, _blocks(result))

    def media(key: str) -> list[dict[str, Any]]:
        return [b for b in _blocks(results[key]) if b["type"] != "text"]

    def text(key: str) -> str:
        return "\n".join(b["text"] for b in _blocks(results[key]) if b["type"] == "text")

    # JSON and text: the result's data (JSON also structured), not a note about a file.
    assert json.loads(results["report"].content[0].text) == {"total": 3, "rows": [1, 2, 3]}
    assert results["report"].structured_content == {"total": 3, "rows": [1, 2, 3]}
    assert text("table") == "a,b\n1,2\n" and media("table") == []
    # Images: seed 000's image types; an SVG is passed as what it is, a text document.
    [chart] = media("chart")
    assert (chart["type"], chart["mimeType"], base64.b64decode(chart["data"])) == ("image", "image/png", _png(3, 2))
    [logo] = media("logo")
    assert logo["type"] == "resource" and logo["resource"]["mimeType"] == "image/svg+xml"
    assert logo["resource"]["text"] == SVG.decode()
    # attach-file: each type as a user expects it, from the content and the name; an opaque binary refused
    for name, (data, media_type, textual) in ATTACHED.items():
        [block] = media(name)
        assert block["type"] == "resource" and block["resource"]["mimeType"] == media_type, (name, block)
        assert (block["resource"]["text"].encode() if textual else base64.b64decode(block["resource"]["blob"])) == data
    assert opaque.is_error and "UnsupportedFileTypeError: './files/a.out'" in _blocks(opaque)[0]["text"]
    # Audio.
    [tone] = media("tone")
    assert (tone["type"], tone["mimeType"], base64.b64decode(tone["data"])) == ("audio", "audio/wav", WAV)
    # Other media: embedded resources with their mimeType.
    for key, media_type, data in (
        ("clip", "video/mp4", MP4),
        ("doc", "application/pdf", PDF),
        ("blob", "application/octet-stream", BLOB),
        ("paper", "application/pdf", PDF),
    ):
        [block] = media(key)
        assert block["type"] == "resource" and block["resource"]["mimeType"] == media_type, block
        assert base64.b64decode(block["resource"]["blob"]) == data
        assert block["resource"]["uri"].startswith("attachment:///")
    [song] = media("song")
    assert (song["type"], song["mimeType"], base64.b64decode(song["data"])) == ("audio", "audio/mpeg", MP3)
    [readme] = media("readme")
    assert readme["resource"] == {"uri": readme["resource"]["uri"], "mimeType": "text/plain", "text": "plain words\n"}
    assert readme["resource"]["uri"].endswith("/readme.txt")
    # An MCP toolbox server's audio, embedded resources and resource link, passed on.
    got = media("mcp")
    assert [b["type"] for b in got] == ["audio", "resource", "resource", "resource_link"]
    assert base64.b64decode(got[0]["data"]) == WAV and got[0]["mimeType"] == "audio/wav"
    assert got[1]["resource"]["uri"] == "file:///reports/q3.pdf"
    assert base64.b64decode(got[1]["resource"]["blob"]) == PDF
    assert got[2]["resource"] == {"uri": "mem://notes.md", "mimeType": "text/markdown", "text": "# Notes\nall good\n"}
    assert {k: got[3][k] for k in ("uri", "name", "mimeType", "description")} == {
        "uri": "https://example.com/big.csv",
        "name": "big.csv",
        "mimeType": "text/csv",
        "description": "too big to embed",
    }
    assert text("mcp").startswith("here it is")
    # Refused with a note, the status unchanged: not what it claims, an SVG with a script, audio past the limit.
    for key, why in (
        ("liar", "it is not application/pdf: its leading bytes are not application/pdf"),
        ("evil", "holds active content ('<script')"),
        ("big", "more than the limit of 4096 for audio (context.audio.max_bytes)"),
    ):
        assert media(key) == [], key
        assert why in text(key), (key, text(key))
