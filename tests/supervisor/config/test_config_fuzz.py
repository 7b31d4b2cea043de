"""Hostile policy and agent files get a clear error, never a traceback or a hang (hypothesis, bounded examples).

Mutated files go through what ``agents-supervise check`` does (load, expand sub-agents, compile) in this process:
the outcome is either a configuration or a ``ConfigError``/``PolicyRefused`` with a message; any other exception
fails the test. The extremes of issue 19 (a deep file, a YAML alias bomb and a self-referencing alias, NUL bytes and
lone surrogates in paths, ``--agent /dev/zero``, ``sandbox_gid: 4294967296``, ``memory_bytes: 10^30``) are also run
through the real CLI, which must exit with its error status and no traceback.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from supervisor._errors import SupervisorError
from supervisor.config._agent_tree import expand_agents
from supervisor.config._loader import load_config
from supervisor.plan._compile import compile_policy
from tests._policies import agent, system_toolbox


def _examples(default: int) -> int:
    """Hypothesis examples: ``default`` in the normal suite, more with ``AGENTS_SUPERVISE_FUZZ_EXAMPLES`` (the long
    mode of ``scripts/chaos fuzz``)."""
    return int(os.environ.get("AGENTS_SUPERVISE_FUZZ_EXAMPLES") or default)


ROOT = Path(__file__).resolve().parents[3]


def _base(root: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    (root / "work").mkdir(exist_ok=True)
    tools = [system_toolbox(capabilities=["date"])]
    bash = [{"tag": "FileSystemDirectory", "contents": {"Path": str(root / "work")}}]
    policy = {
        "agents": ["a.json"],
        "state_dir": str(root / "state"),
        "worker_uids": None,
        "limits": {"wall_time_s": 5, "memory_bytes": "256MiB"},
        "toolboxes": {"work": {"allowed_hosts": []}},
        "supervision": {"crash_loop_max_restarts": 3},
    }
    return policy, agent("a", builtinToolboxes=tools, bashToolboxes=bash)


HOSTILE = st.one_of(
    st.sampled_from(
        [
            None,
            True,
            0,
            -1,
            2**31,
            2**32,
            2**63,
            10**30,
            -(10**30),
            1.5,
            1e308,
            "",
            "\x00",
            "a\x00b",
            "/tmp/\x00x",
            "\ud800",
            "../../../etc",
            "/",
            "x" * 5000,
            [],
            {},
            [[[[[]]]]],
            {"tag": "x"},
            {"tag": "SystemToolbox", "contents": None},
            "256MiB",
            "1e400 GiB",
            "99999999999999999999 TiB",
        ]
    ),
    st.integers(),
    st.text(max_size=10),
    st.floats(allow_nan=False),
)


def _paths(value: Any, here: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [here]
    if isinstance(value, dict):
        for k, v in value.items():
            out += _paths(v, (*here, k))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            out += _paths(v, (*here, i))
    return out


def _replace(value: Any, path: tuple[Any, ...], new: Any) -> Any:
    if not path:
        return new
    head, *rest = path
    if isinstance(value, dict):
        return {**value, head: _replace(value[head], tuple(rest), new)}
    copy = list(value)
    copy[head] = _replace(copy[head], tuple(rest), new)
    return copy


def _check(policy_path: Path, extra: tuple[str, ...] = ()) -> str:
    """What ``check`` does; the error text when the files are refused, ``""`` when they pass."""
    try:
        config = expand_agents(load_config(str(policy_path), list(extra))).config
        compile_policy(config, prepare=False)
    except SupervisorError as exc:
        text = str(exc)
        assert text.strip(), "an error without a message"
        return text
    return ""


@pytest.mark.root  # compiles a policy with cgroup limits: making a cgroup needs root
def test_the_base_files_pass(sandbox_tmp: Path) -> None:
    policy, agent_file = _base(sandbox_tmp)
    (sandbox_tmp / "a.json").write_text(json.dumps(agent_file))
    (sandbox_tmp / "policy.yaml").write_text(yaml.safe_dump(policy))
    assert _check(sandbox_tmp / "policy.yaml") == ""


@settings(
    max_examples=_examples(100),
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(data=st.data())
def test_mutated_files_are_accepted_or_refused_with_a_message(sandbox_tmp: Path, data: st.DataObject) -> None:
    policy, agent_file = _base(sandbox_tmp)
    which = data.draw(st.sampled_from(["policy", "agent", "both"]))
    if which in ("policy", "both"):
        path = data.draw(st.sampled_from(_paths(policy)[1:]))
        policy = _replace(policy, path, data.draw(HOSTILE))
    if which in ("agent", "both"):
        path = data.draw(st.sampled_from(_paths(agent_file)[1:]))
        agent_file = _replace(agent_file, path, data.draw(HOSTILE))
    (sandbox_tmp / "a.json").write_text(json.dumps(agent_file))
    (sandbox_tmp / "policy.yaml").write_text(yaml.safe_dump(policy, allow_unicode=False))
    _check(sandbox_tmp / "policy.yaml")


@settings(
    max_examples=_examples(40),
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(cut=st.integers(0, 10_000), junk=st.binary(max_size=8), target=st.sampled_from(["a.json", "policy.yaml"]))
def test_corrupted_bytes_are_refused_with_a_message(sandbox_tmp: Path, cut: int, junk: bytes, target: str) -> None:
    policy, agent_file = _base(sandbox_tmp)
    texts = {"a.json": json.dumps(agent_file, indent=1).encode(), "policy.yaml": yaml.safe_dump(policy).encode()}
    text = texts[target]
    cut %= len(text) + 1
    texts[target] = text[:cut] + junk + text[cut + len(junk) // 2 :]
    for name, content in texts.items():
        (sandbox_tmp / name).write_bytes(content)
    _check(sandbox_tmp / "policy.yaml")


def _extreme_files(root: Path) -> dict[str, tuple[dict[str, bytes], tuple[str, ...], str]]:
    """name -> (files to write, extra --agent files, text the error must hold)."""
    policy, agent_file = _base(root)
    deep_json = b'{"tag": "OpenAIAgentDescription", "contents": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"
    bomb = "a: &a [x, x, x, x, x, x, x, x, x]\n" + "".join(
        f"{chr(98 + i)}: &{chr(98 + i)} [*{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}]\n"
        for i in range(20)
    )
    nul_agent = _replace(agent_file, ("contents", "bashToolboxes", 0, "contents", "Path"), str(root / "work") + "\x00x")
    surrogate_agent = _replace(agent_file, ("contents", "bashToolboxes", 0, "contents", "Path"), "/tmp/\ud800")

    def with_policy(**changes: Any) -> bytes:
        return yaml.safe_dump({**policy, **changes}).encode()

    good_agent = json.dumps(agent_file).encode()
    return {
        "JSON nested 100,000 deep": ({"a.json": deep_json, "policy.yaml": with_policy()}, (), "nested too deeply"),
        "YAML nested 100,000 deep": (
            {"a.json": good_agent, "policy.yaml": b"limits: " + b"[" * 100_000},
            (),
            "nested more than 64 deep",
        ),
        "a YAML alias bomb": ({"a.json": good_agent, "policy.yaml": bomb.encode()}, (), "the alias *a is not accepted"),
        "a YAML alias of itself": (
            {"a.json": good_agent, "policy.yaml": b"agents: &x [*x]\n"},
            (),
            "the alias *x is not accepted",
        ),
        "a NUL byte in a path": (
            {"a.json": json.dumps(nul_agent).encode(), "policy.yaml": with_policy()},
            (),
            "Path: the string holds a NUL byte",
        ),
        "a lone surrogate in a path": (
            {"a.json": json.dumps(surrogate_agent).encode(), "policy.yaml": with_policy()},
            (),
            "lone surrogate",
        ),
        "--agent /dev/zero": (
            {"a.json": good_agent, "policy.yaml": with_policy()},
            ("/dev/zero",),
            "larger than 8 MiB",
        ),
        "sandbox_gid: 4294967296": (
            {"a.json": good_agent, "policy.yaml": with_policy(sandbox_gid=4294967296)},
            (),
            "sandbox_gid",
        ),
        "memory_bytes: 10^30": (
            {"a.json": good_agent, "policy.yaml": with_policy(limits={"memory_bytes": 10**30})},
            (),
            "larger than the kernel takes",
        ),
        "a size of 1e400 GiB": (
            {"a.json": good_agent, "policy.yaml": with_policy(limits={"memory_bytes": "9" * 400 + ".5 GiB"})},
            (),
            "larger than the kernel takes",
        ),
    }


@pytest.mark.parametrize(
    "case",
    [
        "JSON nested 100,000 deep",
        "YAML nested 100,000 deep",
        "a YAML alias bomb",
        "a YAML alias of itself",
        "a NUL byte in a path",
        "a lone surrogate in a path",
        "--agent /dev/zero",
        "sandbox_gid: 4294967296",
        "memory_bytes: 10^30",
        "a size of 1e400 GiB",
    ],
)
def test_the_extremes_get_a_clear_error_from_check(sandbox_tmp: Path, case: str) -> None:
    files, extra, why = _extreme_files(sandbox_tmp)[case]
    for name, content in files.items():
        (sandbox_tmp / name).write_bytes(content)
    assert why in _check(sandbox_tmp / "policy.yaml", extra)
    args = [arg for path in extra for arg in ("--agent", path)]
    proc = subprocess.run(
        [sys.executable, "-m", "supervisor", "check", "--policy", str(sandbox_tmp / "policy.yaml"), *args],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        cwd=str(sandbox_tmp),
    )
    assert proc.returncode != 0 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
    assert why in proc.stderr, proc.stderr[-2000:]
