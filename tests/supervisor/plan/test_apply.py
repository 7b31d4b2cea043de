"""Plan, then apply: planning makes nothing; applying makes what the plan names (identities recorded, the CA's
certificate, each worker's folders) and takes it back on failure or when asked (identity records stay); identities
another supervisor recorded in between are found, and nothing is recorded then; ``check`` only plans: a state dir
in use is byte-identical after it, and no credential program runs.

Run by any user: a plan is data, and applying as another user than root makes folders of that user (no uids)."""

from __future__ import annotations

import dataclasses
import hashlib
import os
from typing import TYPE_CHECKING, Any

import pytest

from supervisor.config._loader import load_config
from supervisor.plan import (
    IdentitiesChanged,
    apply_plan,
    compile_policy,
    plan_policy,
    read_host_facts,
)
from supervisor.plan import _apply as apply_module
from supervisor.plan._identities import TABLE_FILE, _slot
from supervisor.plan._identity_store import assign_identities, record_identities
from supervisor.plan._tls_termination import ca_file_path
from tests._policies import agent, system_toolbox, write_policy
from tests.supervisor.frontends.test_check_summary import _check
from tests.supervisor.plan._facts import facts_as

if TYPE_CHECKING:
    from pathlib import Path

    from supervisor.plan import HostFacts

FIRST = 3_500_000_000


def _policy(root: Path, *boxes: str, **keys: Any) -> Path:
    toolboxes = [system_toolbox(name, capabilities=["date"]) for name in boxes]
    return write_policy(
        root,
        {"tester": agent(builtinToolboxes=toolboxes)},
        strict=False,
        landlock_min_abi=0,
        toolboxes={f"tester/{boxes[0]}": {"allowed_hosts": ["api.example.com"], "tls_termination": True}},
        **keys,
    )


def _tree(path: Path) -> dict[str, tuple[Any, ...]]:
    """Everything of ``path``'s tree a change would show: type, mode, owner, size, times, contents, link targets."""
    out: dict[str, tuple[Any, ...]] = {}
    for base, dirs, files in os.walk(path):
        for name in [*dirs, *files]:
            full = os.path.join(base, name)
            st = os.lstat(full)
            body: Any = None
            if os.path.islink(full):
                body = os.readlink(full)
            elif os.path.isfile(full):
                with open(full, "rb") as f:
                    body = hashlib.sha256(f.read()).hexdigest()
            out[os.path.relpath(full, path)] = (st.st_mode, st.st_uid, st.st_gid, st.st_size, st.st_mtime_ns, body)
    return out


def test_planning_makes_nothing_and_applying_makes_what_the_plan_names_and_takes_it_back(sandbox_tmp: Path) -> None:
    config = load_config(str(_policy(sandbox_tmp, "one", "two")))
    state = sandbox_tmp / "state"
    plan = plan_policy(config, read_host_facts(config, state_dir=str(state)))
    assert not state.exists()  # planning made nothing
    assert plan.ca is not None and [s.terminator is not None for s in plan.compiled.specs] == [True, False]
    ca = ca_file_path(str(state), plan.ca)
    assert ca in {r.path for r in plan.compiled.specs[0].plan.fs_rules}  # granted before it is written

    applied = apply_plan(plan)
    assert [s.toolbox for s in applied.compiled.specs] == ["one", "two"] and not applied.compiled.load_errors
    for name in ("one", "two"):
        assert (state / "work" / "tester" / name / "tmp").is_dir()
        assert (state / "toolbox-state" / "tester" / name).is_dir()
    assert os.path.isfile(ca) and applied.ca_file == ca
    assert (state / TABLE_FILE).is_file()  # the slug bound to its agent file
    assert str(state / "work" / "tester") in applied.made and str(state / "work" / "tester" / "one" / "tmp") in (
        applied.made
    )

    applied.rollback()
    assert not (state / "work").exists() and not (state / "toolbox-state").exists() and not (state / "tls").exists()
    assert (state / TABLE_FILE).is_file()  # identity records stay: a number is never given twice
    applied.rollback()  # twice is fine

    again = apply_plan(plan_policy(config, read_host_facts(config, state_dir=str(state))))
    assert (state / "work" / "tester" / "one").is_dir()
    assert again.ca_file == ca
    (state / "work" / "tester" / "one" / "tmp" / "kept").write_text("a worker's file")
    existing = apply_plan(plan_policy(config, read_host_facts(config, state_dir=str(state))))
    assert existing.made == [] and existing.ca_file is None  # found, not made: a rollback leaves them
    existing.rollback()
    assert (state / "work" / "tester" / "one" / "tmp" / "kept").is_file() and os.path.isfile(ca)


def test_an_apply_kept_by_its_switch_is_never_taken_back(sandbox_tmp: Path) -> None:
    """Once its generation runs (``keep``), a later rollback (a start-up's exit stack at shutdown) removes nothing:
    the folders and the CA file are the running policy's."""
    config = load_config(str(_policy(sandbox_tmp, "one")))
    state = sandbox_tmp / "state"
    applied = apply_plan(plan_policy(config, read_host_facts(config, state_dir=str(state))))
    assert applied.made and applied.ca_file is not None
    ca = applied.ca_file
    applied.keep()
    applied.rollback()
    assert (state / "work" / "tester" / "one" / "tmp").is_dir() and (
        state / "toolbox-state" / "tester" / "one"
    ).is_dir()
    assert os.path.isfile(ca)


