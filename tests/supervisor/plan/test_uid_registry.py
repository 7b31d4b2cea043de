"""Uids unique on the whole host (``supervisor/plan/_uid_registry.py``): every number a state dir's identity table
gives is claimed in one registry per host, so two supervisors with two state dirs and the shipped range never hand
one uid to two tenants. The pure planning first, then processes allocating at once, then the attack of issue 24 from
real workers of two real supervisors, and an agent file another uid puts at a freed path."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from supervisor._errors import PolicyRefused
from supervisor._supervisor import Supervisor
from supervisor.config._errors import ConfigError
from supervisor.plan._agent_bindings import AgentFile
from supervisor.plan._identities import IdentityTable, WorkerIdentity, _slot, plan_identities
from supervisor.plan._identity_store import assign_identities
from supervisor.plan._uid_registry import REGISTRY_ENV, Holder, HostRegistry, read_registry
from tests._policies import agent, system_toolbox, write_policy

#: strict.yaml's range, which every shipped policy names
FIRST, COUNT = 3_000_000_000, 65536
REPO = Path(__file__).resolve().parents[3]


def test_a_number_another_state_dir_holds_is_never_given() -> None:
    want = FIRST + _slot("beta/tools", 100)
    host = HostRegistry({want: Holder("other", "alpha/tools")}, {"other": "/srv/a"})
    plan = plan_identities(
        IdentityTable(state_id="mine"), {}, ["beta/tools"], first=FIRST, count=100, host=host, state_dir="/srv/b"
    )
    got = plan.workers["beta/tools"]
    assert got.uid != want and got == WorkerIdentity(got.uid, got.uid)
    assert plan.host is not None and plan.host.numbers[got.uid] == Holder("mine", "beta/tools")
    assert plan.host.numbers[want] == Holder("other", "alpha/tools") and plan.host.states["mine"] == "/srv/b"
    assert plan.host_changed and plan.notes == []


def test_a_number_two_tables_hold_stays_with_its_first_claim() -> None:
    """Two state dirs that collided before the registry: the one that claimed the number keeps it; the other's
    toolbox gets a new uid (a note says so) and the number is not retired into its table as its own."""
    taken = FIRST + 7
    host = HostRegistry({taken: Holder("first", "alpha/tools")}, {"first": "/srv/a"})
    table = IdentityTable(workers={"beta/tools": WorkerIdentity(taken, taken)}, state_id="second")
    plan = plan_identities(
        table, {}, ["beta/tools"], first=FIRST, count=100, host=host, state_dir="/srv/b", registry_path="/reg"
    )
    assert plan.workers["beta/tools"].uid != taken
    [note] = plan.notes
    assert f"uid {taken} is held host-wide by toolbox alpha/tools of state dir /srv/a (uid registry /reg)" in note
    assert taken not in plan.table.numbers() and plan.host is not None
    assert plan.host.numbers[taken] == Holder("first", "alpha/tools")
    # An entry no agent file uses any more is dropped the same way, without a note.
    idle = plan_identities(table, {}, [], first=FIRST, count=100, host=host, state_dir="/srv/b")
    assert idle.notes == [] and "beta/tools" not in idle.table.workers


def test_without_a_state_id_every_registered_number_is_anothers() -> None:
    """``check`` of a state dir that never started: what the registry holds is someone else's."""
    slot = FIRST + _slot("a/x", 10)
    host = HostRegistry({slot: Holder("s", "a/x")}, {"s": "/srv/s"})
    plan = plan_identities(IdentityTable(), {}, ["a/x"], first=FIRST, count=10, host=host)
    assert plan.workers["a/x"].uid != slot and not plan.host_changed


