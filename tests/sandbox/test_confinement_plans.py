"""Pure parts of the confinement steps: namespace flags, rlimit settings, status checks, plan decoding, paths."""

from __future__ import annotations

import dataclasses
import os
import resource
import sys
from typing import TYPE_CHECKING

import msgpack
import pytest

from sandbox import (
    ConfinementError,
    ConfinementPlan,
    FsRule,
    Rlimits,
    SandboxError,
    ViewSpec,
    python_runtime_paths,
    uid_can_read,
)
from sandbox._launcher import decode_plan
from sandbox._netns import CLONE_NEWIPC, CLONE_NEWNET, CLONE_NEWPID, CLONE_NEWUSER, plan_namespaces
from sandbox._privileges import check_status
from sandbox._rlimits import RlimitSetting, plan_rlimits

if TYPE_CHECKING:
    from pathlib import Path

INF = resource.RLIM_INFINITY

# --- errors


def test_confinement_error_is_a_sandbox_error_carrying_step_and_errno() -> None:
    exc = ConfinementError("boom", step="landlock", errno=22)
    assert isinstance(exc, SandboxError)
    assert (str(exc), exc.step, exc.errno) == ("boom", "landlock", 22)


# --- namespaces


def test_root_needs_no_user_namespace() -> None:
    plan = plan_namespaces(new_netns=True, new_pidns=True, euid=0)
    assert plan.flags == CLONE_NEWNET | CLONE_NEWPID
    assert not plan.user_ns


def test_non_root_adds_a_user_namespace_only_when_another_namespace_is_asked_for() -> None:
    plan = plan_namespaces(new_netns=True, new_pidns=False, euid=1000)
    assert plan.flags == CLONE_NEWNET | CLONE_NEWUSER
    assert (plan.user_ns, plan.net, plan.pid) == (True, True, False)
    assert plan_namespaces(new_netns=False, new_pidns=False, euid=1000).flags == 0
    only_ipc = plan_namespaces(new_netns=False, new_pidns=False, new_ipcns=True, euid=1000)
    assert only_ipc.flags == CLONE_NEWIPC | CLONE_NEWUSER


def test_a_plan_asks_for_an_ipc_namespace_by_default() -> None:
    from sandbox import ConfinementPlan

    plan = ConfinementPlan(toolbox="t", workdir="/w", entry="m:f")
    assert plan.new_ipcns is True
    flags = plan_namespaces(new_netns=plan.new_netns, new_pidns=plan.new_pidns, new_ipcns=plan.new_ipcns, euid=0)
    assert flags.flags == CLONE_NEWNET | CLONE_NEWPID | CLONE_NEWIPC


# --- rlimits


def test_rlimits_plan_sets_soft_and_hard_and_cpu_gets_one_second_of_grace() -> None:
    limits = Rlimits(address_space_bytes=1 << 30, cpu_seconds=10, open_files=64, file_size_bytes=None, processes=8)
    settings = plan_rlimits(limits, lambda res: INF)
    assert settings == [
        RlimitSetting(resource.RLIMIT_AS, 1 << 30, 1 << 30),
        RlimitSetting(resource.RLIMIT_CPU, 10, 11),
        RlimitSetting(resource.RLIMIT_NOFILE, 64, 64),
        RlimitSetting(resource.RLIMIT_NPROC, 8, 8),
        RlimitSetting(resource.RLIMIT_CORE, 0, 0),
    ]


def test_rlimits_never_exceed_the_current_hard_limit() -> None:
    def hard(res: int) -> int:
        return 5 if res == resource.RLIMIT_CPU else 1024

    settings = plan_rlimits(Rlimits(open_files=100_000, cpu_seconds=5), hard)
    by_name = {s.name: (s.soft, s.hard) for s in settings}
    assert by_name["RLIMIT_NOFILE"] == (1024, 1024)
    assert by_name["RLIMIT_CPU"] == (5, 5)


def test_negative_rlimit_is_refused() -> None:
    with pytest.raises(ConfinementError, match="RLIMIT_AS: invalid limit -1"):
        plan_rlimits(Rlimits(address_space_bytes=-1), lambda res: INF)


# --- status check after the privilege drop

GOOD_STATUS = """Name:\tpython
Uid:\t65534\t65534\t65534\t65534
Gid:\t65534\t65534\t65534\t65534
Groups:\t
NoNewPrivs:\t1
CapInh:\t0000000000000000
CapPrm:\t0000000000000000
CapEff:\t0000000000000000
CapBnd:\t0000000000000000
CapAmb:\t0000000000000000
"""


def test_status_check_accepts_a_fully_dropped_process() -> None:
    assert check_status(GOOD_STATUS, 65534, 65534).ok


@pytest.mark.parametrize(
    ("replace", "problem"),
    [
        (("NoNewPrivs:\t1", "NoNewPrivs:\t0"), "NoNewPrivs is '0'"),
        (("CapEff:\t0000000000000000", "CapEff:\t0000000000000400"), "CapEff is 0000000000000400"),
        (("CapBnd:\t0000000000000000", "CapBnd:\t000001ffffffffff"), "CapBnd"),
        (("Uid:\t65534\t65534\t65534\t65534", "Uid:\t65534\t0\t65534\t65534"), "Uid is"),
        (("Groups:\t", "Groups:\t0 27"), "supplementary groups remain: 0 27"),
    ],
)
def test_status_check_names_what_was_not_dropped(replace: tuple[str, str], problem: str) -> None:
    check = check_status(GOOD_STATUS.replace(*replace), 65534, 65534)
    assert not check.ok
    assert any(problem in p for p in check.problems), check.problems


