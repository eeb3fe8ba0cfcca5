"""Group commit: changes that arrive while an fsync runs share the next one; a change is reported
durable only after an fsync that covers its entry; the event loop keeps running during an fsync;
without fsync, a commit is written on the loop."""
from __future__ import annotations

import asyncio
import os
import time

import pytest

from a3fast.durable.journal import Journal, JournalFailed, read_entries

pytest.importorskip("starlette")


class SlowDisk:
    """os.fsync as a disk that takes `seconds`, recording how many journal bytes each fsync covered."""

    def __init__(self, monkeypatch, seconds: float):
        self.seconds = seconds
        self.covered: list[int] = []
        real = os.fsync

        def fsync(fd):
            size = os.fstat(fd).st_size
            time.sleep(self.seconds)
            real(fd)
            self.covered.append(size)
        monkeypatch.setattr(os, "fsync", fsync)


async def _change(journal: Journal, disk: SlowDisk, k: int, acknowledged: dict) -> None:
    journal.append(b"change %d" % k)
    end = journal.size
    await journal.durable()
    # acknowledged only once some finished fsync covered this entry's last byte
    acknowledged[k] = any(covered >= end for covered in disk.covered)


def _scheduled(journal: Journal) -> bool:
    """Whether a commit is under way: a task (`group`, `always`) not done, or a loop callback
    (`never`: the write's, then its waiters' wake)."""
    commit = journal._commit
    return commit is not None and (isinstance(commit, asyncio.Handle) or not commit.done())


def test_group_commit_shares_the_next_fsync_among_changes_that_arrive_during_one(tmp_path, monkeypatch):
    disk = SlowDisk(monkeypatch, 0.05)
    journal = Journal(tmp_path / "journal", fsync="group")
    acknowledged: dict[int, bool] = {}

    async def main():
        first = asyncio.ensure_future(_change(journal, disk, 0, acknowledged))
        await asyncio.sleep(0.01)                  # the first fsync is now running
        rest = [asyncio.ensure_future(_change(journal, disk, k, acknowledged)) for k in range(1, 21)]
        await asyncio.gather(first, *rest)
    asyncio.run(main())
    assert len(disk.covered) == 2                  # one for the first, one shared by the twenty
    assert all(acknowledged[k] for k in range(21))
    journal.close()
    assert len(read_entries((tmp_path / "journal").read_bytes()).entries) == 21


def test_the_event_loop_keeps_serving_while_an_fsync_runs(tmp_path, monkeypatch):
    disk = SlowDisk(monkeypatch, 0.1)
    journal = Journal(tmp_path / "journal", fsync="group")
    ticks = []

    async def main():
        async def ticker():
            while True:
                ticks.append(time.perf_counter())
                await asyncio.sleep(0.005)
        tick = asyncio.ensure_future(ticker())
        await asyncio.sleep(0)
        started = time.perf_counter()
        await _change(journal, disk, 0, {})
        tick.cancel()
        return started
    started = asyncio.run(main())
    assert len([t for t in ticks if t > started]) >= 5   # ~20 would run in 0.1 s; 0 if blocked
    journal.close()


def test_fsync_always_makes_one_fsync_per_change(tmp_path, monkeypatch):
    disk = SlowDisk(monkeypatch, 0.0)
    journal = Journal(tmp_path / "journal", fsync="always")
    acknowledged: dict[int, bool] = {}

    async def main():
        await asyncio.gather(*(_change(journal, disk, k, acknowledged) for k in range(5)))
    asyncio.run(main())
    assert len(disk.covered) == 5 and all(acknowledged.values())
    journal.close()


