"""The zygote: a fork server that has the worker code imported and forks processes that confine themselves.

The supervisor starts it like a launcher (``[python, "-I", "-B", "-c", <bootstrap>]``, the staged code root first
on ``sys.path``, the supervisor's few fixed variables as its environment; ``supervisor/workers/_zygote_client.py``)
with one end of an ``AF_UNIX``/``SOCK_SEQPACKET`` socket pair on the fd its bootstrap names. It sets its
parent-death signal, imports the modules the supervisor names (the worker entry and the toolbox kinds' packages:
importing is the slow part of a start), loads the C library's name-service modules (a lookup of an unknown user
and group), freezes what it made out of the collector's way (``gc.freeze``: a child's collections then do not write to
the pages it shares with the zygote), refuses to serve if it has more than one thread, answers ``ready`` and serves
spawn requests (``sandbox._zygote_wire`` has the messages) until the socket closes.

For each request it forks; when the request asks for a PID namespace (the plan's ``new_pidns``), between
``unshare(CLONE_NEWPID)`` and a ``setns`` back to its own PID namespace (an fd of it opened at start), so the child is
born PID 1 of a fresh one and needs no outer process (a zygote that is not root cannot: its child's launcher code
then forks for the namespace). The child, before anything else, sets its parent-death signal (a zygote that dies
takes every child with it, and a zygote dies with the supervisor), checks its parent is still the zygote (through a
pidfd of the zygote, opened at start: PID 1's ``getppid()`` is 0), joins its cgroup (it writes ``0`` to each
``cgroup.procs`` fd the request carried, so nothing of the plan runs outside the group), restores the signal state
of a fresh interpreter, closes the zygote's socket and every fd it was not sent, puts the fds it was sent at the
numbers the request names (0, 1, 2: its pipes to the supervisor), and then runs :func:`sandbox._launcher.run` with
that pidfd: the launcher's own code reads the plan from the new stdin and confines the process exactly as a fresh
launcher confines itself (the PID-namespace fork being already done). The plan comes on stdin, not in the request:
the supervisor writes it into the pipe before the request, so the child finds it there, read by the launcher's own
``read_plan``.

The zygote itself never runs toolbox code, never reads a plan and never has a second thread: it imports, forks,
reaps (``SIGCHLD`` through a wakeup pipe) and reports each child's exit status to the supervisor.

Exit statuses of the zygote: 0 when the supervisor closed the socket, 78 (one line on stderr, ``agents-supervise
zygote: <reason>``) when it cannot serve (a malformed message, a second thread, a dead parent).
"""

from __future__ import annotations

import array
import fcntl
import gc
import importlib
import os
import select
import signal
import socket
import sys
import threading
from typing import Any, NoReturn

from sandbox._errors import ConfinementError
from sandbox._launcher import EXIT_CONFINEMENT_FAILED, EXIT_WORKER_FAILED, STEP_MODULES
from sandbox._launcher import PREFIX as LAUNCHER_PREFIX
from sandbox._launcher import run as run_launcher
from sandbox._netns import restore_pid_namespace_for_children, unshare_pid_namespace_for_children
from sandbox._privileges import set_parent_death_signal
from sandbox._zygote_wire import (
    MAX_FDS,
    MAX_MESSAGE,
    SpawnRequest,
    ZygoteWireError,
    check_modules,
    check_spawn,
    decode_message,
    encode_message,
)

__all__ = ["SOCKET_FD", "main", "thread_count"]

#: the fd the zygote finds its end of the socket pair on
SOCKET_FD = 3
_PREFIX = "agents-supervise zygote"
_EXIT_FAILED = 78


def thread_count() -> int:
    """The threads of this process as the kernel counts them (a C library may start one Python never sees)."""
    return len(os.listdir("/proc/self/task"))


def _say(what: str) -> None:
    try:
        os.write(2, f"{_PREFIX}: {what}\n".replace("\n", " ").rstrip().encode("utf-8", "replace") + b"\n")
    except OSError:
        pass


def _fail(what: str) -> NoReturn:
    _say(what)
    os._exit(_EXIT_FAILED)


def _receive(sock: socket.socket) -> tuple[dict[str, Any] | None, list[int]]:
    """One message and its fds (``None`` at EOF). The fds are close-on-exec; a truncated message is refused."""
    fds = array.array("i")
    data, ancdata, flags, _ = sock.recvmsg(
        MAX_MESSAGE, socket.CMSG_SPACE(MAX_FDS * fds.itemsize), socket.MSG_CMSG_CLOEXEC
    )
    for level, kind, cdata in ancdata:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            fds.frombytes(cdata[: len(cdata) - (len(cdata) % fds.itemsize)])
    received = list(fds)
    if flags & (socket.MSG_TRUNC | socket.MSG_CTRUNC):
        for fd in received:
            os.close(fd)
        raise ZygoteWireError("a message or its fds were cut short")
    if not data and not received:
        return None, []
    return decode_message(data), received


