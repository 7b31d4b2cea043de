"""The Landlock compiler: the pure table (fake probe), region algebra, then the real kernel in forked children.

The property tests build random trees and predicates, compile, apply the rules with ``sandbox._landlock`` in a
forked child and try every path there: for exact compilations "the predicate allows it" equals "the confined
process can open it" (read; and write and create in write mode); for inexact ones the kernel allows a superset,
and the in-worker check run inside the confined child gives exactly what it gives outside.
"""

from __future__ import annotations

import errno
import json
import os
import shutil
import tempfile
import traceback
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sandbox import READ, WRITE, FsRule, PathPredicate, compile_predicate, evaluate, landlock_abi, parse_predicate
from sandbox._fs_compile import FsCompilation, PathKind, UnboundedPredicateError, probe_path
from sandbox._fs_regions import TOP, Region, bounds, contains, covered, intersect
from sandbox._landlock import apply_ruleset, plan_ruleset
from sandbox._predicates import (
    AlwaysAllow,
    And,
    ChildOf,
    DirectoryExactly,
    DirectoryRecursive,
    DirectoryShallow,
    FileExactly,
    Not,
)
from sandbox._privileges import set_no_new_privs

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator


def T(tag: str, contents: Any = None) -> dict[str, Any]:
    return {"tag": tag, "contents": contents}


def fake(dirs: tuple[str, ...] = (), files: tuple[str, ...] = ()) -> Callable[[str], PathKind]:
    """A probe over an imaginary filesystem: the listed dirs (and their ancestors) and files exist."""
    kinds: dict[str, PathKind] = {"/": "dir"}
    for d in dirs:
        while d != "/":
            kinds.setdefault(d, "dir")
            d = os.path.dirname(d)
    for f in files:
        kinds[f] = "file"
    return lambda path: kinds.get(path, "missing")


FS = fake(dirs=("/p/src/deep", "/p/dist", "/q"), files=("/p/README.md", "/p/src/a.py"))


def comp(data: dict[str, Any], mode: str = READ, probe: Callable[[str], PathKind] = FS) -> FsCompilation:
    return compile_predicate(parse_predicate(data, "/p"), mode, probe=probe)


def rules(c: FsCompilation) -> list[tuple[str, str]]:
    return [(r.path, r.mode) for r in c.rules]


# --- the table, one constructor at a time


@pytest.mark.parametrize("mode", [READ, WRITE])
def test_directory_recursive_is_one_exact_rule(mode: str) -> None:
    c = comp(T("DirectoryRecursive", "./src"), mode)
    assert rules(c) == [("/p/src", mode)]
    assert c.exact
    assert c.residual == ""
    assert not c.unbounded


@pytest.mark.parametrize("mode", [READ, WRITE])
def test_existing_file_exactly_is_an_exact_file_rule(mode: str) -> None:
    c = comp(T("FileExactly", "./README.md"), mode)
    assert rules(c) == [("/p/README.md", mode)]
    assert c.exact


def test_seed_union_of_trees_and_files_is_exact() -> None:
    c = comp(T("Any", [T("DirectoryRecursive", "./src"), T("FileExactly", "./README.md")]), WRITE)
    assert rules(c) == [("/p/README.md", WRITE), ("/p/src", WRITE)]
    assert c.exact
    assert [r.describe() for r in c.reports] == ["write /p/README.md  (exact)", "write /p/src  (exact)"]


def test_file_exactly_that_does_not_exist_needs_its_parent_in_write_mode() -> None:
    c = comp(T("FileExactly", "./out.json"), WRITE)
    assert rules(c) == [("/p", WRITE)]
    assert not c.exact
    assert "/p/out.json does not exist yet" in c.residual
    assert "anything in /p" in c.residual


def test_file_exactly_that_does_not_exist_gets_no_rule_in_read_mode() -> None:
    c = comp(T("FileExactly", "./out.json"), READ)
    assert rules(c) == []
    assert c.missing == ("/p/out.json",)
    assert c.exact  # nothing is granted, so nothing beyond the predicate


def test_new_file_under_a_missing_parent_is_missing_even_in_write_mode() -> None:
    c = comp(T("FileExactly", "./nodir/out.json"), WRITE)
    assert rules(c) == []
    assert c.missing == ("/p/nodir/out.json",)


def test_new_file_inside_a_granted_tree_stays_exact() -> None:
    c = comp(T("Or", [T("DirectoryRecursive", "."), T("FileExactly", "./out.json")]), WRITE)
    assert rules(c) == [("/p", WRITE)]
    assert c.exact


