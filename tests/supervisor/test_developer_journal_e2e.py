"""Edits of a file granted alone (the seed's ``FileExactly ./package.yaml``) and kill -9 in the middle of a write,
through a real confined Developer worker.

The seed's FileSandbox is used as written (relative paths, resolved against the agent file's folder):
``Any [DirectoryRecursive ./src, DirectoryRecursive ./test, FileExactly ./package.yaml]``. The kernel grants
``package.yaml`` alone, not its folder, so an edit cannot make a temporary file beside it: it is rewritten in place
after its new content is made durable in a journal in the toolbox's state folder.

The kills are deterministic: the policy gives the worker ``AGENTS_SUPERVISE_TEST_PAUSE=<step>:<marker>``
(``toolboxes/_test_pause.py``), the worker creates the marker and stops at that step, the test sees the marker
(inotify) and sends SIGKILL from outside.
"""

from __future__ import annotations

import json
import os
import signal
from functools import partial
from typing import TYPE_CHECKING, Any

import pytest
import trio

from supervisor._supervisor import Supervisor
from tests._policies import agent, write_policy
from tests.supervisor._watch import CreateWatch
from tests.supervisor.test_developer_e2e import _worker_pid

if TYPE_CHECKING:
    from collections.abc import AsyncIterator
    from pathlib import Path

    from toolboxes import ToolResult

pytestmark = pytest.mark.root

NOBODY = 65534
SEED_SANDBOX = {
    "fsbPredicate": {
        "tag": "Any",
        "contents": [
            {"tag": "DirectoryRecursive", "contents": "./src"},
            {"tag": "DirectoryRecursive", "contents": "./test"},
            {"tag": "FileExactly", "contents": "./package.yaml"},
        ],
    },
    "fsbMaxFileSize": 10485760,
    "fsbName": "developer-sandbox",
}
CAPS = ["read-file-range", "write-file-range", "patch-file"]
PACKAGE = "name: demo\nversion: 0.1.0\ndependencies:\n  - base\n"


def _tree(root: Path) -> None:
    for d in ("src", "test"):
        (root / d).mkdir()
        os.chown(root / d, NOBODY, NOBODY)
    (root / "package.yaml").write_text(PACKAGE)
    os.chown(root / "package.yaml", NOBODY, NOBODY)


async def _open(root: Path, pause: str | None = None) -> Supervisor:
    dev = {
        "tag": "DeveloperToolbox",
        "contents": {
            "Name": "dev",
            "Description": "Development utilities",
            "Capabilities": CAPS,
            "FileSandbox": SEED_SANDBOX,
        },
    }
    extra: dict[str, Any] = {}
    if pause is not None:
        extra["toolboxes"] = {"dev": {"env": {"AGENTS_SUPERVISE_TEST_PAUSE": pause}}}
    policy = write_policy(
        root,
        {"tester": agent(builtinToolboxes=[dev])},
        landlock_min_abi=6,
        limits={"wall_time_s": 60},
        supervision={"restart_backoff_initial_s": 0.05, "restart_backoff_max_s": 0.2},
        **extra,
    )
    return Supervisor.open(policy)


def _v(res: ToolResult) -> dict[str, Any]:
    assert res.status == "passed", (res.status, res.data)
    assert isinstance(res.structured, dict)
    return res.structured


async def dev(sup: Supervisor, cap: str, **args: Any) -> ToolResult:
    return await sup.call(f"developer_dev_{cap.replace('-', '_')}", args, session_id="s1")


@pytest.fixture
async def sup(sandbox_tmp: Path) -> AsyncIterator[Supervisor]:
    _tree(sandbox_tmp)
    async with await _open(sandbox_tmp) as s:
        yield s


async def test_file_exactly_can_be_edited_in_place(sup: Supervisor, sandbox_tmp: Path) -> None:
    """The seed's ``./package.yaml``: write-file-range and patch-file edit it; nothing appears beside it."""
    target = sandbox_tmp / "package.yaml"
    inode = target.stat().st_ino
    before = set(os.listdir(sandbox_tmp))
    read = _v(await dev(sup, "read-file-range", path="./package.yaml"))
    written = await dev(
        sup,
        "write-file-range",
        path="./package.yaml",
        ranges="2",
        contentBlocks=["version: 0.2.0"],
        expected_snapshot_ref=read["snapshotRef"],
        commit=True,
    )
    assert _v(written)["path"] == str(target)
    assert target.read_text() == PACKAGE.replace("0.1.0", "0.2.0")
    patch = "--- a/package.yaml\n+++ b/package.yaml\n@@ -3,2 +3,3 @@\n dependencies:\n   - base\n+  - text\n"
    _v(await dev(sup, "patch-file", path="./package.yaml", patch=patch))
    assert target.read_text() == PACKAGE.replace("0.1.0", "0.2.0") + "  - text\n"
    # Rewritten in place: the same inode and owner, and no temporary file was made in its folder.
    assert target.stat().st_ino == inode and target.stat().st_uid == NOBODY
    assert set(os.listdir(sandbox_tmp)) == before
    # The kernel still grants that one file only: a new file beside it is refused by the sandbox.
    beside = await dev(sup, "write-file-range", path="./package.yml", ranges="1", contentBlocks=["x"])
    assert beside.status == "error" and "not allowed by the file sandbox 'developer-sandbox'" in (beside.data or "")


