"""Read the kernel's audit records of the supervisor's workers and explain the denials a call ran into.

How (docs/CONFINEMENT.md, "When the kernel refuses"): the supervisor (root) joins the audit record group
(``sandbox._audit_netlink``; turning the host's audit on first when the policy says ``kernel_audit: enable``). A
worker started with ``audit_denials`` has an audit session of its own (``sandbox._audit_session``), Landlock logging
for every program it runs, and seccomp logging for the refusals worth naming. Records are matched to a worker:

- ``AUDIT_SECCOMP`` by its ``ses=`` (the worker's session, read from ``/proc/<launcher pid>/sessionid``);
- ``AUDIT_LANDLOCK_ACCESS`` by its Landlock ``domain=``: the domain's first denial also brings an
  ``AUDIT_LANDLOCK_DOMAIN`` record (``status=allocated``) naming the process that made it, whose session says
  which worker it is (a domain a worker's program made for itself has a domain id no worker has, and is left out).

A record goes to every call in flight on its worker (a worker running two calls cannot tell them apart, as with
the limit notes) and to the trace (``denial``). When a call ends not passed, :meth:`KernelAudit.begin`'s finisher
first waits for a barrier (``sandbox._audit_netlink.barrier_message``, at most :data:`BARRIER_TIMEOUT_S`): every
record the call caused was queued before its result was sent, so it has arrived by then. A passed call does not
wait (no cost for calls that are not denied); records that were already there are still named.

Where audit cannot be read (not root, not the host's initial namespaces, audit off with ``kernel_audit: use``,
``kernel_audit: off``), a failed call's ``Permission denied`` paths are explained from the toolbox's rules
(``supervisor.workers._denials.explain_text_paths``), marked as a guess; ``agents-supervise check`` says which applies.
Records reach only the host's initial network namespace: a supervisor elsewhere (a container, ``unshare -n``) is
told from ``/proc`` where it can be (``sandbox._audit_netlink.in_initial_netns``), and otherwise by a barrier sent at
start that never comes back (:meth:`KernelAudit.run`); either way it falls back to the error text at once, says so on
stderr and in the trace, and no failed call waits for a barrier that cannot come.
"""

from __future__ import annotations

import errno
import itertools
import os
import sys
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

import trio

from sandbox import REFUSAL_REASONS, read_session, syscall_name
from sandbox import _audit_netlink as netlink
from toolboxes import ToolResult

from ._audit_reach import BARRIER_TIMEOUT_S, NOT_INITIAL_NETNS, PID_NAMESPACE_NOTE
from ._denials import (
    Denial,
    FsContext,
    context_of,
    explain_landlock,
    explain_seccomp,
    explain_text_paths,
    named_in_text,
    notes,
)

if TYPE_CHECKING:
    from supervisor.traces import TraceRecorder

__all__ = ["KernelAudit"]

_ARCHES = {"c000003e": "x86_64", "c00000b7": "aarch64"}
_MAX_PER_CALL = 64
_MAX_DOMAINS = 4096
_MAX_PENDING = 16
#: domains whose access records wait for the domain's "allocated" record. The kernel writes a domain's first denial,
#: then the domain (security/landlock/audit.c), so a record waits for the next few only; on a shared host every
#: process's Landlock denials arrive here, and a domain allocated before this reader started never sends that record:
#: with the bound of every other map (4096 domains x 16 records) they held tens of MB (scripts/soak found the growth)
_MAX_PENDING_DOMAINS = 64
_MAX_SESSIONS = 4096
_MAX_BACKGROUND = 256
_MAX_IN_FLIGHT = 64
#: messages handled per wake-up before the reader lets other tasks run
_DRAIN_BATCH = 256
#: how much of a result's text, from each end, is read for the paths it names
_TEXT_SCANNED = 32 << 10

Finish = Callable[[ToolResult], ToolResult | Awaitable[ToolResult]]
#: a session not read yet (``None`` is a reading: the worker has no audit session)
_UNKNOWN = object()


