#!/usr/bin/env python3
"""Measures a link's throughput between two cluster nodes with one TCP stream.

    linkrate.py serve            listen on an ephemeral port, print it, receive one stream
    linkrate.py send HOST PORT N send N bytes, print Mbit/s (timed until the server has them all)
"""
import socket
import sys
import time


def serve():
    s = socket.socket()
    s.bind(("0.0.0.0", 0))
    s.listen(1)
    print(s.getsockname()[1], flush=True)
    s.settimeout(60)
    c, _ = s.accept()
    header = b""
    while len(header) < 12:
        header += c.recv(12 - len(header))
    n = int(header)
    got = 0
    while got < n:
        chunk = c.recv(1 << 20)
        if not chunk:
            break
        got += len(chunk)
    c.sendall(b"k")
    c.close()


def send(host, port, n):
    c = socket.create_connection((host, int(port)), timeout=60)
    block = b"\0" * (1 << 20)
    c.sendall(b"%012d" % n)
    t0 = time.perf_counter()
    left = n
    while left > 0:
        c.sendall(block[: min(left, len(block))])
        left -= min(left, len(block))
    c.recv(1)
    seconds = time.perf_counter() - t0
    print(f"{n * 8 / seconds / 1e6:.0f}")


if __name__ == "__main__":
    if sys.argv[1] == "serve":
        serve()
    else:
        send(sys.argv[2], sys.argv[3], int(sys.argv[4]))
