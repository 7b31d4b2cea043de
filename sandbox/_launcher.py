"""The launcher: a fresh process that confines itself, then runs the worker's entry point.

The supervisor runs ``[python, "-I", "-B", "-c", "import sys; sys.path.insert(0, <code root>); from
sandbox._launcher import main; main()"]`` (``supervisor/workers/_launch.py``, ``launcher_argv``): isolated mode, so
no ``PYTHONPATH`` or user site reaches it; the code root is, for a worker, the world-readable staged copy of the
``sandbox`` and ``toolboxes`` packages. Its environment is the supervisor's few fixed variables (``LANG``), not the
supervisor's own. It writes on its stdin a 4-byte big-endian length followed by that many bytes of msgpack:
``ConfinementPlan.to_wire()`` (``_launch.plan_frame``). The launcher reads exactly that frame (unbuffered: what
follows on stdin belongs to the worker), runs :func:`confine`, then imports ``plan.entry`` (``module:function``)
and calls it with ``plan.payload``.

A fork of the zygote (``sandbox._zygote``, ``supervision.spawn: zygote``) becomes a launcher the same way: it gets
its pipes as fds 0-2 and calls :func:`run`, which is all of :func:`main` but the final exit. So there is one
confinement path, whichever process made the worker.

Exit statuses: 78 when the plan is malformed or a confinement step fails (one line on stderr,
``agents-supervise launcher: <toolbox>: confinement failed: <reason>``; the entry never runs), 70 when the
entry raises, otherwise the entry's return value (an ``int``) or 0. With a PID namespace the launcher's outer
process exits mirroring the worker: the same code, or killed by the same signal. (A fork of the zygote is born PID 1
of its PID namespace, :func:`confine` skips that fork, and it has no outer process.)

Built-in entry :func:`exec_argv` executes ``payload["argv"]`` in the confined process (a confined command
runner).
"""

from __future__ import annotations

import importlib
import os
import resource
import select
import signal
import struct
import sys
from typing import TYPE_CHECKING, Any, NoReturn

import msgpack

from sandbox._audit_session import set_audit_session
from sandbox._errors import ConfinementError, SandboxError
from sandbox._landlock import (
    RESTRICT_SELF_LOG_NEW_EXEC_ON,
    apply_ruleset,
    landlock_abi,
    plan_ruleset,
    refuse_planted_links,
)
from sandbox._netns import enter_namespaces, plan_namespaces
from sandbox._plan import READ, WRITE, ConfinementPlan, FsRule, ViewSpec
from sandbox._privileges import (
    drop_privileges,
    set_no_new_privs,
    set_parent_death_signal,
    verify_status,
)
from sandbox._procfs import mount_private_proc
from sandbox._rlimits import apply_rlimits, plan_rlimits
from sandbox._seccomp import apply_seccomp, plan_seccomp, plan_seccomp_log

if TYPE_CHECKING:
    from collections.abc import Callable

__all__ = [
    "EXIT_CONFINEMENT_FAILED",
    "EXIT_WORKER_FAILED",
    "MAX_PLAN_BYTES",
    "PREFIX",
    "STEP_MODULES",
    "confine",
    "decode_plan",
    "exec_argv",
    "main",
    "run",
]

#: the modules steps import only when a plan asks for them (a view, accounts, a bridge); the zygote imports them
#: before it forks, so its children do not each pay for them
STEP_MODULES = (
    "sandbox._accounts",
    "sandbox._bridge",
    "sandbox._private_files",
    "sandbox._resolver",
    "sandbox._view",
    "sandbox._view_plan",
)

EXIT_CONFINEMENT_FAILED = 78  # EX_CONFIG
EXIT_WORKER_FAILED = 70  # EX_SOFTWARE
MAX_PLAN_BYTES = 16 * 1024 * 1024
PREFIX = "agents-supervise launcher"
_FORWARDED_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT)


def _malformed(why: str) -> ConfinementError:
    return ConfinementError(f"malformed plan: {why}", step="plan")


