"""``agents-supervise check`` shows each worker's private view: the mount list and the host name it will see."""

from __future__ import annotations

import json
import socket
from typing import TYPE_CHECKING

import pytest

from tests._policies import agent, system_toolbox, write_policy

from .test_frontends import _cli

if TYPE_CHECKING:
    from pathlib import Path


@pytest.mark.root  # compiles a policy with cgroup limits: making a cgroup needs root
def test_check_lists_the_mounts_of_each_workers_view(sandbox_tmp: Path) -> None:
    toolboxes = [system_toolbox("plain", capabilities=["date"]), system_toolbox("named", capabilities=["hostname"])]
    policy = write_policy(sandbox_tmp, {"tester": agent(builtinToolboxes=toolboxes)})
    report = json.loads(_cli("check", "--policy", str(policy), "--json").stdout)
    views = {tb["toolbox"]: tb["view"] for tb in report["toolboxes"]}
    workdir = f"{sandbox_tmp}/state/work/tester/plain"
    assert f"{workdir}: read-write bind of the host's" in views["plain"]
    assert "/usr: read-only bind of the host's, inodes of its own (overlay)" in views["plain"]  # no shared locks
    assert "/bin -> usr/bin" in views["plain"]
    assert "/tmp: fresh tmpfs of 64 MiB" in views["plain"] and "/etc/passwd: generated" in views["plain"]
    assert views["plain"][-1] == "host name: sandbox" and views["named"][-1] == f"host name: {socket.gethostname()}"
    human = _cli("check", "--detail", "--policy", str(policy)).stdout
    assert "filesystem view: private root, only these mounts:" in human and f"    {workdir}: read-write" in human

    off = write_policy(sandbox_tmp, {"tester": agent(builtinToolboxes=toolboxes)}, private_view=False)
    report = json.loads(_cli("check", "--policy", str(off), "--json").stdout)
    assert [tb["view"] for tb in report["toolboxes"]] == [None, None]
    detail = _cli("check", "--detail", "--policy", str(off)).stdout
    assert "filesystem view: the host's tree (private_view: false)" in detail
