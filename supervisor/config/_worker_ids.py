"""Who workers run as, beyond ``sandbox_uid``: a uid range of their own (``worker_uids``) and the supplementary
groups the operator grants for shared folders (``shared_groups``)."""

from __future__ import annotations

from pydantic import Field, model_validator

from ._errors import problem
from ._model import StrictModel
from ._policy_fields import AbsolutePath, ToolboxKey

__all__ = ["SharedGroup", "WorkerUids"]


class WorkerUids(StrictModel):
    """A uid of its own for every worker, with the same number as its own gid: ``first`` .. ``first + count - 1``,
    recorded in the state dir's identity table (kept by each toolbox from run to run and across supervisors) and in
    the host-wide uid registry (never given to another toolbox, whatever its state dir). The default of a policy
    (``null`` in the file: every worker runs as ``sandbox_uid``)."""

    first: int = Field(ge=1000, le=4294967294, description="first uid of the range (not a uid in use on the host)")
    count: int = Field(default=65536, ge=1, le=1 << 24, description="how many uids the range holds")
    registry: AbsolutePath | None = Field(
        default=None,
        description="the directory of the host-wide uid registry, which every supervisor on the host shares so that "
        "no uid is given to two toolboxes, whatever their state dirs (root's, mode 0700); null = "
        "$AGENTS_SUPERVISE_UID_REGISTRY, else /var/lib/agents-supervise-uids",
    )

    @model_validator(mode="after")
    def _fits(self) -> WorkerUids:
        if self.first + self.count - 1 > 4294967294:
            raise problem(
                f"the range {self.first}..{self.first + self.count - 1} passes the largest uid, 4294967294",
                "first + count - 1 <= 4294967294",
            )
        return self


class SharedGroup(StrictModel):
    """An explicit grant: a group the named toolboxes get as a supplementary group, for folders they all write.
    The operator gives such a folder to the group (``chgrp -R GID DIR && chmod -R g+rwX DIR`` and ``g+s`` on its
    folders, so new files stay in the group); workers create files group-writable (umask 002)."""

    gid: int = Field(ge=1, le=4294967294, description="the group (not root's; outside the worker_uids range)")
    toolboxes: list[ToolboxKey] = Field(min_length=1, description="agent-slug/toolbox keys of the toolboxes in it")
