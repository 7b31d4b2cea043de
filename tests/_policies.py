"""Helpers that write real policy and agent files for tests (no mocks: the supervisor loads them as usual)."""

from __future__ import annotations

import json
import os
from typing import TYPE_CHECKING, Any

import yaml

if TYPE_CHECKING:
    from pathlib import Path

ALL_INFO_CAPABILITIES = [
    "date",
    "operating-system",
    "running-user",
    "hostname",
    "working-directory",
    "env-vars",
    "process-info",
    "uptime",
]


def own_part_owner() -> str:
    """How ``check`` names the owner of a sub-agent file this test process wrote beside the naming agent's file:
    ``root's`` when the tests run as root, else the naming file's owner (the fast lane runs them as ``nobody``)."""
    uid = os.getuid()
    return "root's" if uid == 0 else f"the naming file's owner's (uid {uid})"


def system_toolbox(name: str = "system", capabilities: list[str] | None = None, **extra: Any) -> dict[str, Any]:
    """A ``SystemToolbox`` entry of an agent file."""
    return {
        "tag": "SystemToolbox",
        "contents": {
            "Name": name,
            "Description": f"{name} toolbox",
            "Capabilities": capabilities or ALL_INFO_CAPABILITIES,
            **extra,
        },
    }


def mcp_script_server(name: str, script: Path, *args: str, **contents: Any) -> dict[str, Any]:
    """An ``McpSimpleBinary`` entry running ``python script args...`` with a FileSandbox granting the script
    read-only: an argument naming a path grants nothing by itself (docs/MCP.md)."""
    import sys

    return {
        "tag": "McpSimpleBinary",
        "contents": {
            "name": name,
            "executable": sys.executable,
            "args": [str(script), *args],
            "FileSandbox": {"fsbPredicate": {"tag": "FileExactly", "contents": str(script)}},
            **contents,
        },
    }


def agent(slug: str = "tester", **keys: Any) -> dict[str, Any]:
    """An agent file's contents in the seed's tagged form."""
    contents = {
        "slug": slug,
        "apiKeyId": "test",
        "flavor": "openai",
        "modelUrl": "http://127.0.0.1:9/v1",
        "modelName": "test-model",
        "announce": f"agent {slug}",
        "systemPrompt": ["You test."],
        **keys,
    }
    return {"tag": "OpenAIAgentDescription", "contents": contents}


def local_model(loop: dict[str, Any] | None = None) -> dict[str, Any]:
    """An ``agent_loop`` section (``loop``'s keys) that opens the host's loopback to model endpoints: the tests' model
    is a scripted server on 127.0.0.1 (``tests/supervisor/_model_server.py``: the model is the one part that cannot
    be real here), which the address rules refuse unless the policy opens it, as an operator's local model is."""
    return {**(loop or {}), "allow_loopback": True}


def local_model_of(shipped: Path) -> dict[str, Any]:
    """The ``agent_loop`` of the shipped policy file ``shipped`` as it is, with the loopback opened to model endpoints
    (:func:`local_model`): the shipped bounds, the tests' scripted model on 127.0.0.1."""
    return local_model(yaml.safe_load(shipped.read_text())["agent_loop"])


def write_policy(root: Path, agents: dict[str, dict[str, Any]], **policy: Any) -> Path:
    """Write agent files ``<root>/<name>.json`` and ``<root>/policy.yaml`` naming them; return the policy path.

    The state directory is ``<root>/state`` unless ``policy`` says otherwise. Workers share ``sandbox_uid`` (65534)
    unless ``policy`` sets ``worker_uids``: most tests hand their folders to that uid, as a shared-uid setup does; the
    default of a policy file (a uid per worker) is tested in ``tests/sandbox/test_worker_uids.py`` and wherever a test
    sets it.
    """
    for name, content in agents.items():
        (root / f"{name}.json").write_text(json.dumps(content, indent=2))
    data = {
        "agents": [f"{name}.json" for name in agents],
        "state_dir": str(root / "state"),
        "worker_uids": None,
        **policy,
    }
    path = root / "policy.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def shipped_policy(root: Path, shipped: Path, agent_files: list[Path], **policy: Any) -> Path:
    """Write ``<root>/policy.yaml``: the settings of the shipped policy file ``shipped`` unchanged, naming
    ``agent_files``, its state in ``<root>/state`` and workers sharing ``sandbox_uid`` (as :func:`write_policy`),
    plus ``policy``; return its path."""
    settings = yaml.safe_load(shipped.read_text())
    data = {
        **{k: v for k, v in settings.items() if k not in ("agents", "state_dir")},
        "agents": [str(f) for f in agent_files],
        "state_dir": str(root / "state"),
        "worker_uids": None,
        **policy,
    }
    path = root / "policy.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path
