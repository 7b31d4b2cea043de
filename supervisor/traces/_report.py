"""``agents-supervise trace FILE``: what a trace file says happened.

:func:`load_trace` reads the JSONL file (a line that is not a JSON object is counted, not fatal);
:func:`report` (pure) computes, from the records:

- the **call tree**: every ``call_start``/``call_end`` pair, nested by ``parent_call_id`` (frontend calls at the
  root; a Lua ``tools.call`` or a sub-agent's tool call under the call that made it), with tool, agent, caller,
  status and duration. Call ids restart with each supervisor run in the same file, so calls are keyed per run
  (``supervisor_start`` opens a run) and shown as ``r<N>:<id>`` when the file holds more than one run;
- **per-tool** counts, statuses (a call with no ``call_end`` counts as ``unfinished``) and durations;
- **refusals** (``portal_refusal``) with their kind and reason, and ``limit_hit`` records, also counted per
  toolbox (or agent) and limit;
- **kernel denials** (``denial``: Landlock, seccomp, the private view; ``supervisor.workers._kernel_audit``) counted per
  toolbox and rule (``landlock: FileSandbox: no rule``, ``seccomp: keyctl``), with the distinct targets;
- **egress** decisions (``egress``): per host and verdict, and every refusal;
- **agents**: loops started, model retries, steps;
- **redundant reads** (seed 000): a call whose result declared ``state_effect=read`` of a resource already read,
  with no call that could have changed that resource in between. The resource is the call's ``resource_id``, or,
  when none is declared (absent or empty), a path-like field of its input (``path``, ``filepath``, ``file_path``,
  ``file``, ``filename``). A ``mutate`` of a resource invalidates earlier reads of it; a call with any other or no
  ``state_effect`` is treated like a mutate of its resource, and one with no resource at all invalidates every
  earlier read (the conservative reading of the seed: a tool that declares nothing is never misreported, and
  never makes another call look redundant). Order is the order calls ended in the file.

:func:`render_text` formats the report for people; ``--json`` prints :func:`report`'s value as is.
"""

from __future__ import annotations

import json
import os
from collections import Counter, defaultdict
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Iterable

__all__ = ["load_trace", "redundant_reads", "render_text", "report", "resource_of"]

PATH_KEYS = ("path", "filepath", "file_path", "file", "filename")


def load_trace(path: str) -> list[dict[str, Any]]:
    """The records of a trace file, preceded by those of its rotated part ``<path>.1`` when there is one; an
    unreadable line becomes ``{"event": "_unreadable", "line": N}``.

    Raises ``OSError`` when the file cannot be read.
    """
    out: list[dict[str, Any]] = []
    for part in (path + ".1", path):
        if part != path and not os.path.exists(part):
            continue
        with open(part, encoding="utf-8", errors="replace") as fh:
            for n, line in enumerate(fh, 1):
                if not line.strip():
                    continue
                try:
                    record = json.loads(line)
                except json.JSONDecodeError:
                    record = None
                out.append(record if isinstance(record, dict) else {"event": "_unreadable", "line": n})
    return out


def _meta(metadata: Any, key: str) -> str | None:
    for pair in metadata or []:
        if isinstance(pair, list | tuple) and len(pair) == 2 and pair[0] == key:
            return str(pair[1])
    return None


def resource_of(args: Any, metadata: Any) -> str | None:
    """The resource a call addressed: its declared ``resource_id``, else a path-like field of its input."""
    declared = _meta(metadata, "resource_id")
    if declared:
        return declared
    if isinstance(args, dict):
        for key in PATH_KEYS:
            value = args.get(key)
            if isinstance(value, str) and value:
                return f"path:{value}"
    return None


