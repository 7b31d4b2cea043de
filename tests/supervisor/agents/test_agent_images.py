"""Issue 13 item 6: images a tool returns reach the model in agent loops (``run`` and sub-agents), as OpenAI
``image_url`` content parts with data URLs, asserted on what a real OpenAI-compatible server on loopback received
(``tests/supervisor/_model_server.py``). The agent is the seed's "file management assistant with vision"
(``file-agent``), its tools real confined workers.
"""

from __future__ import annotations

import base64
import json
from typing import TYPE_CHECKING, Any

import pytest

from supervisor._supervisor import Supervisor
from tests._policies import agent, local_model, system_toolbox, write_policy
from tests.sandbox.test_escapes import _png
from tests.supervisor._model_server import Reply, answer, call, model_server

if TYPE_CHECKING:
    from pathlib import Path

pytestmark = pytest.mark.root

SVG = b'<svg xmlns="http://www.w3.org/2000/svg"><rect width="1" height="1"/></svg>'


@pytest.fixture(autouse=True)
def _key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AGENTS_TEST_KEY", "sk-test")


def _policy(root: Path, url: str, **policy: Any) -> Path:
    (root / "project").mkdir()
    (root / "project" / "chart.png").write_bytes(_png(4, 3))
    (root / "project" / "logo.svg").write_bytes(SVG)
    (root / "project" / "big.png").write_bytes(_png(64, 64) + b"\x00" * 8192)
    system = system_toolbox(
        capabilities=["attach-file", "list-directory"],
        FileSandbox={
            "fsbPredicate": {"tag": "DirectoryRecursive", "contents": "./project"},
            "fsbName": "system-sandbox",
        },
    )
    vision = agent(
        "file-agent",
        modelUrl=url,
        announce="A file management assistant with vision",
        systemPrompt=["You help users manage and analyze files."],
        builtinToolboxes=[system],
    )
    boss = agent("boss", modelUrl=url, extraAgents=[{"slug": "file-agent", "path": "file-agent.json"}])
    (root / "file-agent.json").write_text(json.dumps(vision))
    return write_policy(
        root,
        {"boss": boss},
        model_keys={"test": "AGENTS_TEST_KEY"},
        agent_loop=local_model({"max_steps": 4, "retries": 0, "request_timeout_s": 10}),
        **policy,
    )


def _images(request: dict[str, Any]) -> list[bytes]:
    """The images of a request's messages: the data URLs of ``image_url`` parts, decoded."""
    out = []
    for m in request["messages"]:
        if isinstance(m.get("content"), list):
            for part in m["content"]:
                if part.get("type") == "image_url":
                    url = part["image_url"]["url"]
                    assert url.startswith("data:image/png;base64,"), url[:40]
                    out.append(base64.b64decode(url.split(",", 1)[1]))
    return out


def _script(files: list[str]) -> Any:
    def script(req: dict[str, Any]) -> Reply:
        done = sum(1 for m in req["messages"] if m["role"] == "tool")
        if req["messages"][1].get("content") == "delegate":
            return call("io_prompt_agent_file-agent", {"what": "Look at the chart."}) if done == 0 else answer("ok")
        if done < len(files):
            return call("system_system_attach_file", {"filepath": files[done]})
        return answer(f"I saw {len(_images(req))} image(s)")

    return script


async def test_the_run_loop_shows_an_attached_image_to_the_model(sandbox_tmp: Path) -> None:
    with model_server(_script(["./project/chart.png"])) as server:
        async with Supervisor.open(_policy(sandbox_tmp, server.url)) as sup:
            result = await sup.run_agent("file-agent", "What does the chart show?")
    assert result.status == "passed" and result.data == "I saw 1 image(s)", result.data
    second = server.requests[1]["messages"]
    # The tool message (text, as the chat format wants), then the image in a user message after it.
    assert [m["role"] for m in second] == ["system", "user", "assistant", "tool", "user"]
    assert "attachment: chart.png (image/png" in second[3]["content"]
    assert second[4]["content"][0] == {
        "type": "text",
        "text": f"Image from the call system_system_attach_file: chart.png (image/png, {len(_png(4, 3))} bytes)",
    }
    assert _images(server.requests[1]) == [_png(4, 3)]
    assert _images(server.requests[0]) == []


async def test_a_sub_agent_sees_images_and_others_are_named_not_sent(sandbox_tmp: Path) -> None:
    files = ["./project/chart.png", "./project/logo.svg", "./project/big.png"]
    with model_server(_script(files)) as server:
        # images larger than the policy's limit never reach the model (here the store refuses them already)
        async with Supervisor.open(_policy(sandbox_tmp, server.url, context={"images": {"max_bytes": 4096}})) as sup:
            result = await sup.run_agent("boss", "delegate")
    assert result.status == "passed", result.data
    sub = [r for r in server.requests if r["messages"][0].get("content") == "You help users manage and analyze files."]
    assert len(sub) == 4
    assert _images(sub[1]) == [_png(4, 3)] and _images(sub[3]) == [_png(4, 3)]  # the SVG and the big one: not sent
    tools = [m["content"] for m in sub[3]["messages"] if m["role"] == "tool"]
    assert "logo.svg (image/svg+xml" in tools[1] and "is not shown to you: models take images as png" in tools[1]
    assert "refused" in tools[2] and "more than the limit of 4096 for images" in tools[2]
    # The boss got the sub-agent's text answer.
    assert "I saw 1 image(s)" in json.dumps(server.requests[-1]["messages"])
