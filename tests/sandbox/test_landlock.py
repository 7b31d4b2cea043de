"""Landlock: the pure plan (any machine), then the thin apply in forked children (kernel with Landlock)."""

from __future__ import annotations

import errno
import json
import os
from typing import TYPE_CHECKING

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sandbox import ConfinementError, FsRule, landlock_abi
from sandbox._landlock import (
    FILE_RIGHTS,
    FS_EXECUTE,
    FS_IOCTL_DEV,
    FS_MAKE_BLOCK,
    FS_MAKE_CHAR,
    FS_READ_DIR,
    FS_READ_FILE,
    FS_REFER,
    FS_TRUNCATE,
    FS_WRITE_FILE,
    NET_BIND_TCP,
    NET_CONNECT_TCP,
    RESTRICT_SELF_LOG_SAME_EXEC_OFF,
    SCOPE_ABSTRACT_UNIX_SOCKET,
    SCOPE_SIGNAL,
    RulesetPlan,
    apply_ruleset,
    fs_rights_for_abi,
    plan_ruleset,
)
from sandbox._privileges import set_no_new_privs

if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path

# --- pure plan


def test_abi_1_handles_only_the_first_thirteen_rights_and_no_network_or_scope() -> None:
    plan = plan_ruleset([FsRule("/usr")], 1, tcp_connect_ports=[8080])
    assert plan.handled_fs == (1 << 13) - 1
    assert plan.handled_net == 0
    assert plan.scoped == 0
    assert plan.connect_ports == ()


def test_abi_7_handles_every_right_tcp_and_both_scopes() -> None:
    plan = plan_ruleset([], 7, tcp_connect_ports=[8080])
    assert plan.handled_fs & (FS_REFER | FS_TRUNCATE | FS_IOCTL_DEV) == FS_REFER | FS_TRUNCATE | FS_IOCTL_DEV
    assert plan.handled_net == NET_BIND_TCP | NET_CONNECT_TCP
    assert plan.scoped == SCOPE_ABSTRACT_UNIX_SOCKET | SCOPE_SIGNAL
    assert plan.connect_ports == (8080,)


@pytest.mark.parametrize(
    ("abi", "present", "absent"),
    [
        (1, 0, FS_REFER | FS_TRUNCATE | FS_IOCTL_DEV),
        (2, FS_REFER, FS_TRUNCATE | FS_IOCTL_DEV),
        (3, FS_REFER | FS_TRUNCATE, FS_IOCTL_DEV),
        (4, FS_REFER | FS_TRUNCATE, FS_IOCTL_DEV),
        (5, FS_REFER | FS_TRUNCATE | FS_IOCTL_DEV, 0),
    ],
)
def test_rights_the_kernel_does_not_know_are_dropped(abi: int, present: int, absent: int) -> None:
    grant = plan_ruleset([FsRule("/work", "write")], abi).paths[0]
    assert grant.dir_access & present == present
    assert grant.dir_access & absent == 0


def test_read_rule_grants_read_list_execute_and_the_file_form_drops_read_dir() -> None:
    grant = plan_ruleset([FsRule("/usr", "read")], 7).paths[0]
    assert grant.dir_access == FS_EXECUTE | FS_READ_FILE | FS_READ_DIR
    assert grant.file_access == FS_EXECUTE | FS_READ_FILE


def test_write_rule_never_grants_device_nodes_and_its_file_form_has_only_file_rights() -> None:
    grant = plan_ruleset([FsRule("/work", "write")], 7).paths[0]
    assert grant.dir_access & (FS_MAKE_CHAR | FS_MAKE_BLOCK) == 0
    assert grant.dir_access & FS_WRITE_FILE
    assert grant.file_access & ~FILE_RIGHTS == 0
    wanted = FS_WRITE_FILE | FS_TRUNCATE | FS_READ_FILE
    assert grant.file_access & wanted == wanted


def test_rules_on_the_same_path_merge_into_one_grant() -> None:
    plan = plan_ruleset([FsRule("/w", "read"), FsRule("/x"), FsRule("/w", "write")], 7)
    assert [g.path for g in plan.paths] == ["/w", "/x"]
    assert plan.paths[0] == plan_ruleset([FsRule("/w", "write")], 7).paths[0]


def test_ports_are_deduplicated_and_checked() -> None:
    assert plan_ruleset([], 4, tcp_connect_ports=[1, 2, 1]).connect_ports == (1, 2)
    with pytest.raises(ConfinementError, match="out of range"):
        plan_ruleset([], 4, tcp_connect_ports=[70000])


def test_relative_path_and_unknown_mode_are_refused() -> None:
    with pytest.raises(ConfinementError, match="absolute"):
        plan_ruleset([FsRule("usr")], 7)
    with pytest.raises(ConfinementError, match="unknown mode 'exec'"):
        plan_ruleset([FsRule("/usr", "exec")], 7)