async def test_kill_9_mid_write_is_recovered_at_the_next_start(sandbox_tmp: Path) -> None:
    """Killed with half of the new content written into the file, the restarted worker replays its journal."""
    _tree(sandbox_tmp)
    workdir = sandbox_tmp / "state" / "work" / "tester" / "dev"
    marker = workdir / "paused-in-place"
    target = sandbox_tmp / "package.yaml"
    old = ("old line of package.yaml\n" * 2000).encode()
    new = ("NEW LINE\n" * 6000).encode()
    target.write_bytes(old)
    journals = sandbox_tmp / "state" / "toolbox-state" / "tester" / "dev" / "write-journal"
    async with await _open(sandbox_tmp, pause=f"in-place-write:{marker}") as sup:
        pid = _worker_pid(sup, "dev")
        worker = sup.runner("dev").worker
        assert worker is not None
        results: list[ToolResult] = []

        async def write() -> None:
            results.append(
                await dev(
                    sup,
                    "write-file-range",
                    path="./package.yaml",
                    ranges="1-2000",
                    contentBlocks=[new.decode().removesuffix("\n")],
                    commit=True,
                )
            )

        with CreateWatch(workdir) as watch:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(write)
                with trio.fail_after(30):
                    await watch.wait_for(marker.exists)
                mixed = target.read_bytes()
                assert mixed.startswith(new[: len(new) // 2]) and mixed != new and mixed != old, "not mid-write"
                assert len(os.listdir(journals)) == 1  # the journal is durable before the target is touched
                os.kill(pid, signal.SIGKILL)
                with trio.fail_after(10):
                    await worker.dead.wait()
        assert results[0].status == "error"
        # The next call waits for the restarted worker, which replayed the journal before serving.
        read = _v(await dev(sup, "read-file-range", path="./package.yaml", metadata_only=True))
        assert _worker_pid(sup, "dev") != pid
        assert target.read_bytes() == new and read["totalFileSize"] == len(new)
        assert os.listdir(journals) == []
        assert sorted(os.listdir(sandbox_tmp)) == ["package.yaml", "policy.yaml", "src", "state", "test", "tester.json"]


async def test_stray_temporary_of_a_killed_atomic_write_is_removed_at_the_next_start(sandbox_tmp: Path) -> None:
    """Issue 19: a worker killed between writing a snapshot's temporary file and renaming it; the next start of
    the worker removes the leftover."""
    _tree(sandbox_tmp)
    (sandbox_tmp / "src" / "a.txt").write_text("alpha\n")
    workdir = sandbox_tmp / "state" / "work" / "tester" / "dev"
    marker = workdir / "paused-atomic"
    state = sandbox_tmp / "state" / "toolbox-state" / "tester" / "dev"
    async with await _open(sandbox_tmp, pause=f"atomic-write:{marker}") as sup:
        pid = _worker_pid(sup, "dev")
        worker = sup.runner("dev").worker
        assert worker is not None
        with CreateWatch(workdir) as watch:
            async with trio.open_nursery() as nursery:
                # read-file-range keeps a snapshot of what it read: an atomic write in the state folder.
                nursery.start_soon(partial(dev, sup, "read-file-range", path="./src/a.txt"))
                with trio.fail_after(30):
                    await watch.wait_for(marker.exists)
                leftovers = [p for p in state.rglob("*") if ".~atomic-" in p.name]
                assert len(leftovers) == 1 and leftovers[0].name.endswith(".tmp"), leftovers
                os.kill(pid, signal.SIGKILL)
                with trio.fail_after(10):
                    await worker.dead.wait()
        assert leftovers[0].exists()  # the kill left it
        _v(await dev(sup, "read-file-range", path="./src/a.txt"))
        assert _worker_pid(sup, "dev") != pid
        assert not leftovers[0].exists()
        assert not [p for p in state.rglob("*") if ".~atomic-" in p.name]
        assert json.loads(json.dumps(sup.load_errors())) == []
