"""Policy planning: what each worker gets, and the policies that must be refused before anything starts.

Planned from this host's facts with a root supervisor's in their place (``_facts.facts_as``: uid 0, a cgroup v2
layout, Landlock ABI 7): a plan is data, so none of these needs root."""

from __future__ import annotations

import importlib
import os
from typing import TYPE_CHECKING

import pytest

import sandbox._view
from sandbox import READ, WRITE
from supervisor._errors import PolicyRefused
from supervisor.config._loader import load_config
from supervisor.plan import _compiled as compiled_module
from supervisor.plan import plan_policy
from supervisor.plan._host_view import HostView
from tests._policies import agent, system_toolbox, write_policy
from tests.supervisor.plan._facts import facts_as

if TYPE_CHECKING:
    from pathlib import Path


def _plan_file(path: Path, root: Path, **facts: object) -> compiled_module.CompiledPolicy:
    config = load_config(str(path))
    return plan_policy(config, facts_as(config, str(root / "state"), **facts)).compiled


def _compile(root: Path, toolbox: dict, **policy: object) -> compiled_module.CompiledPolicy:
    return _plan_file(write_policy(root, {"tester": agent(builtinToolboxes=[toolbox])}, **policy), root)


def test_a_worker_gets_its_folders_system_paths_and_limits(sandbox_tmp: Path) -> None:
    compiled = _compile(sandbox_tmp, system_toolbox(), limits={"open_files": 99, "wall_time_s": 7})
    (spec,) = compiled.specs
    rules = {r.path: r.mode for r in spec.plan.fs_rules}
    assert rules[str(sandbox_tmp / "state" / "work" / "tester" / "system")] == WRITE
    assert rules["/usr"] == READ
    assert all(
        mode == READ for path, mode in rules.items() if not path.startswith(str(sandbox_tmp)) and path != "/dev/null"
    )
    assert spec.plan.rlimits.open_files == 99 and spec.wall_time_s == 7
    assert spec.plan.new_netns and spec.plan.new_pidns and not spec.plan.bridge
    assert spec.plan.tcp_connect_ports == ()
    assert "PYTHONPATH" not in spec.plan.env and spec.plan.env["HOME"].endswith("/work/tester/system")
    assert spec.plan.env["SHELL"] == "/bin/sh"  # bash would look the account up for it on every start
    assert (spec.plan.uid, spec.plan.gid) == (65534, 65534)  # a root supervisor's workers: the sandbox uid
    own = _compile(sandbox_tmp, system_toolbox(), worker_env={"PATH": "/usr/bin", "SHELL": "/bin/bash"}).specs[0]
    assert own.plan.env["SHELL"] == "/bin/bash"


def test_landlock_too_old_for_a_strict_policy_is_refused(sandbox_tmp: Path) -> None:
    with pytest.raises(PolicyRefused, match="needs at least 64"):
        _compile(sandbox_tmp, system_toolbox(), strict=True, landlock_min_abi=64)


def test_always_allow_is_refused_under_strict_and_never_read_write(sandbox_tmp: Path) -> None:
    fsb = {"fsbPredicate": {"tag": "AlwaysAllow"}}
    toolbox = system_toolbox(capabilities=["list-directory"], FileSandbox=fsb)
    with pytest.raises(PolicyRefused, match="whole filesystem"):
        _compile(sandbox_tmp, toolbox, strict=True)
    compiled = _compile(sandbox_tmp, toolbox, strict=False, landlock_min_abi=0, inexact_predicates="warn")
    rules = {r.path: r.mode for r in compiled.specs[0].plan.fs_rules}
    assert rules["/"] == READ
    assert any("whole filesystem" in w for w in compiled.warnings)


def test_inexact_predicate_on_code_running_toolbox(sandbox_tmp: Path) -> None:
    project = sandbox_tmp / "project"
    project.mkdir()
    fsb = {
        "fsbPredicate": {
            "tag": "And",
            "contents": [
                {"tag": "DirectoryRecursive", "contents": str(project)},
                {"tag": "FileExtension", "contents": ["md"]},
            ],
        }
    }
    runs_code = system_toolbox(capabilities=["execute-command"], FileSandbox=fsb)
    with pytest.raises(PolicyRefused, match="runs arbitrary code"):
        _compile(sandbox_tmp, runs_code, inexact_predicates="refuse")
    warned = _compile(sandbox_tmp, runs_code, inexact_predicates="warn")
    assert any("cannot be enforced exactly" in w for w in warned.warnings)
    # The same predicate on a toolbox that runs no code is fine: the in-worker check gives the predicate.
    reads_only = _compile(sandbox_tmp, system_toolbox(capabilities=["list-directory"], FileSandbox=fsb))
    report = reads_only.specs[0].report["file_sandbox"]
    assert report["exact"] is False and report["mode"] == READ and report["residual"]