def decode_plan(data: bytes) -> ConfinementPlan:
    """Decode and check the msgpack body of the plan frame. Pure.

    Raises:
        ConfinementError: not msgpack, not a map, unknown or missing fields, wrong types, a relative
            ``workdir``, an ``entry`` that is not ``module:function``, a uid without gid, a bridge without fd.
    """
    try:
        wire = msgpack.unpackb(data, raw=False, strict_map_key=True)
    except Exception as exc:  # msgpack raises several unrelated types on garbage
        raise _malformed(f"not msgpack ({type(exc).__name__}: {exc})") from exc
    if not isinstance(wire, dict):
        raise _malformed(f"expected a map, got {type(wire).__name__}")
    try:
        plan = ConfinementPlan.from_wire(wire)
    except (TypeError, KeyError, ValueError, AttributeError) as exc:
        raise _malformed(f"{type(exc).__name__}: {exc}") from exc

    def want(ok: bool, what: str) -> None:
        if not ok:
            raise _malformed(what)

    def is_int(v: object) -> bool:
        return isinstance(v, int) and not isinstance(v, bool)

    want(isinstance(plan.toolbox, str) and plan.toolbox != "", "toolbox must be a non-empty string")
    want(isinstance(plan.workdir, str) and os.path.isabs(plan.workdir), "workdir must be an absolute path")
    module, _, func = plan.entry.partition(":") if isinstance(plan.entry, str) else ("", "", "")
    want(bool(module) and func.isidentifier(), f"entry must be 'module:function', got {plan.entry!r}")
    want(isinstance(plan.payload, dict), "payload must be a map")
    want((plan.uid is None) == (plan.gid is None), "uid and gid must be given together")
    for name in ("uid", "gid", "bridge_fd"):
        value = getattr(plan, name)
        want(value is None or (is_int(value) and value >= 0), f"{name} must be a non-negative integer")
    want(is_int(plan.min_landlock_abi) and plan.min_landlock_abi >= 0, "min_landlock_abi must be >= 0")
    for name in ("new_netns", "new_pidns", "new_ipcns", "bridge", "audit_denials"):
        want(isinstance(getattr(plan, name), bool), f"{name} must be true or false")
    want(is_int(plan.umask) and 0 <= plan.umask <= 0o777, "umask must be between 0 and 0o777")
    want(
        isinstance(plan.account_name, str) and ":" not in plan.account_name and "\n" not in plan.account_name,
        "account_name must be a string without ':' or newlines",
    )
    want(not plan.bridge or plan.bridge_fd is not None, "bridge needs bridge_fd")
    if plan.view is not None:
        want(plan.new_pidns, "a private view needs new_pidns (its /proc is the PID namespace's)")
        want(
            isinstance(plan.view.hostname, str)
            and 0 < len(plan.view.hostname) <= 64
            and all(c.isalnum() or c in "-._" for c in plan.view.hostname),
            "view.hostname must be a host name",
        )
        want(
            all(is_int(v) and v > 0 for v in (plan.view.tmp_bytes, plan.view.shm_bytes)),
            "view sizes must be positive integers",
        )
        want(
            isinstance(plan.view.system_paths, tuple)
            and all(isinstance(p, str) and p.startswith("/") for p in plan.view.system_paths),
            "view.system_paths must be absolute paths",
        )
    want(all(isinstance(r.path, str) and isinstance(r.mode, str) for r in plan.fs_rules), "bad fs_rules")
    want(all(is_int(p) and 0 <= p <= 65535 for p in plan.tcp_connect_ports), "bad tcp_connect_ports")
    want(
        isinstance(plan.env, dict) and all(isinstance(k, str) and isinstance(v, str) for k, v in plan.env.items()),
        "env must map strings to strings",
    )
    return plan


def _read_exactly(fd: int, n: int) -> bytes:
    chunks: list[bytes] = []
    while n:
        chunk = os.read(fd, min(n, 1 << 20))
        if not chunk:
            break
        chunks.append(chunk)
        n -= len(chunk)
    return b"".join(chunks)


