"""The zygote's messages and their checks (``sandbox/_zygote_wire.py``): pure, no process."""

from __future__ import annotations

import msgpack
import pytest

from sandbox._zygote_wire import (
    MAX_MESSAGE,
    ZygoteWireError,
    check_fd_targets,
    check_modules,
    decode_message,
    encode_message,
)


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
