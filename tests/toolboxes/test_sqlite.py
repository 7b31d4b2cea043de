"""The SQLite toolbox on real databases, and its Landlock grants on a real kernel."""

from __future__ import annotations

import base64
import json
import os
import sqlite3
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from sandbox import READ, WRITE, FsRule
from supervisor.plan._sqlite_grants import sqlite_fs_rules
from toolboxes import CallContext, WorkerEnv
from toolboxes.sqlite import open_toolbox, parse_versioning
from toolboxes.sqlite._authorizer import classify
from toolboxes.sqlite._versions import scope_handle

if TYPE_CHECKING:
    from toolboxes import ToolResult


def make_db(path: Path, wal: bool = False) -> None:
    conn = sqlite3.connect(path, isolation_level=None)
    if wal:
        conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("CREATE TABLE users (id INTEGER PRIMARY KEY, name TEXT, active INT, photo BLOB)")
    conn.executemany(
        "INSERT INTO users (name, active, photo) VALUES (?, ?, ?)",
        [("ann", 1, b"\x00\x01"), ("bob", 0, None), ("cy", 1, None)],
    )
    conn.close()


def env(tmp: Path) -> WorkerEnv:
    state = tmp / "state"
    state.mkdir(exist_ok=True)
    return WorkerEnv(toolbox_name="t", workdir=str(tmp), state_dir=str(state), channel=None)  # type: ignore[arg-type]


def ctx(conv: str = "c1", turn: str = "t1", call_id: int = 1) -> CallContext:
    return CallContext(call_id=call_id, tool="", session_id="s1", conversation_id=conv, turn_id=turn)


def toolbox(tmp: Path, versioning: dict[str, Any], name: str = "db", **policy: Any) -> Any:
    return open_toolbox({"Name": name, "Description": "test db", "Versioning": versioning, "policy": policy}, env(tmp))


def q(tb: Any, sql: str, params: Any = None, c: CallContext | None = None, **extra: Any) -> ToolResult:
    args: dict[str, Any] = {"sql": sql, **extra}
    if params is not None:
        args["params"] = params
    return tb.call(tb.query_tool, args, c or ctx())


def count(path: Path) -> int:
    conn = sqlite3.connect(path)
    try:
        return conn.execute("SELECT count(*) FROM users").fetchone()[0]
    finally:
        conn.close()


# --- read-only -------------------------------------------------------------------------------------

DISGUISED_WRITES = [
    "INSERT INTO users (name) VALUES ('eve')",
    "insert into users (name) values ('eve')",
    "/* just a select */ INSERT INTO users (name) VALUES ('eve')",
    "-- select\nINSERT INTO users (name) VALUES ('eve')",
    "WITH x AS (SELECT 'eve' AS n) INSERT INTO users (name) SELECT n FROM x",
    "with x as (select 1) delete from users",
    "  update users set name = 'x'",
    "PRAGMA journal_mode=DELETE",
    "pragma user_version = 7",
    "CREATE TABLE evil (a)",
    "create temp table t (a)",
    "DROP TABLE users",
]


@pytest.mark.parametrize("sql", DISGUISED_WRITES)
def test_read_only_refuses_writes_however_disguised(sandbox_tmp: Path, sql: str) -> None:
    db = sandbox_tmp / "a.db"
    make_db(db, wal=True)
    tb = toolbox(sandbox_tmp, {"tag": "SqliteReadOnly", "path": str(db)})
    res = q(tb, sql)
    assert res.status == "error", res
    assert "read-only" in (res.summary or "")
    assert count(db) == 3
    conn = sqlite3.connect(db)
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert conn.execute("PRAGMA user_version").fetchone()[0] == 0
    conn.close()


@pytest.mark.parametrize(
    "sql",
    [
        "ATTACH DATABASE '{out}' AS x",
        "attach '{out}' as x",
        "VACUUM INTO '{out}'",
        "/* harmless */ vacuum into '{out}'",
    ],
)
def test_read_only_refuses_attach_and_vacuum_into(sandbox_tmp: Path, sql: str) -> None:
    db = sandbox_tmp / "a.db"
    make_db(db)
    out = sandbox_tmp / "copy.db"
    tb = toolbox(sandbox_tmp, {"tag": "SqliteReadOnly", "path": str(db)})
    res = q(tb, sql.format(out=out))
    assert res.status == "error"
    assert "ATTACH" in (res.summary or "")
    assert not out.exists()