def read_plan(fd: int = 0) -> ConfinementPlan:
    """Read one length-prefixed plan frame from ``fd``, no byte more, and decode it."""
    try:
        header = _read_exactly(fd, 4)
        if len(header) != 4:
            raise _malformed("stdin closed before the 4-byte length")
        (length,) = struct.unpack(">I", header)
        if length > MAX_PLAN_BYTES:
            raise _malformed(f"frame of {length} bytes exceeds {MAX_PLAN_BYTES}")
        body = _read_exactly(fd, length)
    except OSError as exc:
        raise ConfinementError(f"cannot read the plan: {exc}", step="plan", errno=exc.errno) from exc
    if len(body) != length:
        raise _malformed(f"stdin closed after {len(body)} of {length} bytes")
    return decode_plan(body)


def _close_inherited_fds(keep: tuple[int | None, ...]) -> None:
    """Close every fd above 2 but those of ``keep``: Landlock does not cover fds opened before it."""
    low = 3
    for fd in sorted({fd for fd in keep if fd is not None and fd >= 3}):
        os.closerange(low, fd)
        low = fd + 1
    os.closerange(low, 1 << 20)


def _parent_alive(ppid: int, alive_fd: int | None) -> bool:
    """Whether the parent is still alive: ``alive_fd`` (in a PID namespace ``getppid()`` is 0) is the read end of a
    pipe whose write end the parent holds, or a pidfd of the parent; either reads ready once the parent is gone."""
    if alive_fd is not None:
        readable, _, _ = select.select([alive_fd], [], [], 0)
        return not readable
    return os.getppid() == ppid


def _mirror_exit(status: int) -> NoReturn:
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        try:
            resource.setrlimit(resource.RLIMIT_CORE, (0, 0))  # mirror the death, not a core dump
            if sig not in (signal.SIGKILL, signal.SIGSTOP):
                signal.signal(sig, signal.SIG_DFL)
            signal.pthread_sigmask(signal.SIG_UNBLOCK, [sig])
            os.kill(os.getpid(), sig)
        finally:
            os._exit(128 + sig)  # only reached if the signal did not end us
    os._exit(os.waitstatus_to_exitcode(status) if os.WIFEXITED(status) else EXIT_WORKER_FAILED)


def _fork_for_pid_namespace() -> int:
    """Fork so the child becomes PID 1 of the new PID namespace; return the parent-alive pipe fd in the child.

    The parent never returns: it swaps its stdin/stdout/stderr for ``/dev/null`` (so the supervisor sees EOF
    when the worker dies), forwards SIGTERM/SIGINT/SIGHUP/SIGQUIT to the child, waits for it and exits
    mirroring its status. Signals are blocked across the fork so none is lost or caught by the wrong process.
    """
    alive_r, alive_w = os.pipe()
    signal.pthread_sigmask(signal.SIG_BLOCK, _FORWARDED_SIGNALS)
    try:
        pid = os.fork()
    except OSError as exc:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, _FORWARDED_SIGNALS)
        raise ConfinementError(f"fork failed: {exc.strerror}", step="pidns", errno=exc.errno) from exc
    if pid == 0:
        os.close(alive_w)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, _FORWARDED_SIGNALS)
        return alive_r
    try:
        os.close(alive_r)
        null = os.open(os.devnull, os.O_RDWR)
        for fd in (0, 1, 2):
            os.dup2(null, fd)
        os.close(null)

        def forward(signum: int, _frame: object) -> None:
            try:
                os.kill(pid, signum)
            except ProcessLookupError:
                pass

        for sig in _FORWARDED_SIGNALS:
            signal.signal(sig, forward)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, _FORWARDED_SIGNALS)
        _, status = os.waitpid(pid, 0)  # retried on EINTR (PEP 475) after each forwarded signal
    except BaseException:
        os._exit(EXIT_WORKER_FAILED)
    _mirror_exit(status)


