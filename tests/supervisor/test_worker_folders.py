"""The folders root prepares for a worker at every start, attacked from a real worker: a ``tmp`` replaced by a link
to a root-owned folder, or by a dangling link, is replaced at the next start; its target keeps its owner and mode,
and every toolbox starts again."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from supervisor._supervisor import Supervisor
from tests._policies import agent, system_toolbox, write_policy

pytestmark = pytest.mark.root


def _policy(root: Path) -> Path:
    boxes = [system_toolbox("alpha", capabilities=["execute-command"]), system_toolbox("beta", capabilities=["date"])]
    return write_policy(root, {"tester": agent(builtinToolboxes=boxes)},
                        worker_uids={"first": 3_000_000_000, "count": 1000})


@pytest.mark.parametrize("target", ["victim", "missing"])
async def test_a_worker_that_links_its_tmp_elsewhere_gets_a_fresh_tmp_and_the_target_is_untouched(
        sandbox_tmp: Path, target: str) -> None:
    victim = sandbox_tmp / "victim"
    victim.mkdir()
    os.chmod(victim, 0o755)  # root's, like /etc/cron.d or the state dir
    policy = _policy(sandbox_tmp)
    link = sandbox_tmp / target
    async with Supervisor.open(policy) as sup:
        out = await sup.call("system_alpha_execute_command",
                             {"command": f'rm -rf "$TMPDIR" && ln -s {link} "$TMPDIR" && readlink "$TMPDIR"'})
        assert out.structured is not None and out.structured["stdout"] == f"{link}\n", out.data
    tmp = sandbox_tmp / "state" / "work" / "tester" / "alpha" / "tmp"
    assert tmp.is_symlink()
    async with Supervisor.open(policy) as sup:  # used to chown and chmod the target (or fail: File exists)
        out = await sup.call("system_alpha_execute_command", {"command": 'touch "$TMPDIR/x" && stat -c %u "$TMPDIR"'})
        assert out.structured is not None and out.structured["exitCode"] == 0, out.data
        other = await sup.call("system_beta_date", {})
        assert other.status == "passed", other.data
    assert not tmp.is_symlink() and tmp.is_dir()
    assert out.structured["stdout"].strip() == str(tmp.stat().st_uid) != "0"
    st = victim.stat()
    assert (st.st_uid, st.st_gid, stat.S_IMODE(st.st_mode)) == (0, 0, 0o755)
    assert list(victim.iterdir()) == []
    assert not (sandbox_tmp / "missing").exists()