def test_allowed_hosts_give_a_bridge_and_proxy_environment(sandbox_tmp: Path) -> None:
    compiled = _compile(sandbox_tmp, system_toolbox(), toolboxes={"system": {"allowed_hosts": ["api.example.com"]}})
    spec = compiled.specs[0]
    assert spec.plan.bridge and spec.plan.tcp_connect_ports == (3128, 53)
    assert spec.plan.env["HTTPS_PROXY"] == "http://127.0.0.1:3128"
    assert spec.allowed_hosts == ("api.example.com",)
    assert spec.report["allowed_hosts"] == ["api.example.com"]


def _mcp_agent(sandbox_tmp: Path, args: list[str], **contents: object) -> dict[str, object]:
    entry = {"name": "files", "executable": "/bin/sh", "args": args, **contents}
    return agent(mcpServers=[{"tag": "McpSimpleBinary", "contents": entry}])


def test_an_mcp_servers_path_arguments_grant_nothing_and_must_lie_within_its_rules(sandbox_tmp: Path) -> None:
    """The executable is granted; an argument naming an existing path outside the server's rules is, under a strict
    policy, the toolbox's load error naming the keys that would grant it; a relative, option or missing path is
    not judged."""
    script = sandbox_tmp / "server.py"
    script.write_text("")
    args = [str(script), "--flag", "--root=/etc", "/", str(sandbox_tmp / "nope"), "/usr/bin/env"]
    compiled = _plan_file(write_policy(sandbox_tmp, {"tester": _mcp_agent(sandbox_tmp, args)}), sandbox_tmp)
    assert compiled.specs == []
    [error] = compiled.load_errors
    assert f"argument {str(script)!r}" in error["message"] and "argument '/'" in error["message"]
    assert "/usr/bin/env" not in error["message"] and "nope" not in error["message"]  # within /usr; missing
    assert "$.contents.mcpServers[0].contents.FileSandbox" in error["message"]
    assert "toolboxes.tester/files.read_paths" in error["message"]


def test_an_mcp_servers_file_sandbox_grants_what_its_arguments_name_read_only(sandbox_tmp: Path) -> None:
    script = sandbox_tmp / "server.py"
    script.write_text("")
    (sandbox_tmp / "data").mkdir()
    sandbox = {
        "fsbPredicate": {
            "tag": "Or",
            "contents": [
                {"tag": "FileExactly", "contents": "./server.py"},
                {"tag": "DirectoryRecursive", "contents": "./data"},
            ],
        }
    }
    args = [str(script), str(sandbox_tmp / "data")]
    path = write_policy(sandbox_tmp, {"tester": _mcp_agent(sandbox_tmp, args, FileSandbox=sandbox)})
    compiled = _plan_file(path, sandbox_tmp)
    assert compiled.load_errors == []
    (spec,) = compiled.specs
    rules = {r.path: r.mode for r in spec.plan.fs_rules}
    assert rules[str(script)] == READ and rules[str(sandbox_tmp / "data")] == READ  # never written by the server
    assert rules[os.path.realpath("/bin/sh")] == READ


def test_a_permissive_policy_warns_and_passes_the_argument_without_a_grant(sandbox_tmp: Path) -> None:
    script = sandbox_tmp / "server.py"
    script.write_text("")
    path = write_policy(sandbox_tmp, {"tester": _mcp_agent(sandbox_tmp, [str(script)])}, strict=False)
    compiled = _plan_file(path, sandbox_tmp)
    (spec,) = compiled.specs
    assert str(script) not in {r.path for r in spec.plan.fs_rules}
    assert any(f"argument {str(script)!r}" in w and "without a grant" in w for w in compiled.warnings)