def test_fsync_never_writes_before_acknowledging_but_never_fsyncs(tmp_path, monkeypatch):
    disk = SlowDisk(monkeypatch, 0.0)
    journal = Journal(tmp_path / "journal", fsync="never")

    async def main():
        journal.append(b"change")
        await journal.durable()
        return (tmp_path / "journal").read_bytes()
    on_disk = asyncio.run(main())
    assert read_entries(on_disk).entries == [b"change"]
    assert disk.covered == []
    journal._writer.shutdown()


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full (a device whose writes fail with ENOSPC)")
def test_a_failed_write_fails_the_journal_for_good():
    from pathlib import Path

    from a3fast.durable.journal import JournalFailed

    journal = Journal(Path("/dev/full"), fsync="never")   # every write: ENOSPC, a full disk
    journal.append(b"change 1")

    async def main():
        with pytest.raises(JournalFailed, match="No space left on device"):
            await journal.durable()
        with pytest.raises(JournalFailed):
            await journal.durable()
    asyncio.run(main())
    assert journal.failed is not None
    with pytest.raises(JournalFailed):
        journal.append(b"change 2")
    with pytest.raises(JournalFailed):
        journal.sync()
    journal.close()   # closes without writing again


def test_fsync_never_commits_on_the_event_loop_without_the_writer_thread(tmp_path):
    import threading

    journal = Journal(tmp_path / "journal", fsync="never")
    held = threading.Event()
    journal._writer.submit(held.wait, 30)      # the writer thread busy for as long as the test wants

    async def main():
        journal.append(b"change 1")
        journal.append(b"change 2")
        await asyncio.wait_for(journal.durable(), 10)
        return (tmp_path / "journal").read_bytes()
    try:
        assert read_entries(asyncio.run(main())).entries == [b"change 1", b"change 2"]
        assert journal.lag == 0
    finally:
        held.set()
    journal.close()


def test_fsync_never_writes_a_commit_whole_before_after_write(tmp_path):
    trace = tmp_path / "trace.jsonl"
    fd = os.open(trace, os.O_WRONLY | os.O_CREAT | os.O_APPEND)
    journal = Journal(tmp_path / "journal", fsync="never")
    seen: list[tuple[bytes, list[bytes]]] = []
    journal.before_write = lambda pieces: [(fd, b'{"seq":1}\n')]      # the trace lines the commit carries
    journal.after_write = lambda: seen.append((trace.read_bytes(),
                                               read_entries((tmp_path / "journal").read_bytes()).entries))

    async def main():
        journal.append(b"change")
        await journal.durable()
    asyncio.run(main())
    assert seen == [(b'{"seq":1}\n', [b"change"])]
    journal.close()
    os.close(fd)


def test_fsync_never_changes_made_in_one_turn_of_the_loop_share_one_commit(tmp_path):
    journal = Journal(tmp_path / "journal", fsync="never")
    commits: list[int] = []
    journal.after_write = lambda: commits.append(journal.lag)

    async def change(k: int) -> None:
        journal.append(b"change %d" % k)
        await journal.durable()

    async def main():
        await asyncio.gather(*(change(k) for k in range(5)))
        await change(5)                            # a later turn: a commit of its own
    asyncio.run(main())
    assert len(commits) == 2
    assert read_entries((tmp_path / "journal").read_bytes()).entries == [b"change %d" % k for k in range(6)]
    journal.close()


def test_a_cancelled_wait_leaves_the_commit_and_the_other_waits_alone(tmp_path, monkeypatch):
    disk = SlowDisk(monkeypatch, 0.05)
    journal = Journal(tmp_path / "journal", fsync="group")
    acknowledged: dict[int, bool] = {}

    async def main():
        waits = [asyncio.ensure_future(_change(journal, disk, k, acknowledged)) for k in range(3)]
        await asyncio.sleep(0.01)                  # the fsync of all three is now running
        waits[1].cancel()
        await asyncio.wait_for(asyncio.gather(waits[0], waits[2]), 10)
        assert waits[1].cancelled()
    asyncio.run(main())
    assert acknowledged == {0: True, 2: True}
    assert len(disk.covered) == 1
    journal.close()
    assert read_entries((tmp_path / "journal").read_bytes()).entries == [b"change %d" % k for k in range(3)]


