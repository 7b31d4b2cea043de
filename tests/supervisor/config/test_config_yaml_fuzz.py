"""What YAML 1.1 makes of a policy's words, and hostile file names given to the loader (issue 27 item 6).

PyYAML reads the unquoted words ``off``/``no``/``false`` as ``False`` and ``on``/``yes``/``true`` as ``True``
(FACTS.md), and plain scalars such as ``2001-12-14``, ``0x1F``, ``1:20``, ``.inf`` or ``!!binary ...`` as dates,
numbers and bytes. The policy's own comments write ``kernel_audit: off`` unquoted: that must mean off. Every other
odd value must be accepted or refused with a ``ConfigError`` naming the file and key, never a traceback.

The fuzz tests run a bounded number of examples, derandomized (the same every run) in the normal suite; ``scripts/chaos
fuzz`` runs more (``AGENTS_SUPERVISE_FUZZ_EXAMPLES``). A 2,000-example run of each (2026-12-02) found the tracebacks
these tests now hold off: a NUL in the policy's or an ``--agent`` file's path (``ValueError: embedded null byte``).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from supervisor.config import ConfigError
from supervisor.config._loader import load_config
from supervisor.config._policy_file import load_policy
from tests._policies import agent, system_toolbox
from tests.supervisor.config.test_config_fuzz import _check, _paths

ROOT = Path(__file__).resolve().parents[3]


def _examples(default: int) -> int:
    return int(os.environ.get("AGENTS_SUPERVISE_FUZZ_EXAMPLES") or default)


FUZZ = settings(
    max_examples=_examples(150),
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)

#: Plain YAML scalars that YAML 1.1 (PyYAML) does not read as the string written, and other odd values.
RAW_SCALARS = [
    "off",
    "Off",
    "OFF",
    "no",
    "No",
    "on",
    "yes",
    "true",
    "false",
    "~",
    "null",
    "",
    ".inf",
    "-.inf",
    ".nan",
    "0x1F",
    "0o17",
    "017",
    "1_000",
    "1:20",
    "190:20:30.15",
    "2001-12-14",
    "2001-12-14t21:59:43.10-05:00",
    "!!binary aGVsbG8=",
    "!!binary AA==",
    "!!set {a, b}",
    "!!omap [a: 1, b: 2]",
    "!!pairs [a: 1, a: 2]",
    "!!timestamp 2001-12-14",
    "!!float 1e999",
    "!!int 99999999999999999999999999",
    "!!str 5",
    "!!null ''",
    "!!python/name:os.system",
    "!!python/object/apply:os.system [id]",
    "!custom x",
    '"\\0"',
    '"a\\0b"',
    '"\\ud800"',
    '"\\x85"',
    "'\u2028'",
    "{}",
    "[]",
    "{<<: {a: 1}}",
    "[[[[]]]]",
    "&anchor x",
    "-1",
    "1e400",
    "99999999999999999999",
    "10**30",
    "'256MiB'",
    "256MiB",
    "1e400 GiB",
]


def _base(root: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    """The shipped strict policy with every section a key of its own (HTTP, tenants, OAuth, credentials), its paths
    in ``root``, and one agent."""
    (root / "work").mkdir(exist_ok=True)
    (root / "jwks.json").write_text('{"keys": []}')
    policy = yaml.safe_load((ROOT / "policies" / "strict.yaml").read_text())
    policy.update(
        agents=["a.json"],
        state_dir=str(root / "state"),
        worker_uids=None,
        frontends={"http": {"listen": "127.0.0.1:8765", "allowed_origins": ["https://example.org"]}},
        tenants={"acme": {"tokens": ["sha256:" + "0" * 64], "agents": ["a"], "limits": {"concurrent_calls": 4}}},
        oauth={"issuer": "https://issuer.example.org", "jwks_file": str(root / "jwks.json")},
        credentials={
            "api": {
                "source": {"env": "HOME"},
                "bindings": [{"hosts": ["api.example.org"], "path_prefixes": ["/v1"]}],
                "header": "Authorization: Bearer {value}",
            }
        },
    )
    tools = [system_toolbox(capabilities=["date"])]
    bash = [{"tag": "FileSystemDirectory", "contents": {"Path": str(root / "work")}}]
    return policy, agent("a", builtinToolboxes=tools, bashToolboxes=bash)


PLACEHOLDER = "__raw_yaml_value__"


def _with_raw(policy: dict[str, Any], path: tuple[Any, ...], raw: str, as_key: bool) -> str:
    """The policy as YAML text with the value (or, ``as_key``, the key) at ``path`` written as ``raw``, unquoted."""

    def put(value: Any, rest: tuple[Any, ...]) -> Any:
        head, *tail = rest
        if isinstance(value, dict):
            if not tail and as_key:
                return {(PLACEHOLDER if k == head else k): v for k, v in value.items()}
            return {**value, head: PLACEHOLDER if not tail else put(value[head], tuple(tail))}
        copy = list(value)
        copy[head] = PLACEHOLDER if not tail else put(copy[head], tuple(tail))
        return copy

    text = yaml.safe_dump(put(policy, path), sort_keys=False, width=10_000)
    return text.replace(PLACEHOLDER, raw.replace("\n", " "))


@pytest.mark.root  # compiles a policy with cgroup limits: making a cgroup needs root
def test_the_base_files_pass(sandbox_tmp: Path) -> None:
    policy, agent_file = _base(sandbox_tmp)
    (sandbox_tmp / "a.json").write_text(json.dumps(agent_file))
    (sandbox_tmp / "policy.yaml").write_text(yaml.safe_dump(policy))
    assert _check(sandbox_tmp / "policy.yaml") == ""


@pytest.mark.slow
@FUZZ
@given(data=st.data())
def test_raw_yaml_scalars_anywhere_are_accepted_or_refused_with_a_message(sandbox_tmp: Path, data: Any) -> None:
    policy, agent_file = _base(sandbox_tmp)
    path = data.draw(st.sampled_from(_paths(policy)[1:]))
    raw = data.draw(st.sampled_from(RAW_SCALARS) | st.text(max_size=12))
    as_key = isinstance(path[-1], str) and data.draw(st.booleans())
    (sandbox_tmp / "a.json").write_text(json.dumps(agent_file))
    (sandbox_tmp / "policy.yaml").write_text(_with_raw(policy, path, raw, as_key), encoding="utf-8", errors="replace")
    _check(sandbox_tmp / "policy.yaml")


HOSTILE_NAMES = st.sampled_from(
    ["a\x00b", "\x00", "/tmp/\x00", "\ud800", "a\udcffb", "", ".", "/", "/dev/zero", "/proc/self/mem", "x" * 5000]
) | st.text(max_size=20)


@FUZZ
@given(policy_name=HOSTILE_NAMES | st.just("policy.yaml"), extra=st.lists(HOSTILE_NAMES, max_size=3))
def test_hostile_file_names_get_a_config_error(sandbox_tmp: Path, policy_name: str, extra: list[str]) -> None:
    policy, agent_file = _base(sandbox_tmp)
    (sandbox_tmp / "a.json").write_text(json.dumps(agent_file))
    (sandbox_tmp / "policy.yaml").write_text(yaml.safe_dump(policy))
    cwd = os.getcwd()
    os.chdir(sandbox_tmp)
    try:
        _check(Path(policy_name), tuple(extra))
    finally:
        os.chdir(cwd)


@pytest.mark.parametrize("name", ["a\x00b.json", "/tmp/\x00/a.json"])
def test_a_nul_in_an_agent_file_name_is_a_config_error(sandbox_tmp: Path, name: str) -> None:
    policy, agent_file = _base(sandbox_tmp)
    (sandbox_tmp / "a.json").write_text(json.dumps(agent_file))
    (sandbox_tmp / "policy.yaml").write_text(yaml.safe_dump(policy))
    with pytest.raises(ConfigError, match="NUL byte") as caught:
        load_config(str(sandbox_tmp / "policy.yaml"), [name])
    assert "--agent" in str(caught.value)
    with pytest.raises(ConfigError, match="NUL byte"):
        load_config(str(sandbox_tmp / "policy\x00.yaml"))


def _policy_with(sandbox_tmp: Path, line: str) -> Path:
    path = sandbox_tmp / "policy.yaml"
    path.write_text(f"state_dir: {sandbox_tmp / 'state'}\n{line}\n")
    return path


@pytest.mark.parametrize("word", ["off", "Off", "OFF", "no", "false"])
def test_kernel_audit_off_written_unquoted_is_off(sandbox_tmp: Path, word: str) -> None:
    policy, _, _ = load_policy(str(_policy_with(sandbox_tmp, f"kernel_audit: {word}  # as the comment shows")))
    assert policy.kernel_audit == "off"


def test_kernel_audit_on_written_unquoted_asks_for_the_word(sandbox_tmp: Path) -> None:
    with pytest.raises(ConfigError) as caught:
        load_policy(str(_policy_with(sandbox_tmp, "kernel_audit: on")))
    text = str(caught.value)
    assert "$.kernel_audit" in text and "policy.yaml:2" in text
    assert "enable" in text and "use" in text and "unquoted" in text


@pytest.mark.parametrize(
    ("line", "key"),
    [
        ("inexact_predicates: no", "$.inexact_predicates"),
        ("supervision: {spawn: yes}", "$.supervision.spawn"),
        ("toolboxes: {system: {start: on}}", "$.toolboxes.system.start"),
        ("sessions: {introspection: {scopes: [off]}}", "$.sessions.introspection.scopes[0]"),
        ("worker_env: {DEBUG: yes}", "$.worker_env.DEBUG"),
    ],
)
def test_a_boolean_where_a_word_is_expected_says_yaml_read_it(sandbox_tmp: Path, line: str, key: str) -> None:
    with pytest.raises(ConfigError) as caught:
        load_policy(str(_policy_with(sandbox_tmp, line)))
    text = str(caught.value)
    assert key in text, text
    assert "unquoted" in text and "quote" in text, text
