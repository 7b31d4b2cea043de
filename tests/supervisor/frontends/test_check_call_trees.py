"""``agents-supervise check`` shows the call-tree budgets (``budget``, each ``tenants.<name>.budget``) and what the
sub-agent loops' model requests may reach (``agent_loop``), with a warning for an agent whose ``modelUrl`` will be
refused whatever a resolver answers: as data the summary's printer shows (``frontends/_check_summary.py``)."""

from __future__ import annotations

import json
import os
from typing import TYPE_CHECKING, Any

from supervisor.frontends._check_summary import render_summary, summarize
from tests._policies import agent, write_policy
from tests.supervisor.frontends.test_check_summary import _check

if TYPE_CHECKING:
    from pathlib import Path

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
BUDGET_TITLE = "call-tree budgets (one root call's whole tree: sub-agents, tools.call, every portal request):"
MODEL_TITLE = "model requests of sub-agent loops:"


def _section(lines: list[str], title: str) -> list[str]:
    start = lines.index(title) + 1
    end = next((i for i in range(start, len(lines)) if not lines[i].startswith("  ")), len(lines))
    return lines[start:end]


def _policy(root: Path, **policy: Any) -> Path:
    agents = {
        "local": agent("local", modelUrl="http://127.0.0.1:11434/v1"),
        "cloud": agent("cloud", modelUrl="https://api.openai.com/v1"),
        "meta": agent("meta", modelUrl="http://169.254.169.254/latest"),
        "capped": agent("capped", modelUrl="https://api.example.com/v1"),
    }
    return write_policy(
        root,
        agents,
        budget={"model_requests": 100, "tool_calls": 500, "wall_time_s": 900},
        tenants={
            "acme": {"agents": ["cloud"], "budget": {"tool_calls": 5}},
            "labs": {"agents": ["local"], "budget": {"model_requests": None}},
        },
        ceilings={"capped": {"model_hosts": ["api.openai.com:443"]}},
        **policy,
    )


def test_check_shows_the_budgets_and_where_model_requests_may_go(sandbox_tmp: Path) -> None:
    out = _check("--policy", str(_policy(sandbox_tmp)))
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert _section(lines, BUDGET_TITLE) == [
        "  budget: 100 model requests, 500 tool calls, 900 s of wall time",
        "  tenants.acme.budget: 100 model requests, 5 tool calls (its own), 900 s of wall time",
        "  tenants.labs.budget: no bound on model requests (its own), 500 tool calls, 900 s of wall time",
    ]
    models = _section(lines, MODEL_TITLE)
    assert models[0] == (
        "  at most 16 a loop, 120 s each, 3 retries; endpoints on public addresses, host loopback closed "
        "(agent_loop.allow_loopback); no private range (agent_loop.allow_private_ranges); never cloud metadata or "
        "the supervisor's own ports"
    )
    assert sorted(models[1:]) == [
        "  capped: https://api.example.com/v1 (refused)",
        "  cloud: https://api.openai.com/v1",
        "  local: http://127.0.0.1:11434/v1 (refused)",
        "  meta: http://169.254.169.254/latest (refused)",
    ]
    warnings = "\n".join(_section(lines, next(line for line in lines if line.startswith("warnings ("))))
    assert (
        "agent local: its model requests will be refused: 127.0.0.1 resolves only to addresses that are not allowed: "
        "127.0.0.1 is the host's loopback, which the policy does not open to model endpoints (an agent file cannot "
        "open it); the operator's key that opens it: agent_loop.allow_loopback: true"
    ) in warnings
    [meta] = [line for line in warnings.splitlines() if line.startswith("  agent meta: its model requests will be")]
    assert "169.254.169.254 is a cloud metadata address" in meta and "never dialled, whatever the policy opens" in meta
    assert "agent capped: its model requests will be refused: its modelUrl names the model endpoint " in warnings
    assert "past the policy's ceiling ceilings.capped.model_hosts (api.openai.com:443)" in warnings
    assert "agent cloud" not in warnings

    report = json.loads(_check("--policy", str(_policy(sandbox_tmp)), "--json").stdout)
    assert report["budgets"][1] == {
        "key": "tenants.acme.budget",
        "model_requests": 100,
        "tool_calls": 5,
        "wall_time_s": 900.0,
        "own": ["tool_calls"],
        "text": "100 model requests, 5 tool calls (its own), 900 s of wall time",
    }


def test_the_key_that_opens_the_loopback_is_shown_and_the_warning_goes(sandbox_tmp: Path) -> None:
    opened = {"allow_loopback": True, "allow_private_ranges": ["10.0.0.0/8"]}
    out = _check("--policy", str(_policy(sandbox_tmp, agent_loop=opened)))
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    models = _section(lines, MODEL_TITLE)
    assert "host loopback open (agent_loop.allow_loopback); private ranges 10.0.0.0/8" in models[0]
    assert "  local: http://127.0.0.1:11434/v1" in models and "agent local:" not in out.stdout


def test_the_summary_shows_what_the_report_says() -> None:
    report: dict[str, Any] = {
        "policy": "/p.yaml",
        "state_dir": "/s",
        "landlock_abi": 7,
        "landlock_min_abi": 6,
        "strict": True,
        "max_call_depth": 4,
        "kernel_audit": "off",
        "toolboxes": [],
        "budgets": [{"key": "budget", "text": "64 model requests, 256 tool calls, 600 s of wall time"}],
        "model_requests": {
            "max_steps": 3,
            "request_timeout_s": 0.5,
            "retries": 0,
            "allow_loopback": False,
            "allow_private_ranges": [],
            "agents": [{"agent": "a", "model_url": "http://localhost/v1", "refused": "closed (key)"}],
        },
    }
    lines = render_summary(summarize(report))
    assert _section(lines, BUDGET_TITLE) == ["  budget: 64 model requests, 256 tool calls, 600 s of wall time"]
    assert _section(lines, MODEL_TITLE)[1] == "  a: http://localhost/v1 (refused)"
    assert "  agent a: its model requests will be refused: closed (key)" in lines
    del report["budgets"], report["model_requests"]  # a report without them (an older one) shows neither
    plain = render_summary(summarize(report))
    assert BUDGET_TITLE not in plain and MODEL_TITLE not in plain
