"""Toolbox keys of the policy say whose toolbox they configure: ``agent/toolbox`` always works; a bare toolbox name
works while only one agent has a toolbox of that name, and is a config error naming the qualified keys otherwise."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from supervisor.config._errors import ConfigError
from supervisor.config._loader import load_config
from supervisor.plan._compile import compile_policy
from tests._policies import agent, system_toolbox, write_policy
from tests.supervisor.plan._facts import plan_as_root

if TYPE_CHECKING:
    from pathlib import Path


def _config(root: Path, keys: dict[str, object]) -> object:
    agents = {
        "alpha": agent("alpha", builtinToolboxes=[system_toolbox("tools", capabilities=["date"])]),
        "beta": agent("beta", builtinToolboxes=[system_toolbox("tools", capabilities=["date"])]),
    }
    return load_config(str(write_policy(root, agents, toolboxes=keys)))


def test_a_bare_key_matching_two_agents_toolboxes_is_an_error(tmp_path: Path) -> None:
    config = _config(tmp_path, {"tools": {"allowed_hosts": ["api.example.com"]}})
    with pytest.raises(ConfigError) as caught:
        compile_policy(config, prepare=False)  # type: ignore[arg-type]
    text = str(caught.value)
    assert "$.toolboxes.tools" in text and "agents alpha, beta" in text
    assert "alpha/tools, beta/tools" in text


def test_a_bare_key_matching_one_toolbox_and_qualified_keys_keep_working(tmp_path: Path) -> None:
    boxes = [system_toolbox("one", capabilities=["date"]), system_toolbox("two", capabilities=["date"])]
    path = write_policy(
        tmp_path,
        {"tester": agent(builtinToolboxes=boxes)},
        toolboxes={"one": {"limits": {"wall_time_s": 7}}, "tester/two": {"limits": {"wall_time_s": 9}}},
    )
    specs = {s.toolbox: s for s in plan_as_root(load_config(str(path))).specs}  # (as root would, without root)
    assert (specs["one"].wall_time_s, specs["two"].wall_time_s) == (7, 9)
