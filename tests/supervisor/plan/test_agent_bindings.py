"""Which path a slug is bound to (``supervisor/plan/_agent_bindings.py``): the name the policy gives when only root
could have made or can move the links on its way (a Kubernetes ConfigMap volume, whose ``..data`` link the kubelet
swaps at each update), else the canonical path. With real supervisors: a ConfigMap-like swap keeps the slug, its
uid and folders; a link in a folder others may write, renamed over the named one by another uid, does not move the
slug to the file it leads to; another uid's file where the name leads now does not inherit it. Then the walk's
test of the links (read-only mounts included) and the pure binding rules.

(The same swap through a SIGHUP of a real ``serve --http``, on a read-only bind mount as in a pod, is
``tests/deploy/test_reloader.py``.)"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from supervisor._supervisor import Supervisor
from supervisor.config import load_agent_file
from supervisor.config._errors import ConfigError
from supervisor.plan._agent_bindings import AgentFile, agent_file_identity, bind_agents, loaded_agent_claim
from tests._policies import agent, system_toolbox, write_policy
from tests.deploy.test_reloader import _projected

FIRST, COUNT = 3_000_000_000, 65536
NOBODY = 65534


def _agent_text(capabilities: list[str]) -> str:
    return json.dumps(agent("coder", builtinToolboxes=[system_toolbox("tools", capabilities=capabilities)]))


def _policy(root: Path, named: Path) -> Path:
    policy = write_policy(root, {}, state_dir=str(root / "state"), worker_uids={"first": FIRST, "count": COUNT})
    policy.write_text(policy.read_text().replace("agents: []", f"agents: [{named}]"))
    return policy


def _bound(root: Path) -> dict[str, Any]:
    return dict(json.loads((root / "state" / "identities.json").read_text())["agents"]["coder"])


async def _uid(policy: Path) -> int:
    async with Supervisor.open(policy) as sup:
        out = await sup.call("system_tools_execute_command", {"command": "id -u"})
        assert out.structured is not None, out.data
        return int(out.structured["stdout"])


async def _refused(policy: Path) -> str:
    with pytest.raises(ConfigError) as caught:
        async with Supervisor.open(policy):
            pass
    return str(caught.value)


def _as_nobody(code: str) -> None:
    subprocess.run([sys.executable, "-c", code], user=NOBODY, group=NOBODY, check=True)


@pytest.mark.root
async def test_a_configmap_update_keeps_the_slug(sandbox_tmp: Path, fresh_uid_registry: Path) -> None:
    """The kubelet's swap moves the file's canonical path and inode; the name stays, and so do the slug's uid and
    folders. The binding is the name, with the canonical path it led to never recorded."""
    volume = sandbox_tmp / "configmap"
    _projected(volume, {"coder.json": _agent_text(["execute-command"])}, "v1")
    named = volume / "coder.json"
    policy = _policy(sandbox_tmp, named)
    uid = await _uid(policy)
    first = _bound(sandbox_tmp)
    assert first == {"file": str(named), "owner": 0, "device": first["device"], "inode": first["inode"]}
    _projected(volume, {"coder.json": _agent_text(["execute-command", "date"])}, "v2")  # kubectl edit configmap
    assert uid == await _uid(policy)
    second = _bound(sandbox_tmp)
    assert second["file"] == str(named) and second["inode"] != first["inode"], second


@pytest.mark.root
async def test_a_configmap_agent_and_its_sub_agent_belong_to_the_volume_folder(
    sandbox_tmp: Path, fresh_uid_registry: Path
) -> None:
    """An agent file in the volume belongs to the volume's folder, not to the version folder the kubelet deletes
    at the next update: its tools run there, and a sub-agent file it names relatively, a sibling in
    the volume, is bound by its name in the volume too, so the update keeps both slugs."""
    volume = sandbox_tmp / "configmap"
    coder = json.loads(_agent_text(["execute-command"]))
    coder["contents"]["extraAgents"] = [{"slug": "helper", "path": "helper.json"}]
    files = {"coder.json": json.dumps(coder), "helper.json": json.dumps(agent("helper"))}
    _projected(volume, files, "v1")
    policy = _policy(sandbox_tmp, volume / "coder.json")
    async with Supervisor.open(policy) as sup:
        out = await sup.call("system_tools_execute_command", {"command": "pwd"})
        assert out.structured is not None and out.structured["stdout"].strip() == str(volume), out.data
    bound = json.loads((sandbox_tmp / "state" / "identities.json").read_text())["agents"]
    assert bound["helper"]["file"] == str(volume / "helper.json"), bound
    _projected(volume, files, "v2")
    await _uid(policy)  # no conflict: both slugs stay with their names
    bound = json.loads((sandbox_tmp / "state" / "identities.json").read_text())["agents"]
    assert {bound[s]["file"] for s in ("coder", "helper")} == {str(volume / "coder.json"), str(volume / "helper.json")}


@pytest.mark.root
async def test_a_binding_by_canonical_path_moves_to_the_configmap_name(
    sandbox_tmp: Path, fresh_uid_registry: Path
) -> None:
    """A table from before (or a policy that named the file inside ``..v1`` directly) bound the canonical path;
    naming the file through the volume's links moves the binding to the name, keeping the uid."""
    volume = sandbox_tmp / "configmap"
    _projected(volume, {"coder.json": _agent_text(["execute-command"])}, "v1")
    real = volume / "..v1" / "coder.json"
    uid = await _uid(_policy(sandbox_tmp, real))
    assert _bound(sandbox_tmp)["file"] == str(real)
    named = volume / "coder.json"
    assert uid == await _uid(_policy(sandbox_tmp, named))
    assert _bound(sandbox_tmp)["file"] == str(named)
    _projected(volume, {"coder.json": _agent_text(["execute-command"])}, "v2")
    assert uid == await _uid(_policy(sandbox_tmp, named))


