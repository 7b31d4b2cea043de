"""The audit netlink socket: record parsing (any machine), then the real kernel (root): a process confined by the
launcher's Landlock flags and the logging seccomp filter, in an audit session of its own, produces records that name
the path, the domain, the system call and the session; the main filter's other answers are not logged."""

from __future__ import annotations

import ctypes
import os
import select
import struct
import time

import pytest

from sandbox import FsRule, landlock_abi, read_session, syscall_name
from sandbox import _audit_netlink as netlink
from sandbox._audit_session import set_audit_session
from sandbox._landlock import RESTRICT_SELF_LOG_NEW_EXEC_ON, apply_ruleset, plan_ruleset
from sandbox._seccomp import apply_seccomp, plan_seccomp, plan_seccomp_log

MACHINE = os.uname().machine


def test_fields_keep_quoted_values_whole_and_decode_hex_untrusted_strings() -> None:
    text = (
        'domain=1b7dda3d1 blockers=fs.make_reg path="/etc/a b=c" dev="vda" ino=19 '
        f"comm={b'x y'.hex().upper()} msg='agents-supervise-barrier 7-1' ses=4"
    )
    fields = netlink.parse_fields(text)
    assert fields["path"] == "/etc/a b=c" and "c" not in fields  # a space or '=' in a path adds no field
    assert fields["comm"] == "x y" and fields["ses"] == "4" and fields["ino"] == "19"
    assert fields["msg"] == "agents-supervise-barrier 7-1"


def test_a_message_is_a_record_with_its_serial_and_other_text_is_not() -> None:
    record = netlink.parse_message(1423, b'audit(1796131175.575:3): domain=1b blockers=fs.read_file path="/x"\0')
    assert record == netlink.AuditRecord(1423, 3, {"domain": "1b", "blockers": "fs.read_file", "path": "/x"})
    assert netlink.parse_message(1423, b"not a record") is None


def test_requests_and_the_status_answer_have_the_kernels_layout() -> None:
    raw = netlink.pack_request(netlink.AUDIT_GET, seq=9)
    assert struct.unpack("=IHHII", raw) == (16, 1000, 0x5, 9, 0)
    barrier = netlink.barrier_message("t1")
    assert struct.unpack_from("=IHHII", barrier)[1] == netlink.AUDIT_USER and barrier.endswith(b"barrier t1\0")
    status = netlink.parse_status(struct.pack("=IIIIIIII", 0, 1, 1, 0, 0, 64, 5, 2))
    assert status == netlink.AuditStatus(enabled=1, pid=0, lost=5, backlog=2)
    with pytest.raises(ValueError, match="shorter"):
        netlink.parse_status(b"\0" * 8)


def test_the_logging_filter_names_only_what_the_main_filter_refuses_outright() -> None:
    assert syscall_name("x86_64", 250) == "keyctl" and syscall_name("x86_64", 39) is None  # getpid
    assert syscall_name("aarch64", 219) == "keyctl" and syscall_name("s390x", 250) is None
    assert len(plan_seccomp_log("x86_64")) % 8 == 0 and len(plan_seccomp_log("aarch64")) % 8 == 0


def _confined_child(rules: list[FsRule], script: str) -> tuple[int, int | None]:
    """Fork a child that takes an audit session, the two seccomp filters and Landlock with the launcher's flags,
    then runs ``script`` under /bin/sh; return its pid (the caller waits) and the session it reported."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            os.close(r)
            set_audit_session(65534)
            os.write(w, str(read_session(os.getpid())).encode())
            os.close(w)
            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(38, 1, 0, 0, 0)  # no_new_privs
            apply_seccomp(plan_seccomp(MACHINE), MACHINE)
            apply_seccomp(plan_seccomp_log(MACHINE), MACHINE, log=True)
            apply_ruleset(plan_ruleset(rules, landlock_abi(), restrict_flags=RESTRICT_SELF_LOG_NEW_EXEC_ON))
            os.execv("/bin/sh", ["sh", "-c", script])
        finally:
            os._exit(127)
    os.close(w)
    with os.fdopen(r) as reported:
        text = reported.read()
    return pid, int(text) if text.isdigit() else None


def _records_until_barrier(reader: object, token: str, deadline_s: float = 10.0) -> list[netlink.AuditRecord]:
    out: list[netlink.AuditRecord] = []
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        select.select([reader], [], [], 0.5)
        while True:
            try:
                data = reader.recv(65536)  # type: ignore[attr-defined]
            except BlockingIOError:
                break
            length, kind = struct.unpack_from("=IH", data)
            record = netlink.parse_message(kind, data[16:length])
            if record is None:
                continue
            if record.type == netlink.AUDIT_USER and record.fields.get("msg", "").endswith(token):
                return out
            out.append(record)
    raise AssertionError("the barrier record never came back")


@pytest.mark.root
@pytest.mark.skipif(landlock_abi() < 7, reason="Landlock audit records need ABI 7 (kernel 6.15)")
def test_a_confined_process_is_reported_with_its_path_domain_syscall_and_session(sandbox_tmp: object) -> None:
    if netlink.audit_status().enabled == 0:
        netlink.enable()  # what the supervisor does with kernel_audit: enable (the default)
    reader, control = netlink.open_reader(), netlink.open_control()
    try:
        target = f"/tmp/agents-supervise-denied-{os.getpid()}"
        rules = [FsRule(p, "read") for p in ("/usr", "/lib", "/lib64", "/bin", "/etc") if os.path.exists(p)]
        script = (
            f"echo x > {target}; "
            "python3 -c 'import ctypes, os; l = ctypes.CDLL(None, use_errno=True); "
            "l.syscall(250, 0, 0, 0, 0, 0); os.fork() or os._exit(0)'"
        )
        pid, session = _confined_child(rules, script)
        os.waitpid(pid, 0)
        netlink.send_barrier(control, f"test-{pid}")
        records = _records_until_barrier(reader, f"test-{pid}")
    finally:
        reader.close()
        control.close()
    assert session is not None and session != read_session(os.getpid())
    access = [r for r in records if r.type == netlink.AUDIT_LANDLOCK_ACCESS and r.fields.get("path") == "/tmp"]
    assert access and "fs.make_reg" in access[0].fields["blockers"], records
    [domain] = [
        r
        for r in records
        if r.type == netlink.AUDIT_LANDLOCK_DOMAIN
        and r.fields.get("status") == "allocated"
        and r.fields["domain"] == access[0].fields["domain"]
    ]
    assert int(domain.fields["pid"]) == pid  # the process that made the domain, as the supervisor sees pids
    refused = [r for r in records if r.type == netlink.AUDIT_SECCOMP and r.fields.get("ses") == str(session)]
    names = {syscall_name(MACHINE, int(r.fields["syscall"])) for r in refused}
    assert "keyctl" in names, refused
    assert "clone3" not in names  # fork's clone3 -> ENOSYS comes from the main filter, which does not log
