"""SQLite toolboxes in real confined workers, through ``Supervisor.open``: engine and kernel refuse writes.

Databases are real files under ``sandbox_tmp``. Read-write databases sit in directories owned by the sandbox uid
(SQLite creates its journal beside them); read-only ones are made world-writable on purpose, so that the Unix
permissions would let uid 65534 write them and only the worker's Landlock ruleset (and the toolbox's own checks)
stand in the way.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
import trio

from sandbox import READ, WRITE, FsRule
from supervisor._supervisor import Supervisor
from supervisor.workers._launch import plan_frame
from tests._policies import agent, write_policy

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Iterator

    from toolboxes import ToolResult

pytestmark = pytest.mark.root

NOBODY = 65534
REPO = Path(__file__).resolve().parents[2]


def sqlite_toolbox(name: str, versioning: dict[str, Any]) -> dict[str, Any]:
    return {"tag": "SqliteToolbox", "contents": {"Name": name, "Description": f"{name} db", "Versioning": versioning}}


def make_users_db(path: Path, *, wal: bool = False) -> None:
    conn = sqlite3.connect(path, isolation_level=None)
    if wal:
        conn.execute("PRAGMA journal_mode=WAL").fetchone()
    conn.execute("CREATE TABLE users (id INTEGER PRIMARY KEY, name TEXT NOT NULL, photo BLOB)")
    conn.executemany("INSERT INTO users (name, photo) VALUES (?, ?)", [("ada", b"\x00\x01"), ("brian", None)])
    conn.close()


def names(path: Path) -> list[str]:
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        return [r[0] for r in conn.execute("SELECT name FROM users ORDER BY id")]
    finally:
        conn.close()


def owned_dir(path: Path) -> Path:
    path.mkdir(parents=True)
    os.chown(path, NOBODY, NOBODY)
    return path


@dataclasses.dataclass
class Lab:
    root: Path
    ro_db: Path
    rw_db: Path
    wal_db: Path
    base_db: Path
    store: Path
    writer: sqlite3.Connection  # keeps wal_db's -wal alive, as a long-lived writer would


@pytest.fixture
def lab(sandbox_tmp: Path) -> Iterator[Lab]:
    ro_dir = sandbox_tmp / "ro"
    ro_dir.mkdir()
    ro_db = ro_dir / "analytics.db"
    make_users_db(ro_db)
    ro_dir.chmod(0o777)  # DAC would let uid 65534 create a journal or a VACUUM INTO target here: Landlock must not
    ro_db.chmod(0o666)
    rw_db = owned_dir(sandbox_tmp / "rw") / "memory.db"
    make_users_db(rw_db)
    os.chown(rw_db, NOBODY, NOBODY)
    wal_dir = sandbox_tmp / "wal"
    wal_dir.mkdir()
    wal_db = wal_dir / "live.db"
    make_users_db(wal_db, wal=True)
    writer = sqlite3.connect(wal_db, isolation_level=None)
    writer.execute("INSERT INTO users (name) VALUES ('from-writer-before')")
    for companion in ("-wal", "-shm"):
        os.chmod(str(wal_db) + companion, 0o644)
    base_db = owned_dir(sandbox_tmp / "base") / "base.db"
    make_users_db(base_db)
    os.chown(base_db, NOBODY, NOBODY)
    store = owned_dir(sandbox_tmp / "snapshots")
    try:
        yield Lab(sandbox_tmp, ro_db, rw_db, wal_db, base_db, store, writer)
    finally:
        writer.close()


@pytest.fixture
async def sup(lab: Lab) -> AsyncIterator[Supervisor]:
    toolboxes = [
        sqlite_toolbox("analytics", {"tag": "SqliteReadOnly", "path": str(lab.ro_db)}),
        sqlite_toolbox("memory", {"tag": "SqliteReadWrite", "path": str(lab.rw_db)}),
        sqlite_toolbox("live", {"tag": "SqliteReadOnly", "path": str(lab.wal_db)}),
        sqlite_toolbox(
            "drafts",
            {
                "tag": "SqliteVersioned",
                "shared": "conversation",
                "storageRoot": str(lab.store),
                "basePath": str(lab.base_db),
            },
        ),
    ]
    policy = write_policy(
        lab.root,
        {"tester": agent(builtinToolboxes=toolboxes)},
        landlock_min_abi=6,
        supervision={"restart_backoff_initial_s": 0.05},
    )
    async with Supervisor.open(policy) as s:
        yield s


def meta(result: ToolResult) -> dict[str, str]:
    return dict(result.metadata)


# --- read-only: the engine refuses ---------------------------------------------------------------------------

DISGUISED_WRITES = [
    "INSERT INTO users (name) VALUES ('eve')",
    "insert into users (name) values ('eve')",
    "/* just a read */ INSERT INTO users (name) VALUES ('eve')",
    "-- SELECT\nINSERT INTO users (name) VALUES ('eve')",
    "WITH x AS (SELECT 'eve' AS n) INSERT INTO users (name) SELECT n FROM x",
    "  with x as (select 1) update users set name = 'eve'",
    "DELETE FROM users",
    "CREATE TABLE t (x)",
    "CREATE TEMP TABLE t (x)",
    "DROP TABLE users",
    "PRAGMA journal_mode=DELETE",
    "pragma journal_mode = wal",
    "/* c */ PRAGMA user_version = 7",
    "VACUUM",
]


async def test_read_only_refuses_every_write_however_disguised(sup: Supervisor, lab: Lab) -> None:
    before = lab.ro_db.read_bytes()
    for sql in DISGUISED_WRITES:
        res = await sup.call("sqlite_analytics_query", {"sql": sql})
        assert res.status == "error", (sql, res)
        assert "read-only" in (res.data or ""), (sql, res.data)
        assert meta(res) == {"state_effect": "read", "resource_id": "sqlite:analytics"}, sql
    assert lab.ro_db.read_bytes() == before
    assert sorted(os.listdir(lab.ro_db.parent)) == ["analytics.db"]  # no journal was ever created


async def test_attach_and_vacuum_into_are_refused_and_create_nothing(sup: Supervisor, lab: Lab) -> None:
    target = lab.ro_db.parent / "copy.db"
    for sql in (
        f"ATTACH DATABASE '{target}' AS other",
        f"attach '{target}' as other",
        f"/* backup */ VACUUM INTO '{target}'",
        f"vacuum main into '{target}'",
        "ATTACH ':memory:' AS scratch",
    ):
        for name in ("analytics", "memory"):  # refused on read-write databases too
            res = await sup.call(f"sqlite_{name}_query", {"sql": sql})
            assert res.status == "error", (name, sql, res)
            assert "ATTACH" in (res.data or ""), res.data
    assert not target.exists()
    assert sorted(os.listdir(lab.ro_db.parent)) == ["analytics.db"]


async def test_read_only_reads_and_reports_metadata(sup: Supervisor) -> None:
    res = await sup.call(
        "sqlite_analytics_query", {"sql": "SELECT id, name, photo FROM users WHERE id = ?", "params": [1]}
    )
    assert res.status == "passed", res.data
    data = _data(res)
    assert data["columns"] == ["id", "name", "photo"]
    assert data["rows"] == [[1, "ada", {"base64": "AAE="}]]
    assert data["rowCount"] == 1 and isinstance(data["executionTime"], float)
    assert meta(res) == {"state_effect": "read", "resource_id": "sqlite:analytics"}
    two = await sup.call("sqlite_analytics_query", {"sql": "SELECT 1; SELECT 2"})
    assert two.status == "error" and "exactly one SQL statement" in (two.data or "")
    bad = await sup.call("sqlite_analytics_query", {"sql": "SELEC name FROM users"})
    assert bad.status == "failed" and "SQL error" in (bad.data or bad.summary or "")


def _data(res: ToolResult) -> dict[str, Any]:
    assert isinstance(res.structured, dict), res
    return res.structured


# --- read-only: the kernel refuses too -----------------------------------------------------------------------


async def test_read_only_worker_gets_no_write_right_on_the_database(lab: Lab, sup: Supervisor) -> None:
    rules = sup.runner("analytics").spec.plan.fs_rules
    assert FsRule(str(lab.ro_db), READ) in rules
    writable = [r.path for r in rules if r.mode == WRITE]
    for path in writable:
        assert not (str(lab.ro_db) + "/").startswith(path.rstrip("/") + "/"), f"{path} grants write on the db"
    live = sup.runner("live").spec.plan.fs_rules
    assert {FsRule(str(lab.wal_db) + ext, READ) for ext in ("", "-wal", "-shm")} <= set(live)
    rw = sup.runner("memory").spec.plan.fs_rules
    assert FsRule(str(lab.rw_db.parent), WRITE) in rw


_PROBE = textwrap.dedent("""
    import json, os, sqlite3, sys
    db = sys.argv[1]
    out = {}
    def attempt(name, fn):
        try:
            fn()
            out[name] = "allowed"
        except (OSError, sqlite3.Error) as exc:
            out[name] = type(exc).__name__ + ": " + str(exc)
    def sql_write():
        conn = sqlite3.connect(db, isolation_level=None)  # no mode=ro, no query_only, no authorizer
        try:
            conn.execute("INSERT INTO users (name) VALUES ('kernel-breach')")
        finally:
            conn.close()
    def vacuum_into():
        conn = sqlite3.connect(db, isolation_level=None)
        try:
            conn.execute("VACUUM INTO ?", (db + ".copy",))
        finally:
            conn.close()
    attempt("read", lambda: open(db, "rb").read(16))
    attempt("open_for_write", lambda: open(db, "r+b").close())
    attempt("create_beside", lambda: open(db + "-journal", "wb").close())
    attempt("sql_insert", sql_write)
    attempt("vacuum_into", vacuum_into)
    print(json.dumps(out))