def test_status_check_without_uid_ignores_ids_but_not_capabilities() -> None:
    assert check_status(GOOD_STATUS.replace("65534", "1000"), None, None).ok
    assert not check_status(GOOD_STATUS.replace("CapPrm:\t0000000000000000", "CapPrm:\t1"), None, None).ok


# --- plan decoding


def _wire(**changes: object) -> bytes:
    plan = ConfinementPlan(toolbox="t", workdir="/w", entry="m:f", uid=1, gid=1, fs_rules=(FsRule("/usr"),))
    wire = plan.to_wire()
    wire.update(changes)
    return msgpack.packb(wire)


def test_the_wire_form_is_the_plan_as_asdict_gives_it_and_decodes_back() -> None:
    """``to_wire`` (which leaves the payload uncopied) gives what ``dataclasses.asdict`` gives, byte for byte once
    encoded, for a plan with every nested part (rules, rlimits, view, a nested payload), and the launcher decodes
    the same plan back."""
    plan = ConfinementPlan(
        toolbox="t",
        workdir="/w",
        entry="m:f",
        payload={"config": {"policy": {"limits": {"wall_time_s": 5}, "env": {"A": "b"}}, "list": [1, [2, {"x": 3}]]}},
        uid=1,
        gid=2,
        groups=(7, 8),
        fs_rules=(FsRule("/usr"), FsRule("/w", "write")),
        tcp_connect_ports=(8080,),
        rlimits=Rlimits(cpu_seconds=3, processes=9),
        view=ViewSpec(hostname="h", system_paths=("/usr", "/lib")),
        env={"PATH": "/usr/bin"},
    )
    wire = plan.to_wire()
    assert wire == dataclasses.asdict(plan)
    assert msgpack.packb(wire, use_bin_type=True) == msgpack.packb(dataclasses.asdict(plan), use_bin_type=True)
    assert decode_plan(msgpack.packb(wire, use_bin_type=True)) == plan


def test_decode_plan_round_trips() -> None:
    plan = decode_plan(_wire(tcp_connect_ports=[8080]))
    assert plan.fs_rules == (FsRule("/usr"),)
    assert plan.tcp_connect_ports == (8080,)


@pytest.mark.parametrize(
    ("changes", "reason"),
    [
        ({"uid": None}, "uid and gid must be given together"),
        ({"uid": -1}, "uid must be a non-negative integer"),
        ({"bridge": True}, "bridge needs bridge_fd"),
        ({"env": {"A": 1}}, "env must map strings to strings"),
        ({"tcp_connect_ports": [70000]}, "bad tcp_connect_ports"),
        ({"fs_rules": [{"path": "/x", "mode": "read", "extra": 1}]}, "unexpected keyword"),
        ({"rlimits": "lots"}, "malformed plan"),
        ({"toolbox": ""}, "toolbox must be a non-empty string"),
    ],
)
def test_decode_plan_refuses_bad_fields(changes: dict[str, object], reason: str) -> None:
    with pytest.raises(ConfinementError, match="malformed plan") as info:
        decode_plan(_wire(**changes))
    assert reason in str(info.value)


# --- system paths


def test_python_runtime_paths_cover_interpreter_and_stdlib_without_nesting() -> None:
    paths = python_runtime_paths()
    assert paths == sorted(set(paths))
    for needed in (os.path.realpath(sys.executable), os.path.realpath(os.__file__), sys.prefix):
        assert any(needed == p or needed.startswith(p + "/") for p in paths), needed
    for a in paths:
        assert not any(a != b and a.startswith(b + "/") for b in paths)


@pytest.mark.root
def test_uid_can_read_follows_the_mode_bits_of_every_component(sandbox_tmp: Path) -> None:
    d = sandbox_tmp / "d"
    d.mkdir()
    f = d / "f"
    f.write_text("x")
    f.chmod(0o644)
    d.chmod(0o755)
    assert uid_can_read(str(f), 65534, 65534)
    assert uid_can_read(str(d), 65534, 65534)
    f.chmod(0o640)
    assert not uid_can_read(str(f), 65534, 65534)
    os.chown(f, 0, 65534)
    assert uid_can_read(str(f), 65534, 65534)  # group bits
    f.chmod(0o644)
    d.chmod(0o700)
    assert not uid_can_read(str(f), 65534, 65534)  # parent not searchable
    os.chown(d, 65534, 0)
    assert uid_can_read(str(f), 65534, 65534)  # owner bits of the parent
    d.chmod(0o755)
    link = sandbox_tmp / "link"
    link.symlink_to(f)
    assert uid_can_read(str(link), 65534, 65534)
    assert not uid_can_read(str(sandbox_tmp / "missing"), 65534, 65534)
    assert not uid_can_read("/root/.bashrc", 65534, 65534) or os.stat("/root").st_mode & 0o001


def test_status_check_wants_exactly_the_plans_supplementary_groups() -> None:
    with_groups = GOOD_STATUS.replace("Groups:\t", "Groups:\t2000 2001")
    assert check_status(with_groups, 65534, 65534, (2001, 2000)).ok
    assert not check_status(with_groups, 65534, 65534, (2000,)).ok
    assert not check_status(GOOD_STATUS, 65534, 65534, (2000,)).ok
