"""The ``command`` backend's processes: each command in its own process group, stopped as a group
(on a timeout, at exit, on SIGTERM / SIGHUP), and its output read as it comes (the tail of each
stream, the last result line)."""
from __future__ import annotations

import atexit
import json
import os
import selectors
import signal
import subprocess
import threading
import time

TAIL_BYTES = 256 * 1024
"""Bytes of each output stream kept (the end of it)."""
MAX_LINE_BYTES = 1 << 20
"""A longer stdout line is not read as a result line."""
DRAIN_S = 0.5
"""After the command's main process exits, how long its output is still read (a background
child holding the pipe open does not hold the trial)."""


def parse_result(stdout: str) -> dict | None:
    """The last stdout line that is a JSON object with a step time, or None."""
    for line in reversed(stdout.splitlines()):
        d = _result_line(line)
        if d is not None:
            return d
    return None


def _result_line(line: str) -> dict | None:
    line = line.strip()
    if not line.startswith("{"):
        return None
    try:
        d = json.loads(line)
    except ValueError:
        return None
    return d if isinstance(d, dict) and ("iteration_time_s" in d or "step_time_s" in d) else None


# ------------------------------------------------------------------ processes
_LIVE: dict[int, tuple[subprocess.Popen, float]] = {}     # pid -> (process, its grace period)
_LIVE_LOCK = threading.RLock()      # re-entrant: the signal handler may run while its thread holds it
_HANDLED_SIGNALS = (signal.SIGTERM, signal.SIGHUP)
_CLOSING = False


def _group_alive(pgid: int) -> bool:
    """Whether a process of the group still runs. Zombies do not count: an orphan is reaped by
    init, which in some containers takes a second or more."""
    try:
        os.killpg(pgid, 0)
    except (ProcessLookupError, PermissionError):
        return False
    try:
        entries = os.listdir("/proc")
    except OSError:
        return True
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as fh:
                fields = fh.read().rsplit(b")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if len(fields) > 2 and int(fields[2]) == pgid and fields[0] not in (b"Z", b"X"):
            return True
    return not os.path.isdir("/proc/self")      # no /proc: trust kill()


def stop_group(proc: subprocess.Popen, grace_s: float) -> None:
    """SIGTERM to the command's whole process group, SIGKILL to what is left after ``grace_s``;
    the main process is reaped."""
    pgid = proc.pid
    try:
        os.killpg(pgid, signal.SIGTERM)
    except (ProcessLookupError, PermissionError):
        pass
    end = time.monotonic() + grace_s
    while True:
        proc.poll()                         # reap the leader: a zombie still counts in its group
        if not _group_alive(pgid):
            break
        if time.monotonic() >= end:
            try:
                os.killpg(pgid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
            break
        time.sleep(0.02)
    try:
        proc.wait(timeout=5)
    except subprocess.TimeoutExpired:
        pass


def stop_all() -> None:
    """Stop every command still running, and start no more (at exit, on SIGTERM/SIGHUP: a
    measurement thread the study gave up on may still be about to start one)."""
    global _CLOSING
    with _LIVE_LOCK:
        _CLOSING = True
        live = list(_LIVE.values())
        _LIVE.clear()
    for proc, _ in live:
        try:
            os.killpg(proc.pid, signal.SIGTERM)
        except (ProcessLookupError, PermissionError):
            pass
    end = time.monotonic() + min(max([g for _, g in live] or [0.0]), 5.0)
    for proc, _ in live:
        while _group_alive(proc.pid) and time.monotonic() < end:
            proc.poll()
            time.sleep(0.02)
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


atexit.register(stop_all)


def _on_signal(signum, frame):
    stop_all()
    signal.signal(signum, signal.SIG_DFL)     # then die of it, as without this handler
    os.kill(os.getpid(), signum)


def _install_signal_handlers() -> None:
    if threading.current_thread() is not threading.main_thread():
        return
    for sig in _HANDLED_SIGNALS:
        try:
            if signal.getsignal(sig) == signal.SIG_DFL:
                signal.signal(sig, _on_signal)
        except (ValueError, OSError):
            pass


class _Sink:
    """One output stream read as it comes: its last TAIL_BYTES, and (stdout) the last result line."""

    def __init__(self, want_result: bool):
        self.tail = bytearray()
        self.want_result = want_result
        self.partial = bytearray()      # the current, unfinished line
        self.overlong = False           # the current line went past MAX_LINE_BYTES
        self.result: dict | None = None

    def feed(self, chunk: bytes) -> None:
        self.tail += chunk
        if len(self.tail) > TAIL_BYTES:
            del self.tail[: len(self.tail) - TAIL_BYTES]
        if not self.want_result:
            return
        first = chunk.find(b"\n")
        if first < 0:
            self._extend(chunk)
            return
        self._extend(chunk[:first])          # the line that was under way ends here
        self.finish()
        last = chunk.rfind(b"\n")
        if last > first:                     # then whole lines, of which the last result wins
            d = self._last_result(chunk, first + 1, last)
            if d is not None:
                self.result = d
        self._extend(chunk[last + 1:])

    def _extend(self, data: bytes) -> None:
        if self.overlong:
            return
        self.partial += data
        if len(self.partial) > MAX_LINE_BYTES:
            self.partial = bytearray()
            self.overlong = True

    @staticmethod
    def _last_result(buf: bytes, start: int, end: int) -> dict | None:
        """The last result line among the lines of buf[start:end] (separated by newlines)."""
        while end > start:
            brace = buf.rfind(b"{", start, end)
            if brace < 0:
                return None
            nl = buf.rfind(b"\n", start, brace)
            line_start = start if nl < 0 else nl + 1
            nl = buf.find(b"\n", brace, end)
            line_end = end if nl < 0 else nl
            if line_end - line_start <= MAX_LINE_BYTES:
                d = _result_line(buf[line_start:line_end].decode("utf-8", "replace"))
                if d is not None:
                    return d
            end = line_start - 1
        return None

    def finish(self) -> None:
        """The line under way is complete (a newline came, or the stream closed)."""
        if self.want_result and not self.overlong and self.partial:
            d = _result_line(self.partial.decode("utf-8", "replace"))
            if d is not None:
                self.result = d
        self.partial = bytearray()
        self.overlong = False

    def text(self) -> str:
        return self.tail.decode("utf-8", "replace")


def _pump(proc: subprocess.Popen, out: _Sink, err: _Sink, deadline: float) -> bool:
    """Read both streams until they close (or DRAIN_S after the main process exited); False on
    the deadline."""
    sel = selectors.DefaultSelector()
    sinks = {}
    for stream, sink in ((proc.stdout, out), (proc.stderr, err)):
        sel.register(stream, selectors.EVENT_READ)
        sinks[stream.fileno()] = sink
    exited_at = None
    try:
        while sel.get_map():
            now = time.monotonic()
            if now >= deadline:
                return False
            if exited_at is not None and now - exited_at > DRAIN_S:
                break
            for key, _ in sel.select(timeout=min(deadline - now, 0.1)):
                chunk = os.read(key.fd, 1 << 16)
                if chunk:
                    sinks[key.fd].feed(chunk)
                else:
                    sel.unregister(key.fileobj)
            if exited_at is None and proc.poll() is not None:
                exited_at = time.monotonic()
        left = deadline - time.monotonic()
        if left <= 0:
            return False
        try:
            proc.wait(timeout=left)
        except subprocess.TimeoutExpired:
            return False
        return True
    finally:
        sel.close()
        out.finish()
        err.finish()
        proc.stdout.close()
        proc.stderr.close()
