"""``SkillGitRepo`` over https, end to end: the seed's skills example with a real git smart-HTTP server over TLS.

The lab (``tests/sandbox/_netlab.py``) gives an "internet" namespace; in it ``git http-backend`` serves a bare
repository over TLS (``tests/supervisor/_git_https_server.py``) at ``https://secure.example.test:9443/`` with a
certificate of a test CA (trustme). The supervisor under test runs inside the lab's supervisor namespace (as the
other egress end-to-end tests do) in a private mount namespace whose system CA bundle also trusts the test CA, as a
machine with a private CA installed would. The clone runs confined, reaching only the repository's host through the
egress bridge. A second source names a host with nothing listening on 443: it is a load error of that source and
every other source and toolbox serves (before issue 13, any https source ended the supervisor with a TypeError).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from labkit import make_skill, skill_md
from tests._policies import agent, system_toolbox, write_policy
from tests.sandbox._netlab import INET_TLS, PY, REPO, Lab, Lines, in_ns

if TYPE_CHECKING:
    from collections.abc import Iterator

pytestmark = pytest.mark.root

GIT_PORT = 9443
REACHABLE = f"https://secure.example.test:{GIT_PORT}/skills-repo.git"
UNREACHABLE = "https://www.example.test/skills-repo.git"  # www.example.test serves plain HTTP only
SYSTEM_BUNDLE = "/etc/ssl/certs/ca-certificates.crt"


@pytest.fixture(scope="module")
def lab() -> Iterator[Lab]:
    os.makedirs("/tmp/agents-supervise-tests", exist_ok=True)
    root = Path(tempfile.mkdtemp(dir="/tmp/agents-supervise-tests"))
    os.chmod(root, 0o755)
    lab = Lab(root)
    try:
        yield lab
    finally:
        lab.close()
        shutil.rmtree(root, ignore_errors=True)


def _bare_repo(where: Path) -> Path:
    """A repository with the seed's layout: the skill ``pdf-processing`` under ``pdf-tools/``."""
    work = where / "work"
    make_skill(work / "pdf-tools", "pdf", skill_md("pdf-processing"), scripts={"extract": "extract-text"})
    git = ["git", "-c", "user.email=t@example.test", "-c", "user.name=t", "-c", "init.defaultBranch=main"]
    subprocess.run([*git, "init", "-q", str(work)], check=True)
    subprocess.run([*git, "-C", str(work), "add", "."], check=True)
    subprocess.run([*git, "-C", str(work), "commit", "-qm", "skills"], check=True)
    bare = where / "served" / "skills-repo.git"
    subprocess.run(["git", "clone", "-q", "--bare", str(work), str(bare)], check=True)
    return bare


@pytest.fixture
def git_server(lab: Lab, sandbox_tmp: Path) -> Iterator[Path]:
    """Serve the bare repository over TLS in the lab's internet namespace; yield the CA bundle to trust."""
    with _git_server(lab, sandbox_tmp) as bundle:
        yield bundle


@contextlib.contextmanager
def _git_server(lab: Lab, sandbox_tmp: Path, require: str | None = None) -> Iterator[Path]:
    """The server of :func:`git_server`; ``require``: the ``Authorization`` header every request must carry."""
    import trustme

    ca = trustme.CA()
    cert = ca.issue_cert("secure.example.test", "git-alias.example.test")
    keys = sandbox_tmp / "tls"
    keys.mkdir()
    cert.private_key_pem.write_to_path(str(keys / "key.pem"))
    cert.cert_chain_pems[0].write_to_path(str(keys / "cert.pem"))
    bundle = keys / "bundle.pem"
    bundle.write_bytes(Path(SYSTEM_BUNDLE).read_bytes() + ca.cert_pem.bytes())
    os.chmod(bundle, 0o644)
    bare = _bare_repo(sandbox_tmp / "git")
    proc = subprocess.Popen(
        in_ns(
            lab.inet,
            PY,
            "-m",
            "tests.supervisor._git_https_server",
            "--addr",
            INET_TLS,
            "--port",
            str(GIT_PORT),
            "--cert",
            str(keys / "cert.pem"),
            "--key",
            str(keys / "key.pem"),
            "--root",
            str(bare.parent),
        ),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": REPO, **({"REQUIRE_AUTHORIZATION": require} if require else {})},
    )
    try:
        Lines(proc).next("listening")
        yield bundle
    finally:
        proc.kill()
        proc.wait(timeout=10)
        assert proc.stderr is not None
        proc.stderr.close()


