"""Kernel denials explained: the wording from records and rules (pure, any machine), then real bash tools in real
confined workers refused by Landlock and by seccomp, read back from the kernel's audit records (root), the fallback
from the error text when audit is off, the trace report's grouping and what ``check`` says the host can explain."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

import pytest

from labkit import describe_json, write_script
from sandbox import READ, WRITE, FsRule, landlock_abi
from sandbox._audit_netlink import AUDIT_LANDLOCK_ACCESS, AUDIT_LANDLOCK_DOMAIN, AuditRecord, is_kernel_thread
from supervisor._supervisor import Supervisor
from supervisor.traces import TraceRecorder
from supervisor.traces._report import load_trace, render_text, report
from supervisor.workers._audit_reach import NOT_INITIAL_NETNS
from supervisor.workers._denials import FsContext, explain_landlock, explain_seccomp, explain_text_paths, notes
from supervisor.workers._kernel_audit import KernelAudit
from tests._policies import agent, system_toolbox, write_policy

if TYPE_CHECKING:
    from pathlib import Path

    import trio.testing

BASH = FsContext(
    "tools",
    "bash",
    (FsRule("/usr", READ), FsRule("/w/tools", READ), FsRule("/w/work", WRITE)),
    system_paths=("/usr",),
    workdir="/w/work",
)
FILES = FsContext(
    "files",
    "system",
    (FsRule("/usr", READ), FsRule("/p/src", WRITE), FsRule("/p/docs", READ)),
    sandbox_paths=("/p/src",),
    sandbox_mode=WRITE,
    system_paths=("/usr",),
    workdir="/w/files",
)
READER = FsContext(
    "reader", "mcp", (FsRule("/p/data", READ),), sandbox_paths=("/p/data",), sandbox_mode=READ, workdir="/w/reader"
)


# --- the pure part ----------------------------------------------------------------------------------------------


def test_a_path_no_rule_reaches_names_the_filesandbox_and_how_to_widen_it() -> None:
    [d] = explain_landlock({"domain": "1", "blockers": "fs.make_reg", "path": "/etc"}, FILES)
    assert (d.layer, d.access, d.target, d.rule) == ("landlock", "fs.make_reg", "/etc", "FileSandbox: no rule")
    assert "create a file in /etc" in d.text and "its FileSandbox does not cover /etc" in d.text
    assert "widen that FileSandbox in the agent file" in d.text and "/w/files" in d.text


def test_a_write_under_a_read_only_rule_names_where_the_rule_comes_from() -> None:
    [system] = explain_landlock({"blockers": "fs.write_file", "path": "/usr/lib/x"}, FILES)
    assert system.rule == "read-only: /usr" and "the policy's system_paths (/usr" in system.text
    [sandbox] = explain_landlock({"blockers": "fs.write_file", "path": "/p/data/a.csv"}, READER)
    assert sandbox.rule == "FileSandbox read-only: /p/data"
    assert "a mcp toolbox's FileSandbox is only ever read-only" in sandbox.text
    [own] = explain_landlock({"blockers": "fs.remove_file", "path": "/p/docs/x"}, FILES)
    assert own.rule == "read-only: /p/docs" and "remove a file in /p/docs" in own.text


def test_a_bash_toolbox_has_no_filesandbox_and_is_told_where_it_may_write() -> None:
    [d] = explain_landlock({"blockers": "fs.make_reg", "path": "/tmp"}, BASH)
    assert d.rule == "no rule (bash toolbox without a FileSandbox)"
    assert "it may write only in /w/work" in d.text and "FileSandbox in the agent file" not in d.text


def test_several_blockers_network_and_scope_records_each_become_a_denial() -> None:
    two = explain_landlock({"blockers": "fs.write_file,fs.read_file", "path": "/dev/tty"}, BASH)
    assert [d.access for d in two] == ["fs.write_file", "fs.read_file"]
    [net] = explain_landlock({"blockers": "net.connect_tcp", "daddr": "127.0.0.1", "dest": "5432"}, BASH)
    assert net.target == "tcp:5432" and "allowed hosts" in net.text
    [sig] = explain_landlock({"blockers": "scope.signal", "opid": "1", "ocomm": "init"}, BASH)
    assert "signal a process outside the toolbox's worker" in sig.text


def test_a_refused_system_call_is_named_with_why_and_that_no_key_allows_it() -> None:
    d = explain_seccomp("keyctl", 250, "the kernel keyrings are shared")
    assert (d.layer, d.target, d.rule) == ("seccomp", "keyctl", "keyctl")
    assert "refused keyctl()" in d.text and "no policy key allows it" in d.text
    assert explain_seccomp(None, 999, None).target == "system call 999"


def test_notes_put_what_the_result_names_first_and_count_the_rest() -> None:
    denials = [
        *explain_landlock({"blockers": "fs.write_file,fs.read_file", "path": "/dev/tty"}, BASH),
        *explain_landlock({"blockers": "fs.make_reg", "path": "/tmp"}, BASH),
        *explain_landlock({"blockers": "fs.make_reg", "path": "/tmp"}, BASH),
    ]
    lines = notes(denials, "sh: 1: cannot create /tmp/out: Permission denied")
    assert len(lines) == 2 and "create a file in /tmp" in lines[0], lines
    assert lines[1].startswith("[denied: 2 other refusal(s) during this call (/dev/tty)")


def test_the_fallback_reads_paths_from_error_lines_and_says_it_is_a_guess() -> None:
    text = (
        "cat: /etc/shadow: Permission denied\nsh: 1: cannot create '/tmp/a b': Permission denied\n"
        "touch: cannot touch '/p/docs/new': Read-only file system\n/usr/bin/true: fine\n"
        "/w/tools/run: line 3: /etc/x: Permission denied\n"
        "PermissionError: [Errno 13] Permission denied: '/srv/y'\n"
    )
    guessed = explain_text_paths(text, FILES, permission_denied=True)
    assert [d.target for d in guessed] == ["/etc/shadow", "/tmp/a b", "/p/docs/new", "/etc/x", "/srv/y"]
    assert "probably refused by Landlock" in guessed[0].text and guessed[0].rule == "FileSandbox: no rule"
    assert "private view" in guessed[2].text and guessed[2].rule == "read-only: /p/docs"
    only_view = explain_text_paths(text, FILES, permission_denied=False)  # with audit, EACCES lines are not guessed
    assert [d.target for d in only_view] == ["/p/docs/new"]


def test_dashs_cannot_create_names_the_file_not_the_shell() -> None:
    """Issue 25: dash words a refused redirect ``/bin/sh: 1: cannot create PATH: <error>``; the path is the text
    between ``cannot create `` and the last ``: ``, judged by the rule that covers it (not /bin/sh, not /bin)."""
    ctx = FsContext(
        "tools",
        "bash",
        (FsRule("/usr", READ), FsRule("/bin", READ), FsRule("/w/tools", WRITE)),
        system_paths=("/usr", "/bin"),
        workdir="/w/tools",
    )
    for line, target in [
        ("/bin/sh: 1: cannot create /usr/x: Read-only file system", "/usr/x"),
        ("sh: 3: cannot create /usr/a b: c: Permission denied", "/usr/a b: c"),
        ("/bin/sh: 1: /usr/bin/q: Permission denied", "/usr/bin/q"),
    ]:
        [d] = explain_text_paths(line, ctx, permission_denied=True)
        assert (d.target, d.rule) == (target, "read-only: /usr"), (line, d)
        assert "/bin" not in d.text.replace("/usr/bin/q", ""), d.text
        assert "the policy's system_paths (/usr, read-only for every toolbox)" in d.text
    # a relative path cannot be judged (the shell's directory is unknown here): no note rather than /bin/sh's
    assert explain_text_paths("/bin/sh: 1: cannot create x: Read-only file system", ctx, permission_denied=True) == []


def test_a_kernel_thread_is_told_by_its_flags() -> None:
    assert is_kernel_thread("2 (kthreadd) S 0 0 0 0 -1 2129984 0 0 0 0 0 0 0 0 20 0 1 0 4 0 0")
    assert not is_kernel_thread("1 (my (odd) init) S 0 1 1 0 -1 4194560 0 0 0 0 0 0 0 0 20 0 1 0 4 0 0")
    assert not is_kernel_thread("garbage")


def test_records_are_matched_to_a_worker_by_domain_then_session(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the sessions of processes 42 and 43 stand in for /proc/PID/sessionid (the real one is read in the root tests)
    monkeypatch.setattr("supervisor.workers._kernel_audit.read_session", lambda pid: 7 if pid == 42 else None)
    audit = KernelAudit(TraceRecorder(str(tmp_path / "t.jsonl")))
    audit._contexts[7] = BASH
    audit.handle(AuditRecord(AUDIT_LANDLOCK_ACCESS, 1, {"domain": "d1", "blockers": "fs.read_file", "path": "/x"}))
    assert "d1" in audit._pending  # the domain is not known until its "allocated" record names its process
    audit.handle(AuditRecord(AUDIT_LANDLOCK_DOMAIN, 1, {"domain": "d1", "status": "allocated", "pid": "42"}))
    audit.handle(AuditRecord(AUDIT_LANDLOCK_DOMAIN, 2, {"domain": "d2", "status": "allocated", "pid": "43"}))
    assert audit._domain_session == {"d1": 7, "d2": None} and not audit._pending
    audit.handle(AuditRecord(AUDIT_LANDLOCK_ACCESS, 3, {"domain": "d2", "blockers": "fs.read_file", "path": "/y"}))
    for serial in range(4, 200):  # a worker refused in a loop with no call in flight: traced once
        audit.handle(
            AuditRecord(AUDIT_LANDLOCK_ACCESS, serial, {"domain": "d1", "blockers": "fs.read_file", "path": "/x"})
        )
    audit.trace.close()
    traced = [json.loads(line) for line in (tmp_path / "t.jsonl").read_text().splitlines()]
    assert [(r["toolbox"], r["target"]) for r in traced if r["event"] == "denial"] == [("tools", "/x")]


def test_records_of_domains_never_allocated_here_are_held_for_a_few_domains_only(tmp_path: Path) -> None:
    """Every process's Landlock denials on the host reach the reader; a domain allocated before it started never
    sends its "allocated" record, so its records would wait for ever: only the most recent 64 domains' are held."""
    audit = KernelAudit(TraceRecorder(str(tmp_path / "t.jsonl")))
    for serial in range(10_000):
        fields = {"domain": f"f{serial}", "blockers": "fs.read_file", "path": f"/other/{serial}"}
        audit.handle(AuditRecord(AUDIT_LANDLOCK_ACCESS, serial, fields))
    assert len(audit._pending) == 64 and "f9999" in audit._pending and "f0" not in audit._pending
    audit.trace.close()


