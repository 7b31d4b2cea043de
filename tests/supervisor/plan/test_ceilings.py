"""The policy is the ceiling of what an agent file grants (``supervisor/plan/_ceilings.py``): loopback and private
addresses only where the policy opens them to the toolbox, per-agent and per-tenant ceilings on hosts and
capabilities, each refusal naming the key that would open it. The pure decisions first, then what a compiled policy
and ``check`` make of them (the seed's own file-agent under the shipped strict.yaml)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from supervisor.config import Policy, load_config
from supervisor.plan import compile_policy, plan_policy
from supervisor.plan._ceilings import (
    agent_bounds,
    ceiling_refusals,
    class_refusals,
    method_cap,
    method_refusals,
    path_refusals,
    tenant_reach,
)
from tests._policies import agent, system_toolbox, write_policy
from tests.supervisor.plan._facts import facts_as

REPO = Path(__file__).resolve().parents[3]
STRICT = REPO / "policies" / "strict.yaml"
PERMISSIVE = REPO / "policies" / "permissive.yaml"
SEED_FILE_AGENT = REPO / "examples" / "file-agent" / "agent.json"  # the seed's text, shipped as an example
KEY = "toolboxes.file-agent/lua"


@pytest.mark.parametrize("entry", ["localhost", "LOCALHOST.", "127.0.0.1", "127.1", "0x7f000001", "::1", "[::1]:8080"])
def test_a_loopback_entry_needs_the_policy_to_open_the_loopback(entry: str) -> None:
    [why] = class_refusals([entry], loopback=False, private_ranges=(), policy_key=KEY)
    assert f"{entry!r} is the host's loopback" in why and f"{KEY}.allow_loopback: true" in why
    assert class_refusals([entry], loopback=True, private_ranges=(), policy_key=KEY) == []


@pytest.mark.parametrize(
    ("entry", "net"),
    [("10.1.2.3", "10.1.2.3/32"), ("[fd00::5]:443", "fd00::5/128"), ("::ffff:192.168.1.9", "192.168.1.9/32")],
)
def test_a_private_literal_needs_the_policy_to_open_its_range(entry: str, net: str) -> None:
    [why] = class_refusals([entry], loopback=True, private_ranges=(), policy_key=KEY)
    assert f"{KEY}.allow_private_ranges: [{net}]" in why and "naming the address does not open it" in why
    assert (
        class_refusals(
            [entry], loopback=False, private_ranges=("10.0.0.0/8", "fc00::/7", "192.168.0.0/16"), policy_key=KEY
        )
        == []
    )
    # names are judged at egress, once resolved; public literals need nothing
    assert class_refusals(["db.internal", "203.0.113.7"], loopback=False, private_ranges=(), policy_key=KEY) == []


def _policy(data: dict[str, Any]) -> Policy:
    return Policy.model_validate(data, context={"base_dir": "/"})


def test_ceilings_bound_an_agents_hosts_and_capabilities_and_name_their_key() -> None:
    policy = _policy(
        {
            "worker_uids": None,
            "ceilings": {
                "*": {"forbidden_capabilities": ["execute-command"]},
                "coder": {"allowed_hosts": ["*.example.com:443", "10.1.2.3"]},
            },
            "tenants": {
                "acme": {
                    "agents": ["coder"],
                    "ceiling": {"allowed_hosts": ["*"], "forbidden_capabilities": ["hostname"]},
                }
            },
        }
    )
    reach = tenant_reach(policy, {"coder": ["helper"], "helper": [], "other": []})
    assert reach == {"acme": {"coder", "helper"}}  # a sub-agent is the tenant's reach too
    bounds = agent_bounds(policy, "helper", reach)
    assert [b.key for b in bounds] == ['ceilings."*"', "tenants.acme.ceiling"]
    coder = agent_bounds(policy, "coder", reach)
    assert [b.key for b in coder] == ['ceilings."*"', "ceilings.coder", "tenants.acme.ceiling"]
    assert ceiling_refusals(["api.example.com:443", "*.eu.example.com:443", "10.1.2.3:5432"], ["date"], coder) == []
    refused = ceiling_refusals(["api.example.com", "evil.test"], ["execute-command", "hostname"], coder)
    assert len(refused) == 4, refused
    assert (
        "'api.example.com', past the policy's ceiling ceilings.coder.allowed_hosts (*.example.com:443, 10.1.2.3)"
        in refused[0]
    )
    assert "'execute-command', which the policy forbids (ceilings.\"*\".forbidden_capabilities)" in refused[2]
    assert "(tenants.acme.ceiling.forbidden_capabilities)" in refused[3]
    assert agent_bounds(policy, "other", reach)[0].key == 'ceilings."*"'


def test_http_methods_ceilings_intersect_and_an_asked_method_past_one_names_its_key() -> None:
    policy = Policy.model_validate(
        {
            "ceilings": {"*": {"http_methods": ["get", "HEAD", "POST"]}, "coder": {"http_methods": ["POST", "GET"]}},
            "tenants": {"acme": {"agents": ["coder"], "ceiling": {"allowed_hosts": ["*"]}}},
        }
    )
    bounds = agent_bounds(policy, "coder", {"acme": {"coder"}})
    assert method_cap(bounds) == ["GET", "POST"]
    assert method_cap(agent_bounds(policy, "coder", {})[2:]) is None  # no ceiling names methods: no bound
    assert method_refusals(["get", "post"], bounds) == []
    [refused] = method_refusals(["HEAD"], bounds)
    assert "HEAD (AllowedMethods), past the policy's ceiling ceilings.coder.http_methods (POST, GET)" in refused


def test_a_path_past_every_ceilings_paths_names_the_key_unless_the_policy_grants_it_anyway() -> None:
    policy = Policy.model_validate({"ceilings": {"*": {"paths": ["/srv/acme"]}, "coder": {"paths": ["/srv"]}}})
    bounds = agent_bounds(policy, "coder", {})
    named = [("/srv/acme/project", "its FileSandbox, read"), ("/srv/acmeish", "a path it reads"), ("/usr/bin/x", "")]
    [refused] = path_refusals(named, bounds, granted=["/usr"])
    assert refused.startswith("the agent file names the path /srv/acmeish (a path it reads), past the policy's ")
    assert 'ceiling ceilings."*".paths (/srv/acme); the key that would open it: add a folder holding it' in refused
    assert path_refusals(named, agent_bounds(Policy.model_validate({}), "coder", {})) == []  # no ceiling: no bound


@pytest.mark.parametrize(
    ("ceiling", "where", "word"),
    [
        ({"forbidden_capabilities": ["exec"]}, "$.ceilings.coder.forbidden_capabilities[0]", "unknown capability"),
        ({"allowed_hosts": ["https://x/y"]}, "$.ceilings.coder.allowed_hosts[0]", "invalid host"),
        ({"allowed_hostz": []}, "$.ceilings.coder", "allowed_hostz"),
        ({"http_methods": ["FETCH"]}, "$.ceilings.coder.http_methods[0]", "unknown HTTP method 'FETCH'"),
        ({"paths": ["srv/acme"]}, "$.ceilings.coder.paths[0]", "not an absolute path"),
    ],
)
def test_a_ceiling_that_does_not_parse_is_a_config_error(
    tmp_path: Path, ceiling: dict[str, Any], where: str, word: str
) -> None:
    from supervisor.config import ConfigError

    policy = write_policy(tmp_path, {}, ceilings={"coder": ceiling})
    with pytest.raises(ConfigError) as caught:
        load_config(str(policy))
    assert caught.value.json_path.startswith(where) and word in str(caught.value), str(caught.value)


# ------------------------------------------------------------------------------------------------ compiled policies


def _seed_lua(root: Path) -> dict[str, Any]:
    """The seed's file-agent LuaToolbox entry, unchanged (AllowedHosts: ["localhost"]), its folder made."""
    seed = json.loads(SEED_FILE_AGENT.read_text())
    contents = seed.get("contents", seed)
    [lua] = [t for t in contents["builtinToolboxes"] if t["tag"] == "LuaToolbox"]
    (root / "scripts").mkdir(exist_ok=True)
    return lua


