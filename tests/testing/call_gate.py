"""The test's end of kilnd --test-call-gate (server/test_call_gate.h).

A daemon started with gate.args holds every run at the gate until the test
lets it go, so a test can act while a call is known to be inside the
daemon, or make sure a reply cannot come before the client looks for it:

    gate = CallGate(workdir)
    d = Kilnd(workdir, gate.args)
    ...
    gate.wait_for_call()   # a run is held in the daemon now
    ...                    # kill it, send SIGTERM, ...
    gate.release()         # that run goes on

Runs the test does not care about go through inside `with gate.open():`.
"""
from __future__ import annotations

import contextlib
import errno
import os
import threading
import time
from typing import Iterator

_POLL_S = 0.005


class CallGate:
    def __init__(self, directory: str | os.PathLike):
        self.path = os.path.join(str(directory), "call-gate")
        os.mkfifo(self.path, 0o600)
        self._fd: int | None = None

    @property
    def args(self) -> list[str]:
        """The daemon flags that put its runs behind this gate."""
        return ["--test-call-gate", self.path]

    def _try_open(self) -> bool:
        """Opens our end if a run is held: the daemon opens its end when a
        run reaches the gate, and until then a non-blocking open of ours
        fails with ENXIO."""
        if self._fd is None:
            try:
                self._fd = os.open(self.path, os.O_WRONLY | os.O_NONBLOCK | os.O_CLOEXEC)
            except OSError as e:
                if e.errno != errno.ENXIO:
                    raise
        return self._fd is not None

    def wait_for_call(self, timeout_s: float = 120.0) -> None:
        """Returns once a run is held at the gate.

        Call it before the run's call, or after the previous run let through
        has finished (its reply came): until that run's end of the pipe is
        closed, it would count as held. The deadline only turns a call that
        never comes into a failure."""
        deadline = time.monotonic() + timeout_s
        while not self._try_open():
            if time.monotonic() > deadline:
                raise AssertionError(f"no run reached the call gate in {timeout_s} s")
            time.sleep(_POLL_S)

    def release(self, timeout_s: float = 120.0) -> None:
        """Lets the run held at the gate (waiting for one first) go on."""
        self.wait_for_call(timeout_s)
        self._let_go()

    def _let_go(self) -> None:
        fd, self._fd = self._fd, None
        try:
            os.write(fd, b"g")
        except BrokenPipeError:  # the daemon died at the gate: nothing to let go
            pass
        finally:
            os.close(fd)

    def forget(self) -> None:
        """Drops our end after the daemon holding a run died."""
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    @contextlib.contextmanager
    def open(self) -> Iterator[None]:
        """Lets every run through until the block ends (from a thread, since
        the call that makes them blocks this one)."""
        done = threading.Event()

        def let_through() -> None:
            while not done.is_set():
                if self._try_open():
                    self._let_go()
                else:
                    time.sleep(_POLL_S)

        thread = threading.Thread(target=let_through, name="call-gate-open", daemon=True)
        thread.start()
        try:
            yield
        finally:
            done.set()
            thread.join()

    def close(self) -> None:
        """Lets a held run go (our end of the pipe closes) and removes the pipe."""
        self.forget()
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            pass