@pytest.mark.parametrize("mode", [READ, WRITE])
def test_directory_exactly_is_a_read_rule_and_inexact(mode: str) -> None:
    c = comp(T("DirectoryExactly", "./src"), mode)
    assert rules(c) == [("/p/src", READ)]  # listing a directory never needs write
    assert not c.exact
    assert "read beneath /p/src" in c.residual


@pytest.mark.parametrize("mode", [READ, WRITE])
def test_child_of_is_inexact_because_the_kernel_also_lists_the_directory(mode: str) -> None:
    c = comp(T("ChildOf", "./src"), mode)
    assert rules(c) == [("/p/src", mode)]
    assert not c.exact
    assert "list /p/src itself" in c.residual


@pytest.mark.parametrize("mode", [READ, WRITE])
def test_child_of_with_directory_exactly_is_the_tree_and_exact(mode: str) -> None:
    c = comp(T("Or", [T("ChildOf", "./src"), T("DirectoryExactly", "./src")]), mode)
    assert rules(c) == [("/p/src", mode)]
    assert c.exact


def test_directory_shallow_is_covered_by_its_tree_and_inexact() -> None:
    c = comp(T("DirectoryShallow", "./src"), WRITE)
    assert rules(c) == [("/p/src", WRITE)]  # the directory itself (listing it) and its entries, merged
    assert not c.exact
    assert "not only its direct entries" in c.residual
    assert set(c.reports[0].sources) == {"/p/src", "the direct entries of /p/src"}


def test_child_of_a_file_grants_nothing_and_shallow_of_a_file_the_file() -> None:
    c = comp(T("ChildOf", "./README.md"), WRITE)
    assert rules(c) == []
    assert c.missing == ()
    c = comp(T("Any", [T("ChildOf", "./README.md"), T("DirectoryShallow", "./README.md")]), WRITE)
    assert rules(c) == [("/p/README.md", WRITE)]  # DirectoryShallow p allows p itself; nothing is beneath a file
    assert c.exact


@pytest.mark.parametrize(
    "narrow",
    [T("FilePattern", "*.py"), T("FileExtension", ["py"]), T("FileSizeLessThan", 1000)],
)
def test_name_and_size_predicates_narrow_a_tree_inexactly(narrow: dict[str, Any]) -> None:
    c = comp(T("And", [T("DirectoryRecursive", "./src"), narrow]), READ)
    assert rules(c) == [("/p/src", READ)]
    assert not c.exact
    assert "narrowed by" in c.residual
    assert narrow["tag"] in c.residual


def test_seed_and_of_three_operands_compiles_as_all() -> None:
    three = [T("DirectoryRecursive", "./src"), T("FileExtension", ["hs", "lhs"]), T("FileSizeLessThan", 1048576)]
    c = comp(T("And", three), READ)
    assert (rules(c), c.exact, c.residual) == (lambda a: (rules(a), a.exact, a.residual))(comp(T("All", three)))
    assert rules(c) == [("/p/src", READ)]
    assert not c.exact and "FileExtension" in c.residual and "FileSizeLessThan" in c.residual
    either = comp(
        T(
            "Or",
            [T("DirectoryRecursive", "./src/deep"), T("FileExactly", "./README.md"), T("DirectoryRecursive", "/q")],
        ),
        WRITE,
    )
    assert rules(either) == [("/p/README.md", WRITE), ("/p/src/deep", WRITE), ("/q", WRITE)]
    assert either.exact


def test_and_of_a_tree_and_a_subtree_is_the_subtree_exactly() -> None:
    c = comp(T("All", [T("DirectoryRecursive", "."), T("DirectoryRecursive", "./src/deep")]), WRITE)
    assert rules(c) == [("/p/src/deep", WRITE)]
    assert c.exact


def test_and_of_disjoint_trees_grants_nothing() -> None:
    c = comp(T("And", [T("DirectoryRecursive", "./src"), T("DirectoryRecursive", "/q")]), WRITE)
    assert rules(c) == []
    assert c.exact


def test_tree_minus_a_disjoint_tree_is_exact_and_minus_a_subtree_is_not() -> None:
    disjoint = comp(T("And", [T("DirectoryRecursive", "./src"), T("Not", T("DirectoryRecursive", "./dist"))]))
    assert rules(disjoint) == [("/p/src", READ)]
    assert disjoint.exact
    seed = comp(T("And", [T("DirectoryRecursive", "."), T("Not", T("DirectoryRecursive", "./dist"))]))
    assert rules(seed) == [("/p", READ)]
    assert not seed.exact
    assert "Not(DirectoryRecursive(/p/dist))" in seed.residual


