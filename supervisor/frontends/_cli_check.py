"""``agents-supervise check``: the compiled policy shown, per toolbox (text or ``--json``); nothing starts."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from ._cli import _check_slug, _fail, _load_error_owner

if TYPE_CHECKING:
    import argparse

__all__ = ["check"]


def check(args: argparse.Namespace) -> int:
    """``agents-supervise check``: what each toolbox's worker will get (of ``args.slug``'s toolboxes only, when
    given); nothing starts. Returns the exit status."""
    from supervisor.config import expand_agents, load_config
    from supervisor.plan import compile_policy
    from supervisor.workers import host_explanations

    tree = expand_agents(load_config(args.policy, args.agent))  # sub-agents' toolboxes get workers too
    config = tree.config
    compiled = compile_policy(config, state_dir=args.state_dir, prepare=False)
    try:
        _check_slug(args.slug, [a.slug for a in config.agents])
    except ValueError as exc:
        return _fail(str(exc))
    specs = [s for s in compiled.specs if args.slug in (None, s.agent)]
    report: dict[str, Any] = {
        "policy": config.policy_file,
        "state_dir": compiled.state_dir,
        "landlock_abi": compiled.landlock_abi,
        "strict": config.policy.strict,
        "max_call_depth": compiled.max_call_depth,
        "kernel_audit": config.policy.kernel_audit,
        "denial_explanations": host_explanations(config.policy.kernel_audit),
        "toolboxes": [{"toolbox": s.toolbox, "kind": s.kind, "agent": s.agent, **s.report} for s in specs],
        "warnings": compiled.warnings,
        "load_errors": [
            dict(e) for e in (*tree.load_errors, *compiled.load_errors) if args.slug in (None, e.get("agent"))
        ],
    }
    if args.json:
        print(json.dumps(report, indent=2))
        return 0
    print(
        f"policy {report['policy']}  (strict: {report['strict']}, kernel Landlock ABI {report['landlock_abi']}, "
        f"max call depth {report['max_call_depth']})"
    )
    print(f"a call refused by the kernel is explained (kernel_audit: {report['kernel_audit']}):")
    for line in report["denial_explanations"]:
        print(f"  {line}")
    for tb in report["toolboxes"]:
        print(f"\ntoolbox {tb['toolbox']} ({tb['kind']}, agent {tb['agent']})")
        groups = f" (+ groups {', '.join(str(g) for g in tb['groups'])})" if tb.get("groups") else ""
        host_wide = f" (held on the whole host: uid registry {tb['uid_registry']})" if tb.get("uid_registry") else ""
        print(f"  uid/gid: {tb['uid']}/{tb['gid']}{groups}{host_wide}   network: {tb['network']}")
        limits = tb["limits"]
        print("  limits: " + ", ".join(f"{k}={v}" for k, v in limits.items()))
        if limits.get("address_space_bytes") is not None and tb.get("rlimit_as") is None:
            print(
                "  address space: no RLIMIT_AS (the cgroup's memory limit bounds memory; address_space_bytes "
                "applies only without one)"
            )
        print("  read-only: " + ", ".join(tb["read_only"]))
        print("  read-write: " + ", ".join(tb["read_write"]))
        print("  allowed hosts: " + (", ".join(tb["allowed_hosts"]) or "none (no network)"))
        if tb.get("cname_targets"):
            print("  CNAME targets also accepted: " + ", ".join(tb["cname_targets"]))
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
            print(f"  credential {cred['name']}: added by the egress proxy for {where}, as {how}")
        if tb.get("tls_termination"):
            print("  TLS: terminated by the egress proxy (the worker trusts the supervisor's CA only)")
        print("  extended attributes: " + ("allowed (xattrs: true)" if tb.get("xattrs") else "refused (EOPNOTSUPP)"))
        print("  " + (tb.get("cgroup") or "no cgroup (process and memory limits are the rlimits only)"))
        print("  a call stopped by a limit is explained for: " + (", ".join(tb.get("limit_notes") or ()) or "none"))
        view = tb.get("view")
        print(
            "  filesystem view: "
            + (
                "private root, only these mounts:"
                if view
                else "the host's tree (private_view: false); Landlock alone refuses"
            )
        )
        for line in view or ():
            print(f"    {line}")
        fs = tb.get("file_sandbox")
        if fs:
            exact = "exact" if fs["exact"] else f"inexact ({fs['residual']})"
            print(f"  FileSandbox ({fs['mode']}): {exact}")
            for line in fs["lines"]:
                print(f"    {line}")
        for w in tb["warnings"]:
            print(f"  warning: {w}")
    shown = {w for tb in report["toolboxes"] for w in tb["warnings"]}
    general = [w for w in report["warnings"] if w not in shown]  # the loader's (allowedPaths ...) and the policy's
    if general or report["load_errors"]:
        print("\nwarnings:")
        for w in general:
            print(f"  warning: {w}")
        for e in report["load_errors"]:
            print(f"  load error: {_load_error_owner(e)}: {e['source']}: {e['message']}")
    return 0
