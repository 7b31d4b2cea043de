"""Escape attempts from inside a real worker: a real shell run by ``execute-command`` in the real sandbox.

Each attempt is a shell command that would exit 0 if the sandbox let it through; a 0 is a breach, and the test shows
what the command printed. The worker's FileSandbox is ``DirectoryRecursive <tmp>/project`` (read-write, because
``execute-command`` is enabled); ``<tmp>/secret.txt`` beside it is world-readable, so only the sandbox stands between
the worker and it.
"""

from __future__ import annotations

import os
import socket
import stat
import struct
import zlib
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from supervisor._supervisor import Supervisor
from tests._policies import agent, system_toolbox, write_policy

if TYPE_CHECKING:
    from collections.abc import AsyncIterator

pytestmark = pytest.mark.root

SECRET = "top-secret-value"


@pytest.fixture(params=["zygote", "launcher"])
async def sup(sandbox_tmp: Path, request: pytest.FixtureRequest) -> AsyncIterator[Supervisor]:
    """A supervisor whose worker is forked by the zygote or started by a fresh launcher (``supervision.spawn``):
    every attempt below must fail the same way under both."""
    project = sandbox_tmp / "project"
    project.mkdir()
    os.chown(project, 65534, 65534)
    (sandbox_tmp / "secret.txt").write_text(SECRET)
    os.chmod(sandbox_tmp / "secret.txt", 0o644)
    (sandbox_tmp / "open.txt").write_text("world-writable")
    os.chmod(sandbox_tmp / "open.txt", 0o666)  # DAC would allow writing it: only Landlock stops the worker
    (project / "readonly.txt").write_text("keep me")
    os.chmod(project / "readonly.txt", 0o644)  # owned by root: the sandbox uid may read, not write
    os.symlink(sandbox_tmp / "secret.txt", project / "planted-link")
    fsb = {"fsbPredicate": {"tag": "DirectoryRecursive", "contents": str(project)}, "fsbName": "project"}
    toolbox = system_toolbox(capabilities=["execute-command", "attach-file", "list-directory", "date"], FileSandbox=fsb)
    policy = write_policy(
        sandbox_tmp,
        {"tester": agent(builtinToolboxes=[toolbox])},
        landlock_min_abi=6,
        supervision={"spawn": request.param},
    )
    async with Supervisor.open(policy) as s:
        assert (getattr(s.services.spawner, "serving", None) is not None) == (request.param == "zygote")
        yield s


async def _run(sup: Supervisor, command: str) -> dict:
    result = await sup.call("system_system_execute_command", {"command": command})
    assert result.structured is not None, result.data
    return result.structured


async def _assert_refused(sup: Supervisor, command: str) -> dict:
    out = await _run(sup, command)
    assert out["exitCode"] != 0, f"BREACH: {command!r} succeeded: stdout={out['stdout']!r} stderr={out['stderr']!r}"
    assert SECRET not in out["stdout"], f"BREACH: secret leaked by {command!r}"
    return out


async def test_inside_the_sandbox_works(sup: Supervisor, sandbox_tmp: Path) -> None:
    project = sandbox_tmp / "project"
    out = await _run(sup, f"echo hello > {project}/new.txt && cat {project}/new.txt && cat {project}/readonly.txt")
    assert out["exitCode"] == 0, out
    assert out["stdout"] == "hello\nkeep me"


async def test_reading_and_writing_outside_fail(sup: Supervisor, sandbox_tmp: Path) -> None:
    project = sandbox_tmp / "project"
    secret = sandbox_tmp / "secret.txt"
    for command in (
        f"cat {secret}",
        f"cat {project}/../secret.txt",
        f"cat {project}/planted-link",
        f"echo x > {secret}",
        f"echo x > {sandbox_tmp}/open.txt",
        f"echo x >> {sandbox_tmp}/open.txt",
        f"echo x > {sandbox_tmp}/new-outside.txt",
        f"ln {secret} {project}/hardlink && cat {project}/hardlink",
        f"ln -s {secret} {project}/newlink && cat {project}/newlink",
        f"cat /proc/self/root{secret}",
        f"cat /proc/{os.getpid()}/root{secret}",
        f"cat /proc/{os.getpid()}/environ",
        "cat /etc/shadow",
        "ls /root",
        f"mv {secret} {project}/stolen",
    ):
        out = await _assert_refused(sup, command)
        assert (
            "Permission denied" in out["stderr"]
            or "Operation not permitted" in out["stderr"]
            or "Invalid cross-device link" in out["stderr"]
            or "No such file" in out["stderr"]
        ), (command, out)
    assert secret.read_text() == SECRET
    assert (sandbox_tmp / "open.txt").read_text() == "world-writable"
    assert not (sandbox_tmp / "new-outside.txt").exists()


