"""``agents-supervise check --detail``: every worker in full (paths, limits, mounts, credentials), as lines (pure).

The default output is the summary (``_check_summary.py``); both print the report ``_cli_check.py`` builds.
"""

from __future__ import annotations

from typing import Any

from supervisor.config import load_error_line

from ._check_summary import caps_line, subagent_line

__all__ = ["render_detail"]


def render_detail(report: dict[str, Any]) -> list[str]:
    """The lines of ``check --detail`` for ``report`` (pure)."""
    out: list[str] = []

    def emit(line: str = "") -> None:
        out.extend(line.split("\n"))

    emit(
        f"policy {report['policy']}  (strict: {report['strict']}, kernel Landlock ABI {report['landlock_abi']}, "
        f"max call depth {report['max_call_depth']})"
    )
    emit(f"a call refused by the kernel is explained (kernel_audit: {report['kernel_audit']}):")
    for line in report["denial_explanations"]:
        emit(f"  {line}")
    for tb in report["toolboxes"]:
        emit(f"\ntoolbox {tb['toolbox']} ({tb['kind']}, agent {tb['agent']})")
        groups = f" (+ groups {', '.join(str(g) for g in tb['groups'])})" if tb.get("groups") else ""
        host_wide = f" (held on the whole host: uid registry {tb['uid_registry']})" if tb.get("uid_registry") else ""
        emit(f"  uid/gid: {tb['uid']}/{tb['gid']}{groups}{host_wide}   network: {tb['network']}")
        limits = tb["limits"]
        emit("  limits: " + ", ".join(f"{k}={v}" for k, v in limits.items()))
        if limits.get("address_space_bytes") is not None and tb.get("rlimit_as") is None:
            emit(
                "  address space: no RLIMIT_AS (the cgroup's memory limit bounds memory; address_space_bytes "
                "applies only without one)"
            )
        emit("  read-only: " + ", ".join(tb["read_only"]))
        emit("  read-write: " + ", ".join(tb["read_write"]))
        emit("  allowed hosts: " + (", ".join(tb["allowed_hosts"]) or "none (no network)"))
        if tb.get("cname_targets"):
            emit("  CNAME targets also accepted: " + ", ".join(tb["cname_targets"]))
        if tb.get("caps"):
            emit("  " + caps_line(tb["caps"]))
        for cred in tb.get("credentials") or []:  # names and bindings only: values never leave the proxy
            where = "; ".join(
                ", ".join(b["hosts"])
                + (f" ports {b['ports']}" if b["ports"] else "")
                + f" ({'/'.join(b['schemes'])})"
                + (f" under {', '.join(b['path_prefixes'])}" if b["path_prefixes"] else "")
                for b in cred["bindings"]
            )
            how = (
                f"header {cred['header']}"
                if cred["header"]
                else f"query {cred['query']}"
                if cred["query"]
                else "placeholder only"
            )
            emit(f"  credential {cred['name']}: added by the egress proxy for {where}, as {how}")
        if tb.get("tls_termination"):
            emit("  TLS: terminated by the egress proxy (the worker trusts the supervisor's CA only)")
        emit("  extended attributes: " + ("allowed (xattrs: true)" if tb.get("xattrs") else "refused (EOPNOTSUPP)"))
        if tb.get("spawn") == "launcher":
            emit("  process: a fresh exec by the launcher (its own address layout, stack-canary and hash seeds)")
        elif tb.get("spawn") == "zygote":
            emit(
                "  process: forked by the zygote (address layout, stack-canary and hash seeds shared with the other "
                "forked workers; toolboxes.<name>.spawn: launcher for a fresh exec)"
            )
        emit("  " + (tb.get("cgroup") or "no cgroup (process and memory limits are the rlimits only)"))
        emit("  a call stopped by a limit is explained for: " + (", ".join(tb.get("limit_notes") or ()) or "none"))
        view = tb.get("view")
        emit(
            "  filesystem view: "
            + (
                "private root, only these mounts:"
                if view
                else "the host's tree (private_view: false); Landlock alone refuses"
            )
        )
        for line in view or ():
            emit(f"    {line}")
        fs = tb.get("file_sandbox")
        if fs:
            exact = "exact" if fs["exact"] else f"inexact ({fs['residual']})"
            emit(f"  FileSandbox ({fs['mode']}): {exact}")
            for line in fs["lines"]:
                emit(f"    {line}")
        for w in tb["warnings"]:
            emit(f"  warning: {w}")
    if report.get("subagents"):
        emit("\nsub-agents (what each agent may prompt as io_prompt_agent_<slug>, and why):")
        for link in report["subagents"]:
            emit(f"  {subagent_line(link)}  [{link['source']}]")
    shown = {w for tb in report["toolboxes"] for w in tb["warnings"]}
    general = [w for w in report["warnings"] if w not in shown]  # the loader's (allowedPaths ...) and the policy's
    if general or report["load_errors"]:
        emit("\nwarnings:")
        for w in general:
            emit(f"  warning: {w}")
        for e in report["load_errors"]:
            emit(f"  load error: {load_error_line(e)}")
    return out
