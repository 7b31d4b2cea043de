"""The policy's rules on sub-agent files (``supervisor/config/_subagent_rules.py``), on real agent files loaded by
``expand_agents`` (``extraAgents`` and ``toolDirectory``), and the pure judgement apart.

A sub-agent runs as itself (its toolboxes, uids and files), so an agent file naming another file asks for that
agent's identity: another tenant's agent, a file outside the naming agent's ``paths`` ceiling, another user's file
or a part two tenants would share is refused, as a load error of the naming agent naming the key that would allow
it; nothing else changes (the other tenant's agent keeps its own sub-agents and its own ceilings)."""

from __future__ import annotations

import json
import os
from typing import TYPE_CHECKING, Any

import pytest

from supervisor.config import Policy, SubagentLink, expand_agents, load_config
from supervisor.config._subagent_rules import AgentFileFacts, judge_links
from supervisor.plan import compile_policy
from tests._policies import agent, own_part_owner, system_toolbox

if TYPE_CHECKING:
    from pathlib import Path

    from supervisor.config import AgentTree


def _write(path: Path, slug: str, **keys: Any) -> str:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(agent(slug, **keys)))
    return str(path)


def _tree(root: Path, files: list[str], **policy: Any) -> AgentTree:
    data = {"agents": files, "state_dir": str(root / "state"), "worker_uids": None, **policy}
    (root / "policy.yaml").write_text(json.dumps(data))
    return expand_agents(load_config(str(root / "policy.yaml")))


def _verdicts(tree: AgentTree) -> dict[tuple[str, str | None], tuple[bool, str]]:
    return {(link.agent, link.slug): (link.allowed, link.why) for link in tree.links}


def _errors(tree: AgentTree) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for e in tree.load_errors:
        out.setdefault(e["agent"], []).append(e["message"])
    return out


def test_a_tenants_agent_names_another_tenants_agent_by_extra_agents_or_tool_directory(sandbox_tmp: Path) -> None:
    b = _write(sandbox_tmp / "globex" / "b.json", "b", builtinToolboxes=[system_toolbox("sys", ["hostname"])])
    a = _write(
        sandbox_tmp / "acme" / "a.json",
        "a",
        extraAgents=[{"slug": "b", "path": "../globex/b.json"}],
        toolDirectory="../globex",  # every *.json in it: b's file again
    )
    tenants = {
        "acme": {"agents": ["a"], "ceiling": {"forbidden_capabilities": ["hostname"]}},
        "globex": {"agents": ["b"]},
    }
    # strict: false: the ceiling is judged whatever the host, and as nobody no cgroup can be made.
    tree = _tree(sandbox_tmp, [a, b], tenants=tenants, strict=False)
    assert [x.slug for x in tree.config.agents] == ["a", "b"]
    assert dict(tree.subagents) == {"a": (), "b": ()}
    [extra, directory] = _errors(tree)["a"]
    for message in (extra, directory):
        assert "is an agent the policy gives on its own (not a part of a), and not to tenant acme" in message
        assert message.endswith("the key that would allow it: add b to tenants.acme.agents; that sub-agent is left out")
    assert "$.contents.toolDirectory (b.json)" in [e["source"] for e in tree.load_errors][1]
    # acme's ceiling does not reach b through the refused link: b's toolbox, with hostname, loads.
    compiled = compile_policy(tree.config, prepare=False)
    assert compiled.load_errors == []
    assert ("b", "sys") in {(s.agent, s.toolbox) for s in compiled.specs}
    # The operator gives b to acme too: a may prompt it (and acme's ceiling now bounds b's toolbox).
    tenants["acme"]["agents"] = ["a", "b"]
    shared = _tree(sandbox_tmp, [a, b], tenants=tenants, strict=False)
    assert shared.subagents["a"] == ("b",)
    allowed, why = _verdicts(shared)[("a", "b")]
    assert (
        allowed
        and why == "the policy gives it (one of its agents); every tenant that uses a lists it (tenants.acme.agents)"
    )
    [error] = compile_policy(shared.config, prepare=False).load_errors
    assert (error["agent"], error["toolbox"]) == ("b", "sys")
    assert "tenants.acme.ceiling.forbidden_capabilities" in error["message"]