@pytest.mark.root  # chowns the link to another uid (the plan itself needs no root)
def test_a_link_on_an_arguments_way_that_another_uid_made_is_the_toolboxs_load_error(sandbox_tmp: Path) -> None:
    """A worker (uid 65534) that can write a folder on an argument's way plants a link there to what it wants the
    server to be granted: the supervisor does not follow it (no realpath as root) and the toolbox does not load."""
    shared = sandbox_tmp / "shared"
    shared.mkdir()
    os.chown(shared, 65534, 65534)
    secret = sandbox_tmp / "secret"
    secret.mkdir()
    link = shared / "data"
    link.symlink_to(secret)
    os.lchown(link, 65534, 65534)
    sandbox = {"fsbPredicate": {"tag": "DirectoryRecursive", "contents": str(secret)}}
    path = write_policy(sandbox_tmp, {"tester": _mcp_agent(sandbox_tmp, [str(link)], FileSandbox=sandbox)})
    compiled = _plan_file(path, sandbox_tmp)
    [error] = compiled.load_errors
    assert f"{link} is a symbolic link owned by uid 65534" in error["message"], error


def test_an_unreadable_interpreter_is_refused(sandbox_tmp: Path) -> None:
    """A root supervisor's workers run as the sandbox uid: an interpreter it cannot read refuses the policy."""
    hidden = sandbox_tmp / "hidden"
    hidden.mkdir(mode=0o700)
    fake_python = hidden / "python3"
    fake_python.write_text("")
    agents = {"tester": agent(builtinToolboxes=[system_toolbox()])}
    config = load_config(str(write_policy(sandbox_tmp, agents, sandbox_uid=4242, sandbox_gid=4242)))
    facts = facts_as(config, str(sandbox_tmp / "state"))
    with pytest.raises(PolicyRefused, match=f"the sandbox uid 4242 cannot read {fake_python}"):
        plan_policy(config, facts, python=str(fake_python))
    assert plan_policy(config, facts).compiled.specs  # the interpreter in use: every user reads it


def test_every_toolbox_kind_the_loader_produces_is_implemented(sandbox_tmp: Path) -> None:
    """Every kind of the loader runs (nothing is left out); an OpenAPI toolbox compiles to a worker with its hosts
    and, for a spec given by path, the spec and its folder (relative $ref files) readable."""
    from supervisor.plan._kinds import KIND_PLANS
    from toolboxes import KINDS

    assert list(KIND_PLANS) == list(KINDS)  # one plan entry per kind, in the same order
    for kind in KINDS:
        assert callable(importlib.import_module(f"toolboxes.{kind}").open_toolbox), kind
    spec_dir = sandbox_tmp / "specs"
    spec_dir.mkdir()
    (spec_dir / "api.yaml").write_text("openapi: 3.0.0\ninfo: {title: t, version: '1'}\npaths: {}\n")
    openapi = {
        "tag": "OpenAPIServer",
        "contents": {"SpecUrl": str(spec_dir / "api.yaml"), "BaseUrl": "https://api.example.com"},
    }
    path = write_policy(
        sandbox_tmp, {"tester": agent(builtinToolboxes=[system_toolbox()], openApiToolboxes=[openapi])}, strict=True
    )
    compiled = _plan_file(path, sandbox_tmp)
    assert [s.kind for s in compiled.specs] == ["openapi", "system"]
    assert not any("left out" in w for w in compiled.warnings)
    report = compiled.specs[0].report
    assert report["allowed_hosts"] == ["api.example.com"]
    assert str(spec_dir) in report["read_only"]


# -- RLIMIT_AS only where no cgroup bounds memory (issue 13 item 11) ------------------------------------------------
def test_address_space_rlimit_is_the_memory_bound_only_without_a_cgroup_memory_limit() -> None:
    from sandbox import CgroupLayout, CgroupPlan
    from supervisor.plan._worker_limits import plan_address_space

    layout = CgroupLayout("v2", "/sys/fs/cgroup/x", "/sys/fs/cgroup/x", "/sys/fs/cgroup", "/sys/fs/cgroup/x")
    memory = CgroupPlan(layout, pids_max=64, memory_bytes=2**30, required=True)
    optional = CgroupPlan(layout, pids_max=64, memory_bytes=2**30, required=False)
    pids_only = CgroupPlan(layout, pids_max=64, memory_bytes=None)
    assert plan_address_space(2**29, memory) == (None, None)
    assert plan_address_space(2**29, optional) == (None, 2**29)  # back if the optional group cannot be made
    assert plan_address_space(2**29, pids_only) == (2**29, None)
    assert plan_address_space(2**29, None) == (2**29, None)
    assert plan_address_space(None, memory) == (None, None)


