"""A worker keeps nothing of a call once it answered it (issue 27 item 7: the workers' memory grew in a soak).

A real confined worker (a System toolbox) answers 3,000 calls, then 20,000 more; its own memory (USS: the pages only
it holds, not those it shares with the zygote it was forked from) must not grow by what 20,000 calls would leave if
each left a few dozen bytes (a set of every answered call id did: about 1.2 MB here, 60 bytes a call, for ever).
Sequential calls: the worker's thread count stays where it is, so what is measured is the calls' own leftovers.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import psutil
import pytest

from supervisor import Supervisor
from tests._policies import agent, system_toolbox, write_policy

if TYPE_CHECKING:
    from pathlib import Path

pytestmark = [pytest.mark.root, pytest.mark.slow]


def _uss(pid: int) -> int:
    return psutil.Process(pid).memory_full_info().uss


async def test_answered_calls_leave_nothing_in_the_worker(sandbox_tmp: Path) -> None:
    path = write_policy(sandbox_tmp, {"tester": agent(builtinToolboxes=[system_toolbox(capabilities=["date"])])})
    async with Supervisor.open(path) as sup:
        worker = sup.runner("system").worker
        assert worker is not None and worker.pid is not None
        for _ in range(3000):  # warm: the allocator's pools and the worker's buffers reach their working size
            assert (await sup.call("system_system_date", {})).status == "passed"
        before = _uss(worker.pid)
        for _ in range(20_000):
            assert (await sup.call("system_system_date", {})).status == "passed"
        grown = _uss(worker.pid) - before
        assert sup.runner("system").worker is worker  # the same worker all along
    assert grown < 400 * 1024, f"the worker grew by {grown / 1024:.0f} KiB over 20,000 calls"