def test_scope_can_be_turned_off_and_log_flags_need_abi_7() -> None:
    assert plan_ruleset([], 7, scope=False).scoped == 0
    assert plan_ruleset([], 7, restrict_flags=RESTRICT_SELF_LOG_SAME_EXEC_OFF).restrict_flags == 1
    assert plan_ruleset([], 6, restrict_flags=RESTRICT_SELF_LOG_SAME_EXEC_OFF).restrict_flags == 0


def test_abi_0_is_an_empty_plan_that_cannot_be_applied() -> None:
    plan = plan_ruleset([FsRule("/usr")], 0)
    assert (plan.handled_fs, plan.handled_net, plan.scoped) == (0, 0, 0)
    with pytest.raises(ConfinementError, match="not available"):
        apply_ruleset(plan)


@given(
    abi=st.integers(min_value=0, max_value=9),
    rules=st.lists(
        st.tuples(st.sampled_from(["/a", "/b", "/a/c", "/dev/null"]), st.sampled_from(["read", "write"])),
        max_size=6,
    ),
)
def test_every_grant_is_within_what_the_ruleset_handles(abi: int, rules: list[tuple[str, str]]) -> None:
    plan = plan_ruleset([FsRule(p, m) for p, m in rules], abi)
    assert plan.handled_fs == fs_rights_for_abi(abi)
    for grant in plan.paths:
        assert grant.dir_access & ~plan.handled_fs == 0
        assert grant.file_access & ~FILE_RIGHTS == 0
        assert grant.file_access & ~grant.dir_access == 0


# --- the thin part, in forked children (restrict_self cannot be undone)

needs_landlock = pytest.mark.skipif(landlock_abi() < 1, reason="this kernel has no Landlock")


def _in_child(fn: Callable[[], object]) -> object:
    """Run ``fn`` in a forked child and return what it returns (JSON), or raise what it raised."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        try:
            set_no_new_privs()  # restrict_self needs it unless the process has CAP_SYS_ADMIN
            out = {"ok": fn()}
        except BaseException as exc:
            out = {"error": f"{type(exc).__name__}: {exc}", "errno": getattr(exc, "errno", None)}
        os.write(w, json.dumps(out).encode())
        os._exit(0)
    os.close(w)
    with os.fdopen(r, "rb") as f:
        data = f.read()
    os.waitpid(pid, 0)
    result = json.loads(data)
    if "error" in result:
        raise AssertionError(result)
    return result["ok"]


def _try_open(path: str, flags: int = os.O_RDONLY) -> str:
    try:
        os.close(os.open(path, flags))
    except OSError as exc:
        return errno.errorcode[exc.errno]
    return "ok"


@needs_landlock
def test_landlock_abi_reports_a_version() -> None:
    assert 1 <= landlock_abi() <= 64


@needs_landlock
def test_apply_allows_inside_denies_outside_and_file_rules_use_file_rights(tmp_path: Path) -> None:
    inside, outside = tmp_path / "in", tmp_path / "out"
    inside.mkdir()
    outside.mkdir()
    (inside / "f").write_text("x")
    (outside / "f").write_text("x")
    single = tmp_path / "single"
    single.write_text("x")
    abi = landlock_abi()

    def probe() -> dict[str, object]:
        plan = plan_ruleset([FsRule(str(inside)), FsRule(str(single), "write"), FsRule("/nonexistent-path-xyz")], abi)
        skipped = apply_ruleset(plan)
        return {
            "skipped": skipped,
            "inside": _try_open(str(inside / "f")),
            "outside": _try_open(str(outside / "f")),
            "write_inside": _try_open(str(inside / "f"), os.O_WRONLY),
            "single": _try_open(str(single), os.O_WRONLY),
        }

    assert _in_child(probe) == {
        "skipped": ["/nonexistent-path-xyz"],
        "inside": "ok",
        "outside": "EACCES",
        "write_inside": "EACCES",
        "single": "ok",
    }


@needs_landlock
def test_a_failed_call_reports_its_own_errno_and_the_next_call_is_not_stale() -> None:
    def probe() -> dict[str, object]:
        bad = RulesetPlan(abi=7, handled_fs=1 << 40, handled_net=0, scoped=0, paths=(), connect_ports=())
        try:
            apply_ruleset(bad)
        except ConfinementError as exc:
            first = (exc.errno, str(exc))
        else:
            first = (None, "no error")
        apply_ruleset(plan_ruleset([FsRule("/")], 1))  # an old-ABI plan works on a newer kernel
        return {"first": first, "after": _try_open("/etc/hostname")}

    out = _in_child(probe)
    assert isinstance(out, dict)
    assert out["first"][0] == errno.EINVAL
    assert "create_ruleset" in out["first"][1]
    assert out["after"] == "ok"
