"""A uid per worker, the pure parts: which uid each toolbox gets, the account files (handing folders over:
``tests/sandbox/test_dirfd.py``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from sandbox._accounts import plan_account_files
from supervisor._worker_uids import TooManyWorkers, assign_worker_uids

PASSWD = "root:x:0:0:root:/root:/bin/bash\nnobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n"
GROUP = "root:x:0:\nnogroup:x:65534:\n"


def test_each_toolbox_gets_its_own_uid_in_the_range_whatever_the_others_are() -> None:
    keys = [f"agent/tb{i}" for i in range(50)]
    uids = assign_worker_uids(keys, 3_000_000_000, 1000)
    assert len(set(uids.values())) == 50
    assert all(3_000_000_000 <= u < 3_000_001_000 for u in uids.values())
    # A toolbox keeps its uid when the others change (it depends on its own name, not on the list).
    alone = assign_worker_uids(["agent/tb7"], 3_000_000_000, 1000)
    assert alone["agent/tb7"] == uids["agent/tb7"]
    assert assign_worker_uids(reversed(keys), 3_000_000_000, 1000) == uids


def test_a_full_range_still_gives_distinct_uids_and_a_too_small_one_is_refused() -> None:
    uids = assign_worker_uids(["a/x", "a/y", "a/z"], 5000, 3)
    assert sorted(uids.values()) == [5000, 5001, 5002]
    with pytest.raises(TooManyWorkers, match=r"3 toolboxes need a uid each and worker_uids\.count is 2"):
        assign_worker_uids(["a/x", "a/y", "a/z"], 5000, 2)


def test_account_files_name_a_uid_the_host_does_not_know() -> None:
    files = plan_account_files(PASSWD, GROUP, uid=3_000_000_001, gid=65534, name="agent-tools", home="/w/tools")
    assert files.passwd is not None and files.passwd.startswith(PASSWD)
    assert files.passwd.endswith("agent-tools:x:3000000001:65534:agents-supervise worker:/w/tools:/usr/sbin/nologin\n")
    assert files.group is None  # the host names gid 65534 already
    known = plan_account_files(PASSWD, GROUP, uid=65534, gid=65534, name="agent-tools", home="/w")
    assert (known.passwd, known.group) == (None, None)
    odd = plan_account_files(PASSWD + "agent-x:x:1:1::/:/bin/false", "", uid=7000, gid=7001, name="agent-x:\nroot",
                             home="/w:x")
    assert odd.passwd is not None and "\nagent-xroot:x:7000:7001:agents-supervise worker:/wx:" in odd.passwd
    assert odd.group == "agents-supervise:x:7001:\n"
    taken = plan_account_files(PASSWD + "agent-x:x:1:1::/:/bin/false\n", GROUP, uid=7000, gid=65534, name="agent-x",
                               home="/w")
    assert taken.passwd is not None and "\nagent-x2:x:7000:" in taken.passwd


@pytest.mark.root
def test_the_compiled_plans_carry_the_uids_names_and_umask(tmp_path: Path) -> None:
    from supervisor._compile import compile_policy
    from supervisor._config_loader import load_config
    from supervisor._errors import PolicyRefused
    from tests._policies import agent, system_toolbox, write_policy

    boxes = [system_toolbox("one"), system_toolbox("two")]
    config = load_config(str(write_policy(tmp_path, {"tester": agent(builtinToolboxes=boxes)},
                                          worker_uids={"first": 3_000_000_000, "count": 100})))
    plans = {s.toolbox: s.plan for s in compile_policy(config, prepare=False).specs}
    expected = assign_worker_uids(["tester/one", "tester/two"], 3_000_000_000, 100)
    assert {n: p.uid for n, p in plans.items()} == {"one": expected["tester/one"], "two": expected["tester/two"]}
    assert {p.gid for p in plans.values()} == {65534}
    assert (plans["one"].account_name, plans["one"].umask) == ("agent-one", 0o007)
    shared = load_config(str(write_policy(tmp_path, {"tester": agent(builtinToolboxes=boxes)})))
    one = compile_policy(shared, prepare=False).specs[0].plan
    assert (one.uid, one.account_name, one.umask) == (65534, "", 0o077)
    small = load_config(str(write_policy(tmp_path, {"tester": agent(builtinToolboxes=boxes)},
                                         worker_uids={"first": 3_000_000_000, "count": 1})))
    with pytest.raises(PolicyRefused, match="make the range larger"):
        compile_policy(small, prepare=False)