def test_state_dirs_allocating_at_once_get_distinct_numbers(sandbox_tmp: Path, fresh_uid_registry: Path) -> None:
    code = (
        "import sys, json; from supervisor.plan._identity_store import assign_identities; "
        "ids = assign_identities(sys.argv[1], {}, [f'same/tb{i}' for i in range(40)], first=7000, "
        "count=150, persist=True).workers; print(json.dumps({k: v.uid for k, v in ids.items()}))"
    )
    states = [sandbox_tmp / f"state{i}" for i in range(3)]
    for state in states:
        state.mkdir()
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", code, str(state)],
            stdout=subprocess.PIPE,
            env={**os.environ, "PYTHONPATH": str(REPO)},
        )
        for state in states
    ]
    outs = [json.loads(p.communicate(timeout=60)[0]) for p in procs]
    uids = [u for out in outs for u in out.values()]
    assert len(uids) == 120 and len(set(uids)) == 120  # the same keys in three state dirs: 120 uids
    registry = read_registry(str(fresh_uid_registry))
    assert set(registry.numbers) == set(uids) and set(registry.states.values()) == {str(s) for s in states}
    assert (fresh_uid_registry / "uids.json").stat().st_mode & 0o777 == 0o600
    assert fresh_uid_registry.stat().st_mode & 0o777 == 0o700


def test_a_registry_another_user_may_write_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    loose = tmp_path / "registry"
    loose.mkdir(mode=0o777)
    loose.chmod(0o777)
    monkeypatch.setenv(REGISTRY_ENV, str(loose))
    (tmp_path / "state").mkdir()
    with pytest.raises(PolicyRefused, match=r"must be root's and writable by root only"):
        assign_identities(str(tmp_path / "state"), {}, ["a/x"], first=FIRST, count=10, persist=True)


def test_a_damaged_registry_is_refused_not_reset(sandbox_tmp: Path, fresh_uid_registry: Path) -> None:
    (sandbox_tmp / "state").mkdir()
    for text, word in (("{not json", "is not JSON"), ('{"version": 1, "numbers": {}}', "is damaged")):
        (fresh_uid_registry / "uids.json").write_text(text)
        with pytest.raises(PolicyRefused, match=rf"the host's uid registry {fresh_uid_registry}/uids.json {word}"):
            assign_identities(str(sandbox_tmp / "state"), {}, ["a/x"], first=FIRST, count=10, persist=True)
        assert (fresh_uid_registry / "uids.json").read_text() == text
    assert not (sandbox_tmp / "state" / "identities.json").exists()


def test_a_copied_state_dir_is_refused_and_a_moved_one_keeps_its_uids(
    sandbox_tmp: Path, fresh_uid_registry: Path
) -> None:
    first = sandbox_tmp / "first"
    first.mkdir()
    ids = assign_identities(str(first), {}, ["a/x"], first=FIRST, count=COUNT, persist=True).workers
    copy = sandbox_tmp / "copy"
    shutil.copytree(first, copy)
    with pytest.raises(PolicyRefused, match=r"has the identity of the state dir .*first.*a copy.*remove state_id"):
        assign_identities(str(copy), {}, ["a/x"], first=FIRST, count=COUNT, persist=True)
    shutil.rmtree(copy)
    moved = sandbox_tmp / "moved"
    first.rename(moved)
    assert assign_identities(str(moved), {}, ["a/x"], first=FIRST, count=COUNT, persist=True).workers == ids
    assert str(moved) in read_registry(str(fresh_uid_registry)).states.values()


# ------------------------------------------------------------------------------------------------ real workers


def _slug_on_the_slot_of(key: str, toolbox: str) -> str:
    """An agent slug whose ``slug/toolbox`` has the hash slot of ``key`` in strict.yaml's range (the attacker's
    search, well under a second)."""
    want = _slot(key, COUNT)
    return next(f"t{i}" for i in range(10_000_000) if _slot(f"t{i}/{toolbox}", COUNT) == want)