def _shipped(name: Path, root: Path, agents: dict[str, dict[str, Any]], **extra: Any) -> Path:
    settings = {k: v for k, v in yaml.safe_load(name.read_text()).items() if k not in ("agents", "state_dir")}
    return write_policy(root, agents, **{**settings, **extra})


def _plan(policy: Path) -> Any:
    """The policy planned on this host as a root supervisor sees it (``_facts.facts_as``): no root needed."""
    config = load_config(str(policy))
    return plan_policy(config, facts_as(config, config.policy.state_dir)).compiled


def _load_errors(policy: Path) -> dict[str, str]:
    return {e["toolbox"]: e["message"] for e in _plan(policy).load_errors}


def test_the_seed_file_agent_under_strict_yaml_names_the_key_that_opens_its_localhost(sandbox_tmp: Path) -> None:
    agents = {"file-agent": agent("file-agent", builtinToolboxes=[_seed_lua(sandbox_tmp), system_toolbox()])}
    errors = _load_errors(_shipped(STRICT, sandbox_tmp, agents))
    assert set(errors) == {"lua"}, errors  # the other toolbox loads
    assert "'localhost' is the host's loopback" in errors["lua"]
    assert "toolboxes.file-agent/lua.allow_loopback: true" in errors["lua"]
    # The operator opens it for that toolbox: it loads, and its worker's proxy is told so.
    opened = _shipped(STRICT, sandbox_tmp, agents, toolboxes={"file-agent/lua": {"allow_loopback": True}})
    compiled = _plan(opened)
    assert compiled.load_errors == []
    spec = next(s for s in compiled.specs if s.toolbox == "lua")
    assert (spec.loopback, spec.policy_key) == (True, "toolboxes.file-agent/lua")
    assert spec.report["caps"]["loopback"] is True
    assert not next(s for s in compiled.specs if s.toolbox == "system").loopback


