"""The System toolbox's informational capabilities: facts about the worker's own (confined) world.

Each function returns the ``data`` object of the seed's output shape. They run inside the worker, so they report
what the sandbox sees: ``running-user`` shows the sandbox uid, ``working-directory`` the work folder,
``env-vars`` the worker's minimal environment. Nothing here reads files beyond ``/proc/self`` and ``/etc`` entries the
policy grants; a file the sandbox hides is reported as unknown rather than failing the call.
"""

from __future__ import annotations

import datetime as dt
import grp
import os
import platform
import pwd
import re
import socket
import time
from typing import Any

from ._command import command_folder

__all__ = ["INFO_CAPABILITIES"]


def _date(args: dict[str, Any], config: dict[str, Any]) -> dict[str, Any]:
    now = dt.datetime.now(dt.UTC)
    local = now.astimezone()
    offset = local.strftime("%z")
    return {
        "utc": now.strftime("%Y-%m-%dT%H:%M:%S.%fZ"),
        "local": local.replace(tzinfo=None).isoformat(timespec="microseconds"),
        "timezone": local.tzname() or "UTC",
        "timezoneOffset": offset or "+0000",
    }


def _read_os_release() -> dict[str, str]:
    for path in ("/etc/os-release", "/usr/lib/os-release"):
        try:
            with open(path, encoding="utf-8") as f:
                text = f.read()
        except OSError:
            continue
        out = {}
        for line in text.splitlines():
            if "=" in line and not line.startswith("#"):
                key, _, value = line.partition("=")
                out[key.strip()] = value.strip().strip('"')
        return out
    return {}


def _operating_system(args: dict[str, Any], config: dict[str, Any]) -> dict[str, Any]:
    uname = os.uname()
    release = _read_os_release()
    return {
        "system": uname.sysname,
        "kernelRelease": uname.release,
        "kernelVersion": uname.version,
        "machine": uname.machine,
        "distribution": release.get("PRETTY_NAME") or "unknown",
        "distributionId": release.get("ID") or "unknown",
        "distributionVersion": release.get("VERSION_ID") or "unknown",
        "python": platform.python_version(),
    }


def _running_user(args: dict[str, Any], config: dict[str, Any]) -> dict[str, Any]:
    uid, gid = os.getuid(), os.getgid()
    try:
        name = pwd.getpwuid(uid).pw_name
    except (KeyError, OSError):
        name = None
    try:
        group = grp.getgrgid(gid).gr_name
    except (KeyError, OSError):
        group = None
    return {
        "uid": uid,
        "gid": gid,
        "euid": os.geteuid(),
        "egid": os.getegid(),
        "username": name,
        "group": group,
        "groups": os.getgroups(),
        "home": os.environ.get("HOME"),
    }


def _hostname(args: dict[str, Any], config: dict[str, Any]) -> dict[str, Any]:
    return {"hostname": socket.gethostname()}


def _working_directory(args: dict[str, Any], config: dict[str, Any]) -> dict[str, Any]:
    """Where relative paths start and ``execute-command`` runs: the agent file's folder (docs/FILES.md)."""
    return {"path": command_folder(config, os.getcwd())}


def _env_vars(args: dict[str, Any], config: dict[str, Any]) -> dict[str, Any]:
    pattern = config.get("EnvVarFilter")
    regex = re.compile(pattern) if pattern else None
    variables = {k: v for k, v in sorted(os.environ.items()) if regex is None or regex.search(k)}
    return {"variables": variables, "count": len(variables), "filter": pattern}


def _proc_status() -> dict[str, str]:
    out: dict[str, str] = {}
    try:
        with open("/proc/self/status", encoding="utf-8") as f:
            for line in f:
                key, _, value = line.partition(":")
                out[key] = value.strip()
    except OSError:
        pass
    return out


def _process_info(args: dict[str, Any], config: dict[str, Any]) -> dict[str, Any]:
    status = _proc_status()
    times = os.times()
    return {
        "pid": os.getpid(),
        "ppid": os.getppid(),
        "uid": os.getuid(),
        "threads": int(status.get("Threads", "0") or 0),
        "memoryRssKiB": int((status.get("VmRSS", "0 kB").split() or ["0"])[0]),
        "cpuUserSeconds": times.user,
        "cpuSystemSeconds": times.system,
        "noNewPrivs": status.get("NoNewPrivs"),
        "capEff": status.get("CapEff"),
        "seccomp": status.get("Seccomp"),
    }


def _uptime(args: dict[str, Any], config: dict[str, Any]) -> dict[str, Any]:
    seconds = time.clock_gettime(time.CLOCK_BOOTTIME)
    boot = dt.datetime.now(dt.UTC) - dt.timedelta(seconds=seconds)
    return {"uptimeSeconds": round(seconds, 3), "bootTime": boot.strftime("%Y-%m-%dT%H:%M:%SZ")}


#: capability -> (description, data function)
INFO_CAPABILITIES = {
    "date": ("The current date and time (UTC and local, with the time zone).", _date),
    "operating-system": ("The operating system, kernel and distribution.", _operating_system),
    "running-user": ("The user the tools run as (the sandbox's uid).", _running_user),
    "hostname": ("The host name.", _hostname),
    "working-directory": (
        "The tools' working directory: the agent file's folder, where relative paths start and commands run.",
        _working_directory,
    ),
    "env-vars": ("The environment variables the tools see, filtered by EnvVarFilter.", _env_vars),
    "process-info": ("Facts about the tool process: pid, memory, CPU time, privileges.", _process_info),
    "uptime": ("How long the host has been up.", _uptime),
}
