"""The policy's ``credentials``: clear config errors, agent-file references read as placeholders (never the
value), grants and placeholders per toolbox, and the three sources (env, a root-only file, a command)."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest
import trio

from supervisor._errors import PolicyRefused
from supervisor.config._credentials import CredentialPolicy
from supervisor.config._errors import ConfigError
from supervisor.config._loader import load_config
from supervisor.plan._compile import compile_policy
from supervisor.plan._credential_values import load_credentials, read_root_only_file, run_credential_commands
from tests._policies import agent, system_toolbox, write_policy
from tests.supervisor.plan._facts import plan_as_root

SECRET = "ghp_" + os.urandom(8).hex()
GITHUB = {
    "source": {"env": "GITHUB_TOKEN"},
    "bindings": [{"hosts": ["api.github.com"]}],
    "header": "Authorization: Bearer {value}",
}


def _openapi(spec: Path, **extra: object) -> dict:
    return {
        "tag": "OpenAPIServer",
        "contents": {"SpecUrl": str(spec), "BaseUrl": "https://api.github.com", "Name": "gh", **extra},
    }


@pytest.fixture
def spec(tmp_path: Path) -> Path:
    path = tmp_path / "spec.json"
    path.write_text(
        json.dumps(
            {
                "openapi": "3.0.0",
                "info": {"title": "t", "version": "1"},
                "paths": {"/user": {"get": {"operationId": "me", "responses": {"200": {"description": "ok"}}}}},
            }
        )
    )
    return path


def _error(tmp_path: Path, credentials: object, **policy: object) -> str:
    path = write_policy(
        tmp_path,
        {"a": agent(builtinToolboxes=[system_toolbox(capabilities=["date"])])},
        credentials=credentials,
        **policy,
    )
    with pytest.raises(ConfigError) as caught:
        load_config(str(path))
    return str(caught.value)


@pytest.mark.parametrize(
    ("credentials", "words"),
    [
        ({"bad-name": GITHUB}, "invalid credential name 'bad-name'"),
        ({"gh": {**GITHUB, "source": {}}}, "exactly one of env, file, command"),
        ({"gh": {**GITHUB, "source": {"env": "A", "file": "/x"}}}, "(found env, file)"),
        ({"gh": {**GITHUB, "source": {"file": "relative/token"}}}, "is not absolute"),
        ({"gh": {**GITHUB, "source": {"command": ["vault", "read"]}}}, "'vault' is not an absolute path"),
        ({"gh": {**GITHUB, "bindings": []}}, "bindings"),
        ({"gh": {**GITHUB, "bindings": [{"hosts": ["api.github.com:443"]}]}}, "invalid host in a credential binding"),
        ({"gh": {**GITHUB, "bindings": [{"hosts": ["a.test"], "schemes": ["ftp"]}]}}, "schemes"),
        ({"gh": {**GITHUB, "bindings": [{"hosts": ["a.test"], "path_prefixes": ["v1"]}]}}, "invalid path prefix"),
        ({"gh": {**GITHUB, "header": "Authorization Bearer {value}"}}, "invalid header"),
        ({"gh": {**GITHUB, "header": "Authorization: Bearer"}}, "{value} exactly once"),
        ({"gh": {**GITHUB, "header": "Host: {value}"}}, "cannot carry a credential"),
        ({"gh": {**GITHUB, "query": "key"}}, "not both"),
        ({"gh": {**GITHUB, "sorce": {}}}, "unknown key 'sorce'"),
    ],
)
def test_config_errors_name_the_path_and_what_to_write(tmp_path: Path, credentials: object, words: str) -> None:
    text = _error(tmp_path, credentials)
    assert words in text, text
    assert "credentials" in text


def test_a_toolbox_naming_an_unknown_credential_is_an_error(tmp_path: Path) -> None:
    text = _error(tmp_path, {"gh": GITHUB}, toolboxes={"system": {"credentials": ["gitlab"]}})
    assert "names the credential 'gitlab', which credentials does not define" in text and "gh" in text


def test_token_reference_is_a_placeholder_and_the_grant_carries_the_value(
    tmp_path: Path, spec: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``Token: "${GITHUB_TOKEN}"`` (the credential's env source) and ``${gh}`` (its name) both become the
    placeholder in the worker's config; the value is only in the spec's credentials, for the proxy."""
    monkeypatch.setenv("GITHUB_TOKEN", SECRET)
    tb = _openapi(spec, Token="${GITHUB_TOKEN}", Headers={"X-Also": "token ${gh}"})
    path = write_policy(tmp_path, {"a": agent(openApiToolboxes=[tb])}, credentials={"gh": GITHUB})
    compiled = plan_as_root(load_config(str(path)))  # (planned as a root supervisor would: no root needed)
    (spec_,) = compiled.specs
    worker_config = json.dumps(spec_.plan.payload)
    assert SECRET not in worker_config and SECRET not in json.dumps(spec_.report)
    cfg = spec_.plan.payload["config"]
    assert cfg["Token"] == "AGENTS_SUPERVISE_CREDENTIAL_gh"
    assert cfg["Headers"]["X-Also"] == "token AGENTS_SUPERVISE_CREDENTIAL_gh"
    assert [c.name for c in spec_.credentials] == ["gh"] and spec_.credentials[0].value == SECRET
    assert spec_.report["credentials"][0]["bindings"][0]["hosts"] == ["api.github.com"]
    assert SECRET not in repr(spec_)