def confine(plan: ConfinementPlan, *, parent_pidfd: int | None = None) -> None:
    """Confine the calling process as ``plan`` says; return only in the confined worker.

    ``parent_pidfd`` (a fork of the zygote): a pidfd of the process's parent, which the parent checks of steps 1, 4
    and 9 watch. When the process is then PID 1 (the zygote made its PID namespace when it forked it), the PID
    namespace of step 2 and the fork of step 4 are already done and skipped; every other step is the same.

    The steps, in this order, and why each sits where it does:

    1. PDEATHSIG (``SIGKILL``), then re-check ``getppid()``: first, so that a supervisor dying from here on
       takes the launcher with it; the re-check catches a death just before the call. Then every fd above 2
       except ``bridge_fd`` is closed (fds opened before Landlock are not covered by it), and the kernel's
       Landlock ABI is checked against ``plan.min_landlock_abi`` before any work is done.
    2. New network namespace with ``lo`` up, new PID namespace, new IPC namespace, with ``plan.view`` a UTS
       namespace named ``plan.view.hostname`` (and, for a non-root launcher, a user namespace to be allowed to create
       them): needs privileges that step 8 drops.
    3. Bridge sockets (only when ``plan.bridge``): ``sandbox._bridge.open_bridge(plan.bridge_fd)`` opens the
       egress listening sockets *inside* the new namespace (so they listen on its ``lo``) and passes them
       up; before Landlock, which refuses every TCP bind, and before the uid drop. Then a private
       ``/etc/resolv.conf`` naming the stub (``sandbox._resolver``), while mounts are still allowed (with a view,
       the view holds it).
    4. Fork for the PID namespace (not when already PID 1 of one the zygote made: see ``parent_pidfd``): the child
       is PID 1 and becomes the worker; the parent forwards signals and
       exits mirroring it, so the supervisor sees EOF the moment the worker dies, and when PID 1 dies the
       kernel kills every process of the namespace (no grandchild outlives the worker). The child sets
       PDEATHSIG again (a fork clears it) and checks the parent through a pipe (its ``getppid()`` is 0).
       Then it mounts a private ``/proc`` for its PID namespace (``sandbox._procfs``): it lists only the worker's
       own processes, so every one of them can read its ``/proc/self`` and none sees the host's processes.
       With ``plan.account_name`` and a uid the host's ``/etc/passwd`` does not know (a uid per worker), private
       copies of ``/etc/passwd`` and ``/etc/group`` that name it are mounted (``sandbox._accounts``), before
       Landlock so that the rules on those paths cover the copies.
       With ``plan.view`` instead (4c): the private filesystem view (``sandbox._view_plan`` plans it from the rules,
       ``sandbox._view`` builds it and pivots into it): only the rules' paths, a fresh ``/tmp``, ``/dev/shm``,
       minimal ``/dev``, the worker's own ``/proc``, and ``/etc`` files naming only the worker. Before Landlock,
       whose rules are then opened in the view.
    5. rlimits: while still privileged (raising a hard limit needs ``CAP_SYS_RESOURCE``), after the fork so
       the forwarding parent keeps its own.
    6. ``no_new_privs``: before Landlock, which requires it (or ``CAP_SYS_ADMIN``) in ``restrict_self``. Then the
       seccomp filter (``sandbox._seccomp``: keyrings, io_uring, userfaultfd, perf, bpf refused), which needs it too.
    7. Landlock: the plan's rules, a read rule on the private ``/proc`` (without a PID namespace: on this
       process's own ``/proc/self``) for the check of step 8, with a view write rules on its fresh ``/tmp`` and
       ``/dev/shm``, TCP connect only to ``plan.tcp_connect_ports``, TCP bind
       nowhere, scoping of abstract unix sockets and signals. Before the uid drop: opening the rule paths may
       need access the sandbox uid does not have.
    8. Drop the capability bounding set, groups, gid, uid, every capability; then verify in
       ``/proc/self/status`` (CapEff 0, NoNewPrivs 1, the ids). Last of the kernel steps: the earlier ones
       need the privileges it removes.
    9. PDEATHSIG again (a credential change clears it) and re-check the parent is alive.
    10. ``umask(plan.umask)``, ``chdir(plan.workdir)``, ``os.environ`` replaced by ``plan.env``: the worker sees
        nothing of the launcher's start-up state. The caller then imports the entry.

    Raises:
        ConfinementError: any step could not be enforced. The process is then partly confined and must exit
            without running the entry.
    """
    # 1
    ppid = os.getppid()
    alive_fd = parent_pidfd  # the parent to watch: getppid() is 0 in a PID namespace the zygote made
    pidns_made = parent_pidfd is not None and os.getpid() == 1
    set_parent_death_signal()
    if not _parent_alive(ppid, alive_fd):
        raise ConfinementError("the supervisor exited during start-up", step="pdeathsig")
    _close_inherited_fds((plan.bridge_fd if plan.bridge else None, parent_pidfd))
    abi = landlock_abi()
    if abi < plan.min_landlock_abi:
        have = f"Landlock ABI {abi}" if abi else "no Landlock"
        raise ConfinementError(
            f"the kernel offers {have}, the plan demands at least ABI {plan.min_landlock_abi}", step="landlock"
        )
    if os.geteuid() == 0 and plan.uid is None:
        raise ConfinementError("refusing to run a worker as root: the plan names no uid", step="identity")
    if pidns_made and not plan.new_pidns:
        raise ConfinementError("the process is in a PID namespace the plan does not ask for", step="pidns")
    if plan.audit_denials and os.geteuid() == 0 and plan.uid is not None:
        set_audit_session(plan.uid)  # 1b: tags the worker's audit records; not a wall, so a failure is not fatal
    # 2
    namespaces = plan_namespaces(
        new_netns=plan.new_netns,
        new_pidns=plan.new_pidns and not pidns_made,
        new_ipcns=plan.new_ipcns,
        new_utsns=plan.view is not None,
        euid=os.geteuid(),
    )
    in_pidns = namespaces.pid or pidns_made
    enter_namespaces(namespaces)
    if plan.view is not None:
        from sandbox._view import set_hostname

        set_hostname(plan.view.hostname)
    # 3
    resolv_conf: str | None = None
    if plan.bridge and plan.bridge_fd is not None:
        from sandbox._bridge import open_bridge  # written elsewhere; imported only when a bridge is asked for
        from sandbox._resolver import apply_private_resolv_conf, plan_resolv_conf

        ports = open_bridge(plan.bridge_fd)  # closes bridge_fd in every case; raises BridgeError (a SandboxError)
        # Name resolution goes to the bridge's DNS stub: a private, read-only /etc/resolv.conf in a mount
        # namespace of the worker's own (the host's file is untouched), or in the view.
        resolv_conf = plan_resolv_conf(ports.dns)
        if plan.view is None:
            apply_private_resolv_conf(resolv_conf, workdir=plan.workdir)
    # 4
    if namespaces.pid:
        if alive_fd is not None:  # the worker's parent is the outer process from here on
            os.close(alive_fd)
        alive_fd = _fork_for_pid_namespace()
    if in_pidns:
        set_parent_death_signal()
        if not _parent_alive(ppid, alive_fd):
            raise ConfinementError("the launcher's parent exited during start-up", step="pdeathsig")
        if plan.view is None:
            mount_private_proc()
    if plan.view is not None:
        _enter_view(plan, plan.view, resolv_conf)
    elif plan.account_name and plan.uid is not None and plan.gid is not None:
        _show_account(plan, plan.uid, plan.gid, private_mounts=in_pidns)
    # 5
    apply_rlimits(plan_rlimits(plan.rlimits, lambda res: resource.getrlimit(res)[1]))
    # 6
    set_no_new_privs()
    machine = os.uname().machine
    apply_seccomp(plan_seccomp(machine, xattrs=plan.xattrs), machine)
    if plan.audit_denials:  # after the main filter: of equal answers the newest filter's is taken (and logged)
        apply_seccomp(plan_seccomp_log(machine), machine, log=True)
    # 7
    if abi >= 1:
        own_proc = "/proc" if in_pidns else os.path.realpath("/proc/self")
        rules = [*plan.fs_rules, FsRule(own_proc, READ)]
        if plan.view is not None:
            rules += [FsRule("/tmp", WRITE), FsRule("/dev/shm", WRITE)]  # the view's own tmpfs
        flags = RESTRICT_SELF_LOG_NEW_EXEC_ON if plan.audit_denials else 0  # bash's commands are a new exec
        apply_ruleset(
            plan_ruleset(rules, abi, tcp_connect_ports=plan.tcp_connect_ports, scope=True, restrict_flags=flags)
        )
    # 8
    drop_privileges(plan.uid, plan.gid, plan.groups)
    verify_status(plan.uid, plan.gid, plan.groups)
    # 9
    set_parent_death_signal()
    if not _parent_alive(ppid, alive_fd):
        raise ConfinementError("the launcher's parent exited during confinement", step="pdeathsig")
    if alive_fd is not None:
        os.close(alive_fd)
    # 10
    os.umask(plan.umask)
    try:
        os.chdir(plan.workdir)
    except OSError as exc:
        raise ConfinementError(
            f"cannot enter the work folder {plan.workdir}: {exc.strerror}", step="workdir", errno=exc.errno
        ) from exc
    os.environ.clear()
    os.environ.update(plan.env)