""")


async def test_kernel_refuses_writes_with_the_authorizer_out_of_the_way(lab: Lab, sup: Supervisor) -> None:
    """The read-only worker's exact plan, with a plain Python (no toolbox code) as its entry: the kernel alone."""
    spec = sup.runner("analytics").spec
    python = spec.argv[0]
    plan = dataclasses.replace(
        spec.plan, entry="sandbox._launcher:exec_argv", payload={"argv": [python, "-I", "-c", _PROBE, str(lab.ro_db)]}
    )
    proc = await trio.run_process(
        spec.argv,
        stdin=plan_frame(plan),
        capture_stdout=True,
        capture_stderr=True,
        check=False,
        env=spec.env,
        cwd=spec.cwd,
    )
    assert proc.returncode == 0, proc.stderr.decode()
    out = json.loads(proc.stdout)
    assert out["read"] == "allowed"  # the probe really runs under the worker's rules
    for name in ("open_for_write", "create_beside", "sql_insert", "vacuum_into"):
        assert out[name] != "allowed", f"BREACH: {name} went through the kernel"
    # With the private view the read-only grant is a read-only mount (EROFS before Landlock's EACCES).
    assert out["open_for_write"].startswith(
        "OSError: [Errno 30] Read-only file system" if plan.view is not None else "PermissionError"
    ), out["open_for_write"]
    assert "readonly" in out["sql_insert"] or "unable to open" in out["sql_insert"], out["sql_insert"]
    assert names(lab.ro_db) == ["ada", "brian"]
    assert sorted(os.listdir(lab.ro_db.parent)) == ["analytics.db"]