def test_a_commit_that_fails_raises_in_every_wait_and_starts_no_other(tmp_path):
    journal = Journal(tmp_path / "journal", fsync="never")
    commits: list[int] = []

    def before_write(pieces):
        commits.append(1)
        raise ValueError("the trace lines could not be made")
    journal.before_write = before_write

    async def change(k: int) -> None:
        journal.append(b"change %d" % k)
        await journal.durable()

    async def main():
        return await asyncio.wait_for(asyncio.gather(*(change(k) for k in range(4)), return_exceptions=True), 10)
    raised = asyncio.run(main())
    assert [type(e) for e in raised] == [ValueError] * 4
    assert commits == [1]                          # the waits were told, not left to try again
    journal.before_write = None
    journal.close()                                # the entries were kept for the next commit
    assert read_entries((tmp_path / "journal").read_bytes()).entries == [b"change %d" % k for k in range(4)]


@pytest.mark.parametrize("before_its_start", [False, True])
def test_a_cancelled_commit_cancels_its_waits_rather_than_leave_them(tmp_path, monkeypatch, before_its_start):
    SlowDisk(monkeypatch, 0.05)
    journal = Journal(tmp_path / "journal", fsync="group")

    async def change(k: int) -> None:
        journal.append(b"change %d" % k)
        await journal.durable()

    async def main():
        waits = [asyncio.ensure_future(change(k)) for k in range(3)]
        await asyncio.sleep(0 if before_its_start else 0.01)
        journal._commit.cancel()
        done, pending = await asyncio.wait(waits, timeout=5)
        for wait in pending:
            wait.cancel()
        return [wait.cancelled() for wait in waits], not pending
    cancelled, none_left = asyncio.run(main())
    assert none_left and cancelled == [True] * 3
    journal.close()


@pytest.mark.parametrize("fsync", ["group", "never"])
def test_a_commit_that_fails_with_no_one_waiting_is_still_reported(tmp_path, monkeypatch, fsync):
    journal = Journal(tmp_path / "journal", fsync=fsync)

    def broken(writes, fsync):
        time.sleep(0.05 if fsync else 0)
        raise RuntimeError("the writer broke")
    monkeypatch.setattr(journal, "_write", broken)
    reported: list[dict] = []

    async def main():
        asyncio.get_running_loop().set_exception_handler(lambda _, context: reported.append(context))
        journal.append(b"change")
        wait = asyncio.ensure_future(journal.durable())
        await asyncio.sleep(0 if fsync == "never" else 0.01)
        wait.cancel()                              # no one waits when the commit fails
        await asyncio.sleep(0.2)
        import gc
        gc.collect()                               # asyncio reports an unretrieved error when it is freed
    asyncio.run(main())
    assert any("the writer broke" in str(context.get("exception")) for context in reported)
    journal._writer.shutdown()


@pytest.mark.parametrize("then", ["sync", "close"])
def test_a_commit_a_blocking_sync_left_nothing_to_write_neither_writes_nor_fsyncs(tmp_path, monkeypatch, then):
    """A checkpoint's (or the service's stop's) blocking `sync` between a commit's scheduling and
    its run writes and fsyncs what the commit would have: the commit touches neither the file nor
    the writer thread (after `close`, both are gone) and its waits are told the entries are durable."""
    disk = SlowDisk(monkeypatch, 0)
    journal = Journal(tmp_path / "journal", fsync="group")

    async def main():
        journal.append(b"change")
        wait = asyncio.ensure_future(journal.durable())
        await asyncio.sleep(0)                     # the wait has scheduled its commit, not yet run
        assert _scheduled(journal)
        getattr(journal, then)()
        await asyncio.wait_for(wait, 10)
    asyncio.run(main())
    assert len(disk.covered) == 1                  # the sync's fsync alone
    assert journal.failed is None
    if then == "sync":
        journal.close()
    assert read_entries((tmp_path / "journal").read_bytes()).entries == [b"change"]