def test_a_sub_agent_file_lies_within_the_naming_agents_paths_ceiling(sandbox_tmp: Path) -> None:
    acme, globex = sandbox_tmp / "acme", sandbox_tmp / "globex"
    _write(acme / "mine.json", "mine")
    _write(globex / "helper.json", "helper", builtinToolboxes=[system_toolbox("h", ["date"])])
    a = _write(
        acme / "a.json",
        "a",
        extraAgents=[{"slug": "mine", "path": "mine.json"}, {"slug": "helper", "path": "../globex/helper.json"}],
    )
    b = _write(globex / "b.json", "b", extraAgents=[{"slug": "helper", "path": "helper.json"}])
    tenants = {
        "acme": {"agents": ["a"], "ceiling": {"paths": [str(acme)]}},
        "globex": {"agents": ["b"], "ceiling": {"paths": [str(globex)]}},
    }
    tree = _tree(sandbox_tmp, [a, b], tenants=tenants)
    assert dict(tree.subagents) == {"a": ("mine",), "b": ("helper",), "mine": (), "helper": ()}
    [message] = _errors(tree)["a"]
    assert (
        f"sub-agent helper ({globex / 'helper.json'}) lies outside the policy's ceiling tenants.acme.ceiling.paths"
        in message
    )
    assert "the key that would allow it: add a folder holding it to tenants.acme.ceiling.paths" in message
    verdicts = _verdicts(tree)
    assert verdicts[("a", "mine")] == (
        True,
        f"a part of the agent: its file is {own_part_owner()}; reached by tenant acme; "
        "within tenants.acme.ceiling.paths",
    )
    # globex keeps its own helper: acme's file naming it reaches nothing of globex's (no shared part, no ceiling).
    assert verdicts[("b", "helper")] == (
        True,
        f"a part of the agent: its file is {own_part_owner()}; reached by tenant globex; "
        "within tenants.globex.ceiling.paths",
    )
    # The policy-wide ceilings bound too, tenants or not.
    alone = _tree(sandbox_tmp, [a], ceilings={"a": {"paths": [str(acme)]}})
    assert alone.subagents["a"] == ("mine",)
    assert "outside the policy's ceiling ceilings.a.paths" in _errors(alone)["a"][0]
    assert [x.slug for x in alone.config.agents] == ["a", "mine"]  # the refused file is not loaded: no workers


@pytest.mark.root
def test_a_part_is_a_file_of_root_or_of_the_naming_files_owner(sandbox_tmp: Path) -> None:
    alice, bob = 3_261_000_001, 3_261_000_002
    own = _write(sandbox_tmp / "own.json", "own")
    foreign = _write(sandbox_tmp / "foreign.json", "foreign", builtinToolboxes=[system_toolbox("f", ["date"])])
    _write(sandbox_tmp / "shared.json", "shared")
    a = _write(
        sandbox_tmp / "a.json",
        "a",
        extraAgents=[{"slug": s, "path": f"{s}.json"} for s in ("own", "foreign", "shared")],
    )
    for path, uid in ((a, alice), (own, alice), (foreign, bob)):
        os.chown(path, uid, uid)
    tree = _tree(sandbox_tmp, [a])
    assert tree.subagents["a"] == ("own", "shared")
    assert [x.slug for x in tree.config.agents] == ["a", "own", "shared"]  # foreign's toolbox gets no worker
    [message] = _errors(tree)["a"]
    assert (
        f"sub-agent foreign ({foreign}) is owned by uid {bob}, neither root nor the owner of agent a's file "
        f"(uid {alice})" in message
    )
    assert "list its file among the policy's agents" in message
    verdicts = _verdicts(tree)
    assert (
        verdicts[("a", "own")][1]
        == f"a part of the agent: its file is the naming file's owner's (uid {alice}); no tenant uses a"
    )
    assert verdicts[("a", "shared")][1] == "a part of the agent: its file is root's; no tenant uses a"
    # The operator lists it: one of the policy's agents, given whatever its owner.
    listed = _tree(sandbox_tmp, [a, foreign])
    assert listed.subagents["a"] == ("own", "foreign", "shared")