async def test_metadata_changes_outside_fail(sup: Supervisor, sandbox_tmp: Path) -> None:
    # Landlock does not cover chmod/chown/utime/xattr: the non-root uid must stop them.
    secret = sandbox_tmp / "secret.txt"
    before = os.stat(secret)
    for command in (
        f"chmod 777 {secret}",
        f"chown 65534 {secret}",
        f"touch -d 2001-01-01 {secret}",
        f"python3 -c \"import os; os.setxattr('{secret}', 'user.x', b'y')\"",
    ):
        await _assert_refused(sup, command)
    after = os.stat(secret)
    assert (after.st_mode, after.st_uid, after.st_mtime_ns) == (before.st_mode, before.st_uid, before.st_mtime_ns)


async def test_truncate_and_device_nodes_fail(sup: Supervisor, sandbox_tmp: Path) -> None:
    project = sandbox_tmp / "project"
    await _assert_refused(sup, f": > {project}/readonly.txt")
    await _assert_refused(sup, f"truncate -s 0 {project}/readonly.txt")
    assert (project / "readonly.txt").read_text() == "keep me"
    await _assert_refused(sup, f"mknod {project}/null c 1 3")


async def test_setuid_binaries_gain_nothing(sup: Supervisor, sandbox_tmp: Path) -> None:
    su = "/usr/bin/su" if os.path.exists("/usr/bin/su") else "/bin/su"
    assert os.stat(su).st_mode & stat.S_ISUID
    out = await _run(sup, f"{su} -c id root </dev/null; id -u")
    assert out["stdout"].strip().splitlines()[-1] == "65534"
    status = await _run(sup, "grep -E '^(NoNewPrivs|CapEff|CapPrm|CapBnd)' /proc/self/status")
    lines = dict(line.split(":\t") for line in status["stdout"].strip().splitlines())
    assert lines["NoNewPrivs"] == "1" and int(lines["CapEff"], 16) == 0 and int(lines["CapBnd"], 16) == 0


async def test_signalling_the_supervisor_fails(sup: Supervisor) -> None:
    # The supervisor's pid does not exist in the worker's PID namespace, and Landlock scoping (ABI 6) would refuse
    # the signal anyway (tests/sandbox/test_launcher.py checks scoping without a PID namespace).
    out = await _assert_refused(sup, f"kill -TERM {os.getpid()}")
    assert "No such process" in out["stderr"] or "not permitted" in out["stderr"]
    procs = await _run(sup, "ls /proc | grep -E '^[0-9]+$' | wc -l; cat /proc/1/cmdline | tr '\\0' ' '")
    count, cmdline = procs["stdout"].splitlines()[:2]
    assert int(count) <= 5, procs  # only the worker's own processes are visible
    # PID 1 is the worker: a launcher, or a fork of the zygote (whose command line it keeps)
    forked = getattr(sup.services.spawner, "serving", None)
    assert ("sandbox._zygote" if forked else "sandbox._launcher") in cmdline, cmdline


async def test_abstract_unix_socket_of_the_supervisor_is_unreachable(sup: Supervisor) -> None:
    name = f"agents-supervise-test-{os.getpid()}"
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind("\0" + name)
    server.listen(1)
    try:
        probe = (
            f"python3 -c \"import socket; s = socket.socket(socket.AF_UNIX); s.connect('\\0{name}'); "
            "print('connected')\""
        )
        out = await _assert_refused(sup, probe)
        assert "connected" not in out["stdout"]
    finally:
        server.close()


async def test_network_is_unreachable(sup: Supervisor) -> None:
    await _assert_refused(sup, "exec 3<>/dev/tcp/127.0.0.1/22")
    await _assert_refused(sup, "python3 -c \"import socket; socket.create_connection(('203.0.113.1', 80), 2)\"")
    await _assert_refused(
        sup,
        'python3 -c "import socket; s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); '
        "s.sendto(b'x', ('203.0.113.1', 53))\"",
    )
    await _assert_refused(
        sup,
        'python3 -c "import socket; s = socket.socket(socket.AF_INET, socket.SOCK_STREAM, '
        "262); s.connect(('127.0.0.1', 1))\"",
    )


def _png(width: int = 1, height: int = 1) -> bytes:
    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    raw = b"".join(b"\x00" + b"\x00\x00\x00" * width for _ in range(height))
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0))
        + chunk(b"IDAT", zlib.compress(raw))
        + chunk(b"IEND", b"")
    )


