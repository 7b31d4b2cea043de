"""The uids of a state dir that is gone, given back by the operator (``agents-supervise uids list`` / ``uids release``,
``supervisor/plan/_uid_release.py``): never while the state dir exists, while a supervisor holds it (its folder
removed under it) or while a process runs as one of its uids; afterwards a new toolbox may get them, and the
release warns about files they still own. The pure parts first, then the commands against real supervisors."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import trio

from supervisor._supervisor import Supervisor
from supervisor.frontends._cli_errors import EXIT_ERROR
from supervisor.plan._identities import _slot
from supervisor.plan._uid_registry import Holder, HostRegistry, read_registry
from supervisor.plan._uid_release import (
    StateDirUids,
    release_refusal,
    state_dirs,
    uid_ranges,
    without_state,
)
from tests._policies import agent, system_toolbox, write_policy

FIRST, COUNT = 3_000_000_000, 65536
REPO = Path(__file__).resolve().parents[3]


def _registry() -> HostRegistry:
    return HostRegistry(
        {
            FIRST + 1: Holder("aa", "a/x"),
            FIRST + 2: Holder("aa", "a/y"),
            FIRST + 3: Holder("aa", "(retired)"),
            FIRST + 9: Holder("bb", "b/x"),
        },
        {"aa": "/srv/gone", "bb": "/srv/here"},
    )


def test_state_dirs_are_listed_with_their_numbers_and_whether_they_exist() -> None:
    rows = state_dirs(_registry(), present=lambda sid, path: path == "/srv/here", held=lambda sid: False)
    assert rows == [
        StateDirUids("aa", "/srv/gone", False, False, (FIRST + 1, FIRST + 2, FIRST + 3), ("a/x", "a/y")),
        StateDirUids("bb", "/srv/here", True, False, (FIRST + 9,), ("b/x",)),
    ]
    assert uid_ranges(rows[0].numbers) == f"{FIRST + 1}-{FIRST + 3}"
    assert uid_ranges([5, 1, 2, 9, 8]) == "1-2, 5, 8-9"


def test_a_release_is_refused_while_the_state_dir_exists_is_held_or_runs() -> None:
    gone, here = state_dirs(_registry(), present=lambda sid, path: path == "/srv/here", held=lambda sid: False)
    assert release_refusal(gone, "aa", {}) == ""
    assert "no uids of a state dir with id zz; 'agents-supervise uids list'" in release_refusal(None, "zz", {})
    assert "the state dir /srv/here (id bb) still exists" in release_refusal(here, "bb", {})
    [held, _] = state_dirs(_registry(), present=lambda sid, path: False, held=lambda sid: sid == "aa")
    assert "a running supervisor holds the state dir id aa (last seen at /srv/gone)" in release_refusal(held, "aa", {})
    busy = release_refusal(gone, "aa", {FIRST + 2: ["pid 42 sleep"], FIRST + 9: ["pid 7 other"]})
    assert f"processes run as uids of the state dir id aa: uid {FIRST + 2}: pid 42 sleep. Stop them" in busy


def test_a_release_frees_only_that_state_dirs_numbers() -> None:
    after = without_state(_registry(), "aa")
    assert after.numbers == {FIRST + 9: Holder("bb", "b/x")} and after.states == {"bb": "/srv/here"}
    assert len(_registry().numbers) == 4  # pure: the original is unchanged


# ---------------------------------------------------------------------------------------------- real supervisors


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.run(
        [sys.executable, "-m", "supervisor", "uids", *args],
        capture_output=True,
        text=True,
        env=env,
        cwd=REPO,
        timeout=120,
        check=False,
    )


def _policy(root: Path, slug: str, state: Path) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    box = system_toolbox("tools", capabilities=["execute-command"])
    return write_policy(
        root,
        {slug: agent(slug, builtinToolboxes=[box])},
        state_dir=str(state),
        worker_uids={"first": FIRST, "count": COUNT},  # the shipped range
    )


async def _uid(sup: Supervisor) -> int:
    out = await sup.call("system_tools_execute_command", {"command": "id -u"})
    assert out.structured is not None, out.data
    return int(out.structured["stdout"])


def _listed(registry: Path) -> dict[str, Any]:
    done = _cli("list", "--json", "--registry", str(registry))
    assert done.returncode == 0, done.stderr
    return {row["state_id"]: row for row in json.loads(done.stdout)["state_dirs"]}


@pytest.mark.slow
@pytest.mark.root
async def test_the_uids_of_a_state_dir_that_is_gone_are_released_by_the_operator(
    sandbox_tmp: Path, fresh_uid_registry: Path
) -> None:
    state = sandbox_tmp / "state-one"
    async with Supervisor.open(_policy(sandbox_tmp / "one", "alpha", state)) as sup:
        uid = await _uid(sup)
        assert uid == FIRST + _slot("alpha/tools", COUNT)
        [(sid, row)] = _listed(fresh_uid_registry).items()
        assert (row["path"], row["status"], row["uids"], row["toolboxes"]) == (
            str(state),
            "exists",
            [uid],
            ["alpha/tools"],
        )
        refused = _cli("release", "--state-dir-id", sid, "--registry", str(fresh_uid_registry))
        assert refused.returncode == EXIT_ERROR and f"the state dir {state} (id {sid}) still exists" in refused.stderr
        assert "nothing was released" in refused.stderr and "Traceback" not in refused.stderr
        shutil.rmtree(state)  # removed under the running supervisor: its workers still run as the uid
        assert _listed(fresh_uid_registry)[sid]["status"] == "gone, held by a running supervisor"
        refused = _cli("release", "--state-dir-id", sid, "--registry", str(fresh_uid_registry))
        assert (
            refused.returncode == EXIT_ERROR and f"a running supervisor holds the state dir id {sid}" in refused.stderr
        )
    assert read_registry(str(fresh_uid_registry)).numbers[uid] == Holder(sid, "alpha/tools")  # nothing freed

    # The supervisor is gone, but a process still runs as the uid (a command someone started as it).
    stray = await trio.lowlevel.open_process(["sleep", "300"], user=uid)
    try:
        refused = _cli("release", "--state-dir-id", sid, "--registry", str(fresh_uid_registry))
        assert refused.returncode == EXIT_ERROR
        assert f"processes run as uids of the state dir id {sid}: uid {uid}: pid {stray.pid} sleep" in refused.stderr
    finally:
        stray.send_signal(signal.SIGKILL)
        await stray.wait()

    listed = _cli("list", "--registry", str(fresh_uid_registry))
    assert f"state dir id {sid}: {state} (gone): 1 uids ({uid}); toolboxes alpha/tools" in listed.stdout
    assert "agents-supervise uids release --state-dir-id ID" in listed.stdout
    done = _cli("release", "--state-dir-id", sid, "--registry", str(fresh_uid_registry))
    assert done.returncode == 0, done.stderr
    assert f"released 1 uids of the state dir id {sid} (last seen at {state}): {uid}" in done.stdout
    assert "warning: files these uids own outside the state dir" in done.stdout
    assert f"find / -xdev -uid {uid}" in done.stdout
    assert uid not in read_registry(str(fresh_uid_registry)).numbers and _listed(fresh_uid_registry) == {}
    assert not (fresh_uid_registry / f"held-{sid}.lock").exists()

    # Free again: a new state dir's toolbox on the same slot gets it.
    async with Supervisor.open(_policy(sandbox_tmp / "two", "alpha", sandbox_tmp / "state-two")) as sup:
        assert await _uid(sup) == uid


def test_a_release_of_an_unknown_or_malformed_id_changes_nothing(fresh_uid_registry: Path) -> None:
    for sid, words in (
        ("0123abcd", "holds no uids of a state dir with id 0123abcd"),
        ("../uids", "is not a state dir id"),
    ):
        done = _cli("release", "--state-dir-id", sid, "--registry", str(fresh_uid_registry))
        assert done.returncode == EXIT_ERROR and words in done.stderr and "Traceback" not in done.stderr, done.stderr
    assert sorted(p.name for p in fresh_uid_registry.iterdir()) in ([], ["uids.lock"])
