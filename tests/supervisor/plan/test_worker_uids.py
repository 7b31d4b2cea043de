"""A uid per worker, the pure parts: the account files and what the compiled plans carry (which uid each toolbox
gets: ``test_identities.py``; handing folders over: ``tests/sandbox/test_dirfd.py``)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pytest

from sandbox._accounts import plan_account_files
from supervisor.plan._identities import _slot

if TYPE_CHECKING:
    from pathlib import Path

PASSWD = "root:x:0:0:root:/root:/bin/bash\nnobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n"
GROUP = "root:x:0:\nnogroup:x:65534:\n"


def test_account_files_name_a_uid_the_host_does_not_know() -> None:
    files = plan_account_files(PASSWD, GROUP, uid=3_000_000_001, gid=65534, name="agent-tools", home="/w/tools")
    assert files.passwd is not None and files.passwd.startswith(PASSWD)
    assert files.passwd.endswith("agent-tools:x:3000000001:65534:agents-supervise worker:/w/tools:/usr/sbin/nologin\n")
    assert files.group is None  # the host names gid 65534 already
    known = plan_account_files(PASSWD, GROUP, uid=65534, gid=65534, name="agent-tools", home="/w")
    assert (known.passwd, known.group) == (None, None)
    odd = plan_account_files(
        PASSWD + "agent-x:x:1:1::/:/bin/false", "", uid=7000, gid=7001, name="agent-x:\nroot", home="/w:x"
    )
    assert odd.passwd is not None and "\nagent-xroot:x:7000:7001:agents-supervise worker:/wx:" in odd.passwd
    assert odd.group == "agents-supervise:x:7001:\n"
    shared = plan_account_files(PASSWD, GROUP, uid=65534, gid=65534, name="x", home="/w", groups=(65534, 0, 3100000000))
    assert shared.group == GROUP + "shared-3100000000:x:3100000000:\n"  # a shared group the host does not name
    taken = plan_account_files(
        PASSWD + "agent-x:x:1:1::/:/bin/false\n", GROUP, uid=7000, gid=65534, name="agent-x", home="/w"
    )
    assert taken.passwd is not None and "\nagent-x2:x:7000:" in taken.passwd


def test_the_compiled_plans_carry_the_uids_names_and_umask(tmp_path: Path, fresh_uid_registry: Path) -> None:
    """Planned as a root supervisor plans them (``_facts.facts_as``: the uids are data of the plan, no root)."""
    from supervisor._errors import PolicyRefused
    from supervisor.config._loader import load_config
    from supervisor.plan import plan_policy
    from tests._policies import agent, system_toolbox, write_policy
    from tests.supervisor.plan._facts import facts_as

    def planned(config: Any) -> Any:
        return plan_policy(config, facts_as(config, config.policy.state_dir)).compiled

    boxes = [system_toolbox("one"), system_toolbox("two")]
    config = load_config(
        str(
            write_policy(
                tmp_path, {"tester": agent(builtinToolboxes=boxes)}, worker_uids={"first": 3_000_000_000, "count": 100}
            )
        )
    )
    plans = {s.toolbox: s.plan for s in planned(config).specs}
    expected = {n: 3_000_000_000 + _slot(f"tester/{n}", 100) for n in ("one", "two")}  # a fresh table: hash slots
    if expected["one"] == expected["two"]:
        expected["two"] = 3_000_000_000 + (expected["two"] - 3_000_000_000 + 1) % 100
    assert {n: p.uid for n, p in plans.items()} == expected
    assert {n: p.gid for n, p in plans.items()} == expected  # a group of its own each
    assert (plans["one"].account_name, plans["one"].umask) == ("agent-one", 0o002)
    shared = load_config(str(write_policy(tmp_path, {"tester": agent(builtinToolboxes=boxes)})))
    one = planned(shared).specs[0].plan
    assert (one.uid, one.account_name, one.umask) == (65534, "", 0o077)
    small = load_config(
        str(
            write_policy(
                tmp_path, {"tester": agent(builtinToolboxes=boxes)}, worker_uids={"first": 3_000_000_000, "count": 1}
            )
        )
    )
    with pytest.raises(PolicyRefused, match="make the range larger"):
        planned(small)