def test_tree_minus_itself_grants_nothing() -> None:
    c = comp(T("And", [T("DirectoryRecursive", "./src"), T("Not", T("DirectoryRecursive", "."))]))
    assert rules(c) == []
    assert c.exact


def test_inexact_part_inside_an_exact_tree_does_not_make_it_inexact() -> None:
    c = comp(
        T(
            "Or",
            [
                T("DirectoryRecursive", "./src"),
                T("And", [T("DirectoryRecursive", "./src/deep"), T("FilePattern", "*.md")]),
            ],
        )
    )
    assert rules(c) == [("/p/src", READ)]
    assert c.exact


def test_rules_are_merged_and_nested_ones_dropped() -> None:
    c = comp(
        T(
            "Any",
            [
                T("DirectoryRecursive", "."),
                T("DirectoryRecursive", "./src"),
                T("FileExactly", "./README.md"),
                T("DirectoryExactly", "./src/deep"),
            ],
        ),
        WRITE,
    )
    assert rules(c) == [("/p", WRITE)]
    assert c.exact
    assert c.reports[0].sources == ("/p and everything beneath",)  # the others lie inside it
    nested = comp(T("Any", [T("DirectoryShallow", "."), T("DirectoryRecursive", "./src")]), WRITE)
    assert rules(nested) == [("/p", WRITE)]  # /p/src is not inside the shallow region, but its rule is
    assert nested.reports[0].sources == ("/p", "the direct entries of /p", "/p/src and everything beneath")
    assert not nested.exact


def test_a_write_rule_beneath_a_read_rule_is_kept() -> None:
    c = comp(T("Any", [T("DirectoryExactly", "."), T("DirectoryRecursive", "./src")]), WRITE)
    assert rules(c) == [("/p", READ), ("/p/src", WRITE)]
    assert not c.exact  # DirectoryExactly /p lets the kernel read all of /p


@pytest.mark.parametrize("mode", [READ, WRITE])
def test_always_deny_grants_nothing(mode: str) -> None:
    c = comp(T("AlwaysDeny"), mode)
    assert rules(c) == []
    assert c.exact
    assert c.describe() == ["(no rules: nothing is granted)"]


def test_always_allow_read_is_root_read_only_and_flagged_unbounded() -> None:
    c = comp(T("AlwaysAllow"), READ)
    assert rules(c) == [("/", READ)]
    assert c.exact
    assert c.unbounded
    with pytest.raises(UnboundedPredicateError, match="whole filesystem"):
        c.require_bounded()


def test_always_allow_never_compiles_to_root_read_write() -> None:
    c = comp(T("AlwaysAllow"), WRITE)
    assert rules(c) == [("/", READ)]
    assert c.unbounded
    assert not c.exact
    assert "never gets / read-write" in c.residual


@pytest.mark.parametrize(
    "data",
    [
        T("DirectoryRecursive", "/"),
        T("ChildOf", "/"),
        T("DirectoryShallow", "/"),
        T("FilePattern", "*.md"),
        T("Not", T("DirectoryRecursive", "./dist")),
        T("FileExactly", "/nothing-here"),
    ],
)
def test_anything_reaching_root_is_unbounded_and_never_root_write(data: dict[str, Any]) -> None:
    c = comp(data, WRITE)
    assert ("/", WRITE) not in rules(c)
    assert c.unbounded
    with pytest.raises(UnboundedPredicateError):
        c.require_bounded()


def test_bounded_parts_keep_write_next_to_an_unbounded_read() -> None:
    c = comp(T("Or", [T("DirectoryRecursive", "./src"), T("FilePattern", "*.md")]), WRITE)
    assert rules(c) == [("/", READ), ("/p/src", WRITE)]
    assert c.unbounded


def test_missing_directories_get_no_rule_and_are_listed() -> None:
    c = comp(T("Any", [T("DirectoryRecursive", "./build"), T("DirectoryRecursive", "./src")]), WRITE)
    assert rules(c) == [("/p/src", WRITE)]
    assert c.missing == ("/p/build",)
    assert c.exact
    assert c.describe()[-1].startswith("missing /p/build")


def test_bounded_compilations_pass_require_bounded() -> None:
    comp(T("DirectoryRecursive", "./src"), WRITE).require_bounded()