def redundant_reads(calls: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """The redundant reads among ``calls`` (dicts with ``id``, ``tool``, ``args``, ``metadata``, ``status``, in the
    order they ended): see the module docstring for the rule."""
    last_read: dict[str, str] = {}
    out: list[dict[str, Any]] = []
    for call in calls:
        if call.get("status") is None:
            continue  # never ended: its effect is unknown, but it did nothing we saw
        effect = _meta(call.get("metadata"), "state_effect")
        resource = resource_of(call.get("args"), call.get("metadata"))
        if effect == "read" and resource is not None:
            first = last_read.get(resource)
            if first is not None:
                out.append({"call_id": call["id"], "tool": call.get("tool"), "resource": resource, "first_read": first})
            else:
                last_read[resource] = call["id"]
        elif resource is not None:
            last_read.pop(resource, None)
        else:
            last_read.clear()
    return out


def _stats(durations: list[float]) -> dict[str, float]:
    if not durations:
        return {"total_s": 0.0, "mean_s": 0.0, "max_s": 0.0}
    return {
        "total_s": round(sum(durations), 6),
        "mean_s": round(sum(durations) / len(durations), 6),
        "max_s": round(max(durations), 6),
    }


def report(records: list[dict[str, Any]]) -> dict[str, Any]:
    """Everything ``agents-supervise trace`` shows, as plain JSON data (see the module docstring)."""
    calls: dict[tuple[int, str], dict[str, Any]] = {}
    ended: list[dict[str, Any]] = []
    refusals: list[dict[str, Any]] = []
    limits: list[dict[str, Any]] = []
    denials: list[dict[str, Any]] = []
    egress: list[dict[str, Any]] = []
    events: Counter[str] = Counter()
    runs = sum(1 for r in records if r.get("event") == "supervisor_start") or 1
    run = 0 if any(r.get("event") == "supervisor_start" for r in records) else 1

    def key(call_id: Any) -> str:
        return f"r{run}:{call_id}" if runs > 1 else str(call_id)

    for r in records:
        event = str(r.get("event"))
        events[event] += 1
        if event == "supervisor_start":
            run += 1
        elif event == "call_start" and r.get("call_id") is not None:
            parent = r.get("parent_call_id")
            calls[(run, str(r["call_id"]))] = {
                "id": key(r["call_id"]),
                "parent": key(parent) if parent is not None else None,
                "tool": r.get("tool"),
                "toolbox": r.get("toolbox"),
                "agent": r.get("agent"),
                "caller": r.get("caller"),
                "session": r.get("session"),
                "depth": r.get("depth"),
                "args": r.get("args"),
                "ts": r.get("ts"),
                "status": None,
                "duration_s": None,
                "metadata": [],
                "children": [],
            }
        elif event == "call_end" and r.get("call_id") is not None:
            call = calls.get((run, str(r["call_id"])))
            if call is not None:
                call.update(
                    status=r.get("status"),
                    summary=r.get("summary"),
                    duration_s=r.get("duration_s"),
                    metadata=r.get("metadata") or [],
                )
                ended.append(call)
        elif event == "portal_refusal":
            refusals.append(
                {k: r.get(k) for k in ("ts", "tool", "kind", "reason", "caller", "session", "depth")}
                | {"parent_call_id": key(r["parent_call_id"]) if r.get("parent_call_id") else None}
            )
        elif event == "limit_hit":
            limits.append({k: v for k, v in r.items() if k != "event"})
        elif event == "denial":
            denials.append(
                {
                    k: r.get(k)
                    for k in ("ts", "call_id", "tool", "toolbox", "layer", "access", "target", "rule", "source")
                }
                | {"call_id": key(r["call_id"]) if r.get("call_id") is not None else None}
            )
        elif event == "egress":
            egress.append(
                {k: r.get(k) for k in ("ts", "toolbox", "method", "host", "port", "verdict", "reason", "address")}
            )

    by_id = {c["id"]: c for c in calls.values()}
    roots: list[dict[str, Any]] = []
    for call in calls.values():
        parent = by_id.get(call["parent"]) if call["parent"] else None
        (parent["children"] if parent is not None else roots).append(call)

    per_tool: dict[str, dict[str, Any]] = {}
    durations: dict[str, list[float]] = defaultdict(list)
    for call in calls.values():
        entry = per_tool.setdefault(
            str(call["tool"]), {"count": 0, "passed": 0, "failed": 0, "error": 0, "unfinished": 0}
        )
        entry["count"] += 1
        status = call["status"] if call["status"] in ("passed", "failed", "error") else "unfinished"
        entry[status] += 1
        if isinstance(call["duration_s"], int | float):
            durations[str(call["tool"])].append(float(call["duration_s"]))
    for tool, entry in per_tool.items():
        entry.update(_stats(durations[tool]))

    egress_summary: Counter[str] = Counter(f"{e.get('host')}:{e.get('port')} {e.get('verdict')}" for e in egress)

    def strip(call: dict[str, Any]) -> dict[str, Any]:
        out = {k: call[k] for k in ("id", "tool", "agent", "caller", "session", "depth", "status", "duration_s")}
        out["children"] = [strip(c) for c in call["children"]]
        return out

    return {
        "runs": runs if any(r.get("event") == "supervisor_start" for r in records) else 0,
        "records": len(records),
        "unreadable_lines": [r["line"] for r in records if r.get("event") == "_unreadable"],
        "calls": len(calls),
        "tree": [strip(c) for c in roots],
        "per_tool": dict(sorted(per_tool.items())),
        "refusals": refusals,
        "refusals_by_kind": dict(Counter(str(r["kind"]) for r in refusals)),
        "limits_hit": limits,
        "limits_hit_by_toolbox": _limits_by_toolbox(limits),
        "denials": denials,
        "denials_by_toolbox": _denials_by_toolbox(denials),
        "egress": {
            "decisions": dict(sorted(egress_summary.items())),
            "refused": [e for e in egress if e.get("verdict") != "allowed"],
        },
        "agents": {
            "loops": events["agent_start"],
            "steps": events["agent_step"],
            "model_retries": events["model_retry"],
        },
        "workers": {
            k: events[k]
            for k in (
                "worker_spawn",
                "worker_exit",
                "worker_restart",
                "crash_loop",
                "crash_loop_recovered",
                "protocol_violation",
            )
            if events[k]
        },
        "redundant_reads": redundant_reads(ended),
    }


def _limits_by_toolbox(limits: list[dict[str, Any]]) -> dict[str, dict[str, int]]:
    """``limit_hit`` records counted per toolbox (or agent) and limit: ``{"tools": {"limits.processes": 2}}``."""
    out: dict[str, Counter[str]] = defaultdict(Counter)
    for lim in limits:
        out[str(lim.get("toolbox") or lim.get("agent") or "-")][str(lim.get("limit"))] += 1
    return {who: dict(sorted(c.items())) for who, c in sorted(out.items())}


def _denials_by_toolbox(denials: list[dict[str, Any]]) -> dict[str, dict[str, dict[str, Any]]]:
    """``denial`` records per toolbox and rule: ``{"tools": {"landlock: no rule (...)": {"count": 2, "targets":
    ["/tmp"]}}}`` (targets distinct, sorted, at most 10)."""
    out: dict[str, dict[str, dict[str, Any]]] = defaultdict(dict)
    for d in denials:
        rule = f"{d.get('layer')}: {d.get('rule')}"
        entry = out[str(d.get("toolbox") or "-")].setdefault(rule, {"count": 0, "targets": []})
        entry["count"] += 1
        if d.get("target") not in entry["targets"] and len(entry["targets"]) < 10:
            entry["targets"].append(d.get("target"))
    return {
        who: {
            rule: {"count": e["count"], "targets": sorted(map(str, e["targets"]))} for rule, e in sorted(rules.items())
        }
        for who, rules in sorted(out.items())
    }


def _tree_lines(call: dict[str, Any], indent: int, out: list[str]) -> None:
    duration = f"{call['duration_s']:.3f}s" if isinstance(call["duration_s"], int | float) else "-"
    who = f" [agent {call['agent']}]" if call.get("agent") else ""
    out.append(f"{'  ' * indent}{call['id']} {call['tool']}{who} {call['status'] or 'unfinished'} {duration}")
    for child in call["children"]:
        _tree_lines(child, indent + 1, out)


def render_text(data: dict[str, Any]) -> str:
    """The report as text for a terminal."""
    out = [
        f"{data['records']} records, {data['calls']} calls"
        + (f", {len(data['unreadable_lines'])} unreadable lines" if data["unreadable_lines"] else "")
    ]
    out.append("\nCall tree:")
    for call in data["tree"]:
        _tree_lines(call, 1, out)
    if not data["tree"]:
        out.append("  (no calls)")
    out.append("\nPer tool:")
    for tool, s in data["per_tool"].items():
        out.append(
            f"  {tool}: {s['count']} calls ({s['passed']} passed, {s['failed']} failed, {s['error']} error"
            + (f", {s['unfinished']} unfinished" if s["unfinished"] else "")
            + f"), total {s['total_s']:.3f}s, mean {s['mean_s']:.3f}s, max {s['max_s']:.3f}s"
        )
    out.append(f"\nRefusals: {len(data['refusals'])}")
    for r in data["refusals"]:
        out.append(f"  {r['kind']}: {r['tool']} (by {r['caller']}): {r['reason']}")
    for lim in data["limits_hit"]:
        out.append(f"  limit hit: {lim.get('limit')} = {lim.get('value')} ({lim.get('toolbox') or lim.get('agent')})")
    if data["limits_hit_by_toolbox"]:
        out.append("\nLimits hit per toolbox:")
        for who, counts in data["limits_hit_by_toolbox"].items():
            out.append(f"  {who}: " + ", ".join(f"{limit} x{n}" for limit, n in counts.items()))
    if data.get("denials_by_toolbox"):
        out.append("\nKernel denials per toolbox and rule:")
        for who, rules in data["denials_by_toolbox"].items():
            for rule, e in rules.items():
                out.append(f"  {who}: {rule} x{e['count']} ({', '.join(e['targets'])})")
    out.append(f"\nEgress decisions: {sum(data['egress']['decisions'].values())}")
    for what, n in data["egress"]["decisions"].items():
        out.append(f"  {what}: {n}")
    for e in data["egress"]["refused"]:
        out.append(f"  refused: {e['toolbox']} {e['method']} {e['host']}:{e['port']}: {e['reason']}")
    agents = data["agents"]
    if agents["loops"]:
        out.append(f"\nAgents: {agents['loops']} loops, {agents['steps']} steps, {agents['model_retries']} retries")
    out.append(f"\nRedundant reads: {len(data['redundant_reads'])}")
    for r in data["redundant_reads"]:
        out.append(
            f"  {r['call_id']} {r['tool']} re-read {r['resource']} (first read by {r['first_read']}, unchanged since)"
        )
    return "\n".join(out)
