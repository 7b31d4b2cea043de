"""Bash tools and skills through the supervisor, in real confined workers (Landlock, PID/net namespaces, uid 65534)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
import trio

from labkit import describe_json, make_skill, skill_md, write_script
from supervisor._supervisor import Supervisor
from supervisor.sessions._ids import Owner, root_session_id
from tests._policies import agent, write_policy
from tests._workers import pid_one

pytestmark = pytest.mark.root

ARG = {
    "name": "v",
    "description": "",
    "type": "string",
    "backing_type": "string",
    "arity": "single",
    "mode": "positional",
}


def bash_policy(root: Path, **policy: Any) -> Path:
    tools = root / "tools"
    if not tools.exists():
        tools.mkdir()
    return write_policy(
        root,
        {"tester": agent(bashToolboxes=[{"tag": "FileSystemDirectory", "contents": {"Path": "./tools"}}])},
        **policy,
    )


def processes_in_namespace_of(sup: Supervisor, toolbox: str) -> list[int]:
    """Host pids of every process in the PID namespace of ``toolbox``'s worker (the worker included)."""
    launcher = sup.runner(toolbox).worker
    assert launcher is not None
    assert launcher.pid is not None
    worker = pid_one(launcher.pid)
    ns = os.readlink(f"/proc/{worker}/ns/pid")
    out = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                if os.readlink(f"/proc/{name}/ns/pid") == ns:
                    out.append(int(name))
            except OSError:
                continue
    return out


async def test_a_script_cannot_read_outside_its_sandbox_and_sees_only_its_env(sandbox_tmp: Path) -> None:
    path = bash_policy(sandbox_tmp)
    secret = sandbox_tmp / "secret.txt"
    secret.write_text("top secret")
    secret.chmod(0o644)  # world-readable: only Landlock stands in the way
    write_script(sandbox_tmp / "tools", "peek", describe_json("peek", [ARG]), 'echo "uid $(id -u)"; cat "$1"')
    async with Supervisor.open(path) as sup:
        assert sup.load_errors() == []
        result = await sup.call("bash_peek", {"v": str(secret)}, session_id="s1")
    assert result.status == "failed"
    assert "No such file or directory" in result.data  # the private view holds only what is granted
    assert "uid 65534" in result.data
    assert "top secret" not in result.data


async def test_timeout_in_a_worker_leaves_only_the_worker(sandbox_tmp: Path) -> None:
    path = bash_policy(sandbox_tmp, limits={"wall_time_s": 1})
    write_script(
        sandbox_tmp / "tools",
        "slow",
        describe_json("slow"),
        "sleep 300 & (setsid sleep 300 &) ; setsid sleep 300 & echo started; sleep 300",
    )
    write_script(
        sandbox_tmp / "tools",
        "fork",
        describe_json("fork"),
        "(setsid sleep 300 &) ; nohup sleep 300 >/dev/null 2>&1 & echo done",
    )
    async with Supervisor.open(path) as sup:
        slow = await sup.call("bash_slow", {})
        assert slow.status == "error"
        assert "time limit" in (slow.summary or slow.data)
        assert len(processes_in_namespace_of(sup, "tools")) == 1
        fork = await sup.call("bash_fork", {})
        assert (fork.status, fork.data) == ("passed", "done\n")
        assert len(processes_in_namespace_of(sup, "tools")) == 1


def commands_in_namespace_of(sup: Supervisor, toolbox: str) -> list[str]:
    """Command lines of the processes in ``toolbox``'s PID namespace, the worker left out."""
    out = []
    for pid in processes_in_namespace_of(sup, toolbox):
        try:
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue  # gone meanwhile
        if b"toolboxes._worker" not in argv and not any(b"sandbox" in a for a in argv):
            out.append(b" ".join(argv).decode(errors="replace").strip())
    return out


#: A leftover made with a raw clone() and exit signal 0 (not SIGCHLD), outliving its parent: the kernel re-parents
#: it to the worker (and gives it SIGCHLD then); the wipe after the script's exit must find and kill it.
CLONE_NO_SIGNAL = """python3 - <<'PY'
import ctypes, os
nr = {"x86_64": 56, "aarch64": 220}[os.uname().machine]
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
pid = libc.syscall(nr, 0, 0, 0, 0, 0)
if pid == 0:
    os.execv("/bin/sleep", ["sleep", "300"])
print("cloned", pid > 0)
PY"""


async def test_a_leftover_made_by_raw_clone_is_killed(sandbox_tmp: Path) -> None:
    path = bash_policy(sandbox_tmp)
    write_script(sandbox_tmp / "tools", "hide", describe_json("hide"), CLONE_NO_SIGNAL)
    async with Supervisor.open(path) as sup:
        result = await sup.call("bash_hide", {})
        assert (result.status, result.data) == ("passed", "cloned True\n")
        assert len(processes_in_namespace_of(sup, "tools")) == 1