@pytest.mark.root
async def test_a_link_renamed_over_the_name_by_another_uid_does_not_move_the_slug(
    sandbox_tmp: Path, fresh_uid_registry: Path
) -> None:
    """The named link lies in a folder others may write: the binding is the canonical path. Another uid renames
    a root-owned link of that folder (to an older agent file of root's with more capabilities) over the name: the
    name now leads to a file of the same owner, which must not take the slug."""
    for version, capabilities in (("v1", ["execute-command"]), ("old", ["execute-command", "hostname"])):
        (sandbox_tmp / version).mkdir()
        (sandbox_tmp / version / "coder.json").write_text(_agent_text(capabilities))
    shared = sandbox_tmp / "shared"
    shared.mkdir()
    shared.chmod(0o777)  # others may add, remove and rename entries here
    (shared / "coder.json").symlink_to("../v1/coder.json")
    (shared / "old.json").symlink_to("../old/coder.json")
    policy = _policy(sandbox_tmp, shared / "coder.json")
    await _uid(policy)
    assert _bound(sandbox_tmp)["file"] == str(sandbox_tmp / "v1" / "coder.json")
    _as_nobody(f"import os; os.rename({str(shared / 'old.json')!r}, {str(shared / 'coder.json')!r})")
    assert os.lstat(shared / "coder.json").st_uid == 0  # still root's link, now leading to the old file
    text = await _refused(policy)
    assert f"belongs to {sandbox_tmp / 'v1' / 'coder.json'}" in text, text
    assert _bound(sandbox_tmp)["file"] == str(sandbox_tmp / "v1" / "coder.json")  # unchanged


@pytest.mark.root
async def test_another_uids_file_where_the_name_leads_does_not_inherit_the_slug(
    sandbox_tmp: Path, fresh_uid_registry: Path
) -> None:
    """Bound by its name; the next version's folder is one others may write, and another uid puts its file there
    before root swaps ``..data``: the name leads to a file of uid 65534, refused until rebound."""
    volume = sandbox_tmp / "configmap"
    _projected(volume, {"coder.json": _agent_text(["execute-command"])}, "v1")
    named = volume / "coder.json"
    policy = _policy(sandbox_tmp, named)
    await _uid(policy)
    (volume / "..v2").mkdir()
    (volume / "..v2").chmod(0o777)
    _as_nobody(f"open({str(volume / '..v2' / 'coder.json')!r}, 'w').write({_agent_text(['hostname'])!r})")
    (volume / "..data_tmp").symlink_to("..v2")
    os.replace(volume / "..data_tmp", volume / "..data")
    text = await _refused(policy)
    assert "bound to this path as the file of uid 0" in text and f"now belongs to uid {NOBODY}" in text, text
    assert f"agents-supervise rebind-agent coder {named}" in text
    assert _bound(sandbox_tmp)["owner"] == 0


@pytest.mark.root
def test_the_name_is_bound_only_when_every_link_is_roots_alone(sandbox_tmp: Path) -> None:
    target = sandbox_tmp / "v1" / "coder.json"
    target.parent.mkdir()
    target.write_text("{}")
    for mode, by_name in ((0o755, True), (0o1777, True), (0o777, False), (0o775, False)):
        folder = sandbox_tmp / f"links-{mode:o}"
        folder.mkdir()
        folder.chmod(mode)
        (folder / "coder.json").symlink_to(target)
        found = agent_file_identity(str(folder / "coder.json"))
        assert found.file == str(folder / "coder.json" if by_name else target), (oct(mode), found)
        assert found.owner == 0 and found.inode == target.stat().st_ino
    # a link of another uid in root's folder
    os.lchown(sandbox_tmp / "links-755" / "coder.json", NOBODY, NOBODY)
    assert agent_file_identity(str(sandbox_tmp / "links-755" / "coder.json")).file == str(target)
    # no link, or a name with a dot segment: the canonical path
    assert agent_file_identity(str(target)) == AgentFile(str(target), 0, target.stat().st_dev, target.stat().st_ino)
    dotted = f"{sandbox_tmp}/links-1777/../links-1777/coder.json"
    assert agent_file_identity(dotted).file == str(target)


