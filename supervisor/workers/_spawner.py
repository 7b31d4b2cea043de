"""Who makes a worker's process: the launcher (a fresh interpreter) or the zygote (a fork of one), by policy.

A spawner's :meth:`spawn` takes the launcher command a :class:`~supervisor.workers._worker.WorkerSpec` names, its
environment, working directory and extra fds, and returns a child with the interface of
:class:`~supervisor.workers._spawn.ChildProcess`; the process then reads its plan from its stdin and confines itself
with the same code either way (``sandbox._launcher.run``). Nothing after the spawn cares which spawner made it.

- :class:`LauncherSpawner`: ``spawn_child`` of the command itself (``supervision.spawn: launcher``, and the
  fallback).
- :class:`ZygoteSpawner` (``supervision.spawn: zygote``): while its zygote runs, children are forked by it; a
  command, environment or folder other than the zygote's (a reload staged new code), a zygote that is restarting
  or one that fails a request gets the launcher for that spawn. :meth:`ZygoteSpawner.run` keeps the zygote: it is
  restarted when it dies, at most :data:`MAX_ZYGOTE_STARTS` starts within :data:`ZYGOTE_START_WINDOW_S`; past that,
  or when it cannot start, every spawn uses the launcher for good. Each of these turns is one ``note``
  (``zygote_started``, ``zygote_died``, ``zygote_fallback``): the supervisor writes it to the trace and one line
  to stderr.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any, Protocol

import trio

from ._launch import launcher_argv
from ._spawn import ChildProcess, PidfdChild, spawn_child
from ._zygote_client import Zygote, ZygoteChild, ZygoteGone

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Mapping, Sequence

__all__ = [
    "MAX_ZYGOTE_STARTS",
    "SPAWN_MODES",
    "ZYGOTE_START_WINDOW_S",
    "LauncherSpawner",
    "SpawnedChild",
    "Spawner",
    "ZygoteSpawner",
    "preload_modules",
]

#: the values of the policy's ``supervision.spawn``
SPAWN_MODES = ("zygote", "launcher")
#: starts of the zygote (the first one included) allowed within :data:`ZYGOTE_START_WINDOW_S`
MAX_ZYGOTE_STARTS = 4
ZYGOTE_START_WINDOW_S = 600.0


def preload_modules(workers: Iterable[tuple[str, str]]) -> list[str]:
    """What the zygote imports for ``workers``, each ``(entry, kind)`` (a plan's ``module:function`` entry and its
    toolbox kind): each entry's module and each kind's package, in order, once each."""
    names: dict[str, None] = {}
    for entry, kind in workers:
        names[entry.partition(":")[0]] = None
        names[f"toolboxes.{kind}"] = None
    return list(names)


#: What a spawner returns: a :class:`ChildProcess` (the launcher's) or a :class:`ZygoteChild`.
SpawnedChild = PidfdChild


class Spawner(Protocol):
    def forks(self, argv: Sequence[str], *, env: Mapping[str, str], cwd: str) -> bool: ...

    async def spawn(
        self,
        argv: Sequence[str],
        *,
        env: Mapping[str, str],
        cwd: str,
        pass_fds: Sequence[int] = (),
        new_pidns: bool = False,
        cgroup_procs: Sequence[int] = (),
        stdin_data: bytes = b"",
    ) -> SpawnedChild: ...


class LauncherSpawner:
    """A fresh interpreter per child: ``spawn_child`` of the launcher command."""

    def forks(self, argv: Sequence[str], *, env: Mapping[str, str], cwd: str) -> bool:
        """Whether a spawn of ``argv`` would be a fork of a zygote: never."""
        return False

    async def spawn(
        self,
        argv: Sequence[str],
        *,
        env: Mapping[str, str],
        cwd: str,
        pass_fds: Sequence[int] = (),
        new_pidns: bool = False,
        cgroup_procs: Sequence[int] = (),
        stdin_data: bytes = b"",
    ) -> ChildProcess:
        """Raises ``OSError`` when the command cannot be started. The launcher forks for its PID namespace itself
        (``new_pidns``), is moved into its cgroup by the caller (``cgroup_procs`` unused: ``cgroup_joined`` is
        false) and is sent nothing yet (``stdin_data`` unused: ``stdin_sent`` is 0)."""
        return spawn_child(argv, env=env, cwd=cwd, pass_fds=pass_fds)


class ZygoteSpawner:
    """Children forked by a zygote for ``launcher_argv(python, code_root)`` with ``env``; the launcher otherwise."""

    def __init__(
        self,
        python: str,
        code_root: str,
        *,
        env: Mapping[str, str],
        modules: Sequence[str],
        note: Callable[[str, dict[str, Any]], None],
        cwd: str = "/",
        launched: Zygote | None = None,
    ) -> None:
        """``launched``: a zygote already launched (:meth:`Zygote.launch`) for these settings and ``modules``,
        importing while the caller did other work; the first start waits for it instead of spawning one."""
        self.python = python
        self.code_root = code_root
        self.env = dict(env)
        self.cwd = cwd
        self.modules = list(modules)
        self.argv = launcher_argv(python, code_root)
        self.zygote: Zygote | None = None
        #: why every spawn uses the launcher for good (``None`` while the zygote is used)
        self.fallback_reason: str | None = None
        self._note = note
        self._launcher = LauncherSpawner()
        self._starts: list[float] = []
        self._launched = launched
        self._settled = trio.Event()  # a zygote serves, or the fallback is for good; renewed when one dies

    @property
    def serving(self) -> Zygote | None:
        """The zygote when it is up and serving, else ``None``."""
        zygote = self.zygote
        return zygote if zygote is not None and zygote.pid is not None and not zygote.dead.is_set() else None

    async def settled(self) -> Zygote | None:
        """Wait until a zygote serves (return it) or the launcher is used for good (return ``None``)."""
        await self._settled.wait()
        return self.serving

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Start the zygote (``task_status.started()`` once it is ready or the fallback chosen), restart it when it
        dies (bounded), stop it when cancelled."""
        started = False
        try:
            while True:
                now = trio.current_time()
                self._starts = [t for t in self._starts if now - t < ZYGOTE_START_WINDOW_S]
                if len(self._starts) >= MAX_ZYGOTE_STARTS:
                    self._fall_back(f"the zygote died {len(self._starts)} times within {ZYGOTE_START_WINDOW_S:g} s")
                    break
                self._starts.append(now)
                zygote, self._launched = self._launched, None
                try:
                    if zygote is None:
                        zygote = Zygote(self.python, self.code_root, env=self.env, cwd=self.cwd)
                        self.zygote = zygote
                        await zygote.start(self.modules)
                    else:
                        self.zygote = zygote
                        await zygote.wait_ready()
                except ZygoteGone as exc:
                    self._fall_back(f"the zygote could not start: it {exc}")
                    break
                self._note(
                    "zygote_started",
                    {
                        "pid": zygote.pid,
                        "start_s": round(trio.current_time() - zygote.launched_at, 3),
                        "modules": len(self.modules),
                        "failed_imports": zygote.failed_imports,
                    },
                )
                self._settled.set()
                if not started:
                    started = True
                    task_status.started()
                await zygote.serve()
                self._settled = trio.Event()
                self._note("zygote_died", {"pid": zygote.pid, "reason": f"the zygote {zygote.death_reason}"})
        finally:
            self._settled.set()
            if self.zygote is not None:
                await self.zygote.aclose()
            if not started:
                task_status.started()

    def forks(self, argv: Sequence[str], *, env: Mapping[str, str], cwd: str) -> bool:
        """Whether a spawn of the launcher command ``argv`` (``env``, ``cwd``) would be a fork of the zygote now
        (it serves, and it is that command's: a reload that staged new code gets the launcher)."""
        return self.serving is not None and self._serves(argv, env, cwd)

    def _serves(self, argv: Sequence[str], env: Mapping[str, str], cwd: str) -> bool:
        return list(argv) == self.argv and dict(env) == self.env and cwd == self.cwd

    def _fall_back(self, reason: str) -> None:
        self.fallback_reason = reason
        self._note("zygote_fallback", {"reason": f"{reason}; workers are spawned by the launcher"})

    async def spawn(
        self,
        argv: Sequence[str],
        *,
        env: Mapping[str, str],
        cwd: str,
        pass_fds: Sequence[int] = (),
        new_pidns: bool = False,
        cgroup_procs: Sequence[int] = (),
        stdin_data: bytes = b"",
    ) -> SpawnedChild:
        """A child for the launcher command ``argv``: forked by the zygote when it serves this command, else
        started by the launcher (see :meth:`LauncherSpawner.spawn`). Forked by the zygote, it is PID 1 of a new PID
        namespace with ``new_pidns`` (the plan's: no outer process), joins the cgroup of the ``cgroup_procs`` fds
        itself before it reads anything (``cgroup_joined``), and finds ``stdin_data`` (its plan) already in its stdin
        pipe, as much as the pipe holds (``stdin_sent``). Raises ``OSError`` only when the launcher cannot start it
        either."""
        zygote = self.serving
        if zygote is None or not self._serves(argv, env, cwd):
            return await self._launcher.spawn(argv, env=env, cwd=cwd, pass_fds=pass_fds)
        try:
            return await self._fork(zygote, pass_fds, new_pidns, cgroup_procs, stdin_data)
        except ZygoteGone as exc:
            self._note("zygote_spawn_failed", {"reason": f"the zygote {exc}; this worker is spawned by the launcher"})
            return await self._launcher.spawn(argv, env=env, cwd=cwd, pass_fds=pass_fds)

    async def _fork(
        self,
        zygote: Zygote,
        pass_fds: Sequence[int],
        new_pidns: bool,
        cgroup_procs: Sequence[int],
        stdin_data: bytes,
    ) -> ZygoteChild:
        pipes = [os.pipe2(os.O_CLOEXEC) for _ in range(3)]
        ours = [pipes[0][1], pipes[1][0], pipes[2][0]]  # we write its stdin, read its stdout and stderr
        theirs = [pipes[0][0], pipes[1][1], pipes[2][1]]
        try:
            sent = _prefill(ours[0], stdin_data)  # before the fork: the child never waits for it
            pid, pidfd, record = await zygote.spawn(
                [*zip(theirs, (0, 1, 2), strict=True), *((fd, fd) for fd in pass_fds)],
                new_pidns=new_pidns,
                cgroup_procs=cgroup_procs,
            )
        except BaseException:
            for fd in ours:
                os.close(fd)
            raise
        finally:
            for fd in theirs:
                os.close(fd)
        child = ZygoteChild(pid, pidfd, ours[0], ours[1], ours[2], record)
        child.cgroup_joined = bool(cgroup_procs)
        child.stdin_sent = sent
        return child


def _prefill(fd: int, data: bytes) -> int:
    """Write as much of ``data`` into the empty pipe ``fd`` as it holds without blocking; how much that was."""
    if not data:
        return 0
    os.set_blocking(fd, False)  # our end only (the child's end is another open file); trio's stream wants it so
    view = memoryview(data)
    sent = 0
    try:
        while sent < len(data):
            sent += os.write(fd, view[sent:])
    except BlockingIOError:
        pass
    return sent
