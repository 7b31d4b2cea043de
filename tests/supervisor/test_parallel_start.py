"""Workers start concurrently, at most ``supervision.parallel_starts`` at once, and the tool list keeps the policy's
order whatever worker is ready first. Real confined workers; a toolbox is held in its start by a describe script
that waits for a file the test creates (hidden files are not tools)."""

from __future__ import annotations

import json
import time
from typing import TYPE_CHECKING

import psutil
import pytest
import trio

from labkit import write_script
from supervisor._supervisor import Supervisor
from tests._policies import agent, system_toolbox, write_policy

if TYPE_CHECKING:
    from pathlib import Path

pytestmark = pytest.mark.root

#: the describe answer of a script that waits, polling, for ``.go`` beside it (its worker is not ready before)
HELD_DESCRIBE = """#!/bin/bash
if [ "$1" = describe ]; then
  while [ ! -e "$(dirname "$0")/.go" ]; do sleep 0.02; done
  echo '{"slug": "%s", "description": "held", "args": []}'
  exit 0
fi
echo ran %s
"""


def _held(folder: Path, slug: str) -> None:
    folder.mkdir()
    script = folder / slug
    script.write_text(HELD_DESCRIBE % (slug, slug))
    script.chmod(0o755)


def _spawned(root: Path) -> list[str]:
    path = root / "state" / "trace.jsonl"
    if not path.exists():
        return []
    lines = path.read_text().splitlines()
    return [r["toolbox"] for r in map(json.loads, lines) if r["event"] == "worker_spawn"]


def _describing(folder: Path) -> bool:
    """Whether a describe of a script in ``folder`` is running now (seen from /proc: we are root)."""
    for proc in psutil.process_iter(["cmdline"]):
        cmd = proc.info["cmdline"] or []
        if len(cmd) >= 3 and cmd[-1] == "describe" and cmd[-2].startswith(str(folder) + "/"):
            return True
    return False


async def test_the_tool_list_keeps_the_policy_order_when_the_first_toolbox_is_ready_last(sandbox_tmp: Path) -> None:
    _held(sandbox_tmp / "first", "one")
    (sandbox_tmp / "second").mkdir()
    write_script(sandbox_tmp / "second", "two", json.dumps({"slug": "two", "description": "d", "args": []}), "echo two")
    policy = write_policy(
        sandbox_tmp,
        {
            "tester": agent(
                bashToolboxes=[
                    {"tag": "FileSystemDirectory", "contents": {"Path": "./first"}},
                    {"tag": "FileSystemDirectory", "contents": {"Path": "./second"}},
                ]
            )
        },
    )

    async def release_first_once_second_is_ready() -> None:
        with trio.fail_after(60):
            while "second" not in _spawned(sandbox_tmp):  # noqa: ASYNC110 (a file another process writes)
                await trio.sleep(0.02)
        (sandbox_tmp / "first" / ".go").write_text("")

    async with trio.open_nursery() as nursery:
        nursery.start_soon(release_first_once_second_is_ready)
        async with Supervisor.open(policy) as sup:
            assert sup.load_errors() == []
            names = [t.name for t in sup.list_tools()]
            assert (await sup.call("bash_one", {})).data.strip() == "ran one"
    assert _spawned(sandbox_tmp) == ["second", "first"]  # the second toolbox was ready first ...
    assert names == ["bash_one", "bash_two"]  # ... and the list is in the policy's order


def _worker_processes() -> int:
    """This process's launchers and the zygote's children (the zygote itself is no worker)."""
    count = 0
    for child in psutil.Process().children():
        if any("sandbox._zygote" in arg for arg in child.cmdline()):
            count += len(child.children())
        else:
            count += 1
    return count


async def test_parallel_starts_bounds_the_workers_starting_at_once(sandbox_tmp: Path) -> None:
    for name in ("left", "right"):
        _held(sandbox_tmp / name, name)
    boxes = [{"tag": "FileSystemDirectory", "contents": {"Path": f"./{name}"}} for name in ("left", "right")]
    seen: dict[int, int] = {}

    async def count_children_while_held(bound: int) -> None:
        with trio.fail_after(60):
            while not (_describing(sandbox_tmp / "left") or _describing(sandbox_tmp / "right")):  # noqa: ASYNC110
                await trio.sleep(0.01)
        # Both starts were begun in the same scheduling round: unbounded, both launchers exist by now (children of
        # this process, or of the zygote).
        seen[bound] = _worker_processes()
        for name in ("left", "right"):
            (sandbox_tmp / name / ".go").write_text("")

    for bound in (1, 2):
        for name in ("left", "right"):
            (sandbox_tmp / name / ".go").unlink(missing_ok=True)
        policy = write_policy(
            sandbox_tmp,
            {"tester": agent(bashToolboxes=boxes)},
            supervision={"parallel_starts": bound},
            state_dir=str(sandbox_tmp / f"state{bound}"),
        )
        async with trio.open_nursery() as nursery:
            nursery.start_soon(count_children_while_held, bound)
            async with Supervisor.open(policy) as sup:
                assert [t.name for t in sup.list_tools()] == ["bash_left", "bash_right"]
                assert sup.load_errors() == []
    assert seen == {1: 1, 2: 2}


async def test_eight_toolboxes_start_in_less_than_eight_times_one(sandbox_tmp: Path) -> None:
    """A generous bound (the starts share two CPUs): starting one after another would take eight times one."""
    policies = {}
    for n in (1, 8):
        root = sandbox_tmp / f"n{n}"
        root.mkdir()
        policies[n] = write_policy(
            root, {"tester": agent(builtinToolboxes=[system_toolbox(f"s{i}", ["date"]) for i in range(n)])}
        )
    times: dict[int, list[float]] = {1: [], 8: []}
    for n in (1, 8, 1):  # one toolbox before and after: the machine's load is shared out evenly
        start = time.perf_counter()
        async with Supervisor.open(policies[n]) as sup:
            times[n].append(time.perf_counter() - start)
            assert len(sup.list_tools()) == n and sup.load_errors() == []
    one = sum(times[1]) / 2
    assert times[8][0] < 8 * one, times