async def test_a_call_gets_each_refusal_once_and_a_passed_call_gets_no_note(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from types import SimpleNamespace

    from toolboxes import ToolResult

    # a stand-in tool whose worker has pid 42 in session 7 (the real path runs in the root tests below)
    monkeypatch.setattr("supervisor.workers._kernel_audit.read_session", lambda pid: 7 if pid == 42 else None)
    audit = KernelAudit(TraceRecorder(str(tmp_path / "t.jsonl")))
    audit.unavailable = None  # reading (no socket: the barrier is skipped)
    tool = SimpleNamespace(
        name="bash_w",
        toolbox="tools",
        runner=SimpleNamespace(
            worker=SimpleNamespace(pid=42),
            spec=SimpleNamespace(
                kind="bash", report={}, plan=SimpleNamespace(fs_rules=BASH.rules, workdir="/w/work", view=None)
            ),
        ),
    )
    audit._domain_session["d"] = 7
    for label, status in (("failed", "failed"), ("passed", "passed")):
        finish = audit.begin(tool, label)
        for serial in range(300):
            audit.handle(
                AuditRecord(
                    AUDIT_LANDLOCK_ACCESS,
                    serial,
                    {"domain": "d", "blockers": "fs.make_reg", "path": "/tmp" if serial % 2 else f"/o{serial}"},
                )
            )
        out = finish(ToolResult(status=status, data="cannot create /tmp/x: Permission denied"))
        # a passed call is answered at once (nothing to wait for); a failed one waits for its barrier first
        assert isinstance(out, ToolResult) == (status == "passed")
        result = out if isinstance(out, ToolResult) else await out
        if status == "failed":
            assert result.data.count("[denied: Landlock refused to create a file in /tmp") == 1, result.data
            assert "63 other refusal(s)" in result.data  # 64 kept per call: /tmp once, 63 others
            assert result.metadata == [("denied", "landlock fs.make_reg /tmp")]
        else:
            assert "[denied" not in result.data and result.metadata == []
    audit.trace.close()
    traced = [json.loads(line) for line in (tmp_path / "t.jsonl").read_text().splitlines()]
    assert sum(1 for r in traced if r.get("call_id") == "failed") == 64
    assert not audit._in_flight


def test_the_reader_handles_a_bounded_batch_per_wake_up_and_survives_garbage(tmp_path: Path) -> None:
    import struct

    class Waiting:
        """Messages waiting on the audit socket (stands in for it; the real one is read in the root tests)."""

        def __init__(self, messages: list[bytes]) -> None:
            self.messages = messages

        def recv(self, _size: int) -> bytes:
            if not self.messages:
                raise BlockingIOError
            return self.messages.pop(0)

    audit = KernelAudit(TraceRecorder(str(tmp_path / "t.jsonl")))
    audit._contexts[7] = BASH
    text = b"audit(1.0:5): auid=65534 ses=7 pid=9 sig=0 arch=c000003e syscall=250 compat=0 code=0x50000"
    record = struct.pack("=IHHII", 16 + len(text), 1326, 0, 0, 0) + text
    garbage = [b"short", struct.pack("=IHHII", 56, 1326, 0, 0, 0) + b"\xff" * 40]
    audit._reader = Waiting([*garbage, *[record] * 301])
    assert audit._drain() == 256  # the rest waits for the next wake-up, after other tasks ran
    assert audit._drain() == 47
    audit.trace.close()
    traced = [json.loads(line) for line in (tmp_path / "t.jsonl").read_text().splitlines()]
    assert [r["target"] for r in traced if r["event"] == "denial"] == ["keyctl"]  # once: no call was in flight


async def test_a_start_whose_barrier_never_comes_back_falls_back_to_the_text(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    """Records that never arrive (a host whose audit rules drop AUDIT_USER; a namespace /proc cannot tell apart)
    are found by the start's barrier: the supervisor then does not read, and no failed call waits. A connected
    socket pair stands in for the audit sockets (it carries the barrier request, never a record): dropping
    AUDIT_USER on this host would change the host's audit for every other process."""
    import socket

    audit = KernelAudit(TraceRecorder(str(tmp_path / "t.jsonl")))
    audit._reader, audit._control = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
    audit._reader.setblocking(False)
    audit._control.setblocking(False)
    reason = await audit._probe()
    assert reason is not None and reason.startswith("a barrier record sent at start did not come back within 1 s")
    assert audit._reader is None and audit._control is None  # closed: nothing is read, no call waits
    audit.trace.close()


# --- real workers -----------------------------------------------------------------------------------------------

needs_landlock_audit = pytest.mark.skipif(landlock_abi() < 7, reason="Landlock audit records need ABI 7")


def _policy(root: Path, scripts: dict[str, str], **policy: object) -> Path:
    tools = root / "tools"
    tools.mkdir()
    for name, run in scripts.items():
        write_script(tools, name, describe_json(name), run)
    return write_policy(
        root,
        {"tester": agent(bashToolboxes=[{"tag": "FileSystemDirectory", "contents": {"Path": "./tools"}}])},
        landlock_min_abi=6,
        **policy,
    )


def _denials(root: Path) -> list[dict]:
    lines = (root / "state" / "trace.jsonl").read_text().splitlines()
    return [r for r in map(json.loads, lines) if r["event"] == "denial"]


@pytest.mark.root
@needs_landlock_audit
async def test_a_bash_tool_writing_outside_its_sandbox_is_told_the_path_and_the_rule(sandbox_tmp: Path) -> None:
    # private_view false: the host's tree, so Landlock (not the view's missing or read-only mounts) refuses
    policy = _policy(
        sandbox_tmp,
        {"escape": 'echo hi > "/tmp/escaped-$$" && echo "BREACH"; exit 1', "fine": "echo fine"},
        private_view=False,
    )
    async with Supervisor.open(policy) as sup:
        assert sup.load_errors() == [] and sup.services.kernel_audit.unavailable is None
        escape = await sup.call("bash_escape", {})
        fine = await sup.call("bash_fine", {})
    assert escape.status == "failed" and "BREACH" not in escape.data, escape.data
    assert "[denied: Landlock refused to create a file in /tmp (fs.make_reg)" in escape.data, escape.data
    assert "no rule of toolbox 'tools' reaches it" in escape.data and "it may write only in" in escape.data
    assert ("denied", "landlock fs.make_reg /tmp") in escape.metadata, escape.metadata
    assert fine.status == "passed" and "denied" not in fine.data and fine.meta("denied") is None
    traced = [r for r in _denials(sandbox_tmp) if r["target"] == "/tmp"]
    assert traced and traced[0]["tool"] == "bash_escape" and traced[0]["call_id"]
    assert traced[0]["rule"] == "no rule (bash toolbox without a FileSandbox)" and traced[0]["source"] == "audit"
    data = report(load_trace(str(sandbox_tmp / "state" / "trace.jsonl")))
    grouped = data["denials_by_toolbox"]["tools"]["landlock: no rule (bash toolbox without a FileSandbox)"]
    assert "/tmp" in grouped["targets"] and grouped["count"] >= 1
    assert "tools: landlock: no rule (bash toolbox without a FileSandbox) x" in render_text(data)


@pytest.mark.root
@needs_landlock_audit
async def test_a_write_outside_a_filesandbox_names_the_filesandbox(sandbox_tmp: Path) -> None:
    (sandbox_tmp / "project").mkdir(mode=0o777)
    (sandbox_tmp / "project").chmod(0o777)
    box = system_toolbox(
        capabilities=["execute-command"],
        FileSandbox={"fsbPredicate": {"tag": "DirectoryRecursive", "contents": "./project"}, "fsbName": "project"},
    )
    policy = write_policy(
        sandbox_tmp, {"tester": agent(builtinToolboxes=[box])}, landlock_min_abi=6, private_view=False
    )
    async with Supervisor.open(policy) as sup:
        inside = await sup.call("system_system_execute_command", {"command": f"echo ok > {sandbox_tmp}/project/a"})
        outside = await sup.call("system_system_execute_command", {"command": "echo no > /tmp/outside-$$"})
    assert inside.status == "passed" and inside.meta("denied") is None, inside.data
    assert "its FileSandbox does not cover /tmp" in outside.data, outside.data
    assert "widen that FileSandbox in the agent file" in outside.data
    assert any(r["rule"] == "FileSandbox: no rule" for r in _denials(sandbox_tmp))


@pytest.mark.root
async def test_a_refused_system_call_is_named_in_the_result_and_the_trace(sandbox_tmp: Path) -> None:
    keyctl = (
        "python3 -c 'import ctypes; l = ctypes.CDLL(None, use_errno=True); "
        "print(l.syscall(250, 0, 0, 0, 0, 0), ctypes.get_errno())'; exit 2"
    )
    policy = _policy(sandbox_tmp, {"keys": keyctl})
    async with Supervisor.open(policy) as sup:
        keys = await sup.call("bash_keys", {})
    assert keys.status == "failed" and "-1 1" in keys.data, keys.data  # EPERM, as before
    assert "[denied: the worker's system call filter (seccomp) refused keyctl()" in keys.data, keys.data
    assert ("denied", "seccomp syscall keyctl") in keys.metadata
    [record] = [r for r in _denials(sandbox_tmp) if r["layer"] == "seccomp"]
    assert (record["target"], record["tool"], record["rule"]) == ("keyctl", "bash_keys", "keyctl")


@pytest.mark.root
async def test_without_audit_a_failed_calls_paths_are_explained_from_the_rules(sandbox_tmp: Path) -> None:
    policy = _policy(
        sandbox_tmp, {"escape": 'echo hi > "/tmp/escaped-$$"; exit 1'}, private_view=False, kernel_audit="off"
    )
    async with Supervisor.open(policy) as sup:
        assert sup.services.kernel_audit.unavailable == "kernel_audit: off in the policy"
        escape = await sup.call("bash_escape", {})
    assert "was probably refused by Landlock (this host gives no audit records" in escape.data, escape.data
    assert "/tmp/escaped-" in escape.data and "no rule of toolbox 'tools' reaches it" in escape.data
    assert [r["source"] for r in _denials(sandbox_tmp)] == ["error text"]


#: A supervisor opened in the process this runs in, calling one tool; prints what a test asserts, as JSON.
_CALL_ONE = """
import json, sys, trio
from supervisor._supervisor import Supervisor

async def main():
    async with Supervisor.open(sys.argv[1]) as sup:
        result = await sup.call(sys.argv[2], {})
        finish = sup.services.kernel_audit.begin(sup.registry.get(sys.argv[2]), "probe")
        answered_at_once = finish(result) is result
        print(json.dumps({"unavailable": sup.services.kernel_audit.unavailable, "data": result.data,
                          "metadata": result.metadata, "at_once": answered_at_once}))

trio.run(main)
"""


@pytest.mark.root
@pytest.mark.parametrize(
    ("unshare", "reason"),
    [
        (["unshare", "-n"], NOT_INITIAL_NETNS),
        # a PID namespace of its own, as in a container: the kernel refuses audit requests there
        (["unshare", "-n", "-p", "-f", "--mount-proc"], "audit request 1000 refused: Operation not permitted; no"),
    ],
    ids=["netns", "netns-and-pidns"],
)
def test_a_supervisor_in_a_network_namespace_of_its_own_explains_from_the_text_without_a_barrier(
    sandbox_tmp: Path, unshare: list[str], reason: str
) -> None:
    """Issue 25: the kernel sends audit records only to the initial network namespace. A supervisor started in a
    fresh one (``unshare -n``, as in a container) knows it at start, says so on stderr and in the trace, answers a
    failed call at once (no barrier that cannot come back) and explains its denial from the error text: dash's
    ``cannot create /usr/...`` names that file and the system_paths rule on /usr."""
    import os
    import subprocess
    import sys

    from tests.supervisor.frontends.test_frontends import REPO

    target = "/usr/agents-supervise-netns-probe"
    policy = _policy(sandbox_tmp, {"usr": f"sh -c 'echo hi > {target}'; exit 1"}, private_view=False)
    env = {**os.environ, "PYTHONPATH": REPO}
    run = subprocess.run(
        [*unshare, sys.executable, "-c", _CALL_ONE, str(policy), "bash_usr"],
        capture_output=True,
        text=True,
        env=env,
        cwd=REPO,
        timeout=120,
    )
    assert run.returncode == 0, run.stderr
    out = json.loads(run.stdout)
    assert out["unavailable"].startswith(reason) and out["at_once"] is True, out
    assert f"sh: 1: cannot create {target}: Permission denied" in out["data"], out["data"]
    assert (
        f"[denied: write {target} was probably refused by Landlock (this host gives no audit records" in (out["data"])
    )
    assert "granted read-only by the policy's system_paths (/usr, read-only for every toolbox)" in out["data"]
    assert ["denied", f"landlock fs.write_file {target}"] in out["metadata"]
    assert f"kernel audit: not read ({reason}" in run.stderr
    [started] = [
        json.loads(line)
        for line in (sandbox_tmp / "state" / "trace.jsonl").read_text().splitlines()
        if json.loads(line)["event"] == "kernel_audit"
    ]
    assert started["reading"] is False and started["reason"].startswith(reason)
    check = subprocess.run(
        [*unshare, sys.executable, "-m", "supervisor", "check", "--policy", str(policy), "--json"],
        capture_output=True,
        text=True,
        env=env,
        cwd=REPO,
        timeout=120,
    )
    explained = json.loads(check.stdout)["denial_explanations"]
    if reason == NOT_INITIAL_NETNS:
        assert all(NOT_INITIAL_NETNS in line for line in explained), explained
        assert explained[0].startswith("Landlock denials: guessed from the 'Permission denied' paths")
    else:
        assert all("the supervisor runs in a PID namespace of its own" in line for line in explained), explained


@pytest.mark.root  # compiles a policy with cgroup limits: making a cgroup needs root
def test_check_lists_which_explanations_this_host_gives(sandbox_tmp: Path) -> None:
    from tests.supervisor.frontends.test_frontends import _cli

    policy = write_policy(sandbox_tmp, {"tester": agent(builtinToolboxes=[system_toolbox()])}, kernel_audit="off")
    out = json.loads(_cli("check", "--policy", str(policy), "--json").stdout)
    assert out["kernel_audit"] == "off"
    assert out["denial_explanations"] == [
        "Landlock denials: guessed from the 'Permission denied' paths in a failed call's text and the toolbox's "
        "rules (kernel_audit: off in the policy)",
        "seccomp refusals: not named (kernel_audit: off in the policy)",
    ]


@pytest.mark.root
@needs_landlock_audit
def test_check_says_audit_records_explain_denials_as_root(sandbox_tmp: Path) -> None:
    from tests.supervisor.frontends.test_frontends import _cli

    policy = write_policy(sandbox_tmp, {"tester": agent(builtinToolboxes=[system_toolbox()])})
    human = _cli("check", "--policy", str(policy)).stdout
    assert "a call refused by the kernel is explained (kernel_audit: enable):" in human
    assert "Landlock denials: from the kernel's audit records" in human, human
    assert "seccomp refusals: from the kernel's audit records" in human


@pytest.mark.root
async def test_in_the_private_view_a_write_to_a_read_only_path_is_explained_too(sandbox_tmp: Path) -> None:
    # the view mounts what a worker may only read read-only: the kernel answers EROFS before Landlock is asked
    policy = _policy(sandbox_tmp, {"etc": "echo hi > /etc/planted; exit 1"})
    async with Supervisor.open(policy) as sup:
        etc = await sup.call("bash_etc", {})
    assert "Read-only file system" in etc.data, etc.data
    assert "[denied: write /etc/planted was refused by the worker's private view" in etc.data, etc.data
    assert [r["source"] for r in _denials(sandbox_tmp) if r["target"] == "/etc/planted"] == ["error text"]


@pytest.mark.root
@needs_landlock_audit
async def test_a_refusal_in_one_worker_never_shows_in_another_workers_result(sandbox_tmp: Path) -> None:
    import trio

    for folder, name, run in (
        ("tools", "noisy", 'for i in 1 2 3 4 5 6 7 8; do echo x > "/tmp/noisy-$i"; done; exit 1'),
        ("other", "quiet", "sleep 0.3; echo /tmp/noisy-1 is not mine; exit 1"),
    ):
        (sandbox_tmp / folder).mkdir()
        write_script(sandbox_tmp / folder, name, describe_json(name), run)
    policy = write_policy(
        sandbox_tmp,
        {
            "tester": agent(
                bashToolboxes=[
                    {"tag": "FileSystemDirectory", "contents": {"Path": "./tools"}},
                    {"tag": "FileSystemDirectory", "contents": {"Path": "./other"}},
                ]
            )
        },
        landlock_min_abi=6,
        private_view=False,
    )
    results = {}
    async with Supervisor.open(policy) as sup:
        assert sup.load_errors() == []

        async def call(tool: str) -> None:
            results[tool] = await sup.call(tool, {})

        async with trio.open_nursery() as nursery:  # both in flight at once, on two workers
            nursery.start_soon(call, "bash_quiet")
            nursery.start_soon(call, "bash_noisy")
    assert "[denied: Landlock refused to create a file in /tmp" in results["bash_noisy"].data
    # quiet's text names /tmp/noisy-1, so a refusal of the other worker given to it would be a note here; its own
    # shell's probes (/dev/tty) are its own and only counted
    quiet = results["bash_quiet"]
    assert [line for line in quiet.data.splitlines() if line.startswith("[denied") and "/tmp" in line] == [], quiet.data
    assert quiet.meta("denied") is None
    assert {r["toolbox"] for r in _denials(sandbox_tmp) if r["target"] == "/tmp"} == {"tools"}


@pytest.mark.root
async def test_a_worker_cannot_leave_its_audit_session_or_speak_to_the_audit_socket(sandbox_tmp: Path) -> None:
    import os

    from sandbox import read_session

    probe = (
        "cat /proc/self/sessionid; echo; (echo 0 > /proc/self/loginuid) 2>/dev/null && echo LEFT; "
        'python3 -c \'import socket\ntry:\n socket.socket(16, 3, 9)\n print("AUDIT SOCKET")\n'
        'except OSError as e:\n print("refused", e.errno)\'; cat /proc/self/sessionid'
    )
    policy = _policy(sandbox_tmp, {"probe": probe})
    async with Supervisor.open(policy) as sup:
        result = await sup.call("bash_probe", {})
        worker = sup.runners[0].worker
        session = read_session(worker.pid)
    lines = [line for line in result.data.splitlines() if line.strip()]
    assert session is not None and session != read_session(os.getpid()), result.data
    assert "LEFT" not in result.data and "AUDIT SOCKET" not in result.data, result.data
    assert "refused 93" in result.data  # NETLINK_AUDIT: EPROTONOSUPPORT from the seccomp filter
    assert lines.count(str(session)) >= 2, result.data  # the same session before and after the attempt
