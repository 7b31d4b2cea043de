"""How agent files and reloads reach a Kubernetes pod (docs/DEPLOY.md): the DaemonSet's ``agent-files`` init
container copies the agent files of the ConfigMap to stable paths, and its ``reloader`` container (the same script,
taken from the manifest with Kubernetes' ``$$`` escaping applied) watches the mounted Secret and ConfigMap the way
the kubelet updates them (a new ``..data`` link swapped in), copies again and sends the supervisor SIGHUP, which
reloads the changed agent. (Without the copy the reload is refused: the kubelet's swap moves the real path of
every file, and a slug belongs to its agent file's real path.)

Both run in a PID namespace of their own (``unshare --pid --mount-proc``), as in a pod with
``shareProcessNamespace``: the script signals what it finds in ``/proc``, which then holds only this pod's
processes, never another supervisor of this machine. No kubelet runs here: the test swaps the links as it does."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from supervisor.frontends._http_auth import hash_token
from tests._policies import agent, system_toolbox

pytestmark = pytest.mark.root

REPO = Path(__file__).resolve().parents[2]
MANIFESTS = REPO / "deploy" / "kubernetes" / "agents-supervise.yaml"
ENTRYPOINT = Path(sys.prefix) / "bin" / "agents-supervise"  # the image's ENTRYPOINT, from this venv


def _helper_script() -> str:
    """The script of the init container and the reloader (one script: ``ONCE`` set or not)."""
    [daemonset] = [d for d in yaml.safe_load_all(MANIFESTS.read_text()) if d["kind"] == "DaemonSet"]
    pod = daemonset["spec"]["template"]["spec"]
    assert pod["shareProcessNamespace"] is True
    [init] = [c for c in pod["initContainers"] if c["name"] == "agent-files"]
    [reloader] = [c for c in pod["containers"] if c["name"] == "reloader"]
    assert init["command"] == reloader["command"] == ["/bin/sh", "-c"] and init["args"] == reloader["args"]
    assert (init["env"], reloader["env"]) == ([{"name": "ONCE", "value": "1"}], [{"name": "ONCE", "value": ""}])
    return str(reloader["args"][0]).replace("$$", "$")  # what Kubernetes hands the container ($$ escapes $)


def _projected(folder: Path, files: dict[str, str], version: str) -> None:
    """``folder`` as the kubelet keeps a Secret or ConfigMap volume: the files under ``..<version>``, the link
    ``..data`` to it (swapped atomically), each name a link through ``..data``."""
    (folder / f"..{version}").mkdir(parents=True)
    for name, text in files.items():
        (folder / f"..{version}" / name).write_text(text)
        if not (folder / name).is_symlink():
            (folder / name).symlink_to(f"..data/{name}")
    (folder / "..data_tmp").symlink_to(f"..{version}")
    os.replace(folder / "..data_tmp", folder / "..data")


def _wait(path: Path, text: str, timeout: float = 120) -> str:
    deadline = time.monotonic() + timeout
    while text not in (content := path.read_text() if path.exists() else ""):
        assert time.monotonic() < deadline, f"no {text!r} in {path.name}:\n{content[-3000:]}"
        time.sleep(0.1)
    return content


def test_a_changed_agent_file_reaches_the_supervisor(sandbox_tmp: Path) -> None:
    etc, agents = sandbox_tmp / "etc-agents-supervise", sandbox_tmp / "etc-agents-supervise-agents"
    files = sandbox_tmp / "run-agents-supervise-agents"  # the emptyDir
    files.mkdir(mode=0o777)

    def alpha(capabilities: list[str]) -> str:
        return json.dumps(agent("alpha", builtinToolboxes=[system_toolbox("system", capabilities)]))

    policy: dict[str, Any] = {
        "agents": [f"{files}/alpha.json"],
        "state_dir": str(sandbox_tmp / "state"),
        "worker_uids": None,
        "frontends": {"http": {"listen": "127.0.0.1:0"}},
        "tenants": {"ops": {"tokens": [hash_token("ops-token")], "agents": ["alpha"]}},
    }
    _projected(etc, {"policy.yaml": yaml.safe_dump(policy)}, "v1")
    _projected(agents, {"alpha.json": alpha(["date"])}, "v1")
    script = (
        _helper_script()
        .replace("/etc/agents-supervise-agents", str(agents))
        .replace("/etc/agents-supervise/", f"{etc}/")
        .replace("/run/agents-supervise/agents", str(files))
        .replace("sleep 5", "sleep 0.2")
    )
    subprocess.run(["sh", "-c", script], env={**os.environ, "ONCE": "1"}, check=True, timeout=60)  # init container
    assert json.loads((files / "alpha.json").read_text())["contents"]["slug"] == "alpha"
    assert not (files / "alpha.json").is_symlink() and (files.stat().st_mode & 0o777) == 0o755
    log, reloader_log = sandbox_tmp / "serve.log", sandbox_tmp / "reloader.log"
    pod = subprocess.Popen(
        [
            "unshare",
            "--pid",
            "--fork",
            "--mount-proc",
            "sh",
            "-c",
            '"$1" serve --http --policy "$2" 2>"$3" & exec sh -c "$4" >"$5" 2>&1',
            "pod",
            str(ENTRYPOINT),
            str(etc / "policy.yaml"),
            str(log),
            script,
            str(reloader_log),
        ],
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO), "ONCE": ""},
        stdin=subprocess.DEVNULL,
    )
    try:
        _wait(log, "serving MCP over HTTP at ")
        _projected(agents, {"alpha.json": alpha(["date", "uptime"])}, "v2")  # kubectl edit configmap ...
        reloaded = _wait(log, "the policy was reloaded")
        assert "restarted alpha/system" in reloaded, reloaded
        assert "SIGHUP to" in _wait(reloader_log, "SIGHUP to")
    finally:
        pod.kill()  # the namespace's first process: every process of the "pod" ends with it
        pod.wait()