# --- read-write ------------------------------------------------------------------------------------------------


async def test_read_write_works_and_persists(sup: Supervisor, lab: Lab) -> None:
    ins = await sup.call(
        "sqlite_memory_query",
        {"sql": "INSERT INTO users (name, photo) VALUES (:n, :p)", "params": {"n": "chen", "p": {"base64": "/w=="}}},
    )
    assert ins.status == "passed", ins.data
    assert _data(ins)["rowCount"] == 1
    assert meta(ins) == {"state_effect": "mutate", "resource_id": "sqlite:memory"}
    sel = await sup.call("sqlite_memory_query", {"sql": "SELECT name, photo FROM users WHERE name = 'chen'"})
    assert _data(sel)["rows"] == [["chen", {"base64": "/w=="}]]
    assert meta(sel)["state_effect"] == "read"
    assert names(lab.rw_db) == ["ada", "brian", "chen"]  # on disk, seen by another process
    # A transaction left open ends with its call (rolled back): the next call is not stuck behind it.
    begin = await sup.call("sqlite_memory_query", {"sql": "BEGIN"})
    assert begin.status == "passed"
    again = await sup.call("sqlite_memory_query", {"sql": "INSERT INTO users (name) VALUES ('dora')"})
    assert again.status == "passed", again.data
    assert names(lab.rw_db) == ["ada", "brian", "chen", "dora"]


