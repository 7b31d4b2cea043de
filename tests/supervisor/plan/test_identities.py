"""The identity table of a state dir: a uid and gid per (agent, toolbox), never reused, kept across restarts and
shared by supervisors on one state dir; a slug bound to the agent file that claimed it first. The pure planning
first, then real supervisors (two at once on one state dir), real workers and the CLI's ``rebind-agent``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from supervisor._supervisor import Supervisor
from supervisor.config._errors import ConfigError
from supervisor.frontends._cli import main
from supervisor.plan._identities import (
    IdentityTable,
    TooManyWorkers,
    WorkerIdentity,
    _slot,
    plan_identities,
)
from supervisor.plan._identity_store import assign_identities
from tests._policies import agent, system_toolbox, write_policy

FIRST = 3_000_000_000


def test_each_key_gets_its_own_number_as_uid_and_gid_and_keeps_it() -> None:
    keys = [f"agent/tb{i}" for i in range(50)]
    plan = plan_identities(IdentityTable(), {}, keys, first=FIRST, count=1000)
    ids = plan.workers
    assert len({w.uid for w in ids.values()}) == 50 and all(w.uid == w.gid for w in ids.values())
    assert all(FIRST <= w.uid < FIRST + 1000 for w in ids.values())
    assert ids["agent/tb7"].uid == FIRST + _slot("agent/tb7", 1000)  # the former hash slot: old state dirs keep uids
    # Adding toolboxes later never moves the ones the table holds, whatever their slots.
    later = plan_identities(plan.table, {}, [*keys, *(f"other/tb{i}" for i in range(200))], first=FIRST, count=1000)
    assert {k: later.workers[k] for k in keys} == ids and len(set(later.workers.values())) == 250
    assert not plan_identities(later.table, {}, keys, first=FIRST, count=1000).changed


def test_numbers_are_never_reused_and_a_full_range_is_refused() -> None:
    table = plan_identities(IdentityTable(), {}, ["a/x", "a/y"], first=5000, count=3).table
    # a/x and a/y are gone from the agent files: their numbers stay theirs.
    with pytest.raises(TooManyWorkers, match=r"5000\.\.5002 has no uid left for toolbox a/z"):
        plan_identities(table, {}, ["a/z", "a/w"], first=5000, count=3)
    # The range moved: the old entries are retired, never handed out again, even if the range comes back.
    moved = plan_identities(table, {}, ["a/x"], first=6000, count=3).table
    assert moved.workers["a/x"].uid in range(6000, 6003) and {5000, 5001, 5002} & moved.retired
    back = plan_identities(moved, {}, ["a/y", "a/q"], first=5000, count=3)
    assert {w.uid for w in back.workers.values()} & moved.retired == set()


def test_a_slug_belongs_to_the_file_that_claimed_it_first() -> None:
    table = plan_identities(IdentityTable(), {"coder": "/a/coder.json"}, [], first=None, count=1).table
    same = plan_identities(table, {"coder": "/a/coder.json"}, [], first=None, count=1)
    assert same.conflicts == [] and not same.changed
    other = plan_identities(table, {"coder": "/b/coder.json"}, [], first=None, count=1, table_path="/s/identities.json")
    [problem] = other.conflicts
    assert problem.file == "/b/coder.json"
    assert "'coder' belongs to /a/coder.json (identity table /s/identities.json)" in problem.message
    assert "agents-supervise rebind-agent coder /b/coder.json" in (problem.expected or "")
    assert other.table.agents["coder"].file == "/a/coder.json"


def test_two_processes_allocating_at_once_get_distinct_numbers(tmp_path: Path) -> None:
    code = (
        "import sys, json; from supervisor.plan._identity_store import assign_identities; "
        "ids = assign_identities(sys.argv[1], {}, [f'{sys.argv[2]}/tb{i}' for i in range(40)], first=7000, "
        "count=200, persist=True).workers; print(json.dumps({k: v.uid for k, v in ids.items()}))"
    )
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", code, str(tmp_path), name],
            stdout=subprocess.PIPE,
            env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[3])},
        )
        for name in ("one", "two", "three")
    ]
    outs = [json.loads(p.communicate(timeout=60)[0]) for p in procs]
    uids = [u for out in outs for u in out.values()]
    assert len(uids) == 120 and len(set(uids)) == 120
    table = json.loads((tmp_path / "identities.json").read_text())
    assert {k: v["uid"] for k, v in table["workers"].items()} == {k: v for out in outs for k, v in out.items()}


def test_a_damaged_table_is_refused_not_reset(tmp_path: Path) -> None:
    from supervisor._errors import PolicyRefused

    (tmp_path / "identities.json").write_text('{"version": 1, "agents": {}}')
    with pytest.raises(PolicyRefused, match=r"is damaged .* Restore it from a backup"):
        assign_identities(str(tmp_path), {}, ["a/x"], first=FIRST, count=10, persist=True)
    assert (tmp_path / "identities.json").read_text() == '{"version": 1, "agents": {}}'


# ------------------------------------------------------------------------------------------------ real workers


def _colliding_names(count: int) -> tuple[str, str]:
    """A toolbox of agent ``beta`` whose former hash slot is the one of ``alpha/tools``."""
    want = _slot("alpha/tools", count)
    return "tools", next(f"tb{i}" for i in range(100_000) if _slot(f"beta/tb{i}", count) == want)


def _ids_policy(root: Path, slug: str, toolbox: str, state: Path, **extra: Any) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    boxes = [system_toolbox(toolbox, capabilities=["execute-command"])]
    return write_policy(
        root,
        {slug: agent(slug, builtinToolboxes=boxes)},
        state_dir=str(state),
        worker_uids={"first": FIRST, "count": 1000},
        **extra,
    )


async def _id(sup: Supervisor, toolbox: str) -> tuple[int, int]:
    out = await sup.call(f"system_{toolbox}_execute_command", {"command": "id -u; id -g; id -G"})
    assert out.structured is not None and out.structured["exitCode"] == 0, out.data
    uid, gid, groups = out.structured["stdout"].splitlines()
    assert groups == gid  # no supplementary group
    return int(uid), int(gid)


@pytest.mark.root
async def test_two_supervisors_on_one_state_dir_give_colliding_names_distinct_uids(sandbox_tmp: Path) -> None:
    a_name, b_name = _colliding_names(1000)
    state = sandbox_tmp / "state"
    one = _ids_policy(sandbox_tmp / "one", "alpha", a_name, state)
    two = _ids_policy(sandbox_tmp / "two", "beta", b_name, state)
    async with Supervisor.open(one) as a, Supervisor.open(two) as b:  # both running at once
        first = {"a": await _id(a, a_name), "b": await _id(b, b_name)}
    assert first["a"] != first["b"] and first["a"][0] != first["b"][0]
    assert all(uid == gid and uid != 65534 for uid, gid in first.values())
    async with Supervisor.open(two) as b, Supervisor.open(one) as a:  # restarted, the other order
        again = {"a": await _id(a, a_name), "b": await _id(b, b_name)}
    assert again == first
    assert (state / "work" / "beta" / b_name).stat().st_uid == first["b"][0]


@pytest.mark.root
async def test_another_agent_file_claiming_a_bound_slug_is_refused_until_rebound(sandbox_tmp: Path) -> None:
    state = sandbox_tmp / "state"
    owner = _ids_policy(sandbox_tmp / "owner", "coder", "tools", state)
    async with Supervisor.open(owner) as sup:
        before = await _id(sup, "tools")
    thief = _ids_policy(sandbox_tmp / "thief", "coder", "tools", state)
    thief_file = sandbox_tmp / "thief" / "coder.json"
    with pytest.raises(ConfigError) as caught:
        async with Supervisor.open(thief):
            pass
    text = str(caught.value)
    assert f"{thief_file}" in text and f"belongs to {sandbox_tmp / 'owner' / 'coder.json'}" in text
    assert f"agents-supervise rebind-agent coder {thief_file}" in text
    # check (nothing written) says the same
    assert main(["check", "--policy", str(thief)]) == 2
    # The operator hands the slug over: the new file gets the slug's uid and folders; the old one is refused now.
    other = sandbox_tmp / "other.json"
    other.write_text(json.dumps(agent("other")))
    assert main(["rebind-agent", "--policy", str(thief), "coder", str(other)]) == 2  # not coder's agent file
    assert main(["rebind-agent", "--policy", str(thief), "coder", str(thief_file)]) == 0
    async with Supervisor.open(thief) as sup:
        assert await _id(sup, "tools") == before
    with pytest.raises(ConfigError, match=r"belongs to .*thief/coder\.json"):
        async with Supervisor.open(owner):
            pass


async def test_identities_are_only_read_by_check(sandbox_tmp: Path, fresh_uid_registry: Path) -> None:
    """What ``check`` plans as a root supervisor (``_facts.facts_as``): the uid is given in the plan, nothing is
    recorded."""
    from supervisor.config._loader import load_config
    from supervisor.plan import plan_policy
    from tests.supervisor.plan._facts import facts_as

    policy = _ids_policy(sandbox_tmp, "coder", "tools", sandbox_tmp / "state")
    config = load_config(str(policy))
    compiled = plan_policy(config, facts_as(config, str(sandbox_tmp / "state"))).compiled
    assert compiled.specs[0].plan.uid == FIRST + _slot("coder/tools", 1000)
    assert not (sandbox_tmp / "state").exists()
    assigned = assign_identities(str(sandbox_tmp / "missing"), {}, ["a/b"], first=FIRST, count=10, persist=False)
    assert assigned.workers == {"a/b": WorkerIdentity(FIRST + _slot("a/b", 10), FIRST + _slot("a/b", 10))}