async def test_one_calls_leftovers_die_while_another_call_runs_on(sandbox_tmp: Path) -> None:
    """With two scripts running, the end of one kills only what it left behind (not the wipe of the idle worker)."""
    path = bash_policy(sandbox_tmp)
    tools = sandbox_tmp / "tools"
    write_script(
        tools, "waiter", describe_json("waiter"), 'while [ ! -e "$HOME/gate" ]; do sleep 0.01; done; echo waited'
    )
    write_script(tools, "leaver", describe_json("leaver"), "setsid sleep 300 & sleep 301 & echo left")
    gate = sandbox_tmp / "state" / "work" / "tester" / "tools" / "gate"
    async with Supervisor.open(path) as sup:
        waited: list[Any] = []
        async with trio.open_nursery() as nursery:

            async def wait() -> None:
                waited.append(await sup.call("bash_waiter", {}))

            nursery.start_soon(wait)
            with trio.fail_after(10):
                # a process of another namespace appearing: nothing to wait on but /proc
                while not any("waiter" in c for c in commands_in_namespace_of(sup, "tools")):  # noqa: ASYNC110
                    await trio.sleep(0.01)
            left = await sup.call("bash_leaver", {})
            assert (left.status, left.data) == ("passed", "left\n")
            running = commands_in_namespace_of(sup, "tools")
            assert not any(c.startswith(("sleep 300", "sleep 301")) for c in running), running
            assert any("waiter" in c for c in running), running
            gate.write_text("")
        [result] = waited
        assert (result.status, result.data) == ("passed", "waited\n")
        assert len(processes_in_namespace_of(sup, "tools")) == 1


async def test_calls_past_max_concurrent_calls_wait_for_a_free_slot(sandbox_tmp: Path) -> None:
    """With one slot, a second call waits until the first ends: here the first waits (one second at most) for a file
    that only the second creates, so it gives up (had both run at once, it would have seen the file)."""
    path = bash_policy(sandbox_tmp, limits={"max_concurrent_calls": 1})
    tools = sandbox_tmp / "tools"
    write_script(
        tools,
        "waiter",
        describe_json("waiter"),
        'for i in $(seq 100); do [ -e "$HOME/gate" ] && { echo waited; exit 0; }; sleep 0.01; done; echo gave up',
    )
    write_script(tools, "opener", describe_json("opener"), 'touch "$HOME/gate" && echo opened')
    async with Supervisor.open(path) as sup:
        results: dict[str, Any] = {}
        async with trio.open_nursery() as nursery:

            async def call(name: str) -> None:
                results[name] = await sup.call(f"bash_{name}", {})

            nursery.start_soon(call, "waiter")
            with trio.fail_after(10):
                # a process of another namespace appearing: nothing to wait on but /proc
                while not any("waiter" in c for c in commands_in_namespace_of(sup, "tools")):  # noqa: ASYNC110
                    await trio.sleep(0.01)
            nursery.start_soon(call, "opener")
        assert (results["waiter"].status, results["waiter"].data) == ("passed", "gave up\n")
        assert (results["opener"].status, results["opener"].data) == ("passed", "opened\n")


async def test_hot_reload_reaches_the_supervisor(sandbox_tmp: Path) -> None:
    path = bash_policy(sandbox_tmp)
    async with Supervisor.open(path) as sup:
        assert "bash_new" not in [t.name for t in sup.list_tools()]
        write_script(sandbox_tmp / "tools", "new", describe_json("new"), "echo fresh")
        with trio.fail_after(3):
            while "bash_new" not in [t.name for t in sup.list_tools()]:
                await sup.wait_tools_changed()
        result = await sup.call("bash_new", {})
        assert (result.status, result.data) == ("passed", "fresh\n")


async def test_skills_in_a_worker_are_per_session(sandbox_tmp: Path) -> None:
    skills = sandbox_tmp / "skills"
    make_skill(skills, "pdf", skill_md("pdf-tools"), scripts={"extract": "extract"})
    make_skill(skills, "core", skill_md("core-utils"), scripts={"hello": "hello"})
    path = write_policy(
        sandbox_tmp,
        {
            "tester": agent(
                skillSources=[{"tag": "SkillDirectory", "contents": "./skills"}], autoEnableSkills=["core-utils"]
            )
        },
    )
    async with Supervisor.open(path) as sup:
        assert sup.load_errors() == []
        refused = await sup.call("skill_pdf-tools_extract", {"file": "a"}, session_id="a")
        assert refused.status == "error"
        assert "skill_enable_pdf-tools" in refused.data
        assert (await sup.call("skill_enable_pdf-tools", {}, session_id="a")).status == "passed"
        ran = await sup.call("skill_pdf-tools_extract", {"file": "a"}, session_id="a")
        assert ran.status == "passed", ran.data
        assert ran.data.endswith(f"on a in session {root_session_id(Owner('tester'), 'a')}\n")  # a's, with tester
        assert (await sup.call("skill_pdf-tools_extract", {"file": "a"}, session_id="b")).status == "error"
        auto = await sup.call("skill_core-utils_hello", {"file": "x"}, session_id="b")
        assert auto.status == "passed", auto.data
        described = await sup.call("skill_describe_pdf-tools", {}, session_id="b")
        assert json.loads(described.data)["enabled"] is False