async def test_a_read_write_database_the_workers_uid_cannot_write_is_named_with_its_fix(sandbox_tmp: Path) -> None:
    # Issue 13 item 11: root's 0644 file in a folder the worker's uid does not own. check warns; a write names the
    # path, the uid and the fix instead of "this database is read-only".
    folder = sandbox_tmp / "rootowned"
    folder.mkdir()
    folder.chmod(0o755)
    db = folder / "memory.db"
    make_users_db(db)
    db.chmod(0o644)
    policy = write_policy(
        sandbox_tmp,
        {"tester": agent(builtinToolboxes=[sqlite_toolbox("memory", {"tag": "SqliteReadWrite", "path": str(db)})])},
        landlock_min_abi=6,
    )
    check = subprocess.run(
        [sys.executable, "-m", "supervisor", "check", "--policy", str(policy)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    assert check.returncode == 0, check.stderr
    assert (
        f"memory: the read-write database {db} cannot be written by the worker (uid {NOBODY}): "
        f"{db} is not readable and writable by uid {NOBODY} (owner 0:0, mode 0644)"
    ) in check.stdout.split("\nwarnings (", 1)[1]
    # the fix the README gives (a shared group), in check and in the refused write alike
    fix = f"chgrp -R GID {folder} && chmod -R g+rwX {folder} && chmod g+s {folder}"
    assert fix in check.stdout
    async with Supervisor.open(policy) as sup:
        read = await sup.call("sqlite_memory_query", {"sql": "SELECT name FROM users"})
        assert read.status == "passed", read.data  # reading is allowed by the modes
        wrote = await sup.call("sqlite_memory_query", {"sql": "INSERT INTO users (name) VALUES ('eve')"})
    assert wrote.status == "error"
    assert wrote.data.startswith(f"the database {db} cannot be written by this worker (uid {NOBODY}): ")
    assert fix in wrote.data and "shared_groups" in wrote.data and "SqliteReadOnly" in wrote.data
    assert names(db) == ["ada", "brian"]
    os.chown(folder, NOBODY, NOBODY)  # the fix: no warning any more
    os.chown(db, NOBODY, NOBODY)
    fixed = subprocess.run(
        [sys.executable, "-m", "supervisor", "check", "--policy", str(policy)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    assert "cannot be written by the worker" not in fixed.stdout


@pytest.mark.slow
async def test_locked_database_fails_with_a_retry_hint(sup: Supervisor, lab: Lab) -> None:
    holder = sqlite3.connect(lab.rw_db, isolation_level=None, timeout=0)
    try:
        holder.execute("BEGIN EXCLUSIVE")
        with trio.fail_after(30):
            res = await sup.call("sqlite_memory_query", {"sql": "SELECT count(*) FROM users"})
        assert res.status == "failed", res
        assert "locked" in (res.data or "") and "retry" in (res.data or "")
    finally:
        holder.execute("ROLLBACK")
        holder.close()


# --- WAL, read-only --------------------------------------------------------------------------------------------


async def test_wal_database_read_only_sees_latest_committed_data(sup: Supervisor, lab: Lab) -> None:
    first = await sup.call("sqlite_live_query", {"sql": "SELECT name FROM users ORDER BY id"})
    assert first.status == "passed", first.data
    assert [r[0] for r in _data(first)["rows"]] == ["ada", "brian", "from-writer-before"]
    # Committed after the worker started, still only in the -wal (the writer keeps it from checkpointing away).
    lab.writer.execute("INSERT INTO users (name) VALUES ('from-writer-after')")
    assert os.path.getsize(str(lab.wal_db) + "-wal") > 0
    second = await sup.call("sqlite_live_query", {"sql": "SELECT name FROM users ORDER BY id DESC LIMIT 1"})
    assert _data(second)["rows"] == [["from-writer-after"]]
    refused = await sup.call("sqlite_live_query", {"sql": "INSERT INTO users (name) VALUES ('eve')"})
    assert refused.status == "error" and "read-only" in (refused.data or "")


async def test_wal_database_without_writer_is_read_read_only(sandbox_tmp: Path) -> None:
    """The last writer closed: no ``-wal``, all data in the main file; the worker may not create ``-wal``/``-shm``."""
    db = sandbox_tmp / "closed" / "closed.db"
    db.parent.mkdir()
    db.parent.chmod(0o777)  # DAC would let uid 65534 create the -wal here: only Landlock refuses it
    make_users_db(db, wal=True)
    assert not os.path.exists(str(db) + "-wal")
    policy = write_policy(
        sandbox_tmp,
        {"tester": agent(builtinToolboxes=[sqlite_toolbox("closed", {"tag": "SqliteReadOnly", "path": str(db)})])},
        landlock_min_abi=6,
    )
    async with Supervisor.open(policy) as sup:
        res = await sup.call("sqlite_closed_query", {"sql": "SELECT name FROM users ORDER BY id"})
        assert _data(res)["rows"] == [["ada"], ["brian"]]
        refused = await sup.call("sqlite_closed_query", {"sql": "UPDATE users SET name = 'x'"})
        assert refused.status == "error" and "read-only" in (refused.data or "")
    assert os.listdir(db.parent) == ["closed.db"]


async def test_big_results_are_cut_at_the_policy_output_cap(sandbox_tmp: Path) -> None:
    db = owned_dir(sandbox_tmp / "big") / "big.db"
    conn = sqlite3.connect(db, isolation_level=None)
    conn.execute("BEGIN")  # one transaction: 5000 autocommits would be 5000 fsyncs
    conn.execute("CREATE TABLE t (x TEXT)")
    conn.executemany("INSERT INTO t VALUES (?)", [("x" * 100,)] * 5000)
    conn.execute("COMMIT")
    conn.close()
    policy = write_policy(
        sandbox_tmp,
        {"tester": agent(builtinToolboxes=[sqlite_toolbox("big", {"tag": "SqliteReadOnly", "path": str(db)})])},
        toolboxes={"big": {"limits": {"output_bytes": 20000}}},
    )
    async with Supervisor.open(policy) as sup:
        res = await sup.call("sqlite_big_query", {"sql": "SELECT x FROM t"})
        data = _data(res)
        assert res.status == "passed" and res.truncated and data["truncated"] is True
        assert 0 < data["rowCount"] == len(data["rows"]) < 200  # 20000 bytes of row JSON, not 5000 rows
        assert "LIMIT" in (res.summary or "")
        capped = await sup.call("sqlite_big_query", {"sql": "SELECT rowid FROM t"})
        assert _data(capped)["rowCount"] == 1000 and capped.truncated  # the row cap


# --- versioned ---------------------------------------------------------------------------------------------------


async def test_versioned_snapshots_per_conversation_and_promote(sup: Supervisor, lab: Lab) -> None:
    base_before = lab.base_db.read_bytes()
    read = await sup.call("sqlite_drafts_query", {"sql": "SELECT count(*) FROM users"}, conversation_id="c1")
    assert _data(read)["rows"] == [[2]] and "versionHandle" not in _data(read)
    assert os.listdir(lab.store) == []  # a read never makes a snapshot
    write = await sup.call(
        "sqlite_drafts_query", {"sql": "INSERT INTO users (name) VALUES ('draft')"}, conversation_id="c1"
    )
    assert write.status == "passed", write.data
    assert meta(write) == {"state_effect": "mutate", "resource_id": "sqlite:drafts"}
    handle = _data(write)["versionHandle"]
    assert handle.startswith("conversation-")
    assert lab.base_db.read_bytes() == base_before  # the base is untouched
    assert os.path.exists(lab.store / f"{handle}.db")
    same = await sup.call("sqlite_drafts_query", {"sql": "SELECT name FROM users ORDER BY id"}, conversation_id="c1")
    assert [r[0] for r in _data(same)["rows"]] == ["ada", "brian", "draft"]
    assert _data(same)["versionHandle"] == handle
    other = await sup.call("sqlite_drafts_query", {"sql": "SELECT name FROM users ORDER BY id"}, conversation_id="c2")
    assert [r[0] for r in _data(other)["rows"]] == ["ada", "brian"]
    by_handle = await sup.call(
        "sqlite_drafts_query", {"sql": "SELECT count(*) FROM users", "versionHandle": handle}, conversation_id="c2"
    )
    assert _data(by_handle)["rows"] == [[3]]

    for bad in ("conversation-" + "0" * 24, "../../etc/passwd", "global"):
        unknown = await sup.call("sqlite_drafts_promote", {"versionHandle": bad})
        assert unknown.status == "error" and "unknown versionHandle" in (unknown.data or ""), bad
        query = await sup.call("sqlite_drafts_query", {"sql": "SELECT 1", "versionHandle": bad})
        assert query.status == "error" and "unknown versionHandle" in (query.data or ""), bad
    assert lab.base_db.read_bytes() == base_before

    promoted = await sup.call("sqlite_drafts_promote", {"versionHandle": handle})
    assert promoted.status == "passed", promoted.data
    assert meta(promoted) == {"state_effect": "mutate", "resource_id": "sqlite:drafts"}
    assert names(lab.base_db) == ["ada", "brian", "draft"]
    assert not [n for n in os.listdir(lab.base_db.parent) if n.endswith(".tmp")]
    fresh = await sup.call("sqlite_drafts_query", {"sql": "SELECT count(*) FROM users"}, conversation_id="c3")
    assert _data(fresh)["rows"] == [[3]]


# --- the seed's example agent -------------------------------------------------------------------------------------


async def test_example_agent_loads_and_both_toolboxes_answer(sandbox_tmp: Path) -> None:
    agents = sandbox_tmp / "agents"
    agents.mkdir()
    shutil.copy(REPO / "policies" / "agents" / "sqlite-example.json", agents / "sqlite-example.json")
    made = subprocess.run(
        [sys.executable, str(REPO / "scripts" / "make_example_dbs.py"), str(agents / "sqlite-example")],
        capture_output=True,
        text=True,
        check=False,
    )
    assert made.returncode == 0, made.stderr
    for path in (agents / "sqlite-example", agents / "sqlite-example" / "memory"):
        path.chmod(0o755)
    memory = agents / "sqlite-example" / "memory"
    # The policy file's default is a uid and a group per worker: the folder goes to a group the policy shares with
    # the toolbox (what README says to do), not to one uid.
    os.chown(memory, 0, NOBODY)
    os.chmod(memory, 0o770)
    os.chown(memory / "dev-memory.db", 0, NOBODY)
    os.chmod(memory / "dev-memory.db", 0o660)
    policy = sandbox_tmp / "policy.yaml"
    policy.write_text(
        f"agents: [agents/sqlite-example.json]\nstate_dir: {sandbox_tmp / 'state'}\n"
        f"shared_groups: [{{gid: {NOBODY}, toolboxes: [sqlite-example/shared_working_memory]}}]\n"
    )
    async with Supervisor.open(policy) as sup:
        users = await sup.call("sqlite_analytics_query", {"sql": "SELECT count(*) FROM users WHERE active = 1"})
        assert users.status == "passed", users.data
        assert _data(users)["rows"] == [[3]]
        refused = await sup.call("sqlite_analytics_query", {"sql": "DELETE FROM events"})
        assert refused.status == "error" and "read-only" in (refused.data or "")
        note = await sup.call(
            "sqlite_shared_working_memory_query",
            {"sql": "INSERT INTO analysis_results (content) VALUES (?)", "params": ["found it"]},
        )
        assert note.status == "passed", note.data
        back = await sup.call("sqlite_shared_working_memory_query", {"sql": "SELECT content FROM analysis_results"})
        assert _data(back)["rows"] == [["found it"]]
