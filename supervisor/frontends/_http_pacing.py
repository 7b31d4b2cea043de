"""How long a request shed past the server's work bound (``frontends.http.max_requests_in_flight``) is told to wait:
its ``Retry-After``, paced so that clients which honour it keep the server's refusals at about half its admissions
(:data:`SHED_SHARE`), however many clients there are.

Past saturation every refusal still costs the server a request head's parse and a write. With a fixed wait of 1 s,
N clients held off come back N times a second whatever the server admits meanwhile: at 1,024 sessions against a
bound of 64 the server spent more of its time refusing than answering, and the calls it admitted waited behind the
refusals. The wait is therefore set anew each second (:func:`plan_retry_after`, pure) from the one before and what
that second saw: scaled by the ratio of requests shed to :data:`SHED_SHARE` of the requests admitted (grown when it
shed more, at most doubled in a second and at most :data:`MAX_RETRY_AFTER_S`; shrunk when it shed fewer), and back
to 1 s once a second sheds nothing. A refusal costs the server about a third of a trivial call's work, so at that
share refusing takes about a seventh of its time. A second that admitted nothing (every place held by long calls)
doubles the wait. Every client is told the same wait in a given second; spreading the retries is the client's part
(jitter), as it is of every retrying client.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

__all__ = ["MAX_RETRY_AFTER_S", "PACING_WINDOW_S", "SHED_SHARE", "ShedPacing", "plan_retry_after"]

#: the longest a shed request is told to wait (seconds)
MAX_RETRY_AFTER_S = 30
#: how often the wait is set anew (seconds)
PACING_WINDOW_S = 1.0
#: the refusals a second the pacing aims at, as a share of the admissions of that second
SHED_SHARE = 0.5


def plan_retry_after(wait_s: int, shed: int, admitted: int) -> int:
    """The ``Retry-After`` (whole seconds) of the next window, from this window's ``wait_s`` and the requests it
    shed and admitted. Pure."""
    if shed == 0:
        return 1
    if admitted == 0:
        return min(MAX_RETRY_AFTER_S, 2 * wait_s)
    scaled = math.ceil(wait_s * shed / (admitted * SHED_SHARE))
    return max(1, min(MAX_RETRY_AFTER_S, 2 * wait_s, scaled))


@dataclass
class ShedPacing:
    """The wait shed requests are told, counted per :data:`PACING_WINDOW_S` (trio time given by the caller)."""

    wait_s: int = 1
    window_start: float = -math.inf
    shed: int = 0
    admitted: int = 0

    def admit(self) -> None:
        """A request was admitted."""
        self.admitted += 1

    def shed_one(self, now: float) -> int:
        """A request is shed at ``now``: the ``Retry-After`` it is told."""
        elapsed = now - self.window_start
        if elapsed >= PACING_WINDOW_S:
            # a window ended; when it ended more than one window ago, the second before this shed nothing
            fresh = elapsed >= 2 * PACING_WINDOW_S
            self.wait_s = 1 if fresh else plan_retry_after(self.wait_s, self.shed, self.admitted)
            self.window_start, self.shed, self.admitted = now, 0, 0
        self.shed += 1
        return self.wait_s