def _enter_view(plan: ConfinementPlan, view: ViewSpec, resolv_conf: str | None) -> None:
    """Step 4c: plan the private view from the rules and make it this process's root."""
    import grp
    import pwd

    from sandbox._private_files import enter_private_mounts
    from sandbox._view import apply_view, host_mount_points, probe_host
    from sandbox._view_plan import ViewError, plan_view, view_files

    uid = plan.uid if plan.uid is not None else os.geteuid()
    gid = plan.gid if plan.gid is not None else os.getegid()

    def host_name(lookup: Callable[[int], Any], ident: int) -> str:
        try:
            return str(lookup(ident)[0])
        except (KeyError, OSError):
            return ""

    # A shared uid keeps the name the host gives it (nobody); a uid of its own has none on the host.
    account = plan.account_name or host_name(pwd.getpwuid, uid) or f"agent-{plan.toolbox}"[:32]
    files = view_files(
        uid=uid,
        gid=gid,
        account=account,
        group=host_name(grp.getgrgid, gid),
        home=plan.workdir,
        hostname=view.hostname,
        resolv_conf=resolv_conf,
        groups=[(g, host_name(grp.getgrgid, g)) for g in plan.groups],
    )
    refuse_planted_links(plan.fs_rules)  # before the view copies the links it meets as root's
    try:
        planned = plan_view(plan.fs_rules, view, files, probe_host, host_mount_points(), locked=os.geteuid() != 0)
    except ViewError as exc:
        raise ConfinementError(str(exc), step="view") from exc
    enter_private_mounts(step="view")
    apply_view(planned)