def _tenant(root: Path, slug: str, shared: Path, state: Path) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    fsb = {"fsbPredicate": {"tag": "DirectoryRecursive", "contents": str(shared)}, "fsbName": "shared"}
    box = system_toolbox("tools", capabilities=["execute-command"], FileSandbox=fsb)
    return write_policy(
        root,
        {slug: agent(slug, builtinToolboxes=[box])},
        state_dir=str(state),
        worker_uids={"first": FIRST, "count": COUNT},  # the shipped range, in both
    )


async def _sh(sup: Supervisor, command: str) -> dict[str, Any]:
    out = await sup.call("system_tools_execute_command", {"command": command})
    assert out.structured is not None, out.data
    return out.structured


@pytest.mark.root
async def test_a_tenant_of_another_state_dir_cannot_land_on_anothers_uid(
    sandbox_tmp: Path, fresh_uid_registry: Path
) -> None:
    """Issue 24 defect 1, from real workers: tenant B of a second supervisor (another state dir, the same shipped
    range) picks a slug whose slot is tenant A's uid, then tries to read and chmod A's 0600 file in a folder both
    reach. With the registry B runs as another uid: both fail."""
    shared = sandbox_tmp / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    thief = _slug_on_the_slot_of("alpha/tools", "tools")
    one = _tenant(sandbox_tmp / "one", "alpha", shared, sandbox_tmp / "state-one")
    two = _tenant(sandbox_tmp / "two", thief, shared, sandbox_tmp / "state-two")
    async with Supervisor.open(one) as a:
        made = await _sh(a, f"id -u; umask 077; echo secret > {shared}/secret; stat -c %a {shared}/secret")
        assert made["exitCode"] == 0, made
        a_uid, mode = made["stdout"].split()
        assert int(a_uid) == FIRST + _slot("alpha/tools", COUNT) == FIRST + _slot(f"{thief}/tools", COUNT)
        assert mode == "600"
        async with Supervisor.open(two) as b:  # both running at once
            attack = await _sh(b, f"id -u; cat {shared}/secret; chmod 666 {shared}/secret; stat -c %a {shared}/secret")
    b_uid, *rest = attack["stdout"].split("\n")
    assert int(b_uid) != int(a_uid) and FIRST <= int(b_uid) < FIRST + COUNT
    assert "secret\n" not in attack["stdout"], attack
    assert "Permission denied" in attack["stderr"] and "Operation not permitted" in attack["stderr"], attack
    assert rest[0] == "600" and (shared / "secret").stat().st_mode & 0o777 == 0o600
    held = read_registry(str(fresh_uid_registry)).numbers
    assert held[int(a_uid)].toolbox == "alpha/tools" and held[int(b_uid)].toolbox == f"{thief}/tools"
    assert held[int(a_uid)].state != held[int(b_uid)].state


@pytest.mark.root
async def test_a_uid_two_old_tables_both_hold_is_not_stolen(sandbox_tmp: Path, fresh_uid_registry: Path) -> None:
    """Two state dirs whose tables (from before the registry) give one uid to two toolboxes: the toolbox that
    claimed it first keeps it; the other starts as another uid, its folders handed over, with a warning."""
    shared = sandbox_tmp / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    one = _tenant(sandbox_tmp / "one", "alpha", shared, sandbox_tmp / "state-one")
    async with Supervisor.open(one) as a:
        a_uid = int((await _sh(a, "id -u"))["stdout"])
    state_two = sandbox_tmp / "state-two"
    state_two.mkdir()
    table = {"version": 1, "agents": {}, "workers": {"beta/tools": {"uid": a_uid, "gid": a_uid}}, "retired": []}
    (state_two / "identities.json").write_text(json.dumps(table))
    (state_two / "work" / "beta" / "tools").mkdir(parents=True)
    os.chown(state_two / "work" / "beta" / "tools", a_uid, a_uid)
    two = _tenant(sandbox_tmp / "two", "beta", shared, state_two)
    async with Supervisor.open(two) as b:
        b_uid = int((await _sh(b, "id -u"))["stdout"])
        warned = [w for w in b.compiled.warnings if f"uid {a_uid} is held host-wide by toolbox alpha/tools" in w]
    assert b_uid != a_uid and warned, b.compiled.warnings
    assert (state_two / "work" / "beta" / "tools").stat().st_uid == b_uid
    kept = json.loads((state_two / "identities.json").read_text())
    assert kept["workers"]["beta/tools"]["uid"] == b_uid and a_uid not in kept["retired"]
    async with Supervisor.open(one) as a:
        assert int((await _sh(a, "id -u"))["stdout"]) == a_uid