def test_other_variables_still_expand_and_ungranted_toolboxes_get_nothing(
    tmp_path: Path, spec: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GITHUB_TOKEN", SECRET)
    monkeypatch.setenv("PLAIN", "plain-value")
    tb = _openapi(spec, Headers={"X-Plain": "${PLAIN}"})
    other = system_toolbox(capabilities=["date"])
    path = write_policy(
        tmp_path, {"a": agent(openApiToolboxes=[tb], builtinToolboxes=[other])}, credentials={"gh": GITHUB}
    )
    specs = {s.toolbox: s for s in plan_as_root(load_config(str(path))).specs}
    assert specs["gh"].plan.payload["config"]["Headers"] == {"X-Plain": "plain-value"}
    assert specs["gh"].credentials == () and specs["system"].credentials == ()


def test_policy_grant_and_credential_env_placeholder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An MCP server or a bash tool that insists on an environment variable gets the placeholder in it; the
    toolbox is granted the credential; a grant its AllowedHosts cannot use is a warning."""
    monkeypatch.setenv("GITHUB_TOKEN", SECRET)
    path = write_policy(
        tmp_path,
        {"a": agent(builtinToolboxes=[system_toolbox(capabilities=["date"])])},
        credentials={"gh": GITHUB},
        toolboxes={
            "system": {"credential_env": {"GITHUB_PERSONAL_ACCESS_TOKEN": "gh"}, "allowed_hosts": ["other.example.com"]}
        },
    )
    compiled = plan_as_root(load_config(str(path)))  # (planned as a root supervisor would: no root needed)
    (spec_,) = compiled.specs
    assert spec_.plan.env["GITHUB_PERSONAL_ACCESS_TOKEN"] == "AGENTS_SUPERVISE_CREDENTIAL_gh"
    assert SECRET not in json.dumps(spec_.plan.env)
    assert [c.name for c in spec_.credentials] == ["gh"]
    assert any("bound to api.github.com, which its AllowedHosts do not allow" in w for w in spec_.warnings)


def test_a_missing_source_refuses_the_policy_naming_the_credential(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("GITHUB_TOKEN", raising=False)
    path = write_policy(
        tmp_path, {"a": agent(builtinToolboxes=[system_toolbox(capabilities=["date"])])}, credentials={"gh": GITHUB}
    )
    with pytest.raises(PolicyRefused, match=r"credentials\.gh: the environment variable GITHUB_TOKEN is not set"):
        compile_policy(load_config(str(path)), prepare=False)


def _spec(source: dict) -> dict[str, CredentialPolicy]:
    return {"gh": CredentialPolicy.model_validate({**GITHUB, "source": source})}


def test_env_value_is_stripped_and_checked() -> None:
    assert load_credentials(_spec({"env": "T"}), {"T": f" {SECRET}\n"})["gh"].value == SECRET
    with pytest.raises(PolicyRefused) as caught:
        load_credentials(_spec({"env": "T"}), {"T": "a\r\nX-Injected: 1"})
    assert "control character" in str(caught.value) and "Injected" not in str(caught.value)


@pytest.mark.root  # root-owned files need root
def test_root_only_file_source(tmp_path: Path) -> None:
    """A 0600 root file is read; a file others may read, a file of another owner and a symbolic link (to the
    good file, or on the path) are refused with what is wrong."""
    good = tmp_path / "token"
    good.write_text(SECRET + "\n")
    good.chmod(0o600)
    assert load_credentials(_spec({"file": str(good)}))["gh"].value == SECRET
    loose = tmp_path / "loose"
    loose.write_text(SECRET)
    loose.chmod(0o640)
    with pytest.raises(PolicyRefused, match="mode is 0640: group or others"):
        load_credentials(_spec({"file": str(loose)}))
    theirs = tmp_path / "theirs"
    theirs.write_text(SECRET)
    theirs.chmod(0o600)
    os.chown(theirs, 65534, 65534)
    with pytest.raises(PolicyRefused, match="owned by uid 65534, not by root"):
        load_credentials(_spec({"file": str(theirs)}))
    link = tmp_path / "link"
    link.symlink_to(good)
    with pytest.raises(PolicyRefused, match="cannot be opened"):
        load_credentials(_spec({"file": str(link)}))
    (tmp_path / "dirlink").symlink_to(tmp_path)
    with pytest.raises(PolicyRefused, match="symbolic link on the path is refused"):
        load_credentials(_spec({"file": str(tmp_path / "dirlink" / "token")}))
    with pytest.raises(ValueError, match="not a regular file"):
        read_root_only_file(str(tmp_path))


async def _command_value(spec: dict[str, CredentialPolicy], env: dict[str, str] | None = None) -> str:
    values = await run_credential_commands(spec, env or {})
    return load_credentials(spec, env or {}, command_values=values)["gh"].value


async def test_command_source(tmp_path: Path) -> None:
    """The command's output is the value; a failure names its exit status but never its output."""
    env = {"FROM_VAULT": SECRET}  # the command runs with the supervisor's environment
    ok = _spec({"command": [sys.executable, "-c", "import os; print(os.environ['FROM_VAULT'])"]})
    assert await _command_value(ok, env) == SECRET
    failing = _spec(
        {
            "command": [
                sys.executable,
                "-c",
                "import os, sys; print(os.environ['FROM_VAULT']); "
                "sys.stderr.write(os.environ['FROM_VAULT']); sys.exit(3)",
            ]
        }
    )
    with pytest.raises(PolicyRefused) as caught:
        await _command_value(failing, env)
    assert "exit status 3" in str(caught.value) and SECRET not in str(caught.value)
    with pytest.raises(PolicyRefused, match="cannot be run"):
        await _command_value(_spec({"command": [str(tmp_path / "missing")]}))
    loud = _spec({"command": [sys.executable, "-c", "print('x' * 70000)"]})
    with pytest.raises(PolicyRefused, match="larger than 65536 bytes"):
        await _command_value(loud)


async def test_a_slow_command_is_killed_with_its_children(tmp_path: Path) -> None:
    """At its time limit the command's whole process group is killed: a child it started (holding its output
    pipe) does not outlive it, and the refusal comes at once."""
    marker = tmp_path / "child.pid"
    script = (
        "import subprocess, sys, time; "
        "c = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)']); "
        f"open({str(marker)!r}, 'w').write(str(c.pid)); time.sleep(60)"
    )
    slow = _spec({"command": [sys.executable, "-c", script], "timeout_s": 2})
    with trio.fail_after(30), pytest.raises(PolicyRefused, match=r"did not finish within 2 s"):
        await _command_value(slow)
    child = int(marker.read_text())
    with trio.fail_after(10):  # SIGKILL is delivered at once; the orphan's reaping by init is not ours to wait on
        while _running(child):  # noqa: ASYNC110 (another process's state: nothing to wait on but polling)
            await trio.sleep(0.05)


def _running(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


async def test_the_loop_serves_while_a_command_runs(tmp_path: Path) -> None:
    """Commands run off the trio thread: the command waits for a file that a task of the same loop writes."""
    flag = tmp_path / "go"
    script = f"import os, time\nwhile not os.path.exists({str(flag)!r}): time.sleep(0.01)\nprint({SECRET!r})"
    waiting = _spec({"command": [sys.executable, "-c", script], "timeout_s": 60})
    async with trio.open_nursery() as nursery:
        nursery.start_soon(trio.to_thread.run_sync, flag.write_text, "now")
        assert await _command_value(waiting) == SECRET


def test_tls_termination_plan_and_the_ca(tmp_path: Path) -> None:
    """The worker gets the CA's file read-only and the variables that point its TLS clients at it; the file holds
    the certificate only; a leaf names exactly its host and is signed by the CA; without hosts it is a warning."""
    from cryptography import x509

    from sandbox import READ, supervisor_ca
    from supervisor.plan._tls_termination import CA_ENV_VARS, write_ca_file

    path = write_policy(
        tmp_path,
        {
            "a": agent(
                builtinToolboxes=[system_toolbox(capabilities=["date"]), system_toolbox("quiet", capabilities=["date"])]
            )
        },
        toolboxes={
            "system": {"tls_termination": True, "allowed_hosts": ["api.example.test"]},
            "quiet": {"tls_termination": True},
        },
    )
    specs = {s.toolbox: s for s in plan_as_root(load_config(str(path))).specs}
    ca = supervisor_ca()
    ca_path = str(tmp_path / "state" / "tls" / f"ca-{ca.fingerprint}.pem")
    system = specs["system"]
    assert all(system.plan.env[v] == ca_path for v in CA_ENV_VARS)
    assert any(r.path == ca_path and r.mode == READ for r in system.plan.fs_rules)
    assert system.terminator is ca and system.report["tls_termination"] is True
    assert specs["quiet"].terminator is None
    assert any("tls_termination has no effect" in w for w in specs["quiet"].warnings)
    (tmp_path / "state").mkdir(exist_ok=True)
    written = write_ca_file(str(tmp_path / "state"), ca)
    assert written == ca_path and oct(os.stat(written).st_mode & 0o777) == "0o644"
    text = Path(written).read_text()
    assert "PRIVATE KEY" not in text and x509.load_pem_x509_certificate(text.encode()) == ca.cert
    leaf = ca.leaf("api.example.test")
    names = leaf.extensions.get_extension_for_class(x509.SubjectAlternativeName).value.get_values_for_type(x509.DNSName)
    assert names == ["api.example.test"] and leaf.issuer == ca.cert.subject
    leaf.verify_directly_issued_by(ca.cert)
    assert ca.cert.extensions.get_extension_for_class(x509.BasicConstraints).value.path_length == 0


@pytest.mark.root  # compiles a policy with cgroup limits: making a cgroup needs root
def test_check_shows_credentials_and_never_their_values(tmp_path: Path, spec: Path) -> None:
    import subprocess

    repo = str(Path(__file__).resolve().parents[3])
    tb = _openapi(spec, Token="${GITHUB_TOKEN}")
    path = write_policy(
        tmp_path,
        {"a": agent(openApiToolboxes=[tb])},
        credentials={"gh": GITHUB},
        toolboxes={"gh": {"tls_termination": True}},
    )
    env = {**os.environ, "GITHUB_TOKEN": SECRET, "PYTHONPATH": repo}
    text = subprocess.run(
        [sys.executable, "-m", "supervisor", "check", "--detail", "--policy", str(path)],
        env=env,
        cwd=repo,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert (
        "credential gh: added by the egress proxy for api.github.com (https), as header Authorization" in text.stdout
    ), text.stdout + text.stderr
    assert "TLS: terminated by the egress proxy" in text.stdout
    as_json = subprocess.run(
        [sys.executable, "-m", "supervisor", "check", "--policy", str(path), "--json"],
        env=env,
        cwd=repo,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert '"placeholder": "AGENTS_SUPERVISE_CREDENTIAL_gh"' in as_json.stdout
    assert SECRET not in text.stdout + text.stderr + as_json.stdout + as_json.stderr


@pytest.mark.root  # starts a real supervisor with a worker
async def test_the_supervisor_runs_command_sources_at_start_and_at_each_reload(sandbox_tmp: Path) -> None:
    """``Supervisor.open`` and a reload read a ``command:`` credential through the one child runner (the reload
    from its compile thread, on the loop): the toolbox granted it has the command's output, the new output after a
    reload."""
    from supervisor._supervisor import Supervisor

    vault = sandbox_tmp / "vault.txt"
    vault.write_text("first-" + SECRET)
    command = {"command": [sys.executable, "-c", f"print(open({str(vault)!r}).read())"]}
    path = write_policy(
        sandbox_tmp,
        {"a": agent(builtinToolboxes=[system_toolbox(capabilities=["date"])])},
        credentials={"gh": {**GITHUB, "source": command}},
        toolboxes={"system": {"credentials": ["gh"]}},
    )
    async with Supervisor.open(path) as sup:
        assert [c.value for c in sup.runner("system").spec.credentials] == ["first-" + SECRET]
        vault.write_text("second-" + SECRET)
        outcome = await sup.reload()
        assert outcome.refused is None, outcome
        assert outcome.plan.restarted == (("tester", "system"),)  # a rotated secret restarts the workers granted it
        assert [c.value for c in sup.runner("system").spec.credentials] == ["second-" + SECRET]
        assert (await sup.reload()).plan.kept == (("tester", "system"),)  # the same value: kept
