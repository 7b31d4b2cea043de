"""The policy's section overrides (``config/_model.py``): one definition, the base's; the override only marks keys
as written (a toolbox's ``limits``, its ``validation``, a tenant's ``budget``)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pytest
from pydantic import ValidationError

from supervisor.config._budget import Budget, BudgetOverride
from supervisor.config._limits import Limits, LimitsOverride
from supervisor.config._policy import Policy
from supervisor.config._validation_settings import Validation, ValidationOverride

if TYPE_CHECKING:
    from supervisor.config._model import Override, StrictModel

PAIRS: list[tuple[type[StrictModel], type[Override]]] = [
    (Limits, LimitsOverride),
    (Budget, BudgetOverride),
    (Validation, ValidationOverride),
]


def _without_default(schema: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in schema.items() if k != "default"}


@pytest.mark.parametrize(("base", "override"), PAIRS)
def test_an_override_has_the_keys_types_and_checks_of_its_base(
    base: type[StrictModel], override: type[Override]
) -> None:
    assert list(override.model_fields) == list(base.model_fields)
    assert all(f.default is None and not f.is_required() for f in override.model_fields.values())
    mine, theirs = override.model_json_schema()["properties"], base.model_json_schema()["properties"]
    assert {k: _without_default(v) for k, v in mine.items()} == {k: _without_default(v) for k, v in theirs.items()}


@pytest.mark.parametrize(
    "written",
    [
        {"wall_time_s": None},  # a call always has a wall time: null is not "no limit" here
        {"wall_time_s": 0},
        {"open_files": 8},
        {"memory_bytes": "lots"},
        {"max_concurrent_calls": None},
        {"wall_time": 5},
    ],
)
def test_a_limits_override_refuses_what_the_limits_refuse(written: dict[str, Any]) -> None:
    with pytest.raises(ValidationError):
        Limits.model_validate({**Limits().model_dump(), **written})
    with pytest.raises(ValidationError):
        LimitsOverride.model_validate(written)


def test_only_written_keys_replace_the_base_and_null_is_written() -> None:
    base = Limits(wall_time_s=30.0, cpus=2.0)
    override = LimitsOverride.model_validate({"wall_time_s": 5, "cpus": None, "memory_bytes": "64MiB"})
    merged = override.applied_to(base)
    assert (merged.wall_time_s, merged.cpus, merged.memory_bytes) == (5.0, None, 64 * 2**20)
    assert merged.open_files == base.open_files and merged.output_bytes == base.output_bytes
    assert LimitsOverride().applied_to(base) == base
    budget = BudgetOverride.model_validate({"tool_calls": None}).applied_to(Budget())
    assert budget.tool_calls is None and budget.model_requests == Budget().model_requests


def test_a_policy_applies_a_toolbox_validation_override_over_its_own() -> None:
    policy = Policy.model_validate(
        {"validation": {"allow_extra_properties": True}, "toolboxes": {"t": {"validation": {"strict_mode": False}}}},
        context={"base_dir": "/"},
    )
    assert policy.effective_validation("t") == Validation(allow_extra_properties=True, strict_mode=False)
    assert policy.effective_validation("u") == Validation(allow_extra_properties=True, strict_mode=True)