def _show_account(plan: ConfinementPlan, uid: int, gid: int, *, private_mounts: bool) -> None:
    """Step 4b: name the worker's uid in private ``/etc/passwd``/``/etc/group`` when the host does not."""
    from sandbox._accounts import apply_account_files, plan_account_files
    from sandbox._private_files import enter_private_mounts

    def text(path: str) -> str:
        try:
            with open(path, encoding="utf-8", errors="replace") as f:
                return f.read()
        except OSError as exc:
            raise ConfinementError(f"cannot read {path}: {exc.strerror}", step="accounts", errno=exc.errno) from exc

    files = plan_account_files(
        text("/etc/passwd"),
        text("/etc/group"),
        uid=uid,
        gid=gid,
        name=plan.account_name,
        home=plan.workdir,
        groups=plan.groups,
    )
    if files.passwd is None and files.group is None:
        return
    if not private_mounts:
        enter_private_mounts(step="accounts")
    apply_account_files(files, workdir=plan.workdir)


def load_entry(entry: str) -> Callable[[dict[str, Any]], Any]:
    """Import ``module:function`` and return the function; raise :class:`ConfinementError` if impossible."""
    module_name, _, func_name = entry.partition(":")
    try:
        func = getattr(importlib.import_module(module_name), func_name)
    except Exception as exc:
        raise ConfinementError(f"cannot load entry {entry!r}: {type(exc).__name__}: {exc}", step="entry") from exc
    if not callable(func):
        raise ConfinementError(f"entry {entry!r} is not callable", step="entry")
    loaded: Callable[[dict[str, Any]], Any] = func
    return loaded