def test_a_part_two_tenants_reach_through_different_agents_is_refused_for_both(sandbox_tmp: Path) -> None:
    _write(sandbox_tmp / "common" / "helper.json", "helper")
    extra = [{"slug": "helper", "path": "../common/helper.json"}]
    a = _write(sandbox_tmp / "acme" / "a.json", "a", extraAgents=extra)
    b = _write(sandbox_tmp / "globex" / "b.json", "b", extraAgents=extra)
    tenants: dict[str, Any] = {"acme": {"agents": ["a"]}, "globex": {"agents": ["b"]}}
    tree = _tree(sandbox_tmp, [a, b], tenants=tenants)
    assert dict(tree.subagents) == {"a": (), "b": ()}
    errors = _errors(tree)
    assert "one agent (its workers' uids and files) would be shared between tenant acme and a tenant" in errors["a"][0]
    assert "between tenant globex and a tenant" in errors["b"][0]
    assert "add helper to tenants.<name>.agents of every tenant that uses it" in errors["b"][0]
    # Shared on purpose: one agent given to both names it, or both tenants list it.
    tenants["globex"]["agents"] = ["b", "a"]
    assert _tree(sandbox_tmp, [a, b], tenants=tenants).subagents["a"] == ("helper",)
    both = {"acme": {"agents": ["a", "helper"]}, "globex": {"agents": ["b", "helper"]}}
    assert dict(_tree(sandbox_tmp, [a, b], tenants=both).subagents) == {
        "a": ("helper",),
        "b": ("helper",),
        "helper": (),
    }
    # A tenant-less agent (the operator's, over stdio) naming it shares nothing with a tenant.
    tenants["globex"] = {"agents": ["a"]}
    assert _tree(sandbox_tmp, [a, b], tenants=tenants).subagents["b"] == ("helper",)


def test_the_seeds_own_sub_agents_keep_working_without_tenants(sandbox_tmp: Path) -> None:
    _write(sandbox_tmp / "helper.json", "helper")
    main = _write(
        sandbox_tmp / "main.json",
        "main",
        extraAgents=[{"slug": "main", "path": "main-copy.json"}, {"slug": "helper", "path": "helper.json"}],
    )
    tree = _tree(sandbox_tmp, [main])
    assert tree.subagents["main"] == ("main", "helper") and tree.load_errors == ()
    verdicts = _verdicts(tree)
    assert verdicts[("main", "main")] == (
        True,
        "the agent itself: io_prompt_agent_main prompts it again (bounded by max_call_depth)",
    )
    assert verdicts[("main", "helper")] == (
        True,
        f"a part of the agent: its file is {own_part_owner()}; no tenant uses main",
    )
    assert expand_agents(tree.config).links == tree.links  # idempotent


# ------------------------------------------------------------------------------------------ the judgement, pure
def _facts(*slugs: str, owner: int = 0) -> dict[str, AgentFileFacts]:
    return {s: AgentFileFacts(s, f"/srv/{s}.json", owner) for s in slugs}


def test_a_chain_of_parts_takes_its_tenants_from_the_agent_that_names_it() -> None:
    policy = Policy.model_validate(
        {"tenants": {"acme": {"agents": ["a"], "ceiling": {"paths": ["/srv"]}}, "globex": {"agents": ["b"]}}}
    )
    links = [
        SubagentLink("a", "/srv/p.json", "a.json $.extraAgents[0]", "p"),
        SubagentLink("p", "/srv/q.json", "p.json $.extraAgents[0]", "q"),
        SubagentLink("q", "/srv/b.json", "q.json $.extraAgents[0]", "b"),  # deep down, another tenant's agent
        SubagentLink("q", "/elsewhere/r.json", "q.json $.extraAgents[1]", "r"),  # outside acme's paths
    ]
    facts = {**_facts("a", "b", "p", "q"), "r": AgentFileFacts("r", "/elsewhere/r.json", 0)}
    judged = judge_links(policy, facts, ["a", "b"], links)
    assert [link.allowed for link in judged] == [True, True, False, False]
    assert "not to tenant acme, which uses q" in judged[2].why
    assert "outside the policy's ceiling tenants.acme.ceiling.paths (/srv)" in judged[3].why
    assert (
        judged[1].why
        == "a part of the agent: its file is root's; reached by tenant acme; within tenants.acme.ceiling.paths"
    )