def _send(sock: socket.socket, message: dict[str, Any], fds: tuple[int, ...] = ()) -> None:
    data = encode_message(message)
    if fds:
        sock.sendmsg([data], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", fds))])
    else:
        sock.send(data)


def _preload(modules: list[str]) -> dict[str, str]:
    """Import ``modules``; the ones that failed, with why (a child imports them again after confinement)."""
    failed: dict[str, str] = {}
    for name in modules:
        try:
            importlib.import_module(name)
        except Exception as exc:
            failed[name] = f"{type(exc).__name__}: {exc}"[:500]
    return failed


#: an id no account has: a lookup of it goes through every name service ``/etc/nsswitch.conf`` names
_UNKNOWN_ID = 2_147_483_646


def _warm_name_service() -> None:
    """Look up a user and a group no one has, so that the C library loads every name-service module
    ``/etc/nsswitch.conf`` names (``libnss_systemd`` and the like; ``files`` is part of the C library) once here and
    not in every child: the private view names the worker's uid and gids with ``getpwuid``/``getgrgid``, and a uid of
    its own (``worker_uids``) is unknown to the host's files, so each child went on to load the next module (about
    0.7 ms, 5.8 ms without ``libcap`` already loaded). Each child still looks its ids up itself, against the host's
    files as they are then; nothing is kept but the loaded code."""
    import grp
    import pwd

    for lookup in (pwd.getpwuid, grp.getgrgid):
        try:
            lookup(_UNKNOWN_ID)
        except (KeyError, OSError):
            pass


def _place_fds(fds: list[int], targets: list[int], parent_pidfd: int) -> int:
    """In a child: give it ``fds[k]`` as fd ``targets[k]``, keep a copy of ``parent_pidfd`` above them all (returned)
    and close every other fd above 2."""
    base = max([*targets, *fds, parent_pidfd]) + 1
    moved = [fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, base) for fd in fds]  # out of the way of every target
    kept = fcntl.fcntl(parent_pidfd, fcntl.F_DUPFD_CLOEXEC, base)
    for fd in fds:
        os.close(fd)
    for fd, target in zip(moved, targets, strict=True):
        os.dup2(fd, target, inheritable=True)
    keep = sorted({*(t for t in targets if t > 2), kept})
    low = 3
    for fd in keep:  # everything else goes: the zygote's socket and wakeup pipe, the moved copies, any stray fd
        os.closerange(low, fd)
        low = fd + 1
    os.closerange(low, 1 << 20)
    return kept


def _join_cgroup(procs_fds: list[int]) -> str | None:
    """Write ``0`` (this process) to each ``cgroup.procs`` fd and close it; why it failed, or ``None``."""
    failure = None
    for fd in procs_fds:
        try:
            if failure is None:
                os.write(fd, b"0")
        except OSError as exc:
            failure = f"cannot join its cgroup: {exc.strerror} (errno {exc.errno})"
        finally:
            os.close(fd)
    return failure


def _parent_gone(parent_pidfd: int) -> bool:
    readable, _, _ = select.select([parent_pidfd], [], [], 0)  # a pidfd reads ready once its process exited
    return bool(readable)


def _child(fds: list[int], request: SpawnRequest, parent_pidfd: int) -> NoReturn:
    """The forked child: tie its life to the zygote's, join its cgroup, become a fresh launcher, run the launcher's
    code. ``parent_pidfd`` is a pidfd of the zygote (in a new PID namespace ``getppid()`` is 0)."""
    code = EXIT_CONFINEMENT_FAILED
    try:
        set_parent_death_signal()
        if _parent_gone(parent_pidfd):  # the zygote died before the signal was armed
            os._exit(EXIT_CONFINEMENT_FAILED)
        placed = len(request.targets)
        failure = _join_cgroup(fds[placed:])  # before anything of the plan runs (it is not even read yet)
        signal.set_wakeup_fd(-1)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        parent_pidfd = _place_fds(fds[:placed], request.targets, parent_pidfd)
        if failure is not None:
            os.write(2, f"{LAUNCHER_PREFIX}: ?: confinement failed: {failure}\n".encode())
            os._exit(EXIT_CONFINEMENT_FAILED)
        signal.pthread_sigmask(signal.SIG_SETMASK, [])
        code = EXIT_WORKER_FAILED
        code = run_launcher(parent_pidfd=parent_pidfd)
    except SystemExit as exc:  # the entry's sys.exit(), as a fresh interpreter would end
        if exc.code is None:
            code = 0
        elif isinstance(exc.code, int):
            code = exc.code
        else:
            print(exc.code, file=sys.stderr)
            code = 1
    except BaseException as exc:  # only before the launcher's code ran: it never lets an exception out
        _say(f"child {os.getpid()}: {type(exc).__name__}: {exc}")
    finally:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except Exception:
                pass
        os._exit(code & 0xFF)


def _status(status: int) -> int:
    if os.WIFSIGNALED(status):
        return -os.WTERMSIG(status)
    return os.waitstatus_to_exitcode(status)


class _Namespaces:
    """What the zygote holds to give a child a PID namespace: an fd of its own (to go back to after the fork) and
    a pidfd of itself (the child's way to see that the zygote died). Made once, at start."""

    def __init__(self) -> None:
        self.own_pidns = os.open("/proc/self/ns/pid", os.O_RDONLY | os.O_CLOEXEC)
        self.self_pidfd = os.pidfd_open(os.getpid())
        #: a zygote that is not root cannot make a PID namespace: its child then forks for one (the launcher's way)
        self.can_make_pidns = os.geteuid() == 0


