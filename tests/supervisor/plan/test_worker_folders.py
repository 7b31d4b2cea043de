"""The folders root prepares for a worker at every start, attacked from a real worker: a ``tmp`` replaced by a link
to a root-owned folder, or by a dangling link, is replaced at the next start; its target keeps its owner and mode,
and every toolbox starts again."""

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


def _policy(root: Path) -> Path:
    boxes = [system_toolbox("alpha", capabilities=["execute-command"]), system_toolbox("beta", capabilities=["date"])]
    return write_policy(
        root, {"tester": agent(builtinToolboxes=boxes)}, worker_uids={"first": 3_000_000_000, "count": 1000}
    )


@pytest.mark.parametrize("target", ["victim", "missing"])
async def test_a_worker_that_links_its_tmp_elsewhere_gets_a_fresh_tmp_and_the_target_is_untouched(
    sandbox_tmp: Path, target: str
) -> None:
    victim = sandbox_tmp / "victim"
    victim.mkdir()
    os.chmod(victim, 0o755)  # root's, like /etc/cron.d or the state dir
    policy = _policy(sandbox_tmp)
    link = sandbox_tmp / target
    async with Supervisor.open(policy) as sup:
        out = await sup.call(
            "system_alpha_execute_command",
            {"command": f'rm -rf "$TMPDIR" && ln -s {link} "$TMPDIR" && readlink "$TMPDIR"'},
        )
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


async def test_a_folder_of_another_owner_in_a_work_folder_is_that_toolboxs_load_error(sandbox_tmp: Path) -> None:
    """Not a link but a real folder of another uid at ``tmp`` (moved there somehow): root does not take it; that
    toolbox does not load and says why, the others serve."""
    tmp = sandbox_tmp / "state" / "work" / "tester" / "alpha" / "tmp"
    tmp.mkdir(parents=True)
    os.chown(tmp.parent, 12344, 12344)  # the work folder of a former uid: handed over, but not what it did not own
    os.chown(tmp, 12345, 12345)
    async with Supervisor.open(_policy(sandbox_tmp)) as sup:
        other = await sup.call("system_beta_date", {})
        assert other.status == "passed", other.data
        [error] = [e for e in sup.load_errors() if e.get("toolbox") == "alpha"]
        assert f"{tmp} belongs to uid 12345" in error["message"] and "Move it away" in error["message"]
    assert os.stat(tmp).st_uid == 12345 and os.stat(tmp.parent).st_uid not in (0, 12344)