def test_check_says_when_the_cgroup_replaces_the_address_space_rlimit(sandbox_tmp: Path) -> None:
    compiled = _compile(sandbox_tmp, system_toolbox(), limits={"address_space_bytes": "512MiB"})
    (spec,) = compiled.specs
    assert spec.cgroup is not None and spec.cgroup.memory_bytes is not None  # the facts' cgroup bounds memory
    assert spec.plan.rlimits.address_space_bytes is None and spec.report["rlimit_as"] is None
    no_memory = _compile(sandbox_tmp, system_toolbox(), limits={"address_space_bytes": "512MiB", "memory_bytes": None})
    assert no_memory.specs[0].plan.rlimits.address_space_bytes == 512 * 2**20
    path = write_policy(
        sandbox_tmp,
        {"tester": agent(builtinToolboxes=[system_toolbox()])},
        limits={"address_space_bytes": "512MiB"},
        strict=False,
    )
    no_cgroup = _plan_file(path, sandbox_tmp, cgroup_layout=None, cgroup_problem="none here")  # a host without
    assert no_cgroup.specs[0].plan.rlimits.address_space_bytes == 512 * 2**20  # the rlimit bounds memory then


def test_one_compile_asks_the_host_once_per_path_and_every_toolbox_gets_the_same_answers(
    sandbox_tmp: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The rules of every toolbox share most paths (system paths, the interpreter's, the staged code): one compile
    lstat()s each path once (``_host_view.HostView``), and each toolbox's view and rules are what it gets when
    every question is asked afresh."""
    boxes = [system_toolbox(name, capabilities=["date"]) for name in ("one", "two", "three")]
    path = write_policy(sandbox_tmp, {"tester": agent(builtinToolboxes=boxes)})
    asked: dict[str, int] = {}
    real_probe = sandbox._view.probe_host

    def counting_probe(probed: str) -> object:
        asked[probed] = asked.get(probed, 0) + 1
        return real_probe(probed)

    monkeypatch.setattr(sandbox._view, "probe_host", counting_probe)
    shared = _plan_file(path, sandbox_tmp)
    assert len(shared.specs) == 3 and asked
    assert max(asked.values()) == 1, {p: n for p, n in asked.items() if n > 1}

    class Forgetful(HostView):  # every question asked again, as each toolbox's own planning did before
        def probe(self, probed: str) -> object:  # type: ignore[override]
            return sandbox._view.probe_host(probed)

        def exists(self, probed: str) -> bool:
            return os.path.exists(probed)

    asked.clear()
    fresh = _plan_file(path, sandbox_tmp, paths=Forgetful())
    assert max(asked.values()) >= 3  # (the shared paths, at least once per toolbox)
    for a, b in zip(shared.specs, fresh.specs, strict=True):
        assert a.report["view"] and a.report["view"] == b.report["view"]
        assert a.plan.fs_rules == b.plan.fs_rules and a.warnings == b.warnings


def test_the_policys_parallel_starts_bounds_launcher_and_zygote_starts_alike(sandbox_tmp: Path) -> None:
    """Unset, the zygote's forks get a larger bound than launchers (a fork is a tenth of a launcher's CPU); set,
    ``supervision.parallel_starts`` is the bound of both."""
    path = write_policy(sandbox_tmp, {"tester": agent(builtinToolboxes=[system_toolbox()])})
    default = _plan_file(path, sandbox_tmp, cpu_count=3)  # the host's CPUs are a fact of the plan
    assert default.parallel_starts == compiled_module.STARTS_PER_CPU * 3
    assert default.zygote_parallel_starts == compiled_module.ZYGOTE_STARTS_PER_CPU * 3 > default.parallel_starts
    own = _compile(sandbox_tmp, system_toolbox(), supervision={"parallel_starts": 3})
    assert own.parallel_starts == own.zygote_parallel_starts == 3
