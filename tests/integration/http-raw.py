#!/usr/bin/env python3
"""What curl cannot do to the HTTP API, over a raw socket (http.sh,
http-guard.sh). Each verb prints what it saw and exits 0 when the server did
what the verb expects, 1 otherwise.

  http-raw.py half HOST:PORT BODY
      POST /v1/completions, then close the sending side (shutdown): HTTP lets
      a client half-close after its request; the answer must still come.
      Prints the answer's status line and body.
  http-raw.py reset HOST:PORT BODY SECONDS
      POST /v1/completions, wait, then reset the connection (SO_LINGER 0):
      a client that is gone; prints "reset".
  http-raw.py slow HOST:PORT head|body STEP_S TOTAL_S [SRC]
      Dribble a request a byte every STEP_S seconds, its headers (head) or
      its body after whole headers (body), for up to TOTAL_S seconds. The
      server must cut the connection before then: prints "cut after N s".
      With HTTP_RAW_HEADER set ("Name: value"), the request carries it.
  http-raw.py hold HOST:PORT N SRC
      Open N idle connections from source address SRC and hold them; prints
      how many the server took (it closes the others at once, or at its
      limit), then waits for stdin to close.
"""
import os
import socket
import struct
import sys
import time


def addr(hp):
    host, port = hp.rsplit(":", 1)
    return host, int(port)


def request(hp, body, extra=""):
    host, port = addr(hp)
    b = body.encode()
    return (
        f"POST /v1/completions HTTP/1.1\r\nHost: {host}:{port}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(b)}\r\n{extra}\r\n"
    ).encode() + b


def read_all(s, limit_s):
    s.settimeout(limit_s)
    data = b""
    try:
        while True:
            chunk = s.recv(65536)
            if not chunk:
                break
            data += chunk
    except (socket.timeout, ConnectionError):
        pass
    return data


def connect(hp, src=None):
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    if src:
        s.bind((src, 0))
    s.connect(addr(hp))
    return s


def half(hp, body):
    s = connect(hp)
    s.sendall(request(hp, body, "Connection: close\r\n"))
    s.shutdown(socket.SHUT_WR)
    data = read_all(s, 60)
    head, _, rest = data.partition(b"\r\n\r\n")
    print(head.split(b"\r\n")[0].decode(errors="replace"))
    print(rest.decode(errors="replace"))
    return 0 if head.startswith(b"HTTP/1.1 200") else 1


def reset(hp, body, seconds):
    s = connect(hp)
    s.sendall(request(hp, body))
    time.sleep(seconds)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    s.close()
    print("reset")
    return 0


def slow(hp, what, step, total, src=None):
    host, port = addr(hp)
    if what == "head":
        data = f"POST /v1/completions HTTP/1.1\r\nHost: {host}:{port}\r\nX-Slow: {'a' * 4096}"
    else:
        data = "x" * 65536
    extra = os.environ.get("HTTP_RAW_HEADER")
    extra = f"{extra}\r\n" if extra else ""
    s = connect(hp, src)
    if what == "body":
        s.sendall(
            (
                f"POST /v1/completions HTTP/1.1\r\nHost: {host}:{port}\r\n{extra}"
                f"Content-Type: application/json\r\nContent-Length: 65536\r\n\r\n"
            ).encode()
        )
    start = time.monotonic()
    i = 0
    while time.monotonic() - start < total:
        try:
            s.send(data[i].encode())
            i += 1
            s.settimeout(step)
            got = s.recv(4096)
            if not got:
                print(f"cut after {time.monotonic() - start:.1f} s")
                return 0
            # an answer (408 or other) before the request ended: cut too
            print(f"answered after {time.monotonic() - start:.1f} s: {got[:40]!r}")
            return 0
        except socket.timeout:
            continue
        except ConnectionError:
            print(f"cut after {time.monotonic() - start:.1f} s")
            return 0
    print(f"still open after {total} s")
    return 1


def hold(hp, n, src):
    socks = []
    for _ in range(n):
        try:
            socks.append(connect(hp, src))
        except OSError:
            break
    time.sleep(0.5)
    taken = 0
    for s in socks:
        s.setblocking(False)
        try:
            closed = s.recv(1) == b""
        except BlockingIOError:
            closed = False
        except ConnectionError:
            closed = True
        taken += not closed
    print(taken, flush=True)
    sys.stdin.read()
    return 0


def main(a):
    if a[0] == "half":
        return half(a[1], a[2])
    if a[0] == "reset":
        return reset(a[1], a[2], float(a[3]))
    if a[0] == "slow":
        return slow(a[1], a[2], float(a[3]), float(a[4]), a[5] if len(a) > 5 else None)
    if a[0] == "hold":
        return hold(a[1], int(a[2]), a[3])
    print(__doc__)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