def test_unknown_mode_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown access mode 'rw'"):
        compile_predicate(AlwaysAllow(), "rw")


def test_probe_path_counts_symlinks_and_non_canonical_paths_as_missing(tmp_path: Any) -> None:
    base = os.path.realpath(tmp_path)
    os.mkdir(f"{base}/d")
    open(f"{base}/d/f", "w").close()
    os.symlink(f"{base}/d", f"{base}/link")
    assert probe_path(f"{base}/d") == "dir"
    assert probe_path(f"{base}/d/f") == "file"
    assert probe_path(f"{base}/nope") == "missing"
    assert probe_path(f"{base}/link") == "missing"
    assert probe_path(f"{base}/link/f") == "missing"
    # a predicate path that became a symlink after load gets no rule: it would follow the link
    c = compile_predicate(DirectoryRecursive(f"{base}/link"), WRITE)
    assert c.rules == ()
    assert c.missing == (f"{base}/link",)


# --- region algebra and the bounds, against evaluation (pure: paths under a root that does not exist)

NX = "/nonexistent-fs-compile-root"
PARTS = ("a", "b")
UNIVERSE = sorted(
    {"/", NX}
    | {f"{NX}/{x}" for x in PARTS}
    | {f"{NX}/{x}/{y}" for x in PARTS for y in PARTS}
    | {f"{NX}/{x}/{y}/{z}" for x in PARTS for y in PARTS for z in PARTS}
)
PATHS = st.sampled_from([p for p in UNIVERSE if p.count("/") <= 3])
REGIONS = st.one_of(st.just(TOP), st.builds(Region, st.sampled_from(["exact", "tree", "beneath", "shallow"]), PATHS))


def region_predicate(r: Region) -> PathPredicate:
    return {
        "top": lambda: AlwaysAllow(),
        "exact": lambda: FileExactly(r.path),
        "tree": lambda: DirectoryRecursive(r.path),
        "beneath": lambda: ChildOf(r.path),
        "shallow": lambda: And(DirectoryShallow(r.path), Not(DirectoryExactly(r.path))),  # the entries only
    }[r.kind]()


def member(r: Region, path: str) -> bool:
    return evaluate(region_predicate(r), path).allowed


@given(REGIONS, REGIONS)
@settings(max_examples=300, database=None, deadline=None)
def test_contains_and_intersect_agree_with_membership(a: Region, b: Region) -> None:
    r = intersect(a, b)
    for path in UNIVERSE:
        if contains(a, b) and member(b, path):
            assert member(a, path)
        both = member(a, path) and member(b, path)
        assert (r is not None and member(r, path)) == both


@given(REGIONS, st.lists(REGIONS, max_size=4))
@settings(max_examples=300, database=None, deadline=None)
def test_covered_is_sound(r: Region, regions: list[Region]) -> None:
    if covered(r, regions):
        for path in UNIVERSE:
            if member(r, path):
                assert any(member(s, path) for s in regions)


def predicates_over(paths: list[str]) -> st.SearchStrategy[dict[str, Any]]:
    path = st.sampled_from(paths)
    atoms = st.one_of(
        st.builds(
            T,
            st.sampled_from(["FileExactly", "DirectoryExactly", "DirectoryRecursive", "ChildOf", "DirectoryShallow"]),
            path,
        ),
        st.builds(T, st.just("FilePattern"), st.sampled_from(["*.md", "?", "*", "[ab]*", "n*"])),
        st.builds(T, st.just("FileExtension"), st.sampled_from([["md"], ["txt", "md"]])),
        st.builds(T, st.just("FileSizeLessThan"), st.integers(0, 30)),
        st.sampled_from([{"tag": "AlwaysAllow"}, {"tag": "AlwaysDeny"}]),
    )
    return st.recursive(
        atoms,
        lambda inner: st.one_of(
            st.builds(T, st.just("Not"), inner),
            st.builds(T, st.sampled_from(["And", "Or"]), st.lists(inner, min_size=2, max_size=2)),
            st.builds(T, st.sampled_from(["Any", "All"]), st.lists(inner, max_size=3)),
        ),
        max_leaves=6,
    )


@given(predicates_over([p for p in UNIVERSE if p.count("/") <= 2]))
@settings(max_examples=300, database=None, deadline=None)
def test_bounds_enclose_the_predicate(data: dict[str, Any]) -> None:
    p = parse_predicate(data, NX)
    b = bounds(p)
    for path in UNIVERSE:
        allowed = evaluate(p, path).allowed
        if any(member(r, path) for r in b.lower):
            assert allowed, path
        if allowed:
            assert any(member(r, path) for r in b.upper), path