def test_read_only_reads_and_declares_effect(sandbox_tmp: Path) -> None:
    db = sandbox_tmp / "a.db"
    make_db(db)
    tb = toolbox(sandbox_tmp, {"tag": "SqliteReadOnly", "path": str(db)})
    assert [t.name for t in tb.tools()] == ["sqlite_db_query"]
    res = q(tb, "SELECT name, photo FROM users WHERE active = :a ORDER BY id", {"a": 1})
    assert res.status == "passed", res
    data = res.structured
    assert data["columns"] == ["name", "photo"]
    assert data["rows"] == [["ann", {"base64": base64.b64encode(b"\x00\x01").decode()}], ["cy", None]]
    assert data["rowCount"] == 2
    assert isinstance(data["executionTime"], float)
    assert res.meta("state_effect") == "read"
    assert res.meta("resource_id") == "sqlite:db"
    res = q(tb, "SELECT * FROM pragma_table_info('users')")
    assert res.status == "passed"
    assert res.structured["rowCount"] == 4


def test_read_only_wal_reads_latest_committed_data(sandbox_tmp: Path) -> None:
    db = sandbox_tmp / "a.db"
    make_db(db, wal=True)
    writer = sqlite3.connect(db, isolation_level=None)
    writer.execute("PRAGMA wal_autocheckpoint=0")
    writer.execute("INSERT INTO users (name) VALUES ('dan')")
    assert os.path.getsize(str(db) + "-wal") > 0
    tb = toolbox(sandbox_tmp, {"tag": "SqliteReadOnly", "path": str(db)})
    res = q(tb, "SELECT count(*) FROM users")
    assert res.structured["rows"] == [[4]]
    writer.close()


# --- statement rules and limits --------------------------------------------------------------------


def test_one_statement_per_call_and_clear_errors(sandbox_tmp: Path) -> None:
    db = sandbox_tmp / "a.db"
    make_db(db)
    tb = toolbox(sandbox_tmp, {"tag": "SqliteReadWrite", "path": str(db)})
    res = q(tb, "SELECT 1; DELETE FROM users")
    assert res.status == "error"
    assert "exactly one SQL statement" in (res.summary or "")
    assert count(db) == 3
    res = q(tb, "SELEC 1")
    assert res.status == "failed"
    assert "syntax error" in (res.data or "")
    res = q(tb, "   ")
    assert res.status == "error"
    res = q(tb, "SELECT ?", [1, 2])
    assert res.status == "error"
    assert "placeholders" in (res.summary or "")
    res = q(tb, "SELECT ?", [[1]])
    assert res.status == "error"
    assert q(tb, "SELECT 1; -- trailing comment").status == "passed"


def test_row_cap_and_output_cap_set_truncated(sandbox_tmp: Path) -> None:
    db = sandbox_tmp / "a.db"
    make_db(db)
    tb = toolbox(sandbox_tmp, {"tag": "SqliteReadOnly", "path": str(db)}, max_rows=2)
    res = q(tb, "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n) SELECT i FROM n")
    assert res.status == "passed"
    assert res.truncated
    assert res.structured["rows"] == [[1], [2]]
    tb = toolbox(sandbox_tmp, {"tag": "SqliteReadOnly", "path": str(db)}, output_bytes=1000)
    res = q(
        tb, "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n LIMIT 500) SELECT printf('%050d', i) FROM n"
    )
    assert res.truncated
    assert 0 < res.structured["rowCount"] < 500
    assert len(res.data or "") < 2000


