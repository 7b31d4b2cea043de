"""Leader/followers (toolboxes/_serving.py) with real threads: who runs a job, bounds, order, stopping."""

from __future__ import annotations

import queue
import threading

import pytest

from toolboxes._serving import LeaderFollowers

WAIT_S = 10


class Harness:
    """Feeds ``read`` from a queue (a list of jobs, or ``None`` to stop) and records who read and ran what."""

    def __init__(self, max_jobs: int, name: str) -> None:
        self.name = name
        self.inputs: queue.Queue[list[str] | None] = queue.Queue()
        self.reads: queue.Queue[int] = queue.Queue()
        self.read_by: dict[str, int] = {}
        self.ran_by: dict[str, int] = {}
        self.started: queue.Queue[str] = queue.Queue()
        self.release: dict[str, threading.Event] = {}
        self.running = 0
        self.most_running = 0
        self.lock = threading.Lock()
        self.serving: LeaderFollowers[str] = LeaderFollowers(self.read, self.run, max_jobs, name=name)

    def read(self) -> list[str] | None:
        jobs = self.inputs.get(timeout=WAIT_S)
        self.reads.put(threading.get_ident())
        with self.lock:
            for job in jobs or []:
                self.read_by[job] = threading.get_ident()
                self.release.setdefault(job, threading.Event())
        return jobs

    def run(self, job: str) -> None:
        with self.lock:
            self.ran_by[job] = threading.get_ident()
            self.running += 1
            self.most_running = max(self.most_running, self.running)
        self.started.put(job)
        assert self.release[job].wait(WAIT_S)
        with self.lock:
            self.running -= 1

    def next_started(self) -> str:
        return self.started.get(timeout=WAIT_S)

    def threads(self) -> list[threading.Thread]:
        return [t for t in threading.enumerate() if t.name.startswith(f"{self.name}-")]


def test_a_job_runs_on_the_thread_that_read_it() -> None:
    h = Harness(max_jobs=4, name="same")
    h.serving.start()
    for job in ("a", "b", "c"):
        h.inputs.put([job])
        assert h.next_started() == job
    assert all(h.ran_by[j] == h.read_by[j] for j in "abc")
    for e in h.release.values():
        e.set()
    h.inputs.put(None)
    assert h.serving.stopped.wait(WAIT_S)


def test_reads_that_give_no_job_leave_the_same_thread_reading_and_wake_none() -> None:
    """A reply, a cancel or an inline call (a read that gives no job to run) keeps the reader leading: the next read
    is made on the same thread, and no second thread is started or woken for it (a hand-off per call was a futex
    wake and a thread switch)."""
    h = Harness(max_jobs=4, name="keep")
    h.serving.start()
    for _ in range(20):
        h.inputs.put([])
    readers = {h.reads.get(timeout=WAIT_S) for _ in range(20)}
    assert len(readers) == 1
    assert len(h.threads()) == 1
    h.inputs.put(["a"])  # a job: the reader runs it and hands the lead on
    assert h.next_started() == "a"
    assert h.ran_by["a"] in readers
    assert h.reads.get(timeout=WAIT_S) == h.ran_by["a"]  # the read that gave "a"
    h.inputs.put([])
    assert h.reads.get(timeout=WAIT_S) != h.ran_by["a"]  # the new leader reads while "a" runs
    h.release["a"].set()
    h.inputs.put(None)
    assert h.serving.stopped.wait(WAIT_S)


def test_reading_goes_on_while_max_jobs_run_and_the_rest_wait_in_order() -> None:
    h = Harness(max_jobs=2, name="bound")
    h.serving.start()
    h.inputs.put(["a", "b", "c", "d"])
    assert {h.next_started(), h.next_started()} == {"a", "b"}
    # Both job slots are taken; a reader must still be there (a cancel or a reply would come this way).
    while not h.reads.empty():
        h.reads.get()
    h.inputs.put([])
    h.inputs.put([])
    h.inputs.put(["e"])
    readers = {h.reads.get(timeout=WAIT_S) for _ in range(3)}
    assert not readers & {h.ran_by["a"], h.ran_by["b"]}
    assert h.started.empty()  # c, d and e wait: two jobs run already
    h.release["a"].set()
    assert h.next_started() == "c"
    h.release["b"].set()
    assert h.next_started() == "d"
    h.release["c"].set()
    assert h.next_started() == "e"
    for e in h.release.values():
        e.set()
    assert h.most_running == 2
    assert len(h.threads()) <= 3  # max_jobs + 1
    h.inputs.put(None)
    assert h.serving.stopped.wait(WAIT_S)


def test_after_stop_queued_jobs_never_start() -> None:
    h = Harness(max_jobs=1, name="stop")
    h.serving.start()
    h.inputs.put(["a", "b"])
    assert h.next_started() == "a"
    h.inputs.put(None)
    assert h.serving.stopped.wait(WAIT_S)
    h.release["a"].set()
    h.release["b"].set()
    for thread in h.threads():  # every server thread ends once serving stopped
        thread.join(WAIT_S)
        assert not thread.is_alive()
    assert "b" not in h.ran_by
    assert h.started.empty()


def test_max_jobs_must_be_positive() -> None:
    with pytest.raises(ValueError, match="at least 1"):
        LeaderFollowers(lambda: None, lambda job: None, 0)


def test_serving_goes_on_when_no_more_threads_can_be_started(monkeypatch: pytest.MonkeyPatch) -> None:
    """The system may refuse a thread (RLIMIT_AS, pids.max): jobs still run, one by one on the threads there are."""

    h = Harness(max_jobs=4, name="starved")
    real_start = threading.Thread.start
    started: list[str] = []

    def start(self: threading.Thread) -> None:
        if self.name.startswith("starved-") and started:
            raise RuntimeError("can't start new thread")
        started.append(self.name)
        real_start(self)

    monkeypatch.setattr(threading.Thread, "start", start)
    h.serving.start()
    h.inputs.put(["a"])
    assert h.next_started() == "a"  # the only thread read it and runs it (no one else can lead)
    h.inputs.put(["b"])
    h.release["a"].set()
    assert h.next_started() == "b"  # after a, the same thread reads again and runs b
    h.release["b"].set()
    assert len(started) == 1 and len(h.threads()) == 1
    h.inputs.put(None)
    assert h.serving.stopped.wait(WAIT_S)