# --- the real kernel

needs_landlock = pytest.mark.skipif(landlock_abi() < 1, reason="this kernel has no Landlock")

Probe = tuple[str, str]  # (op, path): op is read-dir, read-file, write or create


def _attempt(op: str, path: str) -> str:
    flags = {
        "read-dir": os.O_RDONLY | os.O_DIRECTORY,
        "read-file": os.O_RDONLY,
        "write": os.O_WRONLY,
        "create": os.O_WRONLY | os.O_CREAT,  # no O_EXCL: a dangling symlink must be followed
    }[op]
    try:
        os.close(os.open(path, flags | os.O_CLOEXEC, 0o644))
    except PermissionError:
        return "denied"
    except OSError as exc:
        return errno.errorcode.get(exc.errno or 0, str(exc.errno))
    return "ok"


def confined_attempts(rules: tuple[FsRule, ...], probes: list[Probe], predicate: PathPredicate) -> dict[str, Any]:
    """In a forked child: apply ``rules`` with Landlock, evaluate ``predicate`` on every probe, then try each.

    Returns ``{"kernel": [ok/denied/errno...], "check": [bool...]}`` read back over a pipe.
    """
    plan = plan_ruleset(rules, landlock_abi())
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - child
        status = 70
        try:
            os.close(r)
            set_no_new_privs()
            apply_ruleset(plan)
            check = [evaluate(predicate, path, for_write=op in ("write", "create")).allowed for op, path in probes]
            kernel = [_attempt(op, path) for op, path in probes]
            os.write(w, json.dumps({"kernel": kernel, "check": check}).encode())
            status = 0
        except BaseException:
            traceback.print_exc()
        finally:
            os._exit(status)
    os.close(w)
    chunks = []
    while chunk := os.read(r, 65536):
        chunks.append(chunk)
    os.close(r)
    _, wstatus = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(wstatus) == 0, "the confined child failed"
    return json.loads(b"".join(chunks))


NAMES = ("a", "b", "n.md", "t.txt")


@contextmanager
def built_tree(entries: list[tuple[list[str], bool, int]], links: list[tuple[str, int]]) -> Iterator[dict[str, Any]]:
    """Build ``R/t`` (the tree) and ``R/o`` (outside) from hypothesis data; yield the paths by kind."""
    root = os.path.realpath(tempfile.mkdtemp(prefix="fs-compile-"))
    try:
        t, o = f"{root}/t", f"{root}/o"
        os.makedirs(f"{o}/sub")
        with open(f"{o}/secret", "w") as f:
            f.write("s")
        os.mkdir(t)
        dirs, files = [t], []
        for parts, is_dir, size in entries:
            path = t
            for i, part in enumerate(parts):
                path = f"{path}/{part}"
                last = i == len(parts) - 1
                if os.path.isfile(path) or (os.path.isdir(path) and last and not is_dir):
                    break
                if os.path.isdir(path):
                    continue
                if last and not is_dir:
                    with open(path, "wb") as f:
                        f.write(b"x" * size)
                    files.append(path)
                else:
                    os.mkdir(path)
                    dirs.append(path)
        targets = [*dirs, *files, f"{o}/secret", o]
        link_paths = []
        for k, (name, index) in enumerate(links):
            link = f"{t}/l{k}-{name}"
            target = targets[index] if index < len(targets) else f"{o}/missing-{k}"
            os.symlink(target, link)
            link_paths.append(link)
        yield {"root": root, "t": t, "o": o, "dirs": dirs, "files": files, "links": link_paths}
    finally:
        shutil.rmtree(root, ignore_errors=True)


def probes_for(tree: dict[str, Any]) -> list[Probe]:
    """Read every path in and around the tree; write every file; create a new file in every directory."""
    o = tree["o"]
    existing = [*tree["dirs"], *tree["files"], *tree["links"], tree["root"], o, f"{o}/secret", f"{o}/sub"]
    existing += [f"{d}/../{os.path.basename(x)}" for d in tree["dirs"][1:3] for x in tree["files"][:2]]
    existing += [f"{link}/.." for link in tree["links"] if os.path.isdir(link)]
    probes: list[Probe] = []
    for path in existing:
        if os.path.isdir(path):
            probes.append(("read-dir", path))
        elif os.path.isfile(path):
            probes.append(("read-file", path))
            probes.append(("write", path))
    for i, d in enumerate([*tree["dirs"], o]):
        probes.append(("create", f"{d}/new-{i}.md"))
    probes += [("create", f"{d}/fresh.md") for d in tree["dirs"][:3]]  # named by FileExactly in any_predicates
    probes += [("create", link) for link in tree["links"] if not os.path.exists(link)]  # dangling: lands outside
    return probes


