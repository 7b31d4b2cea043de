"""How agent files and reloads reach a Kubernetes pod (docs/DEPLOY.md): the supervisor reads the agent files of
the ConfigMap where it is mounted, and the DaemonSet's ``reloader`` container (its script taken from the manifest,
with Kubernetes' ``$$`` escaping applied) watches the mounted Secret and ConfigMap the way the kubelet updates them
(a new ``..data`` link swapped in) and sends the supervisor SIGHUP, which reloads the changed agent and keeps the
other. The slugs stay: each is bound to its agent file's name in the volume, whose links are root's on a read-only
mount (``plan/_agent_bindings.py``), although the swap moves every file's canonical path.

The pod runs in a PID and mount namespace of its own (``unshare --pid --mount --mount-proc``), as in a pod with
``shareProcessNamespace``: the script signals what it finds in ``/proc``, which then holds only this pod's
processes, never another supervisor of this machine; the "ConfigMap" is a folder of mode 0777 (as the kubelet makes
it) bind-mounted read-only where the policy names it, as the container sees its volume. No kubelet runs here: the
test swaps the links as it does, in the folder behind the mount."""

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


def _reloader_script() -> str:
    """The script of the reloader container, as Kubernetes hands it to the container (``$$`` escapes ``$``)."""
    [daemonset] = [d for d in yaml.safe_load_all(MANIFESTS.read_text()) if d["kind"] == "DaemonSet"]
    pod = daemonset["spec"]["template"]["spec"]
    assert pod["shareProcessNamespace"] is True and "initContainers" not in pod  # nothing is copied any more
    [supervisor] = [c for c in pod["containers"] if c["name"] == "supervisor"]
    [reloader] = [c for c in pod["containers"] if c["name"] == "reloader"]
    agents = {"name": "agents", "mountPath": "/etc/agents-supervise-agents", "readOnly": True}
    assert agents in supervisor["volumeMounts"] and agents in reloader["volumeMounts"]
    assert reloader["command"] == ["/bin/sh", "-c"]
    return str(reloader["args"][0]).replace("$$", "$")


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


def _processes_naming(text: str) -> list[str]:
    """The command lines of this host's processes that name ``text``."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                line = f.read().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if text in line:
            found.append(f"{pid}: {line[:200]}")
    return found


def _wait(path: Path, text: str, timeout: float = 120) -> str:
    deadline = time.monotonic() + timeout
    while text not in (content := path.read_text() if path.exists() else ""):
        assert time.monotonic() < deadline, f"no {text!r} in {path.name}:\n{content[-3000:]}"
        time.sleep(0.1)
    return content


def test_a_changed_agent_file_reaches_the_supervisor(sandbox_tmp: Path) -> None:
    etc, volume = sandbox_tmp / "etc-agents-supervise", sandbox_tmp / "configmap-volume"
    agents = sandbox_tmp / "etc-agents-supervise-agents"  # where the pod sees the volume: read-only
    agents.mkdir()

    def agent_file(slug: str, capabilities: list[str]) -> str:
        return json.dumps(agent(slug, builtinToolboxes=[system_toolbox("system", capabilities)]))

    state = sandbox_tmp / "state"
    policy: dict[str, Any] = {
        "agents": [f"{agents}/alpha.json", f"{agents}/beta.json"],
        "state_dir": str(state),
        "worker_uids": None,
        "frontends": {"http": {"listen": "127.0.0.1:0"}},
        "tenants": {"ops": {"tokens": [hash_token("ops-token")], "agents": ["alpha", "beta"]}},
    }
    _projected(etc, {"policy.yaml": yaml.safe_dump(policy)}, "v1")
    beta = agent_file("beta", ["date"])
    _projected(volume, {"alpha.json": agent_file("alpha", ["date"]), "beta.json": beta}, "v1")
    volume.chmod(0o777)  # as the kubelet makes a volume's folder: only the read-only mount keeps others out
    script = (
        _reloader_script()
        .replace("/etc/agents-supervise-agents", str(agents))
        .replace("/etc/agents-supervise/", f"{etc}/")
        .replace("sleep 5", "sleep 0.2")
    )
    log, reloader_log = sandbox_tmp / "serve.log", sandbox_tmp / "reloader.log"
    pod = subprocess.Popen(
        [
            "unshare",
            "--pid",
            "--fork",
            "--kill-child",  # the pod's PID 1 dies with unshare (pod.kill() below), and so does every process in it
            "--mount",
            "--mount-proc",
            "sh",
            "-c",
            'mount --bind "$6" "$7" && mount -o remount,bind,ro "$7" && '
            '{ "$1" serve --http --policy "$2" 2>"$3" & exec sh -c "$4" >"$5" 2>&1; }',
            "pod",
            str(ENTRYPOINT),
            str(etc / "policy.yaml"),
            str(log),
            script,
            str(reloader_log),
            str(volume),
            str(agents),
        ],
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        stdin=subprocess.DEVNULL,
    )
    try:
        _wait(log, "serving MCP over HTTP at ")
        bound = json.loads((state / "identities.json").read_text())["agents"]
        assert bound["alpha"]["file"] == f"{agents}/alpha.json", bound  # the name, not the ..v1 path
        # kubectl edit configmap ...: alpha changed, beta the same (its canonical path moves all the same)
        _projected(volume, {"alpha.json": agent_file("alpha", ["date", "uptime"]), "beta.json": beta}, "v2")
        reloaded = _wait(log, "the policy was reloaded")
        assert "restarted alpha/system" in reloaded and "kept beta/system" in reloaded, reloaded
        assert "SIGHUP to" in _wait(reloader_log, "SIGHUP to")
        after = json.loads((state / "identities.json").read_text())
        assert after["agents"]["alpha"]["file"] == f"{agents}/alpha.json"
        assert after["agents"]["alpha"]["inode"] != bound["alpha"]["inode"]  # the new file, same slug
    finally:
        pod.kill()  # unshare: its child, the namespace's first process, gets SIGKILL (--kill-child) and the pod ends
        pod.wait()
    deadline = time.monotonic() + 30
    while leftovers := _processes_naming(str(etc)):  # the kernel ends the namespace's processes: polled
        assert time.monotonic() < deadline, f"processes of the pod outlived it: {leftovers}"
        time.sleep(0.05)