def _spawn(sock: socket.socket, message: dict[str, Any], fds: list[int], ns: _Namespaces) -> None:
    """Fork a child for one spawn request and answer it; the zygote keeps none of the request's fds."""
    request_id = message.get("id")

    def refuse(why: str) -> None:
        for fd in fds:
            os.close(fd)
        _send(sock, {"t": "refused", "id": request_id, "error": why})

    try:
        request = check_spawn(message, len(fds))
    except ZygoteWireError as exc:
        refuse(str(exc))
        return
    if thread_count() != 1:  # nothing here starts a thread; were one there, a fork could copy a held lock
        refuse("the zygote has more than one thread")
        return
    new_pidns = request.new_pidns and ns.can_make_pidns
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    signal.pthread_sigmask(signal.SIG_BLOCK, signal.valid_signals())  # no handler of ours runs in the child
    try:
        if new_pidns:
            unshare_pid_namespace_for_children()  # the next child is PID 1 of a new PID namespace
    except ConfinementError as exc:
        signal.pthread_sigmask(signal.SIG_SETMASK, [])
        refuse(str(exc))
        return
    refused = ""
    try:
        pid = os.fork()
    except OSError as exc:
        pid, refused = -1, f"fork failed: {exc.strerror}"
    if pid != 0 and new_pidns:
        try:
            restore_pid_namespace_for_children(ns.own_pidns)
        except ConfinementError as exc:  # its next child would be born in that namespace: better to end
            _fail(f"cannot return to its own PID namespace: {exc}")
    if pid < 0:
        signal.pthread_sigmask(signal.SIG_SETMASK, [])
        refuse(refused)
        return
    if pid == 0:
        _child(fds, request, ns.self_pidfd)
    signal.pthread_sigmask(signal.SIG_SETMASK, [])
    for fd in fds:
        os.close(fd)
    pidfd = os.pidfd_open(pid)  # the child cannot have been reaped yet: only this loop reaps
    try:
        _send(sock, {"t": "spawned", "id": request_id, "pid": pid, "pidns": new_pidns}, (pidfd,))
    finally:
        os.close(pidfd)


def _reap(sock: socket.socket) -> None:
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        _send(sock, {"t": "exit", "pid": pid, "status": _status(status)})


def serve(sock: socket.socket) -> NoReturn:
    """Preload, answer ``ready``, serve spawn requests and report exits until the supervisor closes the socket."""
    first, fds = _receive(sock)
    for fd in fds:
        os.close(fd)
    if first is None:
        os._exit(0)
    if first.get("t") != "preload":
        _fail(f"the first message must be 'preload', not {first.get('t')!r}")
    failed = _preload([*STEP_MODULES, *check_modules(first.get("modules"))])
    _warm_name_service()
    gc.collect()
    gc.freeze()  # what the zygote made stays; a child's collector leaves those pages shared
    threads = thread_count()
    if threads != 1 or threading.active_count() != 1:
        _fail(f"refusing to fork: the process has {threads} threads after the imports, forking needs one")
    ns = _Namespaces()
    wake_r, wake_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
    signal.signal(signal.SIGCHLD, lambda _signum, _frame: None)
    signal.set_wakeup_fd(wake_w)
    _send(sock, {"t": "ready", "pid": os.getpid(), "threads": threads, "failed": failed})
    poller = select.poll()
    poller.register(sock.fileno(), select.POLLIN)
    poller.register(wake_r, select.POLLIN)
    while True:
        for fd, _events in poller.poll():
            if fd == wake_r:
                try:
                    while os.read(wake_r, 4096):
                        pass
                except BlockingIOError:
                    pass
                _reap(sock)
                continue
            message, fds = _receive(sock)
            if message is None:
                os._exit(0)  # the supervisor is gone or done: the children die with the zygote
            if message.get("t") != "spawn":
                for received in fds:
                    os.close(received)
                _fail(f"unexpected message {message.get('t')!r}")
            _spawn(sock, message, fds, ns)
        _reap(sock)  # a SIGCHLD may have come while a request was served


def main(sock_fd: int = SOCKET_FD) -> NoReturn:
    """The zygote's start: arm the parent-death signal, then :func:`serve` on the socket ``sock_fd``."""
    ppid = os.getppid()
    try:
        set_parent_death_signal()
        if os.getppid() != ppid:
            _fail("the supervisor exited during start-up")
        sock = socket.socket(fileno=sock_fd)
        if sock.type != socket.SOCK_SEQPACKET or sock.family != socket.AF_UNIX:
            _fail(f"fd {sock_fd} is not a unix seqpacket socket")
        serve(sock)
    except SystemExit:
        raise
    except (OSError, ZygoteWireError, ConfinementError) as exc:
        _fail(f"{type(exc).__name__}: {exc}")
    except BaseException as exc:
        _fail(f"unexpected {type(exc).__name__}: {exc}")
