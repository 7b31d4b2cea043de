"""Extended attributes from inside real workers: refused by default (seccomp answers EOPNOTSUPP, as a file system
without them would), allowed for a toolbox whose policy says ``xattrs: true``.

Landlock (up to ABI 7) does not mediate the ``*xattr`` calls: without the filter, a worker could set, read and remove
``user.*`` attributes on any file its uid or group may write or read, a channel between tenants no Landlock rule sees.
Two toolboxes, ``plain`` (the default) and ``knob`` (``xattrs: true``), each with a project folder holding a file
that already carries a ``user.note`` attribute set by the test (root, outside the sandbox).
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

import pytest

from supervisor._supervisor import Supervisor
from tests._policies import agent, system_toolbox, write_policy

if TYPE_CHECKING:
    from collections.abc import AsyncIterator
    from pathlib import Path

pytestmark = pytest.mark.root

#: every call of the family the Python standard library reaches (path, fd and no-follow forms)
ATTEMPTS = """python3 - <<'PYEOF'
import errno, os, sys
path = sys.argv[1] if len(sys.argv) > 1 else "{path}"
fd = os.open(path, os.O_RDWR)
calls = [
    ("getxattr", lambda: os.getxattr(path, "user.note")),
    ("lgetxattr", lambda: os.getxattr(path, "user.note", follow_symlinks=False)),
    ("fgetxattr", lambda: os.getxattr(fd, "user.note")),
    ("listxattr", lambda: os.listxattr(path)),
    ("flistxattr", lambda: os.listxattr(fd)),
    ("setxattr", lambda: os.setxattr(path, "user.planted", b"from-the-worker")),
    ("lsetxattr", lambda: os.setxattr(path, "user.planted2", b"x", follow_symlinks=False)),
    ("fsetxattr", lambda: os.setxattr(fd, "user.planted3", b"x")),
    ("removexattr", lambda: os.removexattr(path, "user.planted3")),
    ("fremovexattr", lambda: os.removexattr(fd, "user.planted2")),
]
for name, call in calls:
    try:
        print(name, "ok", call())
    except OSError as exc:
        print(name, "EOPNOTSUPP" if exc.errno == errno.EOPNOTSUPP else errno.errorcode.get(exc.errno, exc.errno))
PYEOF"""


@pytest.fixture
async def sup(sandbox_tmp: Path) -> AsyncIterator[Supervisor]:
    toolboxes = []
    for name in ("plain", "knob"):
        project = sandbox_tmp / name
        project.mkdir()
        os.chown(project, 65534, 65534)
        target = project / "file.txt"
        target.write_text("data")
        os.chown(target, 65534, 65534)
        os.setxattr(target, "user.note", b"set-by-root")
        fsb = {"fsbPredicate": {"tag": "DirectoryRecursive", "contents": str(project)}, "fsbName": name}
        toolboxes.append(system_toolbox(name, capabilities=["execute-command"], FileSandbox=fsb))
    policy = write_policy(
        sandbox_tmp, {"tester": agent(builtinToolboxes=toolboxes)}, toolboxes={"knob": {"xattrs": True}}
    )
    async with Supervisor.open(policy) as s:
        yield s


async def _attempts(sup: Supervisor, toolbox: str, path: Path) -> dict[str, str]:
    result = await sup.call(f"system_{toolbox}_execute_command", {"command": ATTEMPTS.format(path=path)})
    assert result.structured is not None, result.data
    out = result.structured
    assert out["exitCode"] == 0, out
    return {line.split(" ", 1)[0]: line.split(" ", 1)[1] for line in out["stdout"].splitlines()}


async def test_xattrs_are_refused_by_default(sup: Supervisor, sandbox_tmp: Path) -> None:
    target = sandbox_tmp / "plain" / "file.txt"
    seen = await _attempts(sup, "plain", target)
    assert seen == {name: "EOPNOTSUPP" for name in seen} and len(seen) == 10, seen
    # nothing was planted, and root's attribute is untouched (the refusal is the filter's, not the file system's)
    assert os.listxattr(target) == ["user.note"]
    assert os.getxattr(target, "user.note") == b"set-by-root"


async def test_the_policy_knob_lets_a_toolbox_use_xattrs(sup: Supervisor, sandbox_tmp: Path) -> None:
    target = sandbox_tmp / "knob" / "file.txt"
    seen = await _attempts(sup, "knob", target)
    assert seen["getxattr"] == "ok b'set-by-root'", seen
    assert seen["fgetxattr"] == "ok b'set-by-root'"
    assert seen["listxattr"].startswith("ok ") and "user.note" in seen["listxattr"]
    assert all(
        seen[name] == "ok None" for name in ("setxattr", "lsetxattr", "fsetxattr", "removexattr", "fremovexattr")
    ), seen
    assert sorted(os.listxattr(target)) == ["user.note", "user.planted"]
    assert os.getxattr(target, "user.planted") == b"from-the-worker"


async def test_ls_and_cp_still_work_without_xattrs(sup: Supervisor, sandbox_tmp: Path) -> None:
    """EOPNOTSUPP is what programs already meet on file systems without attributes: ls -l and cp -a go on."""
    project = sandbox_tmp / "plain"
    command = (
        f"cd {project} && ls -l file.txt && cp -a file.txt copy.txt && python3 -c "
        "\"import shutil; shutil.copy2('file.txt', 'copy2.txt')\" && cat copy.txt copy2.txt"
    )
    result = await sup.call("system_plain_execute_command", {"command": command})
    out = result.structured
    assert out is not None and out["exitCode"] == 0, out
    assert out["stdout"].endswith("datadata"), out
    assert out["stderr"] == "", out