class _Call:
    """One call in flight on a worker: the denials delivered to it, and its end (:meth:`finish`, what
    :meth:`KernelAudit.begin` returns). Found by identity (in-flight lists are searched on every call's end)."""

    __slots__ = ("audit", "call_id", "context", "denials", "session", "tool", "toolbox")

    def __init__(
        self, audit: KernelAudit, call_id: str, tool: str, toolbox: str, session: int | None, context: FsContext
    ) -> None:
        self.audit = audit
        self.call_id = call_id
        self.tool = tool
        self.toolbox = toolbox
        self.session = session
        self.context = context
        self.denials: list[Denial] = []

    def finish(self, result: ToolResult) -> ToolResult | Awaitable[ToolResult]:
        """Explain ``result``: at once for a passed call or one whose records cannot be waited for, else as an
        awaitable (after the barrier)."""
        if result.status == "passed":  # a passed call's refusals are in the trace only
            self._done()
            return result
        if self.audit.unavailable is None and self.session is not None:
            return self._after_barrier(result)
        self._done()
        return self._explained(result)

    def _done(self) -> None:
        session = self.session
        if session is None:
            return
        in_flight = self.audit._in_flight
        calls = in_flight.get(session)
        if calls and self in calls:
            calls.remove(self)
            if not calls:
                in_flight.pop(session, None)

    def _explained(self, result: ToolResult) -> ToolResult:
        audit = self.audit
        try:
            audit._explain(result, self, self.context, audited=audit.unavailable is None and self.session is not None)
        except Exception as exc:  # a bug here must not cost the caller its result: trace it
            audit.trace.record("internal_error", where="kernel_audit", error=f"{type(exc).__name__}: {exc}")
        return result

    async def _after_barrier(self, result: ToolResult) -> ToolResult:
        try:
            await self.audit._barrier()
        finally:
            self._done()
        return self._explained(result)


