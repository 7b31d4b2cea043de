"""The Python API from asyncio (issue 25, item 7): an ``asyncio.run`` program embeds the supervisor with
``open_supervisor`` (a trio guest run on its loop), makes real calls to confined workers concurrently, cancels one
(the call's process is stopped, the supervisor goes on), gets the supervisor's own exception types, and runs two
supervisors on one loop; the same code under trio."""

from __future__ import annotations

import asyncio
import json
from typing import TYPE_CHECKING, Any

import psutil
import pytest

from supervisor import ConfigError, EmbeddedSupervisor, open_supervisor
from tests._policies import agent, system_toolbox, write_policy

if TYPE_CHECKING:
    from pathlib import Path

pytestmark = pytest.mark.root

TOOL = "system_system_execute_command"


def _policy(root: Path, name: str = "embedded") -> Path:
    root.mkdir(exist_ok=True)
    toolbox = system_toolbox("system", ["date", "execute-command"])
    limits = {"max_concurrent_calls": 4, "wall_time_s": 120}  # a call ends by its cancellation, not by this
    return write_policy(root, {name: agent(name, builtinToolboxes=[toolbox])}, limits=limits)


async def _run(sup: EmbeddedSupervisor, command: str) -> dict[str, Any]:
    result = await sup.call(TOOL, {"command": command})
    assert result.status == "passed", result
    data: dict[str, Any] = json.loads(result.data or "{}")
    return data


def _sleepers(marker: str) -> list[psutil.Process]:
    found = []
    for p in psutil.process_iter(["cmdline"]):
        if p.info["cmdline"] == ["sleep", marker]:
            found.append(p)
    return found


def test_an_asyncio_program_embeds_the_supervisor(sandbox_tmp: Path) -> None:
    policy = _policy(sandbox_tmp / "one")
    marker = f"30{abs(hash(str(sandbox_tmp))) % 100000}"

    async def main() -> None:
        async with open_supervisor(policy) as sup:
            assert await sup.agents() == ["embedded"]
            assert {t.name for t in await sup.list_tools()} == {"system_system_date", TOOL}
            # four calls at once: each waits until all four have started, so they end only if they run together
            barrier = (
                'mkdir -p "$TMPDIR/b" && touch "$TMPDIR/b/{i}" && '
                'until [ "$(ls "$TMPDIR/b" | wc -l)" -ge 4 ]; do sleep 0.02; done; echo {i}'
            )
            async with asyncio.timeout(120):
                outs = await asyncio.gather(*(_run(sup, barrier.format(i=i)) for i in range(4)))
            assert [o["stdout"] for o in outs] == [f"{i}\n" for i in range(4)]

            # a call cancelled from asyncio is cancelled in the supervisor: its process is stopped
            call = asyncio.create_task(sup.call(TOOL, {"command": f'echo up > "$TMPDIR/up"; exec sleep {marker}'}))
            async with asyncio.timeout(60):
                while not (sleepers := _sleepers(marker)):
                    assert not call.done(), call.result()
                    await asyncio.sleep(0.05)
            call.cancel()
            async with asyncio.timeout(30):  # (the call's wall time is 120 s)
                with pytest.raises(asyncio.CancelledError):
                    await call
                _, alive = await asyncio.to_thread(psutil.wait_procs, sleepers, 30)
            assert alive == []
            assert (await _run(sup, 'cat "$TMPDIR/up"'))["stdout"] == "up\n"  # and it serves on
            await sup.close_session("no-such-session")  # closing a name never used does nothing

    asyncio.run(main())


def test_the_supervisors_errors_reach_asyncio_unchanged(sandbox_tmp: Path) -> None:
    (sandbox_tmp / "broken.yaml").write_text("agents: [missing.json]\n")

    async def main() -> None:
        with pytest.raises(ConfigError, match="agent file not found"):
            async with open_supervisor(sandbox_tmp / "broken.yaml"):
                pass
        async with open_supervisor(_policy(sandbox_tmp / "after")) as sup:  # the loop hosts a new run after that
            assert (await sup.call("system_system_date", {})).status == "passed"

    asyncio.run(main())


def test_two_supervisors_share_one_loop(sandbox_tmp: Path) -> None:
    """Trio hosts one guest run per loop: both supervisors run in it, and closing one leaves the other serving."""

    async def main() -> None:
        async with open_supervisor(_policy(sandbox_tmp / "a", "alpha")) as alpha:
            async with open_supervisor(_policy(sandbox_tmp / "b", "beta")) as beta:
                assert await alpha.agents() == ["alpha"] and await beta.agents() == ["beta"]
                both = await asyncio.gather(_run(alpha, "echo a"), _run(beta, "echo b"))
                assert [o["stdout"] for o in both] == ["a\n", "b\n"]
            assert (await _run(alpha, "echo still"))["stdout"] == "still\n"

    asyncio.run(main())


async def test_the_same_api_under_trio(sandbox_tmp: Path) -> None:
    async with open_supervisor(_policy(sandbox_tmp / "trio")) as sup:
        assert [t.name for t in await sup.list_tools(agent="embedded")] == ["system_system_date", TOOL]
        assert (await _run(sup, "echo trio"))["stdout"] == "trio\n"
        assert await sup.load_errors() == []