@pytest.mark.parametrize("fsync", ["group", "never"])
def test_waits_end_in_the_order_they_began_even_when_a_sync_made_the_later_ones_durable_first(tmp_path, monkeypatch,
                                                                                                fsync):
    """A wait that begins once a blocking `sync` (a checkpoint's) has made every entry durable,
    while an earlier wait is still to be woken by its commit, ends after that earlier wait: the
    requests a shell started together are answered in their order, whatever each reads after its
    wait (a stream's answers join its slice in order)."""
    SlowDisk(monkeypatch, 0)
    journal = Journal(tmp_path / "journal", fsync=fsync)
    ended: list[str] = []

    async def wait(name: str) -> None:
        await journal.durable()
        ended.append(name)

    async def main():
        journal.append(b"first")
        first = asyncio.ensure_future(wait("first"))
        await asyncio.sleep(0)                     # its commit is scheduled, not yet run
        assert _scheduled(journal)
        journal.append(b"second")
        journal.sync()                             # both entries durable before the commit runs
        second = asyncio.ensure_future(wait("second"))
        await asyncio.wait_for(asyncio.gather(second, first), 10)
        # with no wait left to wake, a wait whose entries are durable ends at once, as before
        assert await asyncio.wait_for(journal.durable(), 10) is None and not journal._waiters
    asyncio.run(main())
    assert ended == ["first", "second"]
    journal.close()
    assert read_entries((tmp_path / "journal").read_bytes()).entries == [b"first", b"second"]


@pytest.mark.parametrize("fsync", ["always", "group", "never"])
def test_trace_lines_are_written_and_readable_only_with_their_entry(tmp_path, fsync):
    # three placements in one turn of the loop: with `always` each commit takes one entry, and the
    # trace a reader may read (trace_size) holds exactly the records of the entries made durable
    from a3fast.schema import parse_declaration
    from a3fast.service.state import ServiceState

    task = {"v": "1.0", "capabilities": [{"name": "order.investigate", "version": 1}]}
    state = ServiceState(tmp_path / "state", fsync=fsync, log=lambda message: None)
    state.open()
    try:
        state.put_agents([parse_declaration({"v": "1.0", "agent": {"name": n, "namespace": "ns"},
                                             "capabilities": [{"name": "order.investigate", "version": 1}],
                                             "clearances": [], "residency": ["eu"]}) for n in ("a", "b")])
        state.journal.sync()
        readable: list[tuple[int, int]] = []     # (records a reader may read, entries on disk) per commit
        after = state.journal.after_write

        def noted():
            after()
            with open(state.trace_path, "rb") as fh:
                records = fh.read()[:state.trace_size].count(b"\n")
            readable.append((records, len(read_entries((state.journal.path).read_bytes(), "j").entries)))
        state.journal.after_write = noted

        async def main():
            for _ in range(3):
                state.place(task)
            await state.durable()
        asyncio.run(main())
        # 3 records a placement; the journal holds the put and then one entry a placement
        expected = [(3, 2), (6, 3), (9, 4)] if fsync == "always" else [(9, 4)]
        assert readable == expected
    finally:
        state.close()


@pytest.mark.parametrize("fsync", ["group", "never"])
def test_a_commit_that_fails_part_way_leaves_none_of_its_entries_for_the_next_start(tmp_path, fsync):
    # the file may grow by about two entries (RLIMIT_FSIZE, in a process of its own): a group
    # commit of three changes fails part-way, every one is answered with the failure, and the
    # restart holds none of them, though two were written whole before the third failed
    import subprocess
    import sys
    import textwrap

    script = textwrap.dedent("""
        import asyncio, os, resource, signal, sys
        from a3fast.schema import parse_declaration
        from a3fast.service.state import ServiceState

        def decl(n):
            return {"v": "1.0", "agent": {"name": n, "namespace": "ns"}, "clearances": [],
                    "capabilities": [{"name": "order.investigate", "version": 1}], "residency": ["eu"]}
        state = ServiceState(sys.argv[1], fsync=sys.argv[2], log=lambda m: None)
        state.open()
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        state.put_agents([parse_declaration(decl("base"))])
        state.journal.sync()
        size = os.path.getsize(state.journal.path)
        resource.setrlimit(resource.RLIMIT_FSIZE, (3 * size + 10, resource.RLIM_INFINITY))

        async def put(name):
            try:
                state.put_agents([parse_declaration(decl(name))])
                await state.durable()
                return "acknowledged"
            except Exception as exc:
                return type(exc).__name__

        async def main():
            print(*await asyncio.gather(*(put(n) for n in ("x1", "x2", "x3"))))
        asyncio.run(main())
        os._exit(0)
    """)
    state = tmp_path / "state"
    run = subprocess.run([sys.executable, "-c", script, str(state), fsync], capture_output=True, text=True,
                         timeout=60)
    assert run.stdout.split() == ["JournalFailed"] * 3, run.stdout + run.stderr
    from a3fast.service.state import ServiceState

    restarted = ServiceState(state, log=lambda message: None)
    restarted.open()
    try:
        assert restarted.fleet.names() == ["base"]
    finally:
        restarted.close()


