"""The steps of ``plan_worker``, each a pure function tested on its own: files (``_worker_files``), network
(``_worker_network``), account and limits (``_worker_limits``), the private view (``_worker_view``). The host's
answers are given as data (a ``HostView`` with answers of its own); nothing here needs root or touches a file."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pytest

from sandbox import NEUTRAL_HOSTNAME, READ, WRITE, FsRule, PathInfo, SupervisorCA
from supervisor._errors import PolicyRefused
from supervisor.config._loader import load_config
from supervisor.plan._ceilings import ToolboxRefused
from supervisor.plan._host_view import HostView
from supervisor.plan._identities import WorkerIdentity
from supervisor.plan._kinds import kind_plan
from supervisor.plan._tls_termination import CA_ENV_VARS, ca_file_path
from supervisor.plan._worker_files import keep_existing, plan_files
from supervisor.plan._worker_limits import NPROC_BACKSTOP_FACTOR, plan_account, plan_limits
from supervisor.plan._worker_network import plan_network
from supervisor.plan._worker_view import plan_worker_view
from tests._policies import agent, system_toolbox, write_policy
from tests.supervisor.plan._facts import v2_layout

if TYPE_CHECKING:
    from pathlib import Path

    from supervisor.config import LoadedConfig, ToolboxConfig


class Answers(HostView):
    """A host that has exactly the paths it is given (folders), and no mount point but ``/``."""

    def __init__(self, existing: set[str]) -> None:
        super().__init__()
        self.existing = existing

    def exists(self, path: str) -> bool:
        return path in self.existing

    def probe(self, path: str) -> PathInfo:
        return PathInfo("dir") if path == "/" or path in self.existing else PathInfo("missing")

    def mount_points(self) -> frozenset[str]:
        return frozenset({"/"})


def _toolbox(root: Path, toolbox: dict[str, Any] | None = None, **policy: Any) -> tuple[LoadedConfig, ToolboxConfig]:
    config = load_config(
        str(write_policy(root, {"tester": agent(builtinToolboxes=[toolbox or system_toolbox()])}, **policy))
    )
    (tb,) = config.toolboxes()
    return config, tb


# -- files ------------------------------------------------------------------------------------------------------------
def test_missing_paths_are_left_out_but_folders_made_at_start_and_one_rule_per_path_takes_the_widest_mode() -> None:
    rules = [
        FsRule("/usr", READ),
        FsRule("/gone", READ),
        FsRule("/w", WRITE),
        FsRule("/usr", WRITE),
        FsRule("/d", READ),
    ]
    kept, warnings = keep_existing(rules, Answers({"/usr", "/d"}), made_at_start=["/w"], name="tb")
    assert kept == [FsRule("/usr", WRITE), FsRule("/w", WRITE), FsRule("/d", READ)]  # order of first mention
    assert warnings == ["tb: /gone does not exist and is not granted"]


def test_a_workers_files_are_the_policys_paths_its_own_folders_and_its_grants(sandbox_tmp: Path) -> None:
    shared = sandbox_tmp / "shared"
    config, tb = _toolbox(sandbox_tmp, toolboxes={"tester/system": {"read_paths": [str(shared)]}})
    state = str(sandbox_tmp / "state")
    host = Answers({"/usr", "/rt", str(shared)})
    files = plan_files(
        config.policy,
        tb,
        kind_plan(tb.kind),
        state_dir=state,
        runtime_dir="/rt",
        runtime_paths=["/py"],
        host=host,
        root=True,
    )
    modes = {r.path: r.mode for r in files.rules}
    assert files.workdir == f"{state}/work/tester/system" and files.state == f"{state}/toolbox-state/tester/system"
    assert modes[files.workdir] == modes[files.state] == WRITE  # made at start: granted though missing now
    assert modes["/usr"] == modes["/rt"] == modes[str(shared)] == READ
    assert "/py" not in modes and any("/py does not exist" in w for w in files.warnings)
    assert files.made_at_start[:3] == (files.workdir, files.state, "/rt") and files.file_sandbox is None


# -- network ----------------------------------------------------------------------------------------------------------
def test_no_hosts_no_bridge_and_hosts_give_the_proxy_and_with_termination_the_ca_alone(sandbox_tmp: Path) -> None:
    config, tb = _toolbox(sandbox_tmp)
    kind = kind_plan(tb.kind)
    closed = plan_network(config.policy, tb, kind, {}, state_dir="/s", credentials={})
    assert not closed.bridge and closed.env == {} and closed.rules == [] and closed.terminator is None
    keys = {"tester/system": {"allowed_hosts": ["api.example.com"], "tls_termination": True}}
    config, tb = _toolbox(sandbox_tmp, toolboxes=keys)
    with pytest.raises(ValueError, match="needs the supervisor's CA"):
        plan_network(config.policy, tb, kind, {}, state_dir="/s", credentials={})
    ca = SupervisorCA.generate()
    opened = plan_network(config.policy, tb, kind, {}, state_dir="/s", credentials={}, ca=ca)
    assert opened.bridge and opened.hosts == ("api.example.com",) and opened.terminator is ca
    assert opened.env["HTTPS_PROXY"] == "http://127.0.0.1:3128"
    assert all(opened.env[v] == ca_file_path("/s", ca) for v in CA_ENV_VARS)
    assert opened.rules == [FsRule(ca_file_path("/s", ca), READ)]


def test_a_loopback_entry_the_policy_keeps_closed_is_refused_under_strict_and_warned_otherwise(
    sandbox_tmp: Path,
) -> None:
    keys = {"tester/system": {"allowed_hosts": ["localhost:8080"]}}
    config, tb = _toolbox(sandbox_tmp, toolboxes=keys)
    with pytest.raises(ToolboxRefused, match="allow_loopback"):
        plan_network(config.policy, tb, kind_plan(tb.kind), {}, state_dir="/s", credentials={})
    config, tb = _toolbox(sandbox_tmp, toolboxes=keys, strict=False)
    warned = plan_network(config.policy, tb, kind_plan(tb.kind), {}, state_dir="/s", credentials={})
    assert any("it reaches nothing" in w for w in warned.warnings)


# -- account and limits -----------------------------------------------------------------------------------------------
def test_only_a_root_supervisor_gives_uids_its_own_or_the_sandbox_uid(sandbox_tmp: Path) -> None:
    config, tb = _toolbox(sandbox_tmp)
    own = WorkerIdentity(3_000_000_007, 3_000_000_007)
    rootless = plan_account(config.policy, tb, own, root=False)  # the supervisor's own uid, in a user namespace
    assert (rootless.uid, rootless.gid, rootless.groups) == (None, None, ())
    shared = plan_account(config.policy, tb, None, root=True)
    assert (shared.uid, shared.gid, shared.own) == (65534, 65534, False)
    mine = plan_account(config.policy, tb, own, root=True)
    assert (mine.uid, mine.gid, mine.own) == (own.uid, own.gid, True)


def test_limits_need_the_kernel_and_cgroups_a_strict_policy_asks_for(sandbox_tmp: Path) -> None:
    config, tb = _toolbox(sandbox_tmp, strict=True, landlock_min_abi=5, limits={"processes": 50})
    with pytest.raises(PolicyRefused, match="Landlock ABI is 4; the policy needs at least 5"):
        plan_limits(config.policy, tb, kernel_abi=4, cgroup_layout=v2_layout())
    with pytest.raises(PolicyRefused, match=r"need a cgroup of its own and none can be made here \(no such thing\)"):
        plan_limits(config.policy, tb, kernel_abi=5, cgroup_layout=None, cgroup_problem="no such thing")
    held = plan_limits(config.policy, tb, kernel_abi=5, cgroup_layout=v2_layout())
    assert held.min_abi == 5 and held.cgroup is not None and held.cgroup.pids_max == 50
    assert held.nproc == 50 * NPROC_BACKSTOP_FACTOR and held.warnings == []
    config, tb = _toolbox(sandbox_tmp, strict=False, limits={"processes": 50})
    loose = plan_limits(config.policy, tb, kernel_abi=0, cgroup_layout=None, cgroup_problem="no such thing")
    assert loose.min_abi == 0 and loose.cgroup is None and loose.nproc == 50
    assert any("no cgroup (no such thing)" in w for w in loose.warnings)


# -- the private view -------------------------------------------------------------------------------------------------
def test_the_view_shows_folders_and_files_made_at_start_and_a_rule_on_root_is_refused_under_strict(
    sandbox_tmp: Path,
) -> None:
    _, tb = _toolbox(sandbox_tmp)
    rules = [FsRule("/usr", READ), FsRule("/s/work/a", WRITE), FsRule("/s/tls/ca.pem", READ)]
    host = Answers({"/usr"})
    warnings: list[str] = []

    def lines(**made: Any) -> list[str]:
        view = plan_worker_view(tb, rules, host, strict=True, hostname=None, warnings=warnings, **made)
        assert view is not None
        return view[1]

    shown = lines(made_at_start=["/s/work/a"], made_files=["/s/tls/ca.pem"])
    assert any(line.startswith("/s/work/a: read-write bind") for line in shown)
    assert any(line.startswith("/s/tls/ca.pem: read-only bind of the host's (file)") for line in shown)
    assert not any(line.startswith("/s/tls/ca.pem") for line in lines(made_at_start=["/s/work/a"]))
    assert shown[-1] == f"host name: {NEUTRAL_HOSTNAME}"  # not the host's: no hostname capability
    whole = [FsRule("/", READ)]
    with pytest.raises(PolicyRefused, match="a strict policy needs the view"):
        plan_worker_view(tb, whole, host, strict=True, hostname=None, made_at_start=[], warnings=warnings)
    assert plan_worker_view(tb, whole, host, strict=False, hostname=None, made_at_start=[], warnings=warnings) is None
    assert any("this worker sees the host's tree" in w for w in warnings)