def check_against_kernel(tree: dict[str, Any], data: dict[str, Any], mode: str) -> FsCompilation:
    predicate = parse_predicate(data, tree["t"])
    c = compile_predicate(predicate, mode)
    probes = probes_for(tree)
    expected = [evaluate(predicate, path, for_write=op in ("write", "create")).allowed for op, path in probes]
    got = confined_attempts(c.rules, probes, predicate)
    assert got["check"] == expected, "the in-worker check differs inside the confined process"
    # a predicate path that does not exist gets no rule (docs/FILES.md, "Paths that do not exist"): the kernel
    # denies it and what is beneath it until restart; only a new FileExactly/DirectoryExactly in write mode
    # whose parent exists gets a rule (its parent's)
    denied_until_restart = [
        r.path
        for r in bounds(predicate).upper
        if r.path in c.missing and (r.kind != "exact" or mode == READ or probe_path(os.path.dirname(r.path)) != "dir")
    ]
    for (op, path), want, kernel in zip(probes, expected, got["kernel"], strict=True):
        assert kernel in ("ok", "denied"), f"{op} {path}: unexpected {kernel}"
        opened = kernel == "ok"
        where = (
            f"{op} {path}: predicate {want}, kernel {kernel}, rules {c.rules}, residual {c.residual!r}, "
            f"missing {c.missing}"
        )
        writes = op in ("write", "create")
        target = os.path.realpath(path)  # where the kernel lands, as the check judges it
        may_deny = any(target == m or target.startswith(m + "/") for m in denied_until_restart)
        if mode == READ and writes:
            assert not opened, where  # read mode never lets anything be written
        elif writes and c.unbounded:
            # / is read-only: no write outside the bounded write rules; inside them the kernel allows a superset,
            # and more than the predicate only under a rule reported inexact
            here = [
                rep
                for rep in c.reports
                if rep.rule.mode == WRITE
                and rep.rule.path != "/"
                and (target == rep.rule.path or target.startswith(rep.rule.path + "/"))
            ]
            assert here or not opened, where
            assert not here or opened or not want or may_deny, where
            assert not opened or want or not all(rep.exact for rep in here), where
        elif c.exact:
            assert opened == want or (may_deny and not opened), where
        else:
            assert opened or not want or may_deny, where  # inexact: the kernel allows a superset
    return c


TREES = st.tuples(
    st.lists(
        st.tuples(st.lists(st.sampled_from(NAMES), min_size=1, max_size=3), st.booleans(), st.integers(0, 30)),
        min_size=1,
        max_size=8,
    ),
    st.lists(st.tuples(st.sampled_from(NAMES), st.integers(0, 12)), max_size=3),
)
# Derandomized: the same 40 examples every run, so CI is repeatable. The one full-suite failure was the oracle's
# (unbounded write mode with an inexact write rule; a missing DirectoryRecursive root): random hunts of 5000 examples
# hit it on every seed; with the oracle fixed, about 23,000 random examples per test (some under CPU load) passed.
KERNEL_SETTINGS = settings(
    max_examples=40, database=None, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow]
)


def rel(tree: dict[str, Any], path: str) -> str:
    return "./" + os.path.relpath(path, tree["t"])


def exact_predicates(tree: dict[str, Any]) -> st.SearchStrategy[dict[str, Any]]:
    anything = st.sampled_from([rel(tree, p) for p in [*tree["dirs"], *tree["files"]]])
    dirs = st.sampled_from([rel(tree, d) for d in tree["dirs"]])
    atoms = [
        st.builds(T, st.just("DirectoryRecursive"), anything),
        dirs.map(lambda d: T("Or", [T("ChildOf", d), T("DirectoryExactly", d)])),
        st.tuples(anything, anything).map(
            lambda xy: T("And", [T("DirectoryRecursive", xy[0]), T("DirectoryRecursive", xy[1])])
        ),
        st.just({"tag": "AlwaysDeny"}),
    ]
    if tree["files"]:
        atoms.append(st.builds(T, st.just("FileExactly"), st.sampled_from([rel(tree, f) for f in tree["files"]])))
    return st.lists(st.one_of(atoms), max_size=4).map(lambda items: T("Any", items))