@pytest.mark.root
def test_a_link_in_a_folder_others_may_write_counts_as_roots_on_a_read_only_mount(sandbox_tmp: Path) -> None:
    """A ConfigMap volume's folder is mode 0777 on the node, mounted read-only in the pod: nobody there can change
    its links. Checked in a mount namespace of its own with a read-only bind mount, as the pod has."""
    source, mounted = sandbox_tmp / "volume", sandbox_tmp / "mounted"
    _projected(source, {"coder.json": "{}"}, "v1")
    source.chmod(0o777)
    mounted.mkdir()
    code = (
        "from supervisor.plan._agent_bindings import agent_file_identity as f;"
        f"print(f({str(mounted / 'coder.json')!r}).file, f({str(source / 'coder.json')!r}).file)"
    )
    shell = 'mount --bind "$1" "$2" && mount -o remount,bind,ro "$2" && exec "$3" -c "$4"'
    out = subprocess.run(
        ["unshare", "--mount", "sh", "-c", shell, "sh", str(source), str(mounted), sys.executable, code],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[3])},
    ).stdout.split()
    assert out == [str(mounted / "coder.json"), str(source / "..v1" / "coder.json")], out


def test_binding_rules() -> None:
    by_name = AgentFile("/cm/coder.json", 0, 1, 7, real="/cm/..v2/coder.json")
    # a binding by the canonical path of the file the name leads to moves to the name; another owner does not
    table = {"coder": AgentFile("/cm/..v2/coder.json", 0, 1, 5)}
    assert bind_agents(table, {"coder": by_name}, "t", {}) == [] and table["coder"] == by_name
    table = {"coder": AgentFile("/cm/..v2/coder.json", 1000, 1, 5)}
    [problem] = bind_agents(table, {"coder": by_name}, "t", {})
    assert "belongs to /cm/..v2/coder.json" in problem.message and table["coder"].owner == 1000
    # bound by the name: a new inode of the same owner is the same file saved anew; another owner is refused
    table = {"coder": AgentFile("/cm/coder.json", 0, 1, 5)}
    assert bind_agents(table, {"coder": by_name}, "t", {}) == [] and table["coder"].inode == 7
    [problem] = bind_agents(table, {"coder": AgentFile("/cm/coder.json", NOBODY, 1, 9)}, "t", {})
    assert f"now belongs to uid {NOBODY}" in problem.message
    # a claim whose file cannot be read now changes nothing, by name or by canonical path
    unknown = AgentFile("/cm/coder.json", real="/cm/..v3/coder.json")
    for kept in (AgentFile("/cm/coder.json", 0, 1, 7), AgentFile("/cm/..v3/coder.json", 0, 1, 7)):
        table = {"coder": kept}
        assert bind_agents(table, {"coder": unknown}, "t", {}) == [] and table["coder"] == kept
    table = {}
    assert bind_agents(table, {"coder": unknown}, "t", {}) == [] and table["coder"] == AgentFile("/cm/..v3/coder.json")


@pytest.mark.root  # root writes the file renamed over the one read (another owner)
def test_the_claim_is_the_file_that_was_read_not_what_the_path_leads_to_a_moment_later(sandbox_tmp: Path) -> None:
    """Another uid's file is read; before the binding looks, root's own file is renamed over it. The claim is the
    file whose text was loaded (owner, device, inode from the descriptor it was read through), so the slug bound
    to root's file is refused to it; with a claim taken from the path it would have passed as root's."""
    named = sandbox_tmp / "coder.json"
    named.write_text(_agent_text(["date"]))
    os.chown(named, NOBODY, NOBODY)
    loaded = load_agent_file(str(named))
    read = os.stat(named)
    assert (loaded.owner, loaded.device, loaded.inode) == (NOBODY, read.st_dev, read.st_ino)
    roots = sandbox_tmp / "roots.json"
    roots.write_text(_agent_text(["date"]))
    os.rename(roots, named)  # what the path leads to now: root's file, another inode
    claim = loaded_agent_claim(loaded)
    assert (claim.file, claim.owner, claim.inode) == (str(named), NOBODY, read.st_ino)
    now = os.stat(named)
    bound = {"coder": AgentFile(str(named), 0, now.st_dev, now.st_ino)}
    [conflict] = bind_agents(bound, {"coder": claim}, "identities.json", {})
    assert f"the file there now belongs to uid {NOBODY}" in conflict.message
    assert bind_agents(dict(bound), {"coder": agent_file_identity(str(named))}, "identities.json", {}) == []