def _in_lab(
    lab: Lab, bundle: Path, *command: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """Run ``python -m supervisor COMMAND`` in the lab's supervisor network namespace, in a private mount namespace
    with the lab's resolv.conf and a CA bundle that trusts the test CA."""
    return subprocess.run(
        [
            "unshare",
            "-m",
            "--propagation",
            "private",
            "sh",
            "-c",
            'mount --bind "$0" /etc/resolv.conf && mount --bind "$1" "$2" && net="$3" py="$4" && shift 4 && '
            'exec nsenter --net="$net" "$py" -m supervisor "$@"',
            f"/etc/netns/{lab.sup}/resolv.conf",
            str(bundle),
            SYSTEM_BUNDLE,
            f"/run/netns/{lab.sup}",
            sys.executable,
            *command,
        ],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": REPO, **(env or {})},
    )


def _trace(root: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (root / "state" / "trace.jsonl").read_text().splitlines()]


def test_https_sources_reachable_and_unreachable(lab: Lab, git_server: Path, sandbox_tmp: Path) -> None:
    make_skill(sandbox_tmp / "skills", "core", skill_md("core-utils"), scripts={"hello": "hello"})
    # the seed's skills example, with the lab's server for github.com and a second, unreachable source
    policy = write_policy(
        sandbox_tmp,
        {
            "tester": agent(
                skillSources=[
                    {"tag": "SkillDirectory", "contents": "./skills"},
                    {"tag": "SkillGitRepo", "contents": {"url": REACHABLE, "subdir": "pdf-tools"}},
                    {"tag": "SkillGitRepo", "contents": {"url": UNREACHABLE}},
                ],
                autoEnableSkills=["core-utils"],
                builtinToolboxes=[system_toolbox()],
            )
        },
    )
    out = _in_lab(lab, git_server, "tools", "--policy", str(policy), "--json")
    assert out.returncode == 0, out.stderr
    listed = json.loads(out.stdout)
    names = {t["name"] for t in listed["tools"]}
    assert {
        "skill_enable_pdf-processing",
        "skill_pdf-processing_extract-text",
        "skill_enable_core-utils",
        "system_system_date",
    } <= names
    [error] = listed["load_errors"]
    assert (error["toolbox"], error["source"]) == ("skills", "skillSources[2]")
    assert error["message"].startswith(f"git clone of {UNREACHABLE} failed: ")
    records = _trace(sandbox_tmp)
    egress = [r for r in records if r["event"] == "egress"]
    assert {(r["host"], r["verdict"], r["toolbox"], r["purpose"]) for r in egress} >= {
        ("secure.example.test", "allowed", "skills", "git clone")
    }
    assert [r["action"] for r in records if r["event"] == "skill_source"] == ["cloned"]
    assert any(r["event"] == "load_error" and r.get("source") == "skillSources[2]" for r in records)

    # A second start keeps the clone (no network needed for it) and the tools stay.
    again = _in_lab(lab, git_server, "call", "--policy", str(policy), "skill_describe_pdf-processing", "{}")
    assert again.returncode == 0, again.stderr
    assert json.loads(again.stdout)["structured"]["name"] == "pdf-processing"
    assert [r["action"] for r in _trace(sandbox_tmp) if r["event"] == "skill_source"] == ["cloned", "kept"]


@pytest.mark.parametrize("accepted", [False, True])
def test_a_clone_through_a_cname_needs_the_skills_toolboxs_cname_targets(
    lab: Lab, git_server: Path, sandbox_tmp: Path, accepted: bool
) -> None:
    """``git-alias.example.test`` is a CNAME of ``git-edge.cdn.example.test``: the clone's bridge judges the target
    as the worker's does, and the skills toolbox's policy ``cname_targets`` opens it for the clone too."""
    url = f"https://git-alias.example.test:{GIT_PORT}/skills-repo.git"
    extra = {"toolboxes": {"skills": {"cname_targets": ["*.cdn.example.test"]}}} if accepted else {}
    policy = write_policy(
        sandbox_tmp,
        {
            "tester": agent(
                skillSources=[{"tag": "SkillGitRepo", "contents": {"url": url, "subdir": "pdf-tools"}}],
                builtinToolboxes=[system_toolbox()],
            )
        },
        **extra,
    )
    out = _in_lab(lab, git_server, "tools", "--policy", str(policy), "--json")
    assert out.returncode == 0, out.stderr
    listed = json.loads(out.stdout)
    names = {t["name"] for t in listed["tools"]}
    egress = [r for r in _trace(sandbox_tmp) if r["event"] == "egress"]
    if accepted:
        assert "skill_enable_pdf-processing" in names and not listed["load_errors"], listed
        assert ("git-alias.example.test", "allowed") in {(r["host"], r["verdict"]) for r in egress}
    else:
        assert "skill_enable_pdf-processing" not in names
        [error] = listed["load_errors"]
        assert error["message"].startswith(f"git clone of {url} failed: "), error
        refused = [r for r in egress if r["verdict"] == "refused"]
        assert refused and "alias (CNAME) of git-edge.cdn.example.test" in refused[0]["reason"], egress


@pytest.mark.parametrize("granted", [False, True])
def test_a_private_repository_is_cloned_with_a_granted_credential_git_never_holds(
    lab: Lab, sandbox_tmp: Path, granted: bool
) -> None:
    """The repository answers 401 without ``Authorization: Bearer <value>``. Granted to the skills toolbox, the
    credential is added by the clone's proxy in the TLS-terminating mode (git trusts the supervisor's CA for this
    clone only) and the clone succeeds; not granted, the clone fails. Git's environment holds no value."""
    secret = "gho_" + os.urandom(8).hex()
    cred = {
        "source": {"env": "LAB_GIT_TOKEN"},
        "header": "Authorization: Bearer {value}",
        "bindings": [{"hosts": ["secure.example.test"], "ports": [GIT_PORT]}],
    }
    extra = {"toolboxes": {"skills": {"credentials": ["lab_git"]}}} if granted else {}
    policy = write_policy(
        sandbox_tmp,
        {
            "tester": agent(
                skillSources=[{"tag": "SkillGitRepo", "contents": {"url": REACHABLE, "subdir": "pdf-tools"}}],
                builtinToolboxes=[system_toolbox()],
            )
        },
        credentials={"lab_git": cred},
        **extra,
    )
    with _git_server(lab, sandbox_tmp, require=f"Bearer {secret}") as bundle:
        out = _in_lab(lab, bundle, "tools", "--policy", str(policy), "--json", env={"LAB_GIT_TOKEN": secret})
    assert out.returncode == 0, out.stderr
    listed = json.loads(out.stdout)
    names = {t["name"] for t in listed["tools"]}
    egress = [r for r in _trace(sandbox_tmp) if r["event"] == "egress"]
    if granted:
        assert "skill_enable_pdf-processing" in names and not listed["load_errors"], listed
        assert any(r.get("terminated") and r.get("credentials") == ["lab_git"] for r in egress), egress
    else:
        assert "skill_enable_pdf-processing" not in names
        [error] = listed["load_errors"]
        assert "could not read Username" in error["message"], error  # git asking for what the 401 wants
    assert secret not in out.stdout and secret not in (sandbox_tmp / "state" / "trace.jsonl").read_text()