def any_predicates(tree: dict[str, Any]) -> st.SearchStrategy[dict[str, Any]]:
    """Random predicates of every shape, and unions of the usual inexact ones (more likely to hit probes)."""
    paths = [rel(tree, p) for p in [*tree["dirs"], *tree["files"], *tree["links"]]]
    fresh = [f"{rel(tree, d)}/fresh.md" for d in tree["dirs"][:3]]  # files that do not exist yet
    path, dirs = st.sampled_from(paths + fresh), st.sampled_from([rel(tree, d) for d in tree["dirs"]])
    usual = st.one_of(
        st.builds(T, st.sampled_from(["ChildOf", "DirectoryShallow", "DirectoryExactly"]), dirs),
        st.builds(T, st.just("FileExactly"), st.sampled_from(fresh)),
        st.tuples(
            dirs, st.sampled_from([T("FilePattern", "n*"), T("FileExtension", ["md"]), T("FileSizeLessThan", 10)])
        ).map(lambda dn: T("And", [T("DirectoryRecursive", dn[0]), dn[1]])),
        st.tuples(dirs, path).map(
            lambda dp: T("And", [T("DirectoryRecursive", dp[0]), T("Not", T("DirectoryRecursive", dp[1]))])
        ),
    )
    return st.one_of(
        predicates_over(paths + fresh), st.lists(usual, min_size=1, max_size=3).map(lambda items: T("Any", items))
    )


@needs_landlock
@given(TREES, st.sampled_from([READ, WRITE]), st.data())
@KERNEL_SETTINGS
def test_exact_predicates_equal_what_the_kernel_allows(spec: Any, mode: str, data: st.DataObject) -> None:
    with built_tree(*spec) as tree:
        predicate = data.draw(exact_predicates(tree), label="predicate")
        c = check_against_kernel(tree, predicate, mode)
        assert c.exact, f"the compiler should call {predicate} exact: {c.residual}"


@needs_landlock
@given(TREES, st.sampled_from([READ, WRITE]), st.data())
@KERNEL_SETTINGS
def test_any_predicate_kernel_allows_a_superset_and_the_check_gives_the_rest(
    spec: Any, mode: str, data: st.DataObject
) -> None:
    with built_tree(*spec) as tree:
        check_against_kernel(tree, data.draw(any_predicates(tree), label="predicate"), mode)


# --- named kernel cases (the same machinery, readable)


#: Shapes a long random hunt found (each about once in a few thousand examples) where the first oracle was wrong, not
#: the compiler: in write mode an inexact write rule lets the kernel allow more than the predicate (the residual says
#: so, the in-worker check refuses the rest), and a DirectoryRecursive root that does not exist yet gets no rule (the
#: kernel denies it until a restart, fail-closed). Kept so that these shapes are checked on every run.
HUNT_FINDS = [
    (
        [(["a", "a"], False, 0)],
        T("Or", [T("FilePattern", "*.md"), T("DirectoryShallow", "./.")]),
        "write",
        "a/a",
        False,
        "ok",
    ),
    (
        [(["a", "a"], False, 0)],
        T("Any", [T("FilePattern", "*.md"), T("FileExactly", "././fresh.md")]),
        "write",
        "a/a",
        False,
        "ok",
    ),
    (
        [(["a"], False, 0)],
        T("And", [T("FilePattern", "*.md"), T("Any", [T("FileExactly", "./a"), T("FilePattern", "*.md")])]),
        "write",
        "a",
        False,
        "ok",
    ),
    ([(["a", "a"], False, 0)], T("DirectoryRecursive", "././fresh.md"), "create", "fresh.md", True, "denied"),
    (
        [(["a"], False, 0)],
        T("Or", [T("FileExactly", "./."), T("DirectoryRecursive", "././fresh.md")]),
        "create",
        "fresh.md",
        True,
        "denied",
    ),
]