class _Stop(BaseException):
    """Stands in for a cancellation in the middle of applying."""


def test_a_failure_while_applying_takes_back_what_it_made(sandbox_tmp: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    config = load_config(str(_policy(sandbox_tmp, "one", "two")))
    state = sandbox_tmp / "state"
    plan = plan_policy(config, read_host_facts(config, state_dir=str(state)))
    real = apply_module.prepare_worker_folders

    def prepare(anchor: int, state_dir: str, spec: Any) -> list[str]:
        if spec.toolbox == "two":
            raise _Stop
        return real(anchor, state_dir, spec)

    monkeypatch.setattr(apply_module, "prepare_worker_folders", prepare)
    with pytest.raises(_Stop):
        apply_plan(plan)
    assert sorted(os.listdir(state)) == ["identities.json", "identities.lock"]  # folders and the CA taken back
    monkeypatch.setattr(apply_module, "prepare_worker_folders", real)

    def broken(anchor: int, state_dir: str, spec: Any) -> list[str]:
        if spec.toolbox == "two":
            raise PermissionError("planted")
        return real(anchor, state_dir, spec)

    monkeypatch.setattr(apply_module, "prepare_worker_folders", broken)  # an Exception: that toolbox's load error
    applied = apply_plan(plan)
    assert [s.toolbox for s in applied.compiled.specs] == ["one"]
    [error] = applied.compiled.load_errors
    assert error["toolbox"] == "two" and "its work and state folders" in error["message"]
    assert [s.toolbox for s in plan.compiled.specs] == ["one", "two"]  # the plan itself is unchanged


def _table_only(config: Any, state: Path) -> HostFacts:
    """A root supervisor's facts whose uids come from the state dir's table alone (no host-wide registry)."""
    facts = facts_as(config, str(state), registry=None)
    return dataclasses.replace(facts, identities=dataclasses.replace(facts.identities, registry=None))


def test_identities_another_supervisor_recorded_meanwhile_are_found_and_nothing_is_recorded(sandbox_tmp: Path) -> None:
    """Two toolboxes' planned uids: while this plan waits, another supervisor on the state dir takes the number
    this plan gave ``tester/one``; applying finds it, records nothing; planned again, it gets another number."""
    count = 16
    config = load_config(str(_policy(sandbox_tmp, "one", worker_uids={"first": FIRST, "count": count})))
    state = sandbox_tmp / "state"
    os.makedirs(state)
    plan = plan_policy(config, _table_only(config, state))
    wanted = plan.planned_identities["tester/one"].uid
    assert wanted == FIRST + _slot("tester/one", count)
    thief = next(f"other/t{i}" for i in range(1000) if _slot(f"other/t{i}", count) == wanted - FIRST)
    assign_identities(str(state), {}, [thief], first=FIRST, count=count, persist=True)
    table = (state / TABLE_FILE).read_bytes()
    with pytest.raises(IdentitiesChanged, match="tester/one would get other uids; plan again"):
        apply_plan(plan)
    assert (state / TABLE_FILE).read_bytes() == table and not (state / "work").exists()
    again = plan_policy(config, _table_only(config, state))
    assert again.planned_identities["tester/one"].uid not in (wanted, None)
    assert again.compiled.specs[0].plan.uid == again.planned_identities["tester/one"].uid
    recorded = record_identities(again.identities, expected=again.planned_identities)
    assert recorded.workers["tester/one"] == again.planned_identities["tester/one"]


def test_check_only_plans_a_state_dir_in_use_is_byte_identical_and_no_credential_program_runs(
    sandbox_tmp: Path,
) -> None:
    """A state dir a supervisor started in (staged code, identities, folders, the CA); then the policy gains a
    toolbox, uids of its own and a credential whose source is a program: ``check`` (each form) and
    ``compile_policy(prepare=False)`` leave every byte, mode, owner and time of it as it was, and of the registry."""
    state = sandbox_tmp / "state"
    registry = sandbox_tmp / "uids"
    compile_policy(load_config(str(_policy(sandbox_tmp, "one"))))  # a start: everything made
    marker = sandbox_tmp / "the-command-ran"
    program = sandbox_tmp / "token.sh"
    program.write_text(f"#!/bin/sh\ntouch {marker}\necho secret\n")
    program.chmod(0o755)
    policy = _policy(
        sandbox_tmp,
        "one",
        "two",
        worker_uids={"first": FIRST, "count": 1000, "registry": str(registry)},
        credentials={
            "tok": {
                "source": {"command": [str(program)]},
                "bindings": [{"hosts": ["api.example.com"]}],
                "header": "Authorization: Bearer {value}",
            }
        },
    )
    before = _tree(state)
    assert any(p.startswith("runtime/") for p in before) and "work/tester/one/tmp" in before
    for args in ([], ["--detail"], ["--json"]):
        out = _check("--policy", str(policy), *args)
        assert out.returncode == 0, out.stderr
        assert "secret" not in out.stdout
    compiled = compile_policy(load_config(str(policy)), prepare=False)
    assert [s.toolbox for s in compiled.specs] == ["one", "two"]
    assert _tree(state) == before
    assert not marker.exists() and not registry.exists()
    assert any("credentials.tok: its command source is not run by check" in w for w in compiled.warnings)
