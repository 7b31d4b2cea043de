"""The zygote's messages and their checks (``sandbox/_zygote_wire.py``): pure, no process."""

from __future__ import annotations

import msgpack
import pytest

from sandbox import MAX_MESSAGE, ZygoteWireError, decode_message, encode_message
from sandbox._zygote_wire import check_fd_targets, check_modules, check_spawn


def test_a_message_round_trips() -> None:
    message = {"t": "spawn", "id": 7, "fds": [0, 1, 2, 9]}
    assert decode_message(encode_message(message)) == message


@pytest.mark.parametrize("data", [b"\xc1", msgpack.packb([1, 2]), msgpack.packb({"id": 1}), msgpack.packb({"t": 3})])
def test_what_is_not_a_message_is_refused(data: bytes) -> None:
    with pytest.raises(ZygoteWireError):
        decode_message(data)


def test_an_oversized_message_is_refused() -> None:
    with pytest.raises(ZygoteWireError, match="exceeds"):
        encode_message({"t": "ready", "failed": {"m": "x" * MAX_MESSAGE}})


def test_fd_targets_are_stdio_first_distinct_and_as_many_as_came() -> None:
    assert check_fd_targets([0, 1, 2, 17], 4) == [0, 1, 2, 17]
    for targets, received, why in (
        ([0, 1, 2], 4, "4 came"),
        ([1, 0, 2], 3, "stdin, stdout and stderr"),
        ([0, 1, 2, 2], 4, "distinct"),
        ([0, 1, 2, 5000], 4, "between 0 and"),
        ([0, 1, 2, True], 4, "integers"),
        ("0,1,2", 3, "integers"),
    ):
        with pytest.raises(ZygoteWireError, match=why):
            check_fd_targets(targets, received)


def test_preload_names_are_dotted_module_names() -> None:
    assert check_modules(["toolboxes._worker", "toolboxes.bash"]) == ["toolboxes._worker", "toolboxes.bash"]
    for bad in (["os; import x"], ["../x"], "toolboxes", [""], [3]):
        with pytest.raises(ZygoteWireError):
            check_modules(bad)


def test_a_spawn_request_names_its_cgroup_fds_and_pid_namespace() -> None:
    """The last ``cgroup`` fds are the group's ``cgroup.procs`` files (not given to the child as fds), ``pidns``
    asks for a new PID namespace; both may be left out (a request of before: no group, no namespace)."""
    request = check_spawn({"t": "spawn", "fds": [0, 1, 2, 9], "cgroup": 3, "pidns": True}, 7)
    assert (request.targets, request.cgroup_fds, request.new_pidns) == ([0, 1, 2, 9], 3, True)
    request = check_spawn({"t": "spawn", "fds": [0, 1, 2]}, 3)
    assert (request.targets, request.cgroup_fds, request.new_pidns) == ([0, 1, 2], 0, False)
    for message, received, why in (
        ({"fds": [0, 1, 2], "cgroup": 1}, 3, "3 came"),  # the group's fd counted as one of the child's
        ({"fds": [0, 1, 2], "cgroup": 5}, 8, "between 0 and 4"),
        ({"fds": [0, 1, 2], "cgroup": -1}, 3, "between 0 and 4"),
        ({"fds": [0, 1, 2], "cgroup": True}, 4, "between 0 and 4"),
        ({"fds": [0, 1, 2], "pidns": 1}, 3, "true or false"),
    ):
        with pytest.raises(ZygoteWireError, match=why):
            check_spawn({"t": "spawn", **message}, received)