@needs_landlock
@pytest.mark.parametrize(("entries", "data", "op", "rel", "predicate_allows", "kernel"), HUNT_FINDS)
def test_shapes_a_random_hunt_found(
    entries: Any, data: Any, op: str, rel: str, predicate_allows: bool, kernel: str
) -> None:
    with built_tree(entries, []) as tree:
        c = check_against_kernel(tree, data, WRITE)  # every probe of the tree, by the oracle
        predicate = parse_predicate(data, tree["t"])
        path = f"{tree['t']}/{rel}"
        got = confined_attempts(c.rules, [(op, path)], predicate)
        assert (evaluate(predicate, path, for_write=True).allowed, got["kernel"][0]) == (predicate_allows, kernel)
        if kernel == "ok":  # more than the predicate: only under a rule the compiler calls inexact
            assert not c.exact and c.residual
        else:  # less than the predicate: the missing root, listed for the operator
            assert any(m.endswith("/fresh.md") for m in c.missing)


@needs_landlock
def test_symlink_planted_inside_pointing_out_is_refused_by_both_fences() -> None:
    with built_tree([(["a"], True, 0), (["a", "n.md"], False, 3)], []) as tree:
        os.symlink(f"{tree['o']}/secret", f"{tree['t']}/a/escape")
        os.symlink(tree["o"], f"{tree['t']}/a/escape-dir")
        predicate = DirectoryRecursive(f"{tree['t']}/a")
        c = compile_predicate(predicate, WRITE)
        assert c.exact
        probes = [
            ("read-file", f"{tree['t']}/a/escape"),
            ("write", f"{tree['t']}/a/escape"),
            ("create", f"{tree['t']}/a/escape-dir/planted"),
            ("read-file", f"{tree['t']}/a/n.md"),
            ("read-file", f"{tree['t']}/a/../../o/secret"),
        ]
        got = confined_attempts(c.rules, probes, predicate)
        assert got["kernel"] == ["denied", "denied", "denied", "ok", "denied"]
        assert got["check"] == [False, False, False, True, False]


@needs_landlock
def test_seed_and_of_three_operands_in_a_confined_child() -> None:
    with built_tree(
        [
            (["src", "Main.hs"], False, 5),
            (["src", "big.hs"], False, 2000),
            (["src", "a.py"], False, 1),
            (["Top.hs"], False, 1),
        ],
        [],
    ) as tree:
        t = tree["t"]
        predicate = parse_predicate(
            T(
                "And",
                [T("DirectoryRecursive", "./src"), T("FileExtension", ["hs", "lhs"]), T("FileSizeLessThan", 1000)],
            ),
            t,
        )
        c = compile_predicate(predicate, READ)
        got = confined_attempts(
            c.rules,
            [
                ("read-file", f"{t}/src/Main.hs"),
                ("read-file", f"{t}/src/big.hs"),
                ("read-file", f"{t}/src/a.py"),
                ("read-file", f"{t}/Top.hs"),
            ],
            predicate,
        )
        assert got["kernel"] == ["ok", "ok", "ok", "denied"]  # the kernel fences the tree ...
        assert got["check"] == [True, False, False, False]  # ... and the in-worker check the rest


@needs_landlock
def test_child_of_lets_the_kernel_list_the_directory_and_the_check_refuses_it() -> None:
    with built_tree([(["a", "n.md"], False, 1)], []) as tree:
        predicate = ChildOf(f"{tree['t']}/a")
        c = compile_predicate(predicate, READ)
        assert not c.exact
        got = confined_attempts(
            c.rules, [("read-dir", f"{tree['t']}/a"), ("read-file", f"{tree['t']}/a/n.md")], predicate
        )
        assert got["kernel"] == ["ok", "ok"]
        assert got["check"] == [False, True]


@needs_landlock
def test_new_file_exactly_can_be_created_and_the_check_keeps_its_siblings_out() -> None:
    with built_tree([(["a"], True, 0)], []) as tree:
        predicate = FileExactly(f"{tree['t']}/a/out.json")
        c = compile_predicate(predicate, WRITE)
        assert rules(c) == [(f"{tree['t']}/a", WRITE)]
        got = confined_attempts(
            c.rules, [("create", f"{tree['t']}/a/out.json"), ("create", f"{tree['t']}/a/other.json")], predicate
        )
        assert got["kernel"] == ["ok", "ok"]
        assert got["check"] == [True, False]


@needs_landlock
def test_always_allow_in_write_mode_cannot_write_anywhere_through_the_kernel() -> None:
    with built_tree([(["n.md"], False, 1)], []) as tree:
        c = compile_predicate(AlwaysAllow(), WRITE)
        got = confined_attempts(
            c.rules,
            [("read-file", f"{tree['t']}/n.md"), ("write", f"{tree['t']}/n.md"), ("create", f"{tree['t']}/new")],
            AlwaysAllow(),
        )
        assert got["kernel"] == ["ok", "denied", "denied"]