def test_locked_database_fails_after_busy_timeout(sandbox_tmp: Path) -> None:
    db = sandbox_tmp / "a.db"
    make_db(db)
    holder = sqlite3.connect(db, isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")
    tb = toolbox(sandbox_tmp, {"tag": "SqliteReadWrite", "path": str(db)}, busy_timeout_s=0.05)
    res = q(tb, "INSERT INTO users (name) VALUES ('x')")
    assert res.status == "failed"
    assert "locked" in (res.data or "")
    holder.execute("ROLLBACK")
    holder.close()
    assert q(tb, "INSERT INTO users (name) VALUES ('x')").status == "passed"


# --- read-write ------------------------------------------------------------------------------------


def test_read_write_works_and_reports_mutation(sandbox_tmp: Path) -> None:
    db = sandbox_tmp / "a.db"
    make_db(db)
    tb = toolbox(sandbox_tmp, {"tag": "SqliteNoVersioning", "path": str(db)})
    res = q(tb, "INSERT INTO users (name, photo) VALUES (?, ?)", ["dan", {"base64": "AAE="}])
    assert res.status == "passed", res
    assert res.structured["rowCount"] == 1
    assert res.meta("state_effect") == "mutate"
    assert count(db) == 4
    res = q(tb, "SELECT photo FROM users WHERE name = 'dan'")
    assert res.structured["rows"] == [[{"base64": "AAE="}]]
    assert res.meta("state_effect") == "read"
    assert q(tb, "CREATE TABLE notes (t TEXT)").meta("state_effect") == "mutate"
    assert q(tb, "ATTACH ':memory:' AS m").status == "error"
    assert q(tb, "VACUUM").status == "passed"


def test_read_write_creates_a_missing_database(sandbox_tmp: Path) -> None:
    db = sandbox_tmp / "memory.db"
    tb = toolbox(sandbox_tmp, {"tag": "SqliteReadWrite", "path": str(db)})
    assert q(tb, "CREATE TABLE t (a)").status == "passed"
    assert db.exists()


def test_read_only_missing_database_fails_clearly(sandbox_tmp: Path) -> None:
    tb = toolbox(sandbox_tmp, {"tag": "SqliteReadOnly", "path": str(sandbox_tmp / "none.db")})
    res = q(tb, "SELECT 1")
    assert res.status == "failed"
    assert "cannot open the database none.db" in (res.data or "")
    assert not (sandbox_tmp / "none.db").exists()


# --- versioned -------------------------------------------------------------------------------------


def test_versioned_writes_go_to_a_snapshot_and_promote_copies_back(sandbox_tmp: Path) -> None:
    db = sandbox_tmp / "base.db"
    make_db(db, wal=True)
    root = sandbox_tmp / "versions"
    tb = toolbox(
        sandbox_tmp, {"tag": "SqliteVersioned", "shared": "conversation", "storageRoot": str(root), "basePath": str(db)}
    )
    assert [t.name for t in tb.tools()] == ["sqlite_db_query", "sqlite_db_promote"]
    before = db.read_bytes()
    res = q(tb, "SELECT count(*) FROM users")
    assert res.structured["rows"] == [[3]]
    assert "versionHandle" not in res.structured
    assert not list(root.iterdir()), "a read must not make a snapshot"
    res = q(tb, "INSERT INTO users (name) VALUES ('dan')")
    assert res.status == "passed", res
    handle = res.structured["versionHandle"]
    assert handle.startswith("conversation-")
    assert res.meta("state_effect") == "mutate"
    assert db.read_bytes() == before
    assert count(db) == 3
    # the same conversation reads its snapshot; another one still sees the base
    assert q(tb, "SELECT count(*) FROM users").structured["rows"] == [[4]]
    assert q(tb, "SELECT count(*) FROM users", c=ctx(conv="c2")).structured["rows"] == [[3]]
    res = q(tb, "INSERT INTO users (name) VALUES ('eli')")
    assert res.structured["versionHandle"] == handle
    # an explicit handle works from another conversation; an unknown one is an error
    assert q(tb, "SELECT count(*) FROM users", c=ctx(conv="c2"), versionHandle=handle).structured["rows"] == [[5]]
    bad = q(tb, "SELECT 1", versionHandle="conversation-" + "0" * 24)
    assert bad.status == "error"
    assert "unknown versionHandle" in (bad.summary or "")
    assert tb.call(tb.promote_tool, {"versionHandle": "../../etc/passwd"}, ctx()).status == "error"
    res = tb.call(tb.promote_tool, {"versionHandle": handle}, ctx())
    assert res.status == "passed", res
    assert res.meta("state_effect") == "mutate"
    assert count(db) == 5
    assert not [p for p in os.listdir(sandbox_tmp) if p.endswith(".tmp")]


def test_versioned_tool_call_scope_snapshots_every_write(sandbox_tmp: Path) -> None:
    db = sandbox_tmp / "base.db"
    make_db(db)
    tb = toolbox(sandbox_tmp, {"tag": "SqliteVersioned", "shared": "tool-call", "basePath": str(db)})
    h1 = q(tb, "DELETE FROM users", c=ctx(call_id=1)).structured["versionHandle"]
    h2 = q(tb, "DELETE FROM users WHERE id = 1", c=ctx(call_id=2)).structured["versionHandle"]
    assert h1 != h2
    assert q(tb, "SELECT count(*) FROM users", versionHandle=h1).structured["rows"] == [[0]]
    assert q(tb, "SELECT count(*) FROM users", versionHandle=h2).structured["rows"] == [[2]]
    assert count(db) == 3


def test_scope_handles_are_keyed_on_the_call_ids() -> None:
    a, _ = scope_handle("turn", ctx("c", "t1"))
    b, _ = scope_handle("turn", ctx("c", "t2"))
    c, _ = scope_handle("turn", ctx("c", "t1", call_id=9))
    assert a is not None
    assert a != b
    assert a == c
    assert scope_handle("global", ctx("x"))[0] == scope_handle("global", ctx("y"))[0]
    handle, why = scope_handle("conversation", ctx(conv=""))
    assert handle is None
    assert "conversation id" in (why or "")


def test_parse_versioning_refuses_bad_config() -> None:
    with pytest.raises(ValueError, match=r"Versioning\.tag"):
        parse_versioning({"tag": "SqliteMaybe", "path": "/x.db"})
    with pytest.raises(ValueError, match="absolute"):
        parse_versioning({"tag": "SqliteReadOnly", "path": "x.db"})
    with pytest.raises(ValueError, match="shared"):
        parse_versioning({"tag": "SqliteVersioned", "shared": "weekly", "basePath": "/x.db"})
    assert parse_versioning({"tag": "SqliteReadWrite", "contents": {"path": "/x.db"}})["mode"] == "rw"


# --- authorizer (pure) -----------------------------------------------------------------------------


def test_classify_is_decided_by_action_not_text() -> None:
    assert classify(sqlite3.SQLITE_SELECT, None, None, None)[0] == "read"
    assert classify(sqlite3.SQLITE_INSERT, "users", None, "main")[0] == "write"
    assert classify(sqlite3.SQLITE_ATTACH, "/tmp/x.db", None, None)[0] == "deny"
    assert classify(sqlite3.SQLITE_ATTACH, "", None, None)[0] == "write"
    assert classify(sqlite3.SQLITE_PRAGMA, "journal_mode", None, None)[0] == "read"
    assert classify(sqlite3.SQLITE_PRAGMA, "journal_mode", "delete", None)[0] == "write"
    assert classify(sqlite3.SQLITE_PRAGMA, "table_info", "users", None)[0] == "read"
    assert classify(sqlite3.SQLITE_PRAGMA, "writable_schema", "1", None)[0] == "deny"
    assert classify(99999, None, None, None)[0] == "write"


# --- kernel grants ---------------------------------------------------------------------------------


def test_grants_state_each_mode() -> None:
    present = {"/d/a.db-wal", "/d/a.db-shm"}
    assert sqlite_fs_rules({"tag": "SqliteReadOnly", "path": "/d/a.db"}, present.__contains__) == [
        FsRule("/d/a.db", READ),
        FsRule("/d/a.db-wal", READ),
        FsRule("/d/a.db-shm", READ),
    ]
    assert sqlite_fs_rules({"tag": "SqliteReadOnly", "path": "/d/a.db"}, lambda p: False) == [FsRule("/d/a.db", READ)]
    assert sqlite_fs_rules({"tag": "SqliteReadWrite", "path": "/d/a.db"}) == [FsRule("/d", WRITE)]
    assert sqlite_fs_rules(
        {"tag": "SqliteVersioned", "shared": "turn", "storageRoot": "/v", "basePath": "/d/a.db"}
    ) == [FsRule("/d", WRITE), FsRule("/v", WRITE)]
    with pytest.raises(ValueError, match="absolute"):
        sqlite_fs_rules({"tag": "SqliteReadOnly", "path": "a.db"})


def _confined_child(rules: list[FsRule], sql_calls: list[tuple[str, dict[str, Any]]]) -> list[dict[str, Any]]:
    """Fork; in the child apply Landlock (system paths read-only + ``rules``) and run toolbox calls."""
    from sandbox import landlock_abi
    from sandbox._landlock import apply_ruleset, plan_ruleset

    abi = landlock_abi()
    if abi < 1:
        pytest.skip("Landlock is not available on this kernel")
    system = [FsRule(p, READ) for p in ("/usr", "/lib", "/lib64", "/etc", "/opt", "/proc", "/dev") if os.path.exists(p)]
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # child: never return into pytest
        try:
            os.close(r)
            import prctl

            prctl.set_no_new_privs(1)
            apply_ruleset(plan_ruleset([*system, *rules], abi))
            out = []
            for versioning, args in sql_calls:
                tb = open_toolbox({"Name": "k", "Versioning": versioning}, WorkerEnv("k", "/", "/", None))  # type: ignore[arg-type]
                res = tb.call(tb.query_tool, args, ctx())
                out.append({"status": res.status, "summary": res.summary, "data": res.data})
            conn_ok = True
            try:
                raw = sqlite3.connect(f"file:{versioning['path']}?mode=rw", uri=True)
                raw.execute("INSERT INTO users (name) VALUES ('kernel?')")
                raw.commit()
            except sqlite3.Error as exc:
                conn_ok = False
                out.append({"raw_write": str(exc)})
            out.append({"raw_write_ok": conn_ok})
            try:
                with open(os.path.join(os.path.dirname(versioning["path"]), "other.txt")) as f:
                    out.append({"outside_read": f.read()})
            except PermissionError:
                out.append({"outside_read": None})
            os.write(w, json.dumps(out).encode())
        finally:
            os._exit(0)
    os.close(w)
    chunks = []
    while chunk := os.read(r, 65536):
        chunks.append(chunk)
    os.close(r)
    os.waitpid(pid, 0)
    return json.loads(b"".join(chunks))


@pytest.mark.root
@pytest.mark.parametrize("keep_writer_open", [True, False])
def test_read_only_under_landlock_reads_wal_and_the_kernel_refuses_writes(
    sandbox_tmp: Path, keep_writer_open: bool
) -> None:
    db = sandbox_tmp / "a.db"
    make_db(db, wal=True)
    writer = sqlite3.connect(db, isolation_level=None)
    writer.execute("PRAGMA wal_autocheckpoint=0")
    writer.execute("INSERT INTO users (name) VALUES ('dan')")
    if not keep_writer_open:
        writer.close()
        assert not os.path.exists(str(db) + "-wal")
    (sandbox_tmp / "other.txt").write_text("not granted")
    versioning = {"tag": "SqliteReadOnly", "path": str(db)}
    out = _confined_child(
        sqlite_fs_rules(versioning),
        [
            (versioning, {"sql": "SELECT count(*) FROM users"}),
            (versioning, {"sql": "INSERT INTO users (name) VALUES ('eve')"}),
        ],
    )
    read, write, *raw = out
    assert raw[-1] == {"outside_read": None}, "the child was not confined"
    assert read["status"] == "passed", read
    assert json.loads(read["data"])["rows"] == [[4]]
    assert write["status"] == "error"
    assert raw[-2] == {"raw_write_ok": False}, raw
    if keep_writer_open:
        writer.close()
    assert count(db) == 4


# --- the example agent file --------------------------------------------------------------------------------------


def test_example_agent_toolboxes_work_on_the_generated_databases(sandbox_tmp: Path) -> None:
    repo = Path(__file__).resolve().parents[2]
    import subprocess
    import sys

    subprocess.run(
        [sys.executable, str(repo / "scripts" / "make_example_dbs.py"), str(sandbox_tmp / "sqlite-example")],
        check=True,
        capture_output=True,
    )
    agent = json.loads((repo / "policies" / "agents" / "sqlite-example.json").read_text())
    boxes = {b["contents"]["Name"]: b["contents"] for b in agent["contents"]["builtinToolboxes"]}
    assert set(boxes) == {"shared_working_memory", "analytics"}
    opened = {}
    for name, contents in boxes.items():
        versioning = dict(contents["Versioning"])
        versioning["path"] = os.path.normpath(os.path.join(sandbox_tmp, versioning["path"]))
        opened[name] = toolbox(sandbox_tmp, versioning, name=name)
    memory, analytics = opened["shared_working_memory"], opened["analytics"]
    assert memory.query_tool == "sqlite_shared_working_memory_query"
    res = q(memory, "INSERT INTO analysis_results (content) VALUES (?)", ["found it"])
    assert res.status == "passed", res
    assert q(analytics, "SELECT count(*) FROM users WHERE active = 1").structured["rows"] == [[3]]
    assert q(analytics, "DELETE FROM events").status == "error"
