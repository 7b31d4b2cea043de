"""The cgroup of one start of a worker: made before the spawn (a fork of the zygote joins it before it reads its
plan; a launcher is moved into it), removed once the worker was reaped. A group the plan does not require and that
cannot be made or joined is reported (``on_unavailable``) and the worker runs without it."""

from __future__ import annotations

import os
import secrets
from typing import TYPE_CHECKING

import trio

from sandbox import ConfinementError, create_cgroup, enter_cgroup, open_procs_files, remove_cgroup

if TYPE_CHECKING:
    from collections.abc import Callable

    from sandbox import CgroupInstance, CgroupPlan

__all__ = ["StartCgroup"]


class StartCgroup:
    """One start's group (:attr:`instance`, ``None`` until made, or when there is none) of the plan ``plan``
    (``None``: no cgroup), named after ``name`` (``<agent>.<toolbox>``)."""

    def __init__(self, plan: CgroupPlan | None, name: str, on_unavailable: Callable[[str], None]) -> None:
        self.plan = plan
        self.name = name
        self._on_unavailable = on_unavailable
        #: this start's cgroup, removed once the worker is reaped
        self.instance: CgroupInstance | None = None
        self._claimed = False
        self._removed = trio.Event()

    def make(self) -> list[int]:
        """Make this start's cgroup (:attr:`instance`) and open its ``cgroup.procs`` files (the fds, the caller's to
        close); raise :class:`ConfinementError` only when the plan requires the group. An optional group that cannot
        be made is reported and the worker runs without (:attr:`instance` ``None``, no fds)."""
        plan = self.plan
        if plan is None:
            return []
        # <agent>.<toolbox>-<supervisor pid>-<random>: two agents' toolboxes of one name are told apart, and a group
        # is stale (sweep_stale_cgroups) only once the supervisor that made it is gone
        unique = f"{os.getpid()}-{secrets.token_hex(6)}"
        instance = plan.instance(self.name, unique)
        try:
            create_cgroup(instance)
            self.instance = instance
            return open_procs_files(instance)
        except ConfinementError as exc:
            self.remove_unused()
            if plan.required:
                raise
            self._on_unavailable(str(exc))
            return []

    def enter(self, pid: int) -> bool:
        """Move the launcher ``pid`` into :attr:`instance`; raise only when the plan requires it. Returns whether the
        launcher is in its group (``False``: an optional one failed; the group goes when the launcher is reaped)."""
        assert self.instance is not None
        assert self.plan is not None
        try:
            enter_cgroup(self.instance, pid)
        except ConfinementError as exc:
            if self.plan.required:
                raise
            self._on_unavailable(str(exc))
            return False
        return True

    def remove_unused(self) -> None:
        """Remove :attr:`instance` when no process of this start ever got into it (it is empty)."""
        instance, self.instance = self.instance, None
        if instance is not None:
            remove_cgroup(instance)

    async def release(self) -> None:
        """Remove this start's cgroup; the caller saw the launcher reaped (its PID namespace is empty by then).

        The kernel may still call the group busy just after the last task was reaped (tasks are released after an
        RCU grace period; there is nothing to wait on in v1), so the removal is retried for up to 2 s, shielded.
        Several tasks may call this at once (reader, kill, stop): one removes, the others wait for it.
        """
        with trio.CancelScope(shield=True):
            if self.instance is None:  # none, or another task is removing it: wait for that
                if self._claimed:
                    await self._removed.wait()
                return
            instance, self.instance = self.instance, None
            self._claimed = True
            try:
                for _ in range(200):
                    if remove_cgroup(instance):
                        break
                    await trio.sleep(0.01)
            finally:
                self._removed.set()
