"""Policy and agent-file loading: the seed's files load, bad input gives file, JSON path, line and expectation."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from sandbox import check_path
from sandbox._predicates import Any_, DirectoryRecursive, FileExactly
from supervisor.config import ConfigError, LoadedConfig, load_agent_file, load_config
from supervisor.config._agent_loader import parse_agent_data
from supervisor.config._policy import Policy, policy_json_schema
from supervisor.config._policy_fields import parse_size
from supervisor.config._policy_file import parse_policy_data

REPO = Path(__file__).resolve().parents[3]
FIXTURES = REPO / "tests" / "fixtures" / "agents"
SHIPPED = [REPO / "policies" / "strict.yaml", REPO / "policies" / "permissive.yaml"]


def write_agent(directory: Path, contents: dict[str, Any], name: str = "agent.json", wrap: bool = True) -> Path:
    path = directory / name
    data = {"tag": "OpenAIAgentDescription", "contents": contents} if wrap else contents
    path.write_text(json.dumps(data, indent=2))
    return path


def write_policy(directory: Path, text: str, name: str = "policy.yaml") -> Path:
    path = directory / name
    path.write_text(text)
    return path


def load_one(tmp_path: Path, contents: dict[str, Any], environ: dict[str, str] | None = None) -> LoadedConfig:
    agent = write_agent(tmp_path, contents)
    policy = write_policy(tmp_path, "agents: [agent.json]\nstrict: false\n")
    config = load_config(str(policy), environ=environ or {})
    assert [a.file for a in config.agents] == [str(agent.resolve())]
    return config


def problem(tmp_path: Path, contents: dict[str, Any], environ: dict[str, str] | None = None) -> ConfigError:
    with pytest.raises(ConfigError) as info:
        load_one(tmp_path, contents, environ)
    err = info.value
    text = str(err)
    assert "pydantic" not in text
    assert "Traceback" not in text
    return err


SYSTEM = {"tag": "SystemToolbox", "contents": {"Name": "system", "Description": "d", "Capabilities": ["date"]}}


# ------------------------------------------------------------------------------------------------ the seed's files
def test_seed_coder_agent_resolves_sandbox_refs() -> None:
    agent = load_agent_file(str(FIXTURES / "coder.json"))
    boxes = {tb.name: tb for tb in agent.toolboxes()}
    assert [(tb.kind, tb.name) for tb in agent.toolboxes()] == [
        ("developer", "dev"),
        ("lua", "lua"),
        ("system", "system"),
    ]
    project = str(FIXTURES / "src")
    assert boxes["dev"].predicate == DirectoryRecursive(project)
    assert boxes["dev"].file_sandbox is not None
    assert boxes["dev"].file_sandbox.max_file_size == 10485760
    # "scratch" has no fsbMaxFileSize: the seed's 50 MiB default applies.
    assert boxes["system"].file_sandbox is not None
    assert boxes["system"].file_sandbox.max_file_size == 50 * 2**20
    cfg = boxes["lua"].worker_config()
    assert cfg["FileSandbox"]["fsbPredicate"] == {"tag": "DirectoryRecursive", "contents": project}
    # entries without fsbName are named by their keys, so refusals say "the file sandbox 'project'"
    assert cfg["FileSandbox"]["fsbName"] == "project"
    assert boxes["system"].file_sandbox.name == "scratch"
    refused = check_path(cfg["FileSandbox"], "/etc/passwd", for_write=False)
    assert "is not allowed by the file sandbox 'project'" in refused.message
    assert cfg["MaxMemoryMB"] == 256
    assert cfg["tag"] == "LuaToolbox"


def test_seed_file_agent_gives_one_toolbox_per_worker() -> None:
    agent = load_agent_file(str(FIXTURES / "file-agent.json"), environ={"GITHUB_TOKEN": "tok-123"})
    got = [(tb.kind, tb.name) for tb in agent.toolboxes()]
    assert got == [
        ("bash", "tools"),
        ("bash", "extra-tools"),
        ("skills", "skills"),
        ("mcp", "filesystem"),
        ("openapi", "api_github_com"),
        ("postgrest", "localhost"),
        ("sqlite", "analytics"),
        ("system", "system"),
        ("developer", "dev"),
        ("lua", "lua"),
    ]
    boxes = {tb.name: tb for tb in agent.toolboxes()}
    assert boxes["tools"].worker_config() == {"tag": "FileSystemDirectory", "Path": str(FIXTURES / "tools")}
    assert boxes["api_github_com"].worker_config()["Token"] == "tok-123"
    assert boxes["api_github_com"].allowed_hosts == ("api.github.com",)
    assert boxes["localhost"].allowed_hosts == ("localhost",)
    assert boxes["lua"].allowed_hosts == ("localhost",)
    assert boxes["analytics"].worker_config()["Versioning"] == {
        "tag": "SqliteReadOnly",
        "path": str(FIXTURES / "analytics.db"),
    }
    assert boxes["analytics"].read_paths == (str(FIXTURES / "analytics.db"),)
    dev = boxes["dev"].predicate
    assert dev == Any_(
        (
            DirectoryRecursive(str(FIXTURES / "src")),
            DirectoryRecursive(str(FIXTURES / "test")),
            FileExactly(str(FIXTURES / "package.yaml")),
        )
    )
    assert boxes["system"].worker_config()["SessionIntrospectionScope"] == "subtree"
    assert boxes["skills"].worker_config()["AutoEnable"] == ["core-utils"]
    assert agent.description.extra_agents[0].path == str(FIXTURES / "helper.json")
    assert all(tb.agent_slug == "file-agent" for tb in agent.toolboxes())


def test_seed_lrmlua_agent_bare_and_wrapped_forms_agree(tmp_path: Path) -> None:
    wrapped = json.loads((FIXTURES / "kimi-lrmlua.json").read_text())
    (tmp_path / "bare.json").write_text(json.dumps(wrapped["contents"]))
    a = load_agent_file(str(FIXTURES / "kimi-lrmlua.json"))
    names = [(tb.kind, tb.name) for tb in a.toolboxes()]
    assert names == [("bash", "ask-user"), ("lua", "lua"), ("sqlite", "shared_working_memory")]
    b = load_agent_file(str(tmp_path / "bare.json"))
    assert [(tb.kind, tb.name) for tb in b.toolboxes()] == names
    assert b.toolboxes()[1].allowed_hosts == ("localhost", "127.0.0.1")


def test_shipped_policies_load_the_system_agent() -> None:
    for path in SHIPPED:
        config = load_config(str(path))
        assert config.warnings == ()
        assert config.policy.state_dir == "/var/lib/agents-supervise"
        [tb] = config.toolboxes()
        assert (tb.kind, tb.name, tb.agent_slug) == ("system", "system", "system")
        assert tb.worker_config()["Capabilities"] == [
            "date",
            "operating-system",
            "running-user",
            "hostname",
            "working-directory",
            "env-vars",
            "process-info",
            "uptime",
        ]
        assert config.policy.device_paths == ["/dev/null"]
    strict = load_config(str(SHIPPED[0])).policy
    assert strict.strict
    assert strict.landlock_min_abi == 6
    assert strict.inexact_predicates == "refuse"
    assert "/etc" not in strict.system_paths
    assert "/etc/passwd" in strict.system_paths
    permissive = load_config(str(SHIPPED[1])).policy
    assert not permissive.strict
    assert permissive.inexact_predicates == "warn"


def test_schema_is_valid_and_accepts_the_shipped_policies() -> None:
    schema = policy_json_schema()
    jsonschema.Draft202012Validator.check_schema(schema)
    validator = jsonschema.Draft202012Validator(schema)
    for path in SHIPPED:
        assert list(validator.iter_errors(yaml.safe_load(path.read_text()))) == []
    assert list(validator.iter_errors({"limits": {"output_bytes": "256MiB"}})) == []
    assert list(validator.iter_errors({"limits": {"output_bytes": "lots"}})) != []
    assert list(validator.iter_errors({"bogus": 1})) != []


# ------------------------------------------------------------------------------------------------ paths and names
def test_relative_paths_resolve_against_the_agent_file_and_canonicalise(tmp_path: Path) -> None:
    real = tmp_path / "real"
    (real / "data").mkdir(parents=True)
    (tmp_path / "link").symlink_to(real)
    fsb = {"fsbPredicate": {"tag": "DirectoryRecursive", "contents": "../link/data"}}
    sub = tmp_path / "agents"
    sub.mkdir()
    agent = write_agent(
        sub,
        {
            "slug": "a",
            "toolDirectory": "../link",
            "builtinToolboxes": [{**SYSTEM, "contents": {**SYSTEM["contents"], "FileSandbox": fsb}}],
        },
    )
    loaded = load_agent_file(str(agent))
    bash, system = loaded.toolboxes()
    assert bash.worker_config()["Path"] == str(real)
    assert system.predicate == DirectoryRecursive(str(real / "data"))


def test_derived_names_get_suffixes_and_explicit_names_win(tmp_path: Path) -> None:
    config = load_one(
        tmp_path,
        {
            "slug": "a",
            "toolDirectory": "system",
            "bashToolboxes": [
                {"tag": "FileSystemDirectory", "contents": {"Path": "x/system"}},
            ],
            "builtinToolboxes": [SYSTEM],
        },
    )
    assert [tb.name for tb in config.toolboxes()] == ["system_2", "system_3", "system"]


def test_two_postgrest_toolboxes_on_one_host_are_told_apart_by_name(tmp_path: Path) -> None:
    def server(**extra: Any) -> dict[str, Any]:
        return {
            "tag": "PostgRESTServer",
            "contents": {"SpecUrl": "http://localhost:3000/", "BaseUrl": "http://localhost:3000", **extra},
        }

    config = load_one(
        tmp_path, {"slug": "a", "postgrestToolboxes": [server(Name="orders"), server(Name="stock"), server()]}
    )
    assert [(t.kind, t.name) for t in config.toolboxes()] == [
        ("postgrest", "orders"),
        ("postgrest", "stock"),
        ("postgrest", "localhost"),
    ]
    clash = problem(tmp_path, {"slug": "a", "postgrestToolboxes": [server(Name="db"), server(Name="db")]})
    assert "duplicate toolbox name 'db'" in str(clash)


def test_allowed_paths_is_ignored_with_a_warning_saying_what_to_write(tmp_path: Path) -> None:
    lua = {
        "tag": "LuaToolbox",
        "contents": {
            "Name": "lua",
            "Description": "d",
            "MaxMemoryMB": 64,
            "MaxExecutionTimeSeconds": 5,
            "AllowedTools": [],
            "AllowedHosts": [],
            "allowedPaths": ["./data", "./scripts"],
        },
    }
    config = load_one(tmp_path, {"slug": "a", "builtinToolboxes": [lua]})
    [warning] = config.warnings
    assert "$.contents.builtinToolboxes[0].contents.allowedPaths" in warning
    assert '"FileSandbox": {"fsbPredicate": {"tag": "Any", "contents": [{"tag": "DirectoryRecursive"' in warning
    assert config.toolboxes()[0].file_sandbox is None


# ------------------------------------------------------------------------------------------------ bad agent files
def test_unknown_capability_names_file_path_and_choices(tmp_path: Path) -> None:
    bad = {**SYSTEM, "contents": {**SYSTEM["contents"], "Capabilities": ["date", "hostname", "foo"]}}
    err = problem(tmp_path, {"slug": "a", "builtinToolboxes": [SYSTEM, bad]})
    assert err.file == str((tmp_path / "agent.json").resolve())
    assert err.json_path == "$.contents.builtinToolboxes[1].contents.Capabilities[2]"
    assert err.expected is not None
    assert err.expected.startswith("one of date, operating-system, running-user")
    assert str(err).startswith(
        f"{err.file}: at $.contents.builtinToolboxes[1].contents.Capabilities[2]: "
        "unknown capability 'foo'; expected one of date, "
    )


def test_developer_capabilities_are_their_own_list(tmp_path: Path) -> None:
    dev = {"tag": "DeveloperToolbox", "contents": {"Name": "dev", "Description": "d", "Capabilities": ["date"]}}
    err = problem(tmp_path, {"slug": "a", "builtinToolboxes": [dev]})
    assert err.json_path == "$.contents.builtinToolboxes[0].contents.Capabilities[0]"
    assert "read-file-range" in (err.expected or "")


def test_unknown_key_lists_the_known_ones(tmp_path: Path) -> None:
    bad = {**SYSTEM, "contents": {**SYSTEM["contents"], "Capabilites": []}}
    err = problem(tmp_path, {"slug": "a", "builtinToolboxes": [bad]})
    assert err.json_path == "$.contents.builtinToolboxes[0].contents.Capabilites"
    assert err.message == "unknown key 'Capabilites'"
    assert "Capabilities" in (err.expected or "")


def test_unknown_top_level_key(tmp_path: Path) -> None:
    err = problem(tmp_path, {"slug": "a", "toolDirectroy": "tools"})
    assert (err.json_path, err.message) == ("$.contents.toolDirectroy", "unknown key 'toolDirectroy'")


def test_unknown_tag_names_the_known_tags(tmp_path: Path) -> None:
    err = problem(tmp_path, {"slug": "a", "builtinToolboxes": [{"tag": "ShellToolbox", "contents": {}}]})
    assert err.json_path == "$.contents.builtinToolboxes[0].tag"
    assert err.message == "unknown tag 'ShellToolbox'"
    assert err.expected == "one of SqliteToolbox, SystemToolbox, DeveloperToolbox, LuaToolbox, WasmToolbox"


def test_unknown_versioning_tag(tmp_path: Path) -> None:
    sqlite = {
        "tag": "SqliteToolbox",
        "contents": {"Name": "db", "Description": "d", "Versioning": {"tag": "SqliteMaybe", "path": "x.db"}},
    }
    err = problem(tmp_path, {"slug": "a", "builtinToolboxes": [sqlite]})
    assert err.json_path == "$.contents.builtinToolboxes[0].contents.Versioning.tag"


def test_wrong_type_says_what_was_expected(tmp_path: Path) -> None:
    lua = {
        "tag": "LuaToolbox",
        "contents": {
            "Name": "lua",
            "Description": "d",
            "MaxMemoryMB": "256",
            "MaxExecutionTimeSeconds": 5,
            "AllowedTools": [],
            "AllowedHosts": [],
        },
    }
    err = problem(tmp_path, {"slug": "a", "builtinToolboxes": [lua]})
    assert err.json_path == "$.contents.builtinToolboxes[0].contents.MaxMemoryMB"
    assert (err.message, err.expected) == ("wrong type: got a string", "an integer")


def test_missing_required_key(tmp_path: Path) -> None:
    err = problem(tmp_path, {"builtinToolboxes": []})
    assert (err.json_path, err.message) == ("$.contents.slug", "missing required key 'slug'")


def test_bad_predicate_points_inside_the_predicate(tmp_path: Path) -> None:
    fsb = {
        "fsbPredicate": {
            "tag": "Any",
            "contents": [
                {"tag": "DirectoryRecursive", "contents": "./src"},
                {"tag": "FileExtension", "contents": [".md"]},
            ],
        }
    }
    bad = {**SYSTEM, "contents": {**SYSTEM["contents"], "FileSandbox": fsb}}
    err = problem(tmp_path, {"slug": "a", "builtinToolboxes": [bad]})
    assert err.json_path == "$.contents.builtinToolboxes[0].contents.FileSandbox.fsbPredicate.contents[1].contents"
    assert "without a leading dot" in err.message


def test_unknown_sandbox_ref_lists_the_defined_ones(tmp_path: Path) -> None:
    bad = {**SYSTEM, "contents": {**SYSTEM["contents"], "FileSandbox": {"ref": "projet"}}}
    err = problem(
        tmp_path,
        {
            "slug": "a",
            "builtinToolboxes": [bad],
            "fileSandboxes": {"project": {"fsbPredicate": {"tag": "DirectoryRecursive", "contents": "."}}},
        },
    )
    assert err.json_path == "$.contents.builtinToolboxes[0].contents.FileSandbox.ref"
    assert err.message == "unknown file sandbox 'projet'"
    assert err.expected == "one of project (the keys of fileSandboxes)"


def test_missing_environment_variable_is_that_toolboxs_load_problem_not_the_files(tmp_path: Path) -> None:
    api = {
        "tag": "OpenAPIServer",
        "contents": {
            "SpecUrl": "https://x.example/openapi.json",
            "BaseUrl": "https://x.example",
            "Headers": {"X-Key": "${X_KEY}", "X-Other": "${API_TOKEN}-again"},
            "Token": "${API_TOKEN}",
        },
    }
    other = {**api, "contents": {**api["contents"], "Name": "other", "Token": "${X_KEY}", "Headers": {}}}
    config = load_one(tmp_path, {"slug": "a", "openApiToolboxes": [api, other]}, environ={"X_KEY": "k"})
    missing, fine = config.toolboxes()
    assert missing.load_problem is not None and fine.load_problem is None
    assert missing.load_problem.startswith(
        "the environment variable API_TOKEN is not set in the supervisor's environment (its Token or Headers use "
        "${API_TOKEN}). Set it where the supervisor starts"
    )
    assert fine.worker_config()["Token"] == "k"
    config = load_one(tmp_path, {"slug": "a", "openApiToolboxes": [api]}, {"X_KEY": "k", "API_TOKEN": "t"})
    cfg = config.toolboxes()[0].worker_config()
    assert (cfg["Token"], cfg["Headers"]) == ("t", {"X-Key": "k", "X-Other": "t-again"})
    assert config.toolboxes()[0].load_problem is None


def test_duplicate_toolbox_name_is_an_error(tmp_path: Path) -> None:
    sqlite = {
        "tag": "SqliteToolbox",
        "contents": {"Name": "system", "Description": "d", "Versioning": {"tag": "SqliteReadOnly", "path": "x.db"}},
    }
    err = problem(tmp_path, {"slug": "a", "builtinToolboxes": [SYSTEM, sqlite]})
    assert err.json_path == "$.contents.builtinToolboxes[1]"
    assert err.message.startswith(
        "duplicate toolbox name 'system' (also the system toolbox at $.contents.builtinToolboxes[0])"
    )


def test_malformed_json_gives_line_and_column(tmp_path: Path) -> None:
    (tmp_path / "agent.json").write_text('{\n  "slug": "a",\n  "announce": "x"\n  "flavor": "y"\n}\n')
    write_policy(tmp_path, "agents: [agent.json]\n")
    with pytest.raises(ConfigError) as info:
        load_config(str(tmp_path / "policy.yaml"))
    p = info.value.problems[0]
    assert (p.line, p.column, p.json_path) == (4, 3, None)
    assert "malformed JSON: Expecting ',' delimiter" in str(info.value)
    assert ":4:3: malformed JSON" in str(info.value)


def test_all_bad_agent_files_are_reported_together(tmp_path: Path) -> None:
    write_agent(tmp_path, {"slug": "a", "flavor": 3}, "one.json")
    write_agent(tmp_path, {"slug": "b", "announce": []}, "two.json")
    write_policy(tmp_path, "agents: [one.json, two.json]\n")
    with pytest.raises(ConfigError) as info:
        load_config(str(tmp_path / "policy.yaml"))
    assert [(os.path.basename(p.file), p.json_path) for p in info.value.problems] == [
        ("one.json", "$.contents.flavor"),
        ("two.json", "$.contents.announce"),
    ]
    assert len(str(info.value).splitlines()) == 2


# ------------------------------------------------------------------------------------------------ bad policies
def test_missing_agent_file_names_it_and_the_policy_line(tmp_path: Path) -> None:
    write_agent(tmp_path, {"slug": "a"})
    policy = write_policy(tmp_path, "# agents\nagents:\n  - agent.json\n  - nowhere/else.json\n")
    with pytest.raises(ConfigError) as info:
        load_config(str(policy))
    err = info.value
    assert (err.file, err.json_path, err.problems[0].line) == (str(policy.resolve()), "$.agents[1]", 4)
    assert str(tmp_path / "nowhere" / "else.json") in err.message or "nowhere/else.json" in err.message
    assert str(err).endswith(f".yaml:4: at $.agents[1]: {err.message}")


def test_missing_agent_given_on_the_command_line(tmp_path: Path) -> None:
    policy = write_policy(tmp_path, "agents: []\n")
    with pytest.raises(ConfigError) as info:
        load_config(str(policy), [str(tmp_path / "extra.json")])
    assert info.value.file == str(tmp_path / "extra.json")
    assert "given with --agent" in info.value.message


def test_extra_agents_are_added_and_slugs_must_differ(tmp_path: Path) -> None:
    write_agent(tmp_path, {"slug": "a", "builtinToolboxes": [SYSTEM]}, "one.json")
    write_agent(tmp_path, {"slug": "b"}, "two.json")
    write_agent(tmp_path, {"slug": "a"}, "three.json")
    policy = write_policy(tmp_path, "agents: [one.json]\n")
    config = load_config(str(policy), [str(tmp_path / "two.json"), str(tmp_path / "one.json")])
    assert [a.slug for a in config.agents] == ["a", "b"]
    with pytest.raises(ConfigError) as info:
        load_config(str(policy), [str(tmp_path / "three.json")])
    assert (os.path.basename(info.value.file), info.value.json_path) == ("three.json", "$.contents.slug")


def test_malformed_yaml_gives_line_and_column(tmp_path: Path) -> None:
    policy = write_policy(tmp_path, "agents: []\nlimits:\n  cpu_seconds: [1, 2\nstrict: true\n")
    with pytest.raises(ConfigError) as info:
        load_config(str(policy))
    p = info.value.problems[0]
    assert p.json_path is None
    assert p.line == 4
    assert p.message.startswith("malformed YAML")


def test_unknown_policy_key_gives_path_and_line(tmp_path: Path) -> None:
    policy = write_policy(tmp_path, "agents: []\nlimits:\n  cpu_seconds: 5\n  cpu_secs: 5\n")
    with pytest.raises(ConfigError) as info:
        load_config(str(policy))
    err = info.value
    assert (err.json_path, err.message, err.problems[0].line) == ("$.limits.cpu_secs", "unknown key 'cpu_secs'", 4)
    assert str(err).endswith(
        "policy.yaml:4: at $.limits.cpu_secs: unknown key 'cpu_secs'; expected keys among "
        "address_space_bytes, cpu_seconds, wall_time_s, open_files, file_size_bytes, processes, memory_bytes, cpus, "
        "output_bytes, max_concurrent_calls"
    )


def test_policy_wrong_types_and_values(tmp_path: Path) -> None:
    policy = write_policy(
        tmp_path,
        "strict: 'yes'\ninexact_predicates: ignore\nsandbox_uid: 0\n"
        "limits: {output_bytes: 12 parsecs}\nnetwork: {allow_private_ranges: [10.0.0.1/8]}\n",
    )
    with pytest.raises(ConfigError) as info:
        load_config(str(policy))
    got = {p.json_path: (p.message, p.line) for p in info.value.problems}
    assert got["$.strict"] == ("wrong type: got a string", 1)
    assert got["$.inexact_predicates"][0] == "invalid value 'ignore'"
    assert got["$.sandbox_uid"][1] == 3
    assert got["$.limits.output_bytes"][0] == "invalid size '12 parsecs'"
    assert "$.network.allow_private_ranges[0]" in got


def test_duplicate_yaml_key_is_an_error(tmp_path: Path) -> None:
    policy = write_policy(tmp_path, "strict: true\nagents: []\nstrict: false\n")
    with pytest.raises(ConfigError) as info:
        load_config(str(policy))
    assert (info.value.json_path, info.value.problems[0].line) == ("$.strict", 3)


def test_strict_needs_landlock(tmp_path: Path) -> None:
    policy = write_policy(tmp_path, "strict: true\nlandlock_min_abi: 0\n")
    with pytest.raises(ConfigError, match="strict: true needs landlock_min_abi of at least 1"):
        load_config(str(policy))


def test_missing_policy_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="policy file not found"):
        load_config(str(tmp_path / "none.yaml"))


def test_empty_policy_means_all_defaults(tmp_path: Path) -> None:
    config = load_config(str(write_policy(tmp_path, "")))
    assert config.agents == ()
    assert config.policy.max_call_depth == 4
    assert config.policy.worker_env == {"PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8"}
    assert config.policy.trace.path == "/var/lib/agents-supervise/trace.jsonl"


# ------------------------------------------------------------------------------------------------ sizes and limits
@pytest.mark.parametrize(
    ("text", "value"),
    [
        (0, 0),
        (4096, 4096),
        ("256MiB", 256 * 2**20),
        ("1GB", 10**9),
        ("1.5KiB", 1536),
        ("10 kib", 10240),
        ("7B", 7),
        ("12", 12),
        ("2TiB", 2 * 2**40),
    ],
)
def test_sizes_parse(text: int | str, value: int) -> None:
    assert parse_size(text) == value


@pytest.mark.parametrize("text", ["-1", -5, "1.3B", "5 parsecs", "MiB", "", True, 1.5])
def test_bad_sizes_are_refused(text: Any) -> None:
    with pytest.raises(ValueError):  # noqa: PT011
        parse_size(text)


def test_effective_limits_merge_overrides_only_where_written(tmp_path: Path) -> None:
    policy = Policy.model_validate(
        yaml.safe_load(
            "limits: {wall_time_s: 30, output_bytes: 1MiB, address_space_bytes: 512MiB}\n"
            "toolboxes:\n  system: {limits: {wall_time_s: 5, address_space_bytes: null}, env: {TZ: UTC}}\n"
            "  a/system: {limits: {open_files: 64}}\n"
        ),
        context={"base_dir": str(tmp_path)},
    )
    limits = policy.effective_limits("system")
    assert (limits.wall_time_s, limits.output_bytes, limits.address_space_bytes) == (5, 2**20, None)
    assert policy.effective_limits("other").wall_time_s == 30
    assert policy.effective_limits("system", "a").open_files == 64
    assert policy.effective_limits("system", "a").wall_time_s == 30  # the slug/name entry replaces the name one
    assert policy.worker_env_for("system")["TZ"] == "UTC"


def test_policy_toolbox_key_naming_nothing_is_a_warning(tmp_path: Path) -> None:
    write_agent(tmp_path, {"slug": "a", "builtinToolboxes": [SYSTEM]})
    policy = write_policy(tmp_path, "agents: [agent.json]\ntoolboxes:\n  sytem: {start: lazy}\n")
    config = load_config(str(policy))
    [warning] = config.warnings
    assert "at $.toolboxes.sytem" in warning
    assert "expected one of system" in warning
    assert ":3:" in warning


# ------------------------------------------------------------------------------------------------ more bad agent input
def test_duplicate_json_key_is_an_error(tmp_path: Path) -> None:
    (tmp_path / "agent.json").write_text(
        '{"slug": "a", "builtinToolboxes": [{"tag": "SystemToolbox", "contents": '
        '{"Name": "s", "Name": "t", "Description": "d", "Capabilities": []}}]}'
    )
    with pytest.raises(ConfigError) as info:
        load_agent_file(str(tmp_path / "agent.json"))
    assert info.value.json_path == "$.builtinToolboxes[0].contents.Name"
    assert info.value.message == "duplicate key 'Name'"


def test_nan_and_infinity_are_not_json(tmp_path: Path) -> None:
    (tmp_path / "agent.json").write_text('{"slug": "a", "flavor": NaN}')
    with pytest.raises(ConfigError, match="malformed JSON: NaN is not a JSON number"):
        load_agent_file(str(tmp_path / "agent.json"))


def test_skill_sources_are_checked(tmp_path: Path) -> None:
    err = problem(
        tmp_path,
        {
            "slug": "a",
            "skillSources": [
                {"tag": "SkillGitRepo", "contents": {"url": "https://git.example/skills", "subdir": "../up"}}
            ],
        },
    )
    assert err.json_path == "$.contents.skillSources[0].contents.subdir"
    err = problem(tmp_path, {"slug": "a", "autoEnableSkills": ["core-utils", "Bad--Name"]})
    assert err.json_path == "$.contents.autoEnableSkills[1]"
    config = load_one(
        tmp_path,
        {
            "slug": "a",
            "skillSources": [
                {"tag": "SkillDirectory", "contents": "./skills"},
                {"tag": "SkillGitRepo", "contents": {"url": "https://git.example/skills", "subdir": "pdf"}},
            ],
        },
    )
    [skills] = config.toolboxes()
    assert skills.allowed_hosts == ("git.example",)
    assert skills.read_paths == (str(tmp_path.resolve() / "skills"),)


def test_secrets_stay_out_of_reprs(tmp_path: Path) -> None:
    api = {
        "tag": "OpenAPIServer",
        "contents": {"SpecUrl": "./spec.json", "BaseUrl": "https://x.example", "Token": "${T}", "Name": "x"},
    }
    config = load_one(tmp_path, {"slug": "a", "openApiToolboxes": [api]}, {"T": "s3cret-value"})
    assert "s3cret-value" not in repr(config)
    tb = config.toolboxes()[0]
    assert tb.worker_config()["SpecUrl"] == str(tmp_path.resolve() / "spec.json")
    assert tb.allowed_hosts == ("x.example",)


def test_policy_allowed_hosts_are_checked(tmp_path: Path) -> None:
    policy = write_policy(tmp_path, "toolboxes:\n  lua:\n    allowed_hosts: [API.Example.com, 'https://x/y']\n")
    with pytest.raises(ConfigError) as info:
        load_config(str(policy))
    assert (info.value.json_path, info.value.problems[0].line) == ("$.toolboxes.lua.allowed_hosts[1]", 3)


def test_policy_allowed_hosts_take_ports_and_port_ranges(tmp_path: Path) -> None:
    policy = write_policy(
        tmp_path,
        "toolboxes:\n  lua:\n    allowed_hosts: [API.Example.com:443, '*.example.org:443',"
        " '[2001:db8::1]:443', 'files.example:8000-8100', 'any.example']\n",
    )
    hosts = load_config(str(policy)).policy.toolboxes["lua"].allowed_hosts
    assert hosts == [
        "api.example.com:443",
        "*.example.org:443",
        "[2001:db8::1]:443",
        "files.example:8000-8100",
        "any.example",
    ]


@pytest.mark.parametrize(
    ("entry", "words"),
    [
        ("api.example.com:", "port is missing"),
        ("api.example.com:8100-8000", "range 8100-8000 is empty"),
        ("api.example.com:99999", "outside 1-65535"),
        ("[2001:db8::1]443", "expected ':port'"),
        ("metadata.google.internal:80", "cloud metadata"),
        ("168.63.129.16", "cloud metadata"),
    ],
)
def test_malformed_port_entries_are_located_and_explained(tmp_path: Path, entry: str, words: str) -> None:
    policy = write_policy(tmp_path, f"toolboxes:\n  lua:\n    allowed_hosts: [ok.example, '{entry}']\n")
    with pytest.raises(ConfigError) as info:
        load_config(str(policy))
    assert info.value.json_path == "$.toolboxes.lua.allowed_hosts[1]"
    assert words in info.value.message, info.value.message
    assert "Traceback" not in str(info.value) and "pydantic" not in str(info.value)


def test_agent_file_allowed_hosts_take_ports(tmp_path: Path) -> None:
    lua = {
        "tag": "LuaToolbox",
        "contents": {
            "Name": "lua",
            "Description": "d",
            "MaxMemoryMB": 64,
            "MaxExecutionTimeSeconds": 5,
            "AllowedTools": [],
            "AllowedHosts": ["api.example.com:443", "bad.example:0"],
        },
    }
    err = problem(tmp_path, {"slug": "a", "builtinToolboxes": [lua]})
    assert err.json_path == "$.contents.builtinToolboxes[0].contents.AllowedHosts[1]", err.json_path
    assert "outside 1-65535" in err.message


def test_bad_policy_toolbox_key_is_located(tmp_path: Path) -> None:
    policy = write_policy(tmp_path, "toolboxes:\n  ok: {}\n  'not ok': {start: lazy}\n")
    with pytest.raises(ConfigError) as info:
        load_config(str(policy))
    assert (info.value.json_path, info.value.message) == ('$.toolboxes["not ok"]', "invalid toolbox key 'not ok'")
    assert info.value.problems[0].line == 3


_KEYS = [
    "slug",
    "tag",
    "contents",
    "builtinToolboxes",
    "Name",
    "Description",
    "Capabilities",
    "FileSandbox",
    "fsbPredicate",
    "ref",
    "Versioning",
    "path",
    "Path",
    "bashToolboxes",
    "fileSandboxes",
    "AllowedHosts",
    "SystemToolbox",
    "LuaToolbox",
    "SqliteToolbox",
    "SqliteReadOnly",
    "Any",
    "DirectoryRecursive",
    "x",
]
_JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-5, 2**70) | st.floats(allow_nan=False) | st.sampled_from(_KEYS),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.sampled_from(_KEYS), inner, max_size=5),
    max_leaves=30,
)


@settings(max_examples=300, deadline=None)
@given(body=st.dictionaries(st.sampled_from(_KEYS), _JSON, max_size=5), wrap=st.booleans())
def test_any_json_gives_a_config_or_a_config_error(body: dict[str, Any], wrap: bool) -> None:
    data = {"tag": "OpenAIAgentDescription", "contents": body} if wrap else body
    try:
        agent = parse_agent_data(data, "/nonexistent/agent.json", environ={})
    except ConfigError as exc:
        error: ConfigError | None = exc
    else:
        error = None
        for tb in agent.toolboxes():
            json.dumps(tb.worker_config())
    if error is not None:
        text = str(error)
        assert text.startswith("/nonexistent/agent.json")
        assert "pydantic" not in text
        assert all(p.json_path is None or p.json_path.startswith("$") for p in error.problems)


_POLICY_KEYS = [
    "agents",
    "limits",
    "toolboxes",
    "system",
    "wall_time_s",
    "output_bytes",
    "network",
    "allow_private_ranges",
    "strict",
    "supervision",
    "restart_backoff_max_s",
    "trace",
    "path",
    "env",
    "worker_env",
    "model_keys",
    "context",
    "images",
    "max_bytes",
    "x",
]
_YAML = st.recursive(
    st.none() | st.booleans() | st.integers(-5, 2**70) | st.floats() | st.sampled_from(["1MiB", "10.0.0.0/8", "/x"]),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.sampled_from(_POLICY_KEYS), inner, max_size=4),
    max_leaves=20,
)


@settings(max_examples=300, deadline=None)
@given(data=st.dictionaries(st.sampled_from(_POLICY_KEYS), _YAML, max_size=5))
def test_any_policy_data_gives_a_policy_or_a_config_error(data: dict[str, Any]) -> None:
    try:
        policy = parse_policy_data(data, "/nonexistent/policy.yaml")
    except ConfigError as exc:
        error: ConfigError | None = exc
    else:
        error = None
        policy.effective_limits("system")
    if error is not None:
        assert str(error).startswith("/nonexistent/policy.yaml: at $")
        assert "pydantic" not in str(error)


def test_the_readme_policy_example_is_a_valid_policy() -> None:
    text = (REPO / "README.md").read_text()
    block = text.split("## A policy", 1)[1].split("```yaml\n", 1)[1].split("```", 1)[0]
    policy = parse_policy_data(yaml.safe_load(block), str(REPO / "policy.yaml"))
    assert policy.worker_uids is not None and policy.toolboxes["system"].allowed_hosts == [
        "api.example.com:443",
        "*.example.org",
    ]