def exec_argv(payload: dict[str, Any]) -> NoReturn:
    """Built-in entry: replace the confined process with ``payload["argv"]``, environment ``os.environ``.

    ``os.environ`` is the plan's ``env`` by then. ``argv[0]`` without a slash is looked up in the env's
    ``PATH``. Signals Python ignores at start-up (SIGPIPE, SIGXFSZ) are reset to their defaults first. Exits
    127 when the program does not exist, 126 when it cannot be executed (like a shell), 64 on a bad payload,
    each with one line on stderr.
    """
    argv = payload.get("argv") if isinstance(payload, dict) else None
    if not isinstance(argv, list) or not argv or not all(isinstance(a, str) and "\0" not in a for a in argv):
        print(f"{PREFIX}: exec_argv: payload needs 'argv', a non-empty list of strings", file=sys.stderr)
        os._exit(64)
    for sig in (signal.SIGPIPE, signal.SIGXFSZ):
        signal.signal(sig, signal.SIG_DFL)
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        os.execvpe(argv[0], argv, dict(os.environ))
    except OSError as exc:
        print(f"{PREFIX}: exec_argv: {argv[0]}: {exc.strerror}", file=sys.stderr)
        os._exit(127 if isinstance(exc, FileNotFoundError) else 126)


def _say(toolbox: str, what: str, reason: object) -> None:
    line = f"{PREFIX}: {toolbox}: {what}: {reason}".replace("\n", " ")
    try:
        os.write(2, (line + "\n").encode("utf-8", "replace"))
    except OSError:
        pass


def run(*, parent_pidfd: int | None = None) -> int:
    """Read the plan from stdin, confine, run the entry; return the exit status of an entry that returned.

    The one path from a plan to a confined entry, whoever started the process: :func:`main` (a fresh interpreter)
    and a child of the zygote (``sandbox._zygote``, a fork of one, which passes ``parent_pidfd``: see
    :func:`confine`). Exits itself (``os._exit``) with
    :data:`EXIT_CONFINEMENT_FAILED` or :data:`EXIT_WORKER_FAILED` after one line on stderr, never with a
    traceback; a ``SystemExit`` of the entry passes through.
    """
    toolbox = "?"
    try:
        plan = read_plan(0)
        toolbox = plan.toolbox
        confine(plan, parent_pidfd=parent_pidfd)
        entry = load_entry(plan.entry)
    except SandboxError as exc:  # ConfinementError, or the bridge's BridgeError
        _say(toolbox, "confinement failed", exc)
        os._exit(EXIT_CONFINEMENT_FAILED)
    except BaseException as exc:
        _say(toolbox, "confinement failed", f"unexpected {type(exc).__name__}: {exc}")
        os._exit(EXIT_CONFINEMENT_FAILED)
    try:
        result = entry(plan.payload)
    except SystemExit:
        raise
    except BaseException as exc:
        _say(toolbox, "worker failed", f"{type(exc).__name__}: {exc}")
        sys.stdout.flush()
        os._exit(EXIT_WORKER_FAILED)
    return result if isinstance(result, int) and not isinstance(result, bool) else 0


def main() -> NoReturn:
    """The launcher's start: :func:`run`, then exit with its status; never return, never print a traceback."""
    sys.exit(run())


if __name__ == "__main__":
    main()