async def test_attach_file_and_list_directory(sup: Supervisor, sandbox_tmp: Path) -> None:
    project = sandbox_tmp / "project"
    (project / "pic.dat").write_bytes(_png())
    ok = await sup.call("system_system_attach_file", {"filepath": str(project / "pic.dat")})
    assert ok.status == "passed", ok.data
    (att,) = ok.attachments
    assert att.media_type == "image/png" and att.sha256 and att.size == len(_png())
    assert sup.services.calls.attachments.read(att) == _png()
    refused = await sup.call("system_system_attach_file", {"filepath": str(sandbox_tmp / "secret.txt")})
    assert refused.status == "error" and "not allowed by the file sandbox 'project'" in refused.data
    ghost = await sup.call("system_system_attach_file", {"filepath": str(sandbox_tmp / "no-such-file.png")})
    assert ghost.data.replace("no-such-file.png", "secret.txt") == refused.data  # existence is not revealed
    listing = await sup.call("system_system_list_directory", {"path": str(project)})
    names = {e["name"] for e in listing.structured["entries"]}
    assert {"pic.dat", "readonly.txt"} <= names
    assert "planted-link" not in names  # it leads outside the sandbox
    outside = await sup.call("system_system_list_directory", {"path": str(sandbox_tmp)})
    assert outside.status == "error"


async def test_attachment_refusals(sup: Supervisor, sandbox_tmp: Path) -> None:
    from toolboxes import Attachment, ToolResult

    worker = sup.runner("system").spec.plan.workdir
    Path(worker, "ok.png").write_bytes(_png())
    Path(worker, "fake.png").write_bytes(b"GIF89a" + b"\x00" * 20)
    Path(worker, "big.png").write_bytes(_png() + b"\x00" * (sup.services.calls.attachments.limits["images"] + 1))
    os.symlink(worker + "/ok.png", worker + "/link.png")
    cases = {
        "link.png": "symbolic link",
        "../ok.png": "leaves the work folder",
        "/etc/passwd": "not absolute",
        "fake.png": "they look like image/gif",
        "big.png": "more than the limit",
        "ok.png": None,
    }
    result = ToolResult.passed("x", attachments=[Attachment("image/png", p) for p in cases])
    stored = sup.services.calls.attachments.store(worker, result)
    assert stored.status == "passed"
    assert [a.path for a in stored.attachments] == ["ok.png"]
    for path, reason in cases.items():
        if reason:
            assert any(path in note and reason in note for _, note in stored.metadata), (path, stored.metadata)


async def test_command_filter_fails_closed(sandbox_tmp: Path) -> None:
    filters = {
        "allow": '#!/bin/sh\necho \'{"acceptance": "allowed", "note": "ok"}\'\n',
        "refuse": '#!/bin/sh\necho \'{"acceptance": "refused", "note": "no rm please"}\'\n',
        "garbage": "#!/bin/sh\necho not-json\n",
        "crash": "#!/bin/sh\nexit 3\n",
        "writes": '#!/bin/sh\necho x > /tmp/filter-wrote && echo \'{"acceptance": "allowed"}\'\n',
    }
    toolboxes = []
    for name, body in filters.items():
        path = sandbox_tmp / f"filter-{name}.sh"
        path.write_text(body)
        os.chmod(path, 0o755)
        toolboxes.append(system_toolbox(name, capabilities=["execute-command"], CommandFilter=str(path)))
    policy = write_policy(sandbox_tmp, {"tester": agent(builtinToolboxes=toolboxes)})
    async with Supervisor.open(policy) as s:
        allowed = await s.call("system_allow_execute_command", {"command": "echo hi"})
        assert allowed.status == "passed" and allowed.structured["stdout"] == "hi\n"
        refused = await s.call("system_refuse_execute_command", {"command": "echo hi"})
        assert refused.status == "error" and "no rm please" in refused.data
        for name in ("garbage", "crash", "writes"):
            result = await s.call(f"system_{name}_execute_command", {"command": "echo hi"})
            assert result.status == "error" and "refusing" in result.data, (name, result.data)
    assert not Path("/tmp/filter-wrote").exists()


async def test_unlisted_capability_has_no_tool(sup: Supervisor) -> None:
    names = {t.name for t in sup.list_tools()}
    assert "system_system_hostname" not in names
    result = await sup.call("system_system_hostname", {})
    assert result.status == "error" and "Tool not found" in result.data
