"""``start: lazy`` with real confined workers: the tools are listed before any worker runs (from one start at the
first supervisor start, then from the supervisor's cache), the worker starts on the first call and answers it,
and the list it announces is the one that was served."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from labkit import describe_json, write_script
from supervisor._supervisor import Supervisor
from supervisor.workers._tool_cache import tool_cache_path
from tests._policies import agent, write_policy

pytestmark = pytest.mark.root


def _policy(root: Path) -> Path:
    tools = root / "tools"
    tools.mkdir()
    args = [
        {
            "name": "who",
            "description": "a name",
            "type": "string",
            "backing_type": "string",
            "arity": "single",
            "mode": "positional",
        }
    ]
    write_script(tools, "greet", describe_json("greet", args), 'echo "hello $1 from $$"')
    return write_policy(
        root,
        {"tester": agent(bashToolboxes=[{"tag": "FileSystemDirectory", "contents": {"Path": "./tools"}}])},
        toolboxes={"tools": {"start": "lazy"}},
    )


def _events(root: Path, name: str, sup: Supervisor | None = None) -> list[dict]:
    if sup is not None:
        sup.trace.flush()
    lines = (root / "state" / "trace.jsonl").read_text().splitlines()
    return [r for r in map(json.loads, lines) if r["event"] == name and r.get("toolbox") == "tools"]


def _tool_list(sup: Supervisor) -> list[tuple[str, str, str]]:
    return sorted((t.name, t.description, json.dumps(t.input_schema, sort_keys=True)) for t in sup.list_tools())


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


async def test_a_lazy_toolbox_lists_its_tools_with_no_worker_and_starts_on_the_first_call(sandbox_tmp: Path) -> None:
    policy = _policy(sandbox_tmp)
    # First start: no cache yet, so the worker is started once to list its tools, then stopped.
    async with Supervisor.open(policy) as sup:
        assert sup.load_errors() == []
        [runner] = sup.runners
        assert runner.worker is None
        [listing] = _events(sandbox_tmp, "worker_spawn", sup)
        assert listing["lazy"] == "listing"
        assert not _alive(listing["pid"])  # stopped again: no worker process until the first call
        served = _tool_list(sup)
        assert [name for name, _, _ in served] == ["bash_greet"]
    cache = tool_cache_path(str(sandbox_tmp / "state"), "tester", "tools")
    assert os.stat(cache).st_uid == os.geteuid() and os.stat(cache).st_mode & 0o077 == 0  # the supervisor's own

    # Second start: the list comes from the cache; no worker runs at all until the first call.
    (sandbox_tmp / "state" / "trace.jsonl").unlink()
    async with Supervisor.open(policy) as sup:
        [runner] = sup.runners
        assert runner.worker is None and _events(sandbox_tmp, "worker_spawn", sup) == []
        assert _tool_list(sup) == served
        result = await sup.call("bash_greet", {"who": "ada"})
        assert result.status == "passed", result.data
        [spawn] = _events(sandbox_tmp, "worker_spawn", sup)
        assert runner.worker is not None and runner.worker.pid == spawn["pid"] and _alive(spawn["pid"])
        assert result.data.strip().startswith("hello ada from ")
        assert _tool_list(sup) == served  # the worker's own list is the one that was served
        again = await sup.call("bash_greet", {"who": "bob"})
        assert again.status == "passed" and len(_events(sandbox_tmp, "worker_spawn", sup)) == 1  # one worker


async def test_a_stale_cache_is_not_served(sandbox_tmp: Path) -> None:
    """A cache made for another payload (the agent file changed) is ignored: the toolbox is listed again."""
    policy = _policy(sandbox_tmp)
    cache = Path(tool_cache_path(str(sandbox_tmp / "state"), "tester", "tools"))
    cache.parent.mkdir(parents=True)
    cache.write_text(
        json.dumps(
            {
                "fingerprint": "another payload",
                "tools": [{"name": "bash_planted", "description": "x", "input_schema": {"type": "object"}}],
                "load_errors": [],
                "catalog": {},
            }
        )
    )
    async with Supervisor.open(policy) as sup:
        assert [t.name for t in sup.list_tools()] == ["bash_greet"]
        assert len(_events(sandbox_tmp, "worker_spawn", sup)) == 1
    assert "bash_greet" in cache.read_text() and "bash_planted" not in cache.read_text()