def test_a_sync_queued_behind_a_failing_commit_writes_nothing_after_the_cut(tmp_path):
    # a checkpoint's blocking sync on the loop, queued on the writer thread behind a commit that
    # fails: it must fail too, not write B after the cut commit and call it durable (B was
    # answered with the failure). In a process of its own: the file size limit is the process's
    import subprocess
    import sys
    import textwrap

    script = textwrap.dedent("""
        import asyncio, resource, signal, sys
        from pathlib import Path
        from a3fast.durable.journal import Journal, JournalFailed, read_entries

        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        path = Path(sys.argv[1])

        async def main():
            journal = Journal(path, fsync="group")
            journal.append(b"Jkept")
            await journal.durable()
            resource.setrlimit(resource.RLIMIT_FSIZE, (4096, resource.RLIM_INFINITY))
            journal.append(b"Jbig" + b"x" * 8000)            # its commit fails: past the limit
            first = asyncio.ensure_future(journal.durable())
            await asyncio.sleep(0)
            await asyncio.sleep(0)                           # that commit is on the writer thread
            journal.append(b"Jsmall")
            second = asyncio.ensure_future(journal.durable())
            try:
                journal.sync()
                print("synced")
            except JournalFailed:
                print("sync failed")
            for wait in (first, second):
                try:
                    await wait
                    print("durable")
                except JournalFailed:
                    print("failed")
            print(*read_entries(path.read_bytes()).entries)
        asyncio.run(main())
    """)
    run = subprocess.run([sys.executable, "-c", script, str(tmp_path / "journal")], capture_output=True,
                         text=True, timeout=60)
    assert run.stdout.splitlines() == ["sync failed", "failed", "failed", "b'Jkept'"], run.stdout + run.stderr


@pytest.mark.parametrize("fsync", ["never", "group"])
@pytest.mark.parametrize("where", ["before_write", "_write"])
def test_a_commit_ended_by_something_not_an_error_raises_in_its_waits_rather_than_hang(tmp_path, monkeypatch,
                                                                                         where, fsync):
    # a BaseException that is not an Exception (asyncio hands it to the loop's handler) still ends
    # the commit: its waits raise it, before or after the entries left the buffer; after, the
    # journal has failed, where later waits asked for commit after commit of entries gone
    journal = Journal(tmp_path / "journal", fsync=fsync)

    class Interrupted(BaseException):
        pass

    interruptions = [Interrupted()]
    if where == "before_write":
        def before_write(pieces):
            if interruptions:
                raise interruptions.pop()
            return []
        journal.before_write = before_write
    else:
        write = journal._write

        def interrupted_write(writes, fsync):
            if interruptions:
                raise interruptions.pop()
            write(writes, fsync)
        monkeypatch.setattr(journal, "_write", interrupted_write)

    async def main():
        journal.append(b"first")
        with pytest.raises(Interrupted):
            await asyncio.wait_for(journal.durable(), 10)
        if where == "_write":
            # its entry left the buffer for a write cut short: the journal fails, as on a disk error
            with pytest.raises(JournalFailed, match="cut short"):
                journal.append(b"second")
            with pytest.raises(JournalFailed):
                await asyncio.wait_for(journal.durable(), 10)
            return
        journal.append(b"second")
        await asyncio.wait_for(journal.durable(), 10)      # nothing was taken: the journal goes on
    asyncio.run(main())
    journal.close()
    entries = read_entries((tmp_path / "journal").read_bytes()).entries
    assert entries == ([b"first", b"second"] if where == "before_write" else [])
