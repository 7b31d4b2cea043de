"""``SessionIntrospectionScope: subtree`` is the caller's own call tree, whatever the agents in it.

The seed's ``file-agent`` (``examples/file-agent/agent.json``, the seed's text) asks its sub-agent ``helper``
(``extraAgents``), then lists and searches sessions with its own ``system`` toolbox (the seed's entry: ``subtree``,
``list-sessions``, ``search-sessions``), under the shipped ``strict.yaml``'s settings, whose
``sessions.introspection.other_agents`` is false. It sees the helper's run it asked for, and not the helper's runs
asked by another session of its own or by another caller.

Real parts: the supervisor, its confined workers (the seed file's toolboxes), the session store, the portal. Not
real: the model endpoint, a scripted OpenAI-compatible server on loopback (``tests/supervisor/_model_server.py``),
because no real model can run here. Of the seed's file, only ``openApiToolboxes`` is left out (it fetches
``api.github.com`` when it loads, and tests send no packet beyond loopback); the helper's own file is a stand-in
(the seed shows none) pointing at the scripted server.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from supervisor._supervisor import Supervisor
from supervisor.sessions._ids import Owner, root_session_id
from tests._policies import agent, local_model_of, shipped_policy
from tests.supervisor._model_server import answer, model_server
from tests.supervisor.config.test_seed_examples import _stand_ins, seed_file

pytestmark = pytest.mark.root

STRICT = Path(__file__).resolve().parents[3] / "policies" / "strict.yaml"


def _policy(root: Path, model_url: str) -> Path:
    folder = root / "file-agent"
    folder.mkdir()
    _stand_ins(folder)
    seed = json.loads(seed_file("file-agent.json").read_text())
    assert seed["extraAgents"] == [{"slug": "helper", "path": "./helper.json"}]
    del seed["openApiToolboxes"]
    (folder / "file-agent.json").write_text(json.dumps(seed))
    helper = agent("helper", modelUrl=model_url, announce="Helps the file agent.")
    (folder / "helper.json").write_text(json.dumps(helper))
    assert yaml.safe_load(STRICT.read_text())["sessions"]["introspection"]["other_agents"] is False
    return shipped_policy(
        root,
        STRICT,
        [folder / "file-agent.json"],
        model_keys={"test": "AGENTS_TEST_KEY"},
        agent_loop=local_model_of(STRICT),
    )


def _sessions(result: Any) -> dict[str, str]:
    """sessionId -> agent of a ``list-sessions`` answer."""
    assert result.status == "passed", result.data
    return {s["sessionId"]: s["agent"] for s in result.structured["sessions"]}


async def test_the_seed_file_agent_sees_its_helpers_runs_and_no_others(
    sandbox_tmp: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AGENTS_TEST_KEY", "k")
    with model_server(lambda req: answer("helper is done")) as server:
        async with Supervisor.open(_policy(sandbox_tmp, server.url)) as sup:
            assert sup.sessions is not None
            asked = await sup.call("io_prompt_agent_helper", {"what": "count the quarterly reports"}, session_id="s1")
            assert asked.status == "passed", asked.data
            other = await sup.call("io_prompt_agent_helper", {"what": "count the quarterly invoices"}, session_id="s2")
            assert other.status == "passed", other.data
            alone = await sup.run_agent("helper", "count the quarterly taxes", session_id="s1")
            assert alone.status == "passed", alone.data
            mine = root_session_id(Owner("file-agent"), "s1")
            parents = sup.sessions.parents()
            [run] = [sid for sid, parent in parents.items() if parent == mine]  # the helper's run asked from s1
            assert sup.sessions.owners()[run] == Owner("helper")

            listed = await sup.call("system_system_list_sessions", {}, session_id="s1")
            assert _sessions(listed) == {mine: "file-agent", run: "helper"}
            assert listed.structured["scope"] == "subtree"
            [entry] = [s for s in listed.structured["sessions"] if s["sessionId"] == run]
            assert entry["isChild"] is True and entry["isParent"] is False

            found = await sup.call("system_system_search_sessions", {"query": "quarterly"}, session_id="s1")
            assert found.status == "passed", found.data
            hits = {r["sessionId"]: r for r in found.structured["results"]}
            assert set(hits) == {mine, run}  # its own call of the helper, and the helper's run (its prompt)
            assert hits[run]["matchType"] == "content" and "quarterly reports" in hits[run]["preview"]

            # s2's own tree holds s2's run of the helper, never s1's; a fresh session sees only itself.
            listed2 = await sup.call("system_system_list_sessions", {}, session_id="s2")
            assert mine not in _sessions(listed2) and run not in _sessions(listed2)
            assert sorted(_sessions(listed2).values()) == ["file-agent", "helper"]
            fresh = await sup.call("system_system_list_sessions", {}, session_id="s3")
            assert list(_sessions(fresh).values()) == ["file-agent"]
    assert len(server.requests) == 3