def test_permissive_yaml_opens_the_loopback_to_every_toolbox(sandbox_tmp: Path) -> None:
    agents = {"file-agent": agent("file-agent", builtinToolboxes=[_seed_lua(sandbox_tmp)])}
    compiled = compile_policy(load_config(str(_shipped(PERMISSIVE, sandbox_tmp, agents))), prepare=False)
    assert compiled.load_errors == [] and compiled.specs[0].loopback


def test_a_non_strict_policy_warns_and_the_entry_reaches_nothing(sandbox_tmp: Path) -> None:
    agents = {"file-agent": agent("file-agent", builtinToolboxes=[_seed_lua(sandbox_tmp)])}
    policy = write_policy(sandbox_tmp, agents, strict=False, landlock_min_abi=0)
    compiled = compile_policy(load_config(str(policy)), prepare=False)
    assert compiled.load_errors == [] and not compiled.specs[0].loopback
    assert any("allow_loopback: true" in w and "it reaches nothing" in w for w in compiled.warnings), compiled.warnings


def test_openapi_base_urls_and_policy_hosts_open_no_address_class_either(sandbox_tmp: Path) -> None:
    (sandbox_tmp / "spec.json").write_text(
        json.dumps({"openapi": "3.0.0", "info": {"title": "t", "version": "1"}, "paths": {}})
    )
    api = {
        "tag": "OpenAPIServer",
        "contents": {"Name": "db", "SpecUrl": str(sandbox_tmp / "spec.json"), "BaseUrl": "http://192.168.4.4:3000"},
    }
    policy = write_policy(
        sandbox_tmp,
        {"tenant": agent("tenant", openApiToolboxes=[api], builtinToolboxes=[system_toolbox()])},
        toolboxes={"tenant/system": {"allowed_hosts": ["localhost:5432"]}},
    )
    errors = _load_errors(policy)
    assert "toolboxes.tenant/db.allow_private_ranges: [192.168.4.4/32]" in errors["db"]
    assert "toolboxes.tenant/system.allow_loopback: true" in errors["system"]


