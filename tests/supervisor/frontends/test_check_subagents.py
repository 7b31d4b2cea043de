"""``agents-supervise check`` shows each agent's sub-agents and why the policy allows or refuses each (the real
CLI on real agent files: two tenants, one agent file naming the other tenant's agent, a part of its own, itself)."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from tests._policies import agent, own_part_owner
from tests.supervisor.frontends.test_check_call_trees import _section
from tests.supervisor.frontends.test_check_summary import _check

if TYPE_CHECKING:
    from pathlib import Path

TITLE = "sub-agents (what each agent may prompt as io_prompt_agent_<slug>, and why):"


def _policy(root: Path) -> Path:
    acme, globex = root / "acme", root / "globex"
    acme.mkdir()
    globex.mkdir()
    (globex / "b.json").write_text(json.dumps(agent("b")))
    (acme / "part.json").write_text(json.dumps(agent("part")))
    extra = [
        {"slug": "a", "path": "a.json"},
        {"slug": "part", "path": "part.json"},
        {"slug": "b", "path": "../globex/b.json"},
    ]
    (acme / "a.json").write_text(json.dumps(agent("a", extraAgents=extra)))
    policy = root / "policy.yaml"
    data = {
        "agents": [str(acme / "a.json"), str(globex / "b.json")],
        "state_dir": str(root / "state"),
        "worker_uids": None,
        "tenants": {"acme": {"agents": ["a"], "ceiling": {"paths": [str(acme)]}}, "globex": {"agents": ["b"]}},
    }
    policy.write_text(json.dumps(data))
    return policy


def test_check_shows_each_sub_agent_allowed_or_refused_and_why(sandbox_tmp: Path) -> None:
    policy = _policy(sandbox_tmp)
    out = _check("--policy", str(policy))
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    acme, globex = sandbox_tmp / "acme", sandbox_tmp / "globex"
    assert _section(lines, TITLE) == [
        f"  a -> a ({acme / 'a.json'}): allowed: the agent itself: io_prompt_agent_a prompts it again (bounded by "
        "max_call_depth)",
        f"  a -> part ({acme / 'part.json'}): allowed: a part of the agent: its file is {own_part_owner()}; reached by "
        "tenant acme; within tenants.acme.ceiling.paths",
        f"  a -> b ({globex / 'b.json'}): refused: sub-agent b ({globex / 'b.json'}) lies outside the policy's "
        f"ceiling tenants.acme.ceiling.paths ({acme}); the key that would allow it: add a folder holding it to "
        "tenants.acme.ceiling.paths",
    ]
    errors = "\n".join(line for line in lines if line.startswith("  agent a: "))
    assert "$.contents.extraAgents[2]: sub-agent b" in errors and "that sub-agent is left out" in errors
    report = json.loads(_check("--policy", str(policy), "--json").stdout)
    assert [(s["agent"], s["subagent"], s["allowed"]) for s in report["subagents"]] == [
        ("a", "a", True),
        ("a", "part", True),
        ("a", "b", False),
    ]
    assert report["subagents"][2]["source"].endswith("a.json $.contents.extraAgents[2]")
    detail = _check("--policy", str(policy), "--detail").stdout
    assert TITLE in detail and "[" + report["subagents"][1]["source"] + "]" in detail
    # Within its ceiling, b is still another tenant's agent: the next key is named.
    data = json.loads(policy.read_text())
    data["tenants"]["acme"]["ceiling"]["paths"].append(str(globex))
    policy.write_text(json.dumps(data))
    lines = _check("--policy", str(policy)).stdout.splitlines()
    [line] = [x for x in _section(lines, TITLE) if x.startswith("  a -> b ")]
    assert line.endswith(
        "refused: sub-agent b (" + str(globex / "b.json") + ") is an agent the policy gives on its "
        "own (not a part of a), and not to tenant acme, which uses a: a tenant reaches no agent the "
        "policy does not give it; the key that would allow it: add b to tenants.acme.agents"
    )
