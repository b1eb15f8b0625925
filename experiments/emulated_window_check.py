"""Real transfers through an emulated long link, against the cost model's window physics.

    python experiments/emulated_window_check.py [--delays-ms 5,10,20] [--rate-mbit 200] [--json]

tc netem is not available on these machines, so the delay is added in user space: a
store-and-forward relay (real TCP sockets, one per direction and hop) holds every byte for the
link's serialisation at ``rate`` and then for the one-way delay, as a long fibre does. Through it
run, as separate processes speaking TCP:
- send/recv the way NCCL does it over the network: fixed-size chunks, at most W un-freed at the
  receiver, a credit returned for each chunk (NCCL_STEPS = 8 slots);
- a ring all-gather across two emulated buildings of two ranks each, the way NCCL's Simple
  protocol runs it: 4-slot steps in 2-slot slices, 8 slots in flight per connection, a slot freed
  when the receiver forwards its data, steps waiting for the left neighbour's previous step.

Each measured time is set beside ``collectives.p2p_time`` / ``collectives.ring_time`` for the same
sizes, windows, rate and delay (no fitted parameter), at every delay and two window sizes.
"""
from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import socket
import struct
import sys
import threading
import time
from collections import deque
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from autotune.costmodel import nccl as N  # noqa: E402
from autotune.costmodel.collectives import KIND_AG, _window_bound, ring_time  # noqa: E402
from autotune.costmodel.xp import SCALAR  # noqa: E402

HOST = "127.0.0.1"


# ---------------------------------------------------------------- the emulated link
def _pipe(src: socket.socket, dst: socket.socket, rate_Bps: float, delay_s: float) -> None:
    """Bytes read from ``src`` leave for ``dst`` after their serialisation at ``rate_Bps`` (queued
    behind earlier bytes) plus ``delay_s``: a link with unbounded buffering."""
    q: deque = deque()
    cv = threading.Condition()
    done = [False]

    def reader():
        last = time.perf_counter()
        while True:
            try:
                data = src.recv(65536)
            except OSError:                      # reset by a peer that has finished
                data = b""
            now = time.perf_counter()
            if not data:
                break
            depart = max(now, last) + len(data) / rate_Bps
            last = depart
            with cv:
                q.append((depart + delay_s, data))
                cv.notify()
        with cv:
            done[0] = True
            cv.notify()

    threading.Thread(target=reader, daemon=True).start()
    while True:
        with cv:
            while not q and not done[0]:
                cv.wait()
            if not q and done[0]:
                break
            due, data = q.popleft()
        wait = due - time.perf_counter()
        if wait > 0:
            time.sleep(wait)
        try:
            dst.sendall(data)
        except OSError:                          # the far end finished and closed
            return
    try:
        dst.shutdown(socket.SHUT_WR)
    except OSError:
        pass


def relay(listen: socket.socket, target_port: int, rate_Bps: float, delay_s: float) -> None:
    """Accept one connection and forward it both ways through the emulated link."""
    a, _ = listen.accept()
    b = socket.create_connection((HOST, target_port))
    for s in (a, b):
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    threading.Thread(target=_pipe, args=(a, b, rate_Bps, delay_s), daemon=True).start()
    threading.Thread(target=_pipe, args=(b, a, rate_Bps, delay_s), daemon=True).start()


def _listener() -> tuple[socket.socket, int]:
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind((HOST, 0))
    s.listen(4)
    return s, s.getsockname()[1]


