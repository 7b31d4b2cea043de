"""Set-uid and set-gid mode bits refused in real workers (issue 24 item 8): a member of a ``shared_groups`` folder
tries to leave a 6755 file on the host's file system, by every call that can set a mode; the seccomp filter
refuses each with ``EPERM`` and the host's file never carries the bits, while ordinary modes still work."""

from __future__ import annotations

import os
import stat
from typing import TYPE_CHECKING

import pytest

from supervisor._supervisor import Supervisor
from tests._policies import agent, system_toolbox, write_policy

if TYPE_CHECKING:
    from pathlib import Path

pytestmark = pytest.mark.root

FIRST = 3_200_000_000
GID = 3_210_000_000

#: Each way to ask for set-id bits, then the ordinary modes; prints ``<name> <errno or ok>`` per line.
ATTEMPTS = r"""python3 - <<'PY'
import ctypes, errno, os
libc = ctypes.CDLL(None, use_errno=True)
def attempt(name, fn):
    try:
        fn()
        print(name, "ok")
    except OSError as exc:
        print(name, exc.errno)
def raw(name, *args):
    def call():
        if getattr(libc, name)(*args) < 0:
            raise OSError(ctypes.get_errno(), name)
    return call
open("plain", "w").write("#!/bin/sh\necho hi\n")
attempt("chmod", lambda: os.chmod("plain", 0o6755))
attempt("chmod_u", lambda: os.chmod("plain", 0o4755))
attempt("chmod_g", lambda: os.chmod("plain", 0o2755))
fd = os.open("plain", os.O_RDONLY)
attempt("fchmod", lambda: os.fchmod(fd, 0o6755))
attempt("fchmodat", lambda: os.chmod("plain", 0o6755, dir_fd=os.open(".", os.O_RDONLY)))
attempt("open_creat", lambda: os.close(os.open("made", os.O_CREAT | os.O_WRONLY, 0o6755)))
attempt("creat", raw("creat", b"made2", 0o4755))
attempt("mknod", lambda: os.mknod("made3", 0o106755))
attempt("mkdir", lambda: os.mkdir("folder", 0o6775))
attempt("chmod_dir", lambda: os.chmod("folder", 0o2775))
attempt("ordinary_chmod", lambda: os.chmod("plain", 0o755))
attempt("ordinary_open", lambda: os.close(os.open("made4", os.O_CREAT | os.O_WRONLY, 0o750)))
attempt("sticky", lambda: os.chmod("folder", 0o1777))
attempt("open_existing", lambda: os.close(os.open("plain", os.O_RDONLY, 0o6755)))
PY
chmod 6755 plain 2>&1; echo "shell $?"
"""


async def test_a_shared_group_member_cannot_leave_set_id_files_on_the_host(sandbox_tmp: Path) -> None:
    shared = sandbox_tmp / "shared"
    shared.mkdir()
    os.chown(shared, 0, GID)
    os.chmod(shared, 0o2770)
    fsb = {"fsbPredicate": {"tag": "DirectoryRecursive", "contents": str(shared)}, "fsbName": "shared"}
    policy = write_policy(
        sandbox_tmp,
        {"tester": agent(builtinToolboxes=[system_toolbox("alpha", ["execute-command"], FileSandbox=fsb)])},
        landlock_min_abi=6,
        worker_uids={"first": FIRST, "count": 1000},
        shared_groups=[{"gid": GID, "toolboxes": ["tester/alpha"]}],
    )
    async with Supervisor.open(policy) as sup:
        result = await sup.call("system_alpha_execute_command", {"command": f"cd {shared} && {ATTEMPTS}"})
    assert result.structured is not None, result.data
    out = result.structured["stdout"].splitlines()
    answers = dict(line.split(" ", 1) for line in out if not line.startswith("chmod: "))
    eperm = str(1)
    for name in ("chmod", "chmod_u", "chmod_g", "fchmod", "fchmodat", "open_creat", "creat", "mknod", "chmod_dir"):
        assert answers[name] == eperm, (name, out)
    for name in ("mkdir", "ordinary_chmod", "ordinary_open", "sticky", "open_existing"):
        assert answers[name] == "ok", (name, out)
    assert any("Operation not permitted" in line for line in out), out  # coreutils' chmod says why
    assert answers["shell"] != "0", out
    # On the host: no file or folder the worker made carries a set-id bit
    for path in shared.iterdir():
        mode = path.lstat().st_mode
        assert not mode & (stat.S_ISUID | stat.S_ISGID), (path, oct(mode))
        assert path.lstat().st_gid == GID
    assert stat.S_IMODE((shared / "plain").stat().st_mode) == 0o755
    assert stat.S_IMODE((shared / "folder").stat().st_mode) == 0o1777
    assert not (shared / "made").exists() and not (shared / "made2").exists() and not (shared / "made3").exists()
