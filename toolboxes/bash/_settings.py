"""Limits and environment of the scripts a toolbox runs, read from ``config["policy"]`` (pure code).

``config["policy"]`` (set by the supervisor from the policy file)::

    {"limits": {"wall_time_s": 30, "output_bytes": 1048576, "stderr_bytes": 65536},
     "env": {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"},
     "describe_timeout_s": 5, "watch_interval_s": 0.5}

Every key is optional. ``env`` is the *whole* environment of a script besides the ``AGENT_*`` ids; when the policy
gives none, :data:`DEFAULT_ENV` is used (a PATH and a UTF-8 locale, nothing of the supervisor's or the worker's).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

__all__ = ["DEFAULT_ENV", "BashSettings"]

DEFAULT_ENV: dict[str, str] = {"PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8"}


def _number(obj: dict[str, Any], key: str, default: float, where: str) -> float:
    value = obj.get(key)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
        raise ValueError(f"{where}.{key} must be a positive number, not {value!r}")
    return float(value)


def _watch_interval(policy: dict[str, Any]) -> float:
    value = policy.get("watch_interval_s", BashSettings.watch_interval_s)
    if value is False or value == 0:
        return 0.0
    return _number(policy, "watch_interval_s", BashSettings.watch_interval_s, "policy")


@dataclass(frozen=True)
class BashSettings:
    """Per-toolbox limits. Times in seconds, sizes in bytes."""

    wall_time_s: float = 30.0
    output_bytes: int = 1024 * 1024
    stderr_bytes: int = 64 * 1024
    describe_timeout_s: float = 5.0
    describe_output_bytes: int = 256 * 1024
    #: How often the script folder is checked for added, changed and removed scripts; 0 turns watching off.
    watch_interval_s: float = 0.5
    env: dict[str, str] = field(default_factory=lambda: dict(DEFAULT_ENV))

    @classmethod
    def from_policy(cls, policy: Any) -> BashSettings:
        """Read ``config["policy"]``; raises ``ValueError`` naming the bad key."""
        if policy is None:
            return cls()
        if not isinstance(policy, dict):
            raise ValueError("config.policy must be a map")
        limits = policy.get("limits") or {}
        if not isinstance(limits, dict):
            raise ValueError("config.policy.limits must be a map")
        env = policy.get("env", DEFAULT_ENV)
        if not isinstance(env, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in env.items()):
            raise ValueError("config.policy.env must be a map of strings to strings")
        if any("=" in k or "\x00" in k or "\x00" in v or not k for k, v in env.items()):
            raise ValueError("config.policy.env has a name or value that cannot be in an environment")
        return cls(
            wall_time_s=_number(limits, "wall_time_s", cls.wall_time_s, "policy.limits"),
            output_bytes=int(_number(limits, "output_bytes", cls.output_bytes, "policy.limits")),
            stderr_bytes=int(_number(limits, "stderr_bytes", cls.stderr_bytes, "policy.limits")),
            describe_timeout_s=_number(policy, "describe_timeout_s", cls.describe_timeout_s, "policy"),
            describe_output_bytes=int(_number(policy, "describe_output_bytes", cls.describe_output_bytes, "policy")),
            watch_interval_s=_watch_interval(policy),
            env=dict(env),
        )