def _recv_exact(s: socket.socket, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        chunk = s.recv(n - len(buf))
        if not chunk:
            raise ConnectionError("peer closed")
        buf += chunk
    return bytes(buf)


# ---------------------------------------------------------------- NCCL-style send/recv
def _p2p_receiver(port_q, out_q, size: int, chunk: int) -> None:
    ls, port = _listener()
    port_q.put(port)
    c, _ = ls.accept()
    c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    got = 0
    while got < size:
        n = min(chunk, size - got)
        _recv_exact(c, n)
        got += n
        c.sendall(b"c")                           # the slot is free: credit back to the sender
    out_q.put(time.perf_counter())
    c.close()


def measure_p2p(size: int, chunk: int, window: int, rate_Bps: float, delay_s: float) -> float:
    ctx = mp.get_context("fork")
    port_q, out_q = ctx.Queue(), ctx.Queue()
    rx = ctx.Process(target=_p2p_receiver, args=(port_q, out_q, size, chunk))
    rx.start()
    rport = port_q.get(timeout=10)
    ls, lport = _listener()
    threading.Thread(target=relay, args=(ls, rport, rate_Bps, delay_s), daemon=True).start()
    s = socket.create_connection((HOST, lport))
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    payload = os.urandom(chunk)
    t0 = time.perf_counter()
    sent, inflight = 0, 0
    while sent < size:
        while inflight >= window:
            _recv_exact(s, 1)
            inflight -= 1
        n = min(chunk, size - sent)
        s.sendall(payload[:n])
        sent += n
        inflight += 1
    t_end = out_q.get(timeout=600)
    rx.join(10)
    s.close()
    return t_end - t0


def model_p2p(size: int, chunk: int, window: int, rate_Bps: float, delay_s: float) -> float:
    """collectives.p2p_time's window bound for these chunk and window sizes (no NCCL overhead)."""
    G = -(-size // chunk)
    s = size / G / rate_Bps
    return float(_window_bound(float(G), float(window), s, s + 2.0 * delay_s, SCALAR)) + delay_s


# ---------------------------------------------------------------- NCCL-style ring all-gather
def _ring_rank(rank: int, n: int, size: int, buffer_bytes: int, ports, start_evt, out_q) -> None:
    """One rank of a Simple-protocol ring all-gather: n-1 steps of size/n bytes per loop, each in
    2 slices; 4 slices (8 slots) in flight per connection; a slice's slot is freed (credit sent
    left) when this rank forwards it, or on arrival at the loop's last step."""
    slot = buffer_bytes // N.NCCL_STEPS
    chunk = slot * N.RING_SLOTS_PER_STEP[N.PROTO_SIMPLE]
    nsl = N.RING_SLOTS_PER_STEP[N.PROTO_SIMPLE] // N.RING_SLOTS_PER_SLICE[N.PROTO_SIMPLE]
    W = N.in_flight_slices(N.PROTO_SIMPLE)
    k = n - 1
    loops = max(1, -(-size // (n * chunk)))
    step_bytes = size // (n * loops)
    slice_bytes = max(1, step_bytes // nsl)
    G = k * loops * nsl
    ls = ports["listen"][rank]
    right = socket.create_connection((HOST, ports["send_to"][rank]))
    left, _ = ls.accept()
    for s in (left, right):
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    arrived = [threading.Event() for _ in range(G)]
    credits = threading.Semaphore(W)

    def rx():
        for g in range(G):
            _recv_exact(left, slice_bytes)
            arrived[g].set()
            if (g // nsl) % k == k - 1:           # last step of its loop: freed on arrival
                left.sendall(b"c")

    def credit_rx():
        for _ in range(G):
            _recv_exact(right, 1)
            credits.release()

    threading.Thread(target=rx, daemon=True).start()
    threading.Thread(target=credit_rx, daemon=True).start()
    payload = os.urandom(slice_bytes)
    start_evt.wait()
    t0 = time.perf_counter()
    for g in range(G):
        t = g // nsl
        if t % k:
            arrived[g - nsl].wait()               # the left neighbour's previous step
        credits.acquire()
        right.sendall(payload)
        if t % k:
            left.sendall(b"c")                    # forwarded: that slot is free at our left
    arrived[G - 1].wait()
    out_q.put((rank, t0, time.perf_counter()))
    time.sleep(0.2)


def measure_ring(size: int, buffer_bytes: int, rate_in: float, rate_x: float, delay_s: float, n_in: int = 2,
                 n_x: int = 2) -> float:
    n = n_in * n_x
    ctx = mp.get_context("fork")
    listens = [_listener() for _ in range(n)]
    send_to = []
    for r in range(n):
        dst = (r + 1) % n
        crossing = (r + 1) % n_in == 0
        ls, port = _listener()
        threading.Thread(target=relay, args=(ls, listens[dst][1], rate_x if crossing else rate_in,
                                             delay_s if crossing else 50e-6), daemon=True).start()
        send_to.append(port)
    ports = {"listen": [ls for ls, _ in listens], "send_to": send_to}
    start, out_q = ctx.Event(), ctx.Queue()
    procs = [ctx.Process(target=_ring_rank, args=(r, n, size, buffer_bytes, ports, start, out_q)) for r in range(n)]
    for p in procs:
        p.start()
    time.sleep(0.5)
    start.set()
    res = [out_q.get(timeout=600) for _ in range(n)]
    for p in procs:
        p.join(10)
    t0 = min(r[1] for r in res)
    return max(r[2] for r in res) - t0


def model_ring(size: int, buffer_bytes: int, rate_in: float, rate_x: float, delay_s: float, n_in: int = 2,
               n_x: int = 2) -> float:
    return float(ring_time(KIND_AG, float(size), float(n_in), float(n_x), rate_in, 50e-6, rate_x, delay_s,
                           float(N.PROTO_SIMPLE), 1.0, float(buffer_bytes), SCALAR, 0.0))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--delays-ms", default="5,10,20")
    ap.add_argument("--rate-mbit", type=float, default=200.0)
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args(argv)
    rate = a.rate_mbit * 1e6 / 8
    rows = []
    for d_ms in (float(x) for x in a.delays_ms.split(",")):
        d = d_ms / 1e3
        for chunk, window in ((64 * 1024, 8), (128 * 1024, 8)):          # 512 KiB and 1 MiB in flight
            size = 4 * 2**20
            m = measure_p2p(size, chunk, window, rate, d)
            rows.append({"case": "send/recv", "delay_ms": d_ms, "window_bytes": chunk * window, "size_bytes": size,
                         "measured_s": m, "model_s": model_p2p(size, chunk, window, rate, d)})
        for buf in (512 * 1024, 2 * 2**20):                                   # NCCL_BUFFSIZE per connection
            size = 4 * 2**20
            m = measure_ring(size, buf, 4 * rate, rate, d)
            rows.append({"case": "ring all-gather (2 x 2 ranks)", "delay_ms": d_ms, "window_bytes": buf,
                         "size_bytes": size, "measured_s": m, "model_s": model_ring(size, buf, 4 * rate, rate, d)})
    for r in rows:
        r["error"] = r["model_s"] / r["measured_s"] - 1
    if a.json:
        print(json.dumps(rows, indent=1))
    else:
        print(f"link {a.rate_mbit:.0f} Mbit/s across buildings (4x inside), user-space store-and-forward delay")
        print(f"{'case':30s} {'delay':>6s} {'window':>9s} {'measured':>10s} {'model':>10s} {'error':>7s}")
        for r in rows:
            print(f"{r['case']:30s} {r['delay_ms']:5.0f}ms {r['window_bytes'] / 2**10:7.0f}Ki "
                  f"{r['measured_s'] * 1e3:8.1f}ms {r['model_s'] * 1e3:8.1f}ms {r['error']:+7.1%}")
        worst = max(abs(r["error"]) for r in rows)
        print(f"largest |error| {worst:.1%} over {len(rows)} cases")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