def test_a_ceiling_is_a_load_error_of_the_toolbox_past_it_whatever_strict_says(sandbox_tmp: Path) -> None:
    boxes = [
        system_toolbox("shell", capabilities=["date", "execute-command"]),
        system_toolbox("info", capabilities=["date"]),
    ]
    for strict in (True, False):
        policy = write_policy(
            sandbox_tmp,
            {"coder": agent("coder", builtinToolboxes=[*boxes, _seed_lua(sandbox_tmp)])},
            strict=strict,
            landlock_min_abi=1 if strict else 0,
            ceilings={
                "*": {"forbidden_capabilities": ["execute-command"]},
                "coder": {"allowed_hosts": ["*.example.com"]},
            },
            network={"allow_loopback": True},
        )
        errors = _load_errors(policy)
        assert set(errors) == {"shell", "lua"}, errors
        assert "'execute-command', which the policy forbids (ceilings.\"*\".forbidden_capabilities)" in errors["shell"]
        assert "'localhost', past the policy's ceiling ceilings.coder.allowed_hosts (*.example.com)" in errors["lua"]


@pytest.mark.root  # compiles a policy with cgroup limits: making a cgroup needs root
def test_check_shows_what_the_policy_caps_for_each_toolbox(
    sandbox_tmp: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from supervisor.frontends._cli import main

    policy = write_policy(
        sandbox_tmp,
        {"coder": agent("coder", builtinToolboxes=[system_toolbox("info", capabilities=["date"])])},
        ceilings={"*": {"forbidden_capabilities": ["execute-command"]}, "coder": {"allowed_hosts": ["*.example.com"]}},
        toolboxes={"coder/info": {"allow_private_ranges": ["10.1.0.0/16"]}},
    )
    assert main(["check", "--policy", str(policy)]) == 0
    out = capsys.readouterr().out
    assert (
        "  coder: hosts within *.example.com (ceilings.coder.allowed_hosts); execute-command forbidden "
        '(ceilings."*".forbidden_capabilities)\n    info reaches 10.1.0.0/16 (toolboxes.coder/info)\n'
    ) in out, out
    assert main(["check", "--detail", "--policy", str(policy)]) == 0
    out = capsys.readouterr().out
    assert (
        "the policy caps it: hosts within *.example.com (ceilings.coder.allowed_hosts); execute-command forbidden "
        '(ceilings."*".forbidden_capabilities); host loopback closed (toolboxes.coder/info.allow_loopback); '
        "private ranges 10.1.0.0/16"
    ) in out, out
    assert main(["check", "--policy", str(policy), "--json"]) == 0
    [tb] = json.loads(capsys.readouterr().out)["toolboxes"]
    assert tb["caps"]["hosts"] == [{"key": "ceilings.coder.allowed_hosts", "patterns": ["*.example.com"]}]


def test_a_policy_file_a_worker_can_write_stops_a_strict_start(sandbox_tmp: Path) -> None:
    from supervisor._errors import PolicyRefused

    fsb = {"fsbPredicate": {"tag": "DirectoryRecursive", "contents": str(sandbox_tmp)}, "fsbName": "all"}
    agents = {
        "coder": agent(
            "coder", builtinToolboxes=[system_toolbox("sh", capabilities=["execute-command"], FileSandbox=fsb)]
        )
    }
    with pytest.raises(PolicyRefused, match=r"the policy file .*policy\.yaml can be written by the worker of coder/sh"):
        _plan(write_policy(sandbox_tmp, agents))
    compiled = _plan(write_policy(sandbox_tmp, agents, strict=False, landlock_min_abi=0))
    assert any("policy file" in w and "not refused" in w for w in compiled.warnings)
    assert any(w.startswith("agent coder: the agent file") for w in compiled.warnings)


def test_a_tenants_ceiling_bounds_the_sub_agents_its_agents_reach(sandbox_tmp: Path) -> None:
    from supervisor.config import expand_agents

    (sandbox_tmp / "helper.json").write_text(
        json.dumps(agent("helper", builtinToolboxes=[system_toolbox("info", capabilities=["date", "hostname"])]))
    )
    policy = write_policy(
        sandbox_tmp,
        {"front": agent("front", extraAgents=[{"slug": "helper", "path": "helper.json"}])},
        tenants={"acme": {"agents": ["front"], "ceiling": {"forbidden_capabilities": ["hostname"]}}},
    )
    compiled = compile_policy(expand_agents(load_config(str(policy))).config, prepare=False)
    [error] = compiled.load_errors
    assert (error["agent"], error["toolbox"]) == ("helper", "info")
    assert "'hostname', which the policy forbids (tenants.acme.ceiling.forbidden_capabilities)" in error["message"]