@pytest.mark.root
async def test_a_file_another_uid_puts_at_a_freed_path_does_not_inherit_the_slug(
    sandbox_tmp: Path, fresh_uid_registry: Path
) -> None:
    agents = sandbox_tmp / "agents"
    agents.mkdir()
    agents.chmod(0o777)  # other users may put files here
    state = sandbox_tmp / "state"
    file = agents / "coder.json"
    box = system_toolbox("tools", capabilities=["execute-command"])
    content = json.dumps(agent("coder", builtinToolboxes=[box]))
    file.write_text(content)
    policy = write_policy(sandbox_tmp, {}, state_dir=str(state), worker_uids={"first": FIRST, "count": COUNT})
    policy.write_text(policy.read_text().replace("agents: []", f"agents: [{file}]"))
    async with Supervisor.open(policy) as sup:
        uid = int((await _sh(sup, "id -u"))["stdout"])
    bound = json.loads((state / "identities.json").read_text())["agents"]["coder"]
    assert (bound["file"], bound["owner"], bound["inode"]) == (str(file), 0, file.stat().st_ino)
    # Its owner saves it anew (a copy renamed over it: a new inode): still the same agent.
    (agents / "coder.json.new").write_text(content)
    (agents / "coder.json.new").rename(file)
    async with Supervisor.open(policy) as sup:
        assert int((await _sh(sup, "id -u"))["stdout"]) == uid
    # The file is removed; another user puts one with the same slug at the freed path.
    file.unlink()
    subprocess.run(
        [sys.executable, "-c", f"open({str(file)!r}, 'w').write({content!r})"], user=65534, group=65534, check=True
    )
    assert file.stat().st_uid == 65534
    with pytest.raises(ConfigError) as caught:
        async with Supervisor.open(policy):
            pass
    text = str(caught.value)
    assert "bound to this path as the file of uid 0" in text and "now belongs to uid 65534" in text, text
    assert f"agents-supervise rebind-agent coder {file}" in text
    assert json.loads((state / "identities.json").read_text())["agents"]["coder"]["owner"] == 0  # unchanged
    assert AgentFile.from_json(bound).owner == 0


@pytest.mark.root
def test_check_shows_each_workers_host_wide_uid(
    sandbox_tmp: Path, fresh_uid_registry: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from supervisor.frontends._cli import main

    (sandbox_tmp / "shared").mkdir()
    policy = _tenant(sandbox_tmp / "one", "alpha", sandbox_tmp / "shared", sandbox_tmp / "state")
    assert main(["check", "--policy", str(policy)]) == 0
    uid = FIRST + _slot("alpha/tools", COUNT)
    summary = capsys.readouterr().out
    assert f"alpha/tools (system): uid {uid} (host-wide);" in summary, summary
    assert (
        f"held in the registry {fresh_uid_registry}: no other state dir or supervisor on the host gets them" in summary
    )
    assert main(["check", "--detail", "--policy", str(policy)]) == 0
    assert (
        f"uid/gid: {uid}/{uid} (held on the whole host: uid registry {fresh_uid_registry})" in capsys.readouterr().out
    )
    assert not any(fresh_uid_registry.iterdir())  # check claims nothing
    assert main(["check", "--policy", str(policy), "--json"]) == 0
    [tb] = json.loads(capsys.readouterr().out)["toolboxes"]
    assert (tb["uid"], tb["uid_registry"]) == (uid, str(fresh_uid_registry))