class KernelAudit:
    """The supervisor's reader of audit records, and the per-call watch that turns them into notes."""

    #: the longest a call's finish waits (the barrier of a call that did not pass)
    longest_wait_s = BARRIER_TIMEOUT_S

    def __init__(
        self,
        trace: TraceRecorder,
        *,
        mode: str = "enable",
        system_paths: tuple[str, ...] = (),
        machine: str | None = None,
    ) -> None:
        self.trace = trace
        self.mode = mode
        self.system_paths = system_paths
        self.machine = machine or os.uname().machine
        #: ``None`` while records are read; otherwise why not (shown in the trace, used for the fallback)
        self.unavailable: str | None = "not started"
        self._reader: Any = None
        self._control: Any = None
        self._tokens = itertools.count(1)
        self._barriers: dict[str, trio.Event] = {}
        #: (worker object, launcher pid) -> its audit session: a reused pid of a later worker is another key
        self._session_of_pid: OrderedDict[tuple[int, int], int | None] = OrderedDict()
        #: a worker spec's rules as an FsContext, made once (the spec is kept with it: ids are reused)
        self._context_of_spec: OrderedDict[int, tuple[Any, FsContext]] = OrderedDict()
        self._contexts: OrderedDict[int, FsContext] = OrderedDict()
        #: calls in flight per worker session; a call cancelled before its result never reaches its finisher, so
        #: the lists and the map are bounded (the oldest entries go)
        self._in_flight: OrderedDict[int, list[_Call]] = OrderedDict()
        self._domain_session: OrderedDict[str, int | None] = OrderedDict()
        self._pending: OrderedDict[str, list[dict[str, str]]] = OrderedDict()
        self._background: OrderedDict[int, OrderedDict[tuple[str, str], None]] = OrderedDict()

    # -- reading -----------------------------------------------------------------------------------------------
    def _open(self) -> str | None:
        if self.mode == "off":
            return "kernel_audit: off in the policy"
        if os.geteuid() != 0:
            return "the supervisor is not root"
        netns = netlink.in_initial_netns()
        if netns is False:  # no record would come: the host's audit is not even turned on
            return NOT_INITIAL_NETNS
        try:
            status = netlink.audit_status()
            if status.enabled == 0:
                if self.mode != "enable":
                    return "the host's audit is off (kernel_audit: use)"
                netlink.enable()
            self._reader = netlink.open_reader()
            self._control = netlink.open_control()
        except netlink.AuditUnavailable as exc:
            self.close()
            return f"{exc}{PID_NAMESPACE_NOTE if netns is None else ''}"
        return None

    def close(self) -> None:
        for sock in (self._reader, self._control):
            if sock is not None:
                sock.close()
        self._reader = self._control = None

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Open the sockets, check that records arrive (a barrier must come back within
        :data:`BARRIER_TIMEOUT_S`, once, before ``started``), then read records until cancelled; never raises for
        what the kernel sends. Where records cannot be read, says why on stderr (unless ``kernel_audit: off``) and
        in the trace, and returns: failed calls are explained from their text, without waiting."""
        self.unavailable = self._open()
        if self.unavailable is None:
            try:
                self.unavailable = await self._probe()
            except BaseException:  # cancelled while starting: nothing is left open
                self.close()
                raise
        self.trace.record("kernel_audit", reading=self.unavailable is None, reason=self.unavailable or "")
        if self.unavailable is not None and self.mode != "off":
            print(
                f"agents-supervise: kernel audit: not read ({self.unavailable}); a call the kernel refuses is "
                "explained from its error text and the toolbox's rules, as a guess",
                file=sys.stderr,
                flush=True,
            )
        task_status.started()
        if self.unavailable is not None:
            return
        try:
            await self._read_forever()
        finally:
            self.unavailable = "stopped"
            for event in self._barriers.values():
                event.set()
            self.close()

    async def _read_forever(self) -> None:
        while True:
            await trio.lowlevel.wait_readable(self._reader)
            self._drain()
            await trio.lowlevel.checkpoint()  # a flood of records never starves the calls

    async def _probe(self) -> str | None:
        """Send one barrier and read until it comes back: ``None`` when it did, else why records do not arrive
        (the sockets are then closed)."""
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self._read_forever)
            arrived = await self._barrier()
            nursery.cancel_scope.cancel()
        if arrived:
            return None
        self.close()
        return (
            f"a barrier record sent at start did not come back within {BARRIER_TIMEOUT_S:g} s: the supervisor is "
            "probably not in the host's initial network namespace (a container), where alone the kernel delivers "
            "audit records, or the host's audit rules exclude AUDIT_USER records"
        )

    def _drain(self, limit: int = _DRAIN_BATCH) -> int:
        """Read and handle at most ``limit`` messages that are waiting; return how many were read."""
        for count in range(limit):
            try:
                data = self._reader.recv(65536)
            except BlockingIOError:
                return count
            except OSError as exc:  # ENOBUFS: records were dropped while the supervisor was busy; go on
                if exc.errno == errno.ENOBUFS:
                    continue
                return count
            if len(data) < 16:
                continue
            length = int.from_bytes(data[0:4], "little")
            kind = int.from_bytes(data[4:6], "little")
            record = netlink.parse_message(kind, data[16:length])
            if record is not None:
                try:
                    self.handle(record)
                except (ValueError, KeyError):  # a record of a form this code does not know: not a denial it names
                    pass
                except Exception as exc:  # a bug here must not take the supervisor down: trace it, go on
                    self.trace.record("internal_error", where="kernel_audit", error=f"{type(exc).__name__}: {exc}")
        return limit

    def handle(self, record: netlink.AuditRecord) -> None:
        """Take one record (pure bookkeeping; the tests feed records here directly too)."""
        f = record.fields
        if record.type == netlink.AUDIT_USER:
            msg = f.get("msg", "")
            if msg.startswith(netlink.BARRIER_PREFIX):
                event = self._barriers.pop(msg[len(netlink.BARRIER_PREFIX) :], None)
                if event is not None:
                    event.set()
        elif record.type == netlink.AUDIT_SECCOMP:
            session = int(f.get("ses", "-1"))
            machine = _ARCHES.get(f.get("arch", ""), self.machine)
            number = int(f.get("syscall", "-1"))
            name = syscall_name(machine, number)
            if session in self._contexts and name != "clone3":
                self._deliver(session, [explain_seccomp(name, number, REFUSAL_REASONS.get(name or ""))])
        elif record.type == netlink.AUDIT_LANDLOCK_ACCESS:
            domain = f.get("domain", "")
            if domain in self._domain_session:
                self._landlock(self._domain_session[domain], f)
            else:
                pending = self._pending.setdefault(domain, [])
                if len(pending) < _MAX_PENDING:
                    pending.append(f)
                _bound(self._pending, _MAX_PENDING_DOMAINS)
        elif record.type == netlink.AUDIT_LANDLOCK_DOMAIN:
            domain = f.get("domain", "")
            if f.get("status") == "allocated":
                creator = read_session(int(f.get("pid", "0"))) if f.get("pid", "").isdigit() else None
                self._domain_session[domain] = creator
                _bound(self._domain_session, _MAX_DOMAINS)
                for fields in self._pending.pop(domain, []):
                    self._landlock(creator, fields)
            elif f.get("status") == "deallocated":
                self._domain_session.pop(domain, None)
                self._pending.pop(domain, None)

    def _landlock(self, session: int | None, fields: dict[str, str]) -> None:
        context = self._contexts.get(session) if session is not None else None
        if context is not None and session is not None:
            self._deliver(session, explain_landlock(fields, context))

    def _deliver(self, session: int, denials: list[Denial]) -> None:
        """Give each denial to the calls in flight on the worker that have not had it (at most
        :data:`_MAX_PER_CALL` each) and trace it once; with no call in flight, trace each distinct refusal of the
        worker once (at most :data:`_MAX_BACKGROUND` kept): a worker refused in a loop does not grow the trace."""
        calls = self._in_flight.get(session) or []
        context = self._contexts[session]
        for d in denials:
            key = (d.access, d.target)
            if calls:
                fresh = [
                    c
                    for c in calls
                    if len(c.denials) < _MAX_PER_CALL and all(key != (o.access, o.target) for o in c.denials)
                ]
                if not fresh:
                    continue
                for call in fresh:
                    call.denials.append(d)
            else:
                fresh = []
                seen = self._background.setdefault(session, OrderedDict())
                if key in seen:
                    continue
                seen[key] = None
                _bound(seen, _MAX_BACKGROUND)
                _bound(self._background, _MAX_SESSIONS)
            self.trace.record(
                "denial",
                call_id=fresh[0].call_id if len(fresh) == 1 else None,
                call_ids=[c.call_id for c in fresh] if len(fresh) > 1 else None,
                tool=fresh[0].tool if len(fresh) == 1 else None,
                toolbox=context.toolbox,
                layer=d.layer,
                access=d.access,
                target=d.target,
                rule=d.rule,
                text=d.text,
                source="audit",
            )

    # -- the per-call watch ------------------------------------------------------------------------------------
    def _session(self, worker: Any) -> int | None:
        pid = getattr(worker, "pid", None)
        if pid is None:
            return None
        key = (id(worker), pid)
        known = self._session_of_pid.get(key, _UNKNOWN)
        if known is _UNKNOWN:
            known = self._session_of_pid[key] = read_session(pid)
            _bound(self._session_of_pid, _MAX_SESSIONS)
        return known  # type: ignore[return-value]

    def _context(self, tool: Any) -> FsContext:
        spec = getattr(tool.runner, "spec", None)
        cached = self._context_of_spec.get(id(spec))
        if cached is not None and cached[0] is spec:
            return cached[1]
        context = self._make_context(tool, spec)
        self._context_of_spec[id(spec)] = (spec, context)
        _bound(self._context_of_spec, _MAX_SESSIONS)
        return context

    def _make_context(self, tool: Any, spec: Any) -> FsContext:
        plan = getattr(spec, "plan", None)
        return context_of(
            tool.toolbox,
            getattr(spec, "kind", ""),
            getattr(plan, "fs_rules", ()),
            getattr(spec, "report", {}) or {},
            self.system_paths,
            getattr(plan, "workdir", ""),
            view=getattr(plan, "view", None) is not None,
        )

    def begin(self, tool: Any, call_id: str) -> Finish:
        """Note the call in flight on ``tool``'s worker; the returned function explains its result: at once for a
        passed call or one whose records cannot be waited for, else as an awaitable (after the barrier)."""
        context = self._context(tool)
        session = self._session(getattr(tool.runner, "worker", None))
        call = _Call(self, call_id, tool.name, tool.toolbox, session, context)
        if session is not None:
            contexts, in_flight = self._contexts, self._in_flight
            contexts[session] = context
            contexts.move_to_end(session)
            if len(contexts) > _MAX_SESSIONS:
                _bound(contexts, _MAX_SESSIONS)
            calls = in_flight.get(session)
            if calls is None:
                calls = in_flight[session] = [call]
                if len(in_flight) > _MAX_SESSIONS:
                    _bound(in_flight, _MAX_SESSIONS)
            else:
                calls.append(call)
                if len(calls) > _MAX_IN_FLIGHT:
                    del calls[:-_MAX_IN_FLIGHT]
        return call.finish

    def _explain(self, result: ToolResult, call: _Call, context: FsContext, *, audited: bool) -> None:
        """Append the notes of a failed call's refusals to ``result`` (and trace those read from its text)."""
        data = result.data or ""
        if len(data) > 2 * _TEXT_SCANNED:  # bash puts stderr first, a traceback ends last
            data = data[:_TEXT_SCANNED] + "\n" + data[-_TEXT_SCANNED:]
        text = f"{data}\n{result.summary or ''}"
        denials = list(call.denials)
        known = {d.target for d in denials}
        for d in explain_text_paths(text, context, permission_denied=not audited):
            if d.target in known:
                continue
            denials.append(d)
            self.trace.record(
                "denial",
                call_id=call.call_id,
                tool=call.tool,
                toolbox=call.toolbox,
                layer=d.layer,
                access=d.access,
                target=d.target,
                rule=d.rule,
                text=d.text,
                source="error text",
            )
        if not denials:
            return
        lines = notes(denials, text)
        result.data = "\n".join([result.data, *lines] if result.data else lines)
        for d in denials:
            if named_in_text(d, text):
                result.metadata.append(("denied", f"{d.layer} {d.access} {d.target}"[:300]))

    async def _barrier(self) -> bool:
        """Queue a barrier record and wait (at most :data:`BARRIER_TIMEOUT_S`) until it is read back; whether it
        was."""
        if self._control is None:
            return False
        token = f"{os.getpid()}-{next(self._tokens)}"
        event = trio.Event()
        self._barriers[token] = event
        try:
            netlink.send_barrier(self._control, token)
        except OSError:
            self._barriers.pop(token, None)
            return False
        with trio.move_on_after(BARRIER_TIMEOUT_S):
            await event.wait()
        self._barriers.pop(token, None)
        return event.is_set() and self._reader is not None


def _bound(mapping: OrderedDict[Any, Any], limit: int) -> None:
    while len(mapping) > limit:
        mapping.popitem(last=False)
