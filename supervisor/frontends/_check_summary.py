"""``agents-supervise check``'s default output: a summary, as data (:class:`CheckSummary`) and its printer (pure).

:func:`summarize` turns check's report (the ``--json`` form, ``_cli_check.py``) into a :class:`CheckSummary`: a few
heading lines (the policy, the kernel, how refusals are explained), one :class:`WorkerLine` per worker, titled
:class:`CheckSection` blocks, then the warnings and load errors as :class:`CheckNote`\\ s. :func:`render_summary`
prints it: nothing is decided there. To show something more, add it to the data (a fact on a worker's line, a
section, a note) where the report is summarized; the printer needs no change. ``--detail`` prints every worker in
full instead (``_check_detail.py``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from supervisor.config import display_path, load_error_owner, load_error_reason

__all__ = [
    "CheckNote",
    "CheckSection",
    "CheckSummary",
    "WorkerLine",
    "caps_line",
    "render_summary",
    "subagent_line",
    "summarize",
]


@dataclass
class WorkerLine:
    """One worker: whose it is, its kind, and short facts (``uid 3000000001``, ``no network``), in order."""

    agent: str
    toolbox: str
    kind: str
    facts: list[str] = field(default_factory=list)


@dataclass
class CheckSection:
    """A titled block of lines shown after the workers (host-wide facts, per-agent caps, ...)."""

    title: str
    lines: list[str] = field(default_factory=list)


@dataclass
class CheckNote:
    """A warning or a load error; ``subject`` is whose it is (``agent/toolbox``, ``agent A``, or ``""``: the
    policy's)."""

    kind: str  # "warning" | "load error"
    subject: str
    text: str


@dataclass
class CheckSummary:
    """What ``check`` prints by default (see the module docstring)."""

    heading: list[str] = field(default_factory=list)
    workers: list[WorkerLine] = field(default_factory=list)
    sections: list[CheckSection] = field(default_factory=list)
    notes: list[CheckNote] = field(default_factory=list)

    def warn(self, subject: str, text: str) -> None:
        """Add a warning about ``subject``."""
        self.notes.append(CheckNote("warning", subject, text))


def _size(n: Any) -> str:
    if not isinstance(n, int):
        return "no limit"
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= scale and n % scale == 0:
            return f"{n // scale} {unit}"
    return f"{n} bytes"


def _worker_facts(tb: dict[str, Any]) -> list[str]:
    """The short facts of one worker's report entry (``_compile.plan_worker``'s ``report``)."""
    groups = f" + groups {', '.join(map(str, tb['groups']))}" if tb.get("groups") else ""
    facts = [f"uid {tb['uid']}{' (host-wide)' if tb.get('uid_registry') else ''}{groups}"]
    hosts = list(tb.get("allowed_hosts") or ())
    more = f" (+{len(hosts) - 3})" if len(hosts) > 3 else ""
    facts.append("hosts " + ", ".join(hosts[:3]) + more if hosts else "no network")
    fs = tb.get("file_sandbox")
    if fs:
        facts.append(f"FileSandbox {fs['mode']}{'' if fs['exact'] else ' (inexact)'}")
    facts.append(f"{len(tb.get('read_only') or ())} paths read-only, {len(tb.get('read_write') or ())} read-write")
    limits = tb.get("limits") or {}
    facts.append(f"memory {_size(limits.get('memory_bytes'))}, {limits.get('wall_time_s', 0):g} s a call")
    if tb.get("credentials"):
        facts.append("credentials " + ", ".join(c["name"] for c in tb["credentials"]))
    if tb.get("start") == "lazy":
        facts.append("starts on its first call")
    return facts


def caps_line(caps: dict[str, Any], *, title: str = "the policy caps it: ") -> str:
    """What the policy caps for a toolbox (``plan/_ceilings.caps_report``), on one line, each with its key."""
    key = caps["opened_by"]
    parts = [f"hosts within {', '.join(h['patterns']) or 'none'} ({h['key']})" for h in caps["hosts"]]
    parts += [f"{', '.join(c['capabilities'])} forbidden ({c['key']})" for c in caps["forbidden_capabilities"]]
    parts += [f"paths within {', '.join(p['trees']) or 'none'} ({p['key']})" for p in caps.get("paths", [])]
    parts += [f"HTTP methods {', '.join(m['methods']) or 'none'} ({m['key']})" for m in caps.get("http_methods", [])]
    parts.append("host loopback open" if caps["loopback"] else f"host loopback closed ({key}.allow_loopback)")
    ranges = ", ".join(caps["private_ranges"])
    parts.append(f"private ranges {ranges}" if ranges else f"no private range ({key}.allow_private_ranges)")
    return title + "; ".join(parts)


def _ceiling_sections(toolboxes: list[dict[str, Any]]) -> list[CheckSection]:
    """The host-wide uid registry, and what the policy caps for each agent (its ceilings, once) and where it opens
    the host's loopback or private ranges (per toolbox)."""
    sections = []
    registries = sorted({tb["uid_registry"] for tb in toolboxes if tb.get("uid_registry")})
    if registries:
        lines = [
            f"held in the registry {r}: no other state dir or supervisor on the host gets them" for r in registries
        ]
        sections.append(CheckSection("worker uids, unique on the host", lines))
    per_agent: dict[str, list[str]] = {}
    for tb in toolboxes:
        caps = tb.get("caps")
        if not caps:
            continue
        if tb["agent"] not in per_agent:
            bounds = [f"hosts within {', '.join(h['patterns']) or 'none'} ({h['key']})" for h in caps["hosts"]]
            bounds += [f"{', '.join(c['capabilities'])} forbidden ({c['key']})" for c in caps["forbidden_capabilities"]]
            bounds += [f"paths within {', '.join(p['trees']) or 'none'} ({p['key']})" for p in caps.get("paths", [])]
            bounds += [
                f"HTTP methods {', '.join(m['methods']) or 'none'} ({m['key']})" for m in caps.get("http_methods", [])
            ]
            per_agent[tb["agent"]] = [f"{tb['agent']}: " + ("; ".join(bounds) or "no ceiling")]
        opened = (["host loopback"] if caps["loopback"] else []) + list(caps["private_ranges"])
        if opened:
            per_agent[tb["agent"]].append(f"  {tb['toolbox']} reaches {', '.join(opened)} ({caps['opened_by']})")
    if per_agent:
        lines = [line for agent_lines in per_agent.values() for line in agent_lines]
        sections.append(
            CheckSection("what the policy caps, per agent (loopback and private ranges: closed unless named)", lines)
        )
    return sections


def _call_tree_sections(report: dict[str, Any]) -> list[CheckSection]:
    """The call-tree budgets (``budget``, each ``tenants.<name>.budget``) and what sub-agent loops' model requests
    may reach (``agent_loop``)."""
    sections = []
    budgets = report.get("budgets") or []
    if budgets:
        sections.append(
            CheckSection(
                "call-tree budgets (one root call's whole tree: sub-agents, tools.call, every portal request)",
                [f"{b['key']}: {b['text']}" for b in budgets],
            )
        )
    models = report.get("model_requests")
    if models and models.get("agents"):
        ranges = ", ".join(models["allow_private_ranges"])
        reach = [
            "host loopback open (agent_loop.allow_loopback)"
            if models["allow_loopback"]
            else "host loopback closed (agent_loop.allow_loopback)",
            f"private ranges {ranges} (agent_loop.allow_private_ranges)"
            if ranges
            else "no private range (agent_loop.allow_private_ranges)",
        ]
        lines = [
            f"at most {models['max_steps']} a loop, {models['request_timeout_s']:g} s each, {models['retries']} "
            f"retries; endpoints on public addresses, {'; '.join(reach)}; never cloud metadata or the supervisor's "
            "own ports",
            *(f"{a['agent']}: {a['model_url']}{' (refused)' if a['refused'] else ''}" for a in models["agents"]),
        ]
        sections.append(CheckSection("model requests of sub-agent loops", lines))
    return sections


def subagent_line(link: dict[str, Any]) -> str:
    """One sub-agent link of check's report (``subagents``): who names what, allowed or refused, and why."""
    named = link["subagent"] or "?"
    verdict = "allowed" if link["allowed"] else "refused"
    return f"{link['agent']} -> {named} ({display_path(link['file'])}): {verdict}: {link['why']}"


def _subagent_sections(report: dict[str, Any]) -> list[CheckSection]:
    """Each agent's sub-agents (``extraAgents``, ``toolDirectory``) and why the policy allows or refuses each."""
    links = report.get("subagents") or []
    if not links:
        return []
    return [
        CheckSection(
            "sub-agents (what each agent may prompt as io_prompt_agent_<slug>, and why)",
            [subagent_line(link) for link in links],
        )
    ]


def summarize(report: dict[str, Any]) -> CheckSummary:
    """The summary of check's ``report`` (pure)."""
    summary = CheckSummary()
    min_abi = f", needs {report['landlock_min_abi']}" if report.get("strict") else ""
    summary.heading = [
        f"policy {report['policy']}: strict {str(report['strict']).lower()}, kernel Landlock ABI "
        f"{report['landlock_abi']}{min_abi}, max call depth {report['max_call_depth']}",
        f"state dir {report['state_dir']}",
        f"a call refused by the kernel is explained (kernel_audit: {report['kernel_audit']}):",
        *(f"  {line}" for line in report.get("denial_explanations") or ()),
    ]
    toolboxes = report.get("toolboxes") or []
    for tb in toolboxes:
        summary.workers.append(WorkerLine(tb["agent"], tb["toolbox"], tb["kind"], _worker_facts(tb)))
        for w in tb.get("warnings") or ():
            own = f"{tb['toolbox']}: "  # most say whose they are already: the subject says it once
            summary.warn(f"{tb['agent']}/{tb['toolbox']}", w[len(own) :] if w.startswith(own) else w)
    summary.sections += _ceiling_sections(toolboxes)
    summary.sections += _subagent_sections(report)
    summary.sections += _call_tree_sections(report)
    for agent in (report.get("model_requests") or {}).get("agents") or ():
        if agent["refused"]:
            summary.warn(f"agent {agent['agent']}", f"its model requests will be refused: {agent['refused']}")
    shown = {w for tb in toolboxes for w in tb.get("warnings") or ()}
    for w in report.get("warnings") or ():
        if w not in shown:  # the loader's (allowedPaths ...) and the policy's
            summary.warn("", w)
    for e in report.get("load_errors") or ():
        summary.notes.append(CheckNote("load error", load_error_owner(e), load_error_reason(e)))
    return summary


def render_summary(summary: CheckSummary) -> list[str]:
    """The lines ``check`` prints for ``summary`` (pure): heading, one line per worker, sections, then the warnings
    and load errors, each once, and where to see more."""
    lines = list(summary.heading)
    agents = len({w.agent for w in summary.workers})
    lines += ["", f"{len(summary.workers)} worker(s) of {agents} agent(s):"]
    lines += [f"  {w.agent}/{w.toolbox} ({w.kind}): {'; '.join(w.facts)}" for w in summary.workers]
    for section in summary.sections:
        lines += ["", f"{section.title}:", *(f"  {line}" for line in section.lines)]
    for kind, title in (("warning", "warnings"), ("load error", "load errors")):
        notes = list(dict.fromkeys((n.subject, n.text) for n in summary.notes if n.kind == kind))
        if notes:
            lines += ["", f"{title} ({len(notes)}):"]
        lines += [f"  {subject}: {text}" if subject else f"  {text}" for subject, text in notes]
    lines += ["", "each worker's paths, limits, mounts and credentials: check --detail (all of it as JSON: --json)"]
    return lines
