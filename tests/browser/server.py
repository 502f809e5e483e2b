#!/usr/bin/env python3
"""The scripted HTTP server of the browser suite (tests/browser.rs, in headless Chromium) and of its
native twin (tests/browser_native.rs): it answers each request of a scenario from the scenario's
script, in order, and keeps what it saw, so that the tests assert on what reached the server.

    python3 tests/browser/server.py [--lifeline]

It listens on 127.0.0.1, on a free port, and prints `http://127.0.0.1:<port>` on its first line. With
`--lifeline` it exits when its standard input closes (the native suite holds it open); otherwise when
it is killed (tests/browser/run does it).

Every answer carries the CORS headers a page of another origin needs (the test page is served from
wasm-bindgen-test-runner's own port): `Access-Control-Allow-Origin: *`, and `Retry-After` exposed,
without which the browser hides it from the page and a retry test could pass for the wrong reason.
A preflight (`OPTIONS`) is answered and logged. Every answer closes its connection, so that no
request goes on a connection the browser kept (whose failure Chromium would resend by itself).

    GET|POST|... /s/<key>?script=a,b,c   answer the n-th request of <key> with the n-th step (the last
                                         step again after the end); a step is one of
        200, 503, 429, ...               that status, no body but its reason
        503ra1                           503 with `Retry-After: 1`
        503date3                         503 with `Retry-After` an HTTP date 3 s ahead
        429ra1                           429 with `Retry-After: 1`
        hang                             no answer: the connection is held until the client closes
                                         it (logged as closed), or 60 s
        close                            the request read, the connection closed unanswered
    GET /log/<key>    what <key> saw, a line a request: `<method> <step> <arrived ms> <closed ms|->`,
                      in milliseconds since the server started
    GET /later?after_ms=N   a port that refuses connections for N ms, then listens and answers as
                            this server does
    GET /refusing     a port that refuses connections as long as the server runs
"""

import email.utils
import socket
import sys
import threading
import time
import urllib.parse

START = time.monotonic()
LOCK = threading.Lock()
# key -> list of [method, step, arrived_ms, closed_ms or None]
SEEN = {}
# Sockets bound and not listening: a connection to them is refused.
RESERVED = []


def now_ms():
    return (time.monotonic() - START) * 1000.0


REASONS = {200: "OK", 204: "No Content", 404: "Not Found", 429: "Too Many Requests", 500: "Internal Server Error",
           502: "Bad Gateway", 503: "Service Unavailable", 504: "Gateway Timeout"}


def cors(preflight_headers=None):
    headers = [
        ("Access-Control-Allow-Origin", "*"),
        ("Access-Control-Expose-Headers", "Retry-After"),
    ]
    if preflight_headers is not None:
        headers += [
            ("Access-Control-Allow-Methods", "GET, HEAD, POST, PUT, PATCH, DELETE"),
            ("Access-Control-Allow-Headers", preflight_headers or "*"),
            # No caching: each attempt's preflight reaches the server, and is logged.
            ("Access-Control-Max-Age", "0"),
        ]
    return headers


def send(conn, status, headers=(), body=b""):
    head = "HTTP/1.1 %d %s\r\n" % (status, REASONS.get(status, "Status"))
    for name, value in list(headers) + [("Content-Length", str(len(body))), ("Connection", "close")]:
        head += "%s: %s\r\n" % (name, value)
    conn.sendall(head.encode("latin-1") + b"\r\n" + body)


def read_request(conn):
    """The request line, its headers (lower-case names) and its body, or None if the client closed."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = conn.recv(65536)
        if not chunk:
            return None
        data += chunk
    head, _, rest = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    method, target, _ = lines[0].split(" ", 2)
    headers = {}
    for line in lines[1:]:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    length = int(headers.get("content-length", "0") or 0)
    while len(rest) < length:
        chunk = conn.recv(65536)
        if not chunk:
            break
        rest += chunk
    return method, target, headers, rest


def wait_for_close(conn, limit_s):
    """Reads until the client closes the connection (returns the time) or `limit_s` passes (None)."""
    conn.settimeout(0.05)
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        try:
            if not conn.recv(65536):
                return now_ms()
        except socket.timeout:
            continue
        except OSError:
            return now_ms()
    return None


def answer_step(conn, method, key, step):
    with LOCK:
        entry = [method, step, now_ms(), None]
        SEEN.setdefault(key, []).append(entry)
    if step == "hang":
        entry[3] = wait_for_close(conn, 60.0)
        return
    if step == "close":
        conn.shutdown(socket.SHUT_RDWR)
        return
    headers = cors()
    if step.endswith("ra1"):
        status = int(step[:3])
        headers.append(("Retry-After", "1"))
    elif step.startswith("503date"):
        status = 503
        ahead = int(step[len("503date"):])
        headers.append(("Retry-After", email.utils.formatdate(time.time() + ahead, usegmt=True)))
    else:
        status = int(step)
    send(conn, status, headers, REASONS.get(status, "").encode())


def reserve():
    """A socket bound to a free port and not listening: connections to it are refused."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    RESERVED.append(sock)
    return sock


def serve(listener):
    while True:
        conn, _ = listener.accept()
        threading.Thread(target=handle, args=(conn,), daemon=True).start()


def listen_later(sock, after_ms):
    time.sleep(after_ms / 1000.0)
    sock.listen(64)
    serve(sock)


def handle(conn):
    try:
        request = read_request(conn)
        if request is None:
            return
        method, target, headers, _ = request
        url = urllib.parse.urlsplit(target)
        query = urllib.parse.parse_qs(url.query)
        parts = url.path.strip("/").split("/")
        if method == "OPTIONS":
            key = parts[1] if len(parts) > 1 and parts[0] == "s" else "-"
            with LOCK:
                SEEN.setdefault(key, []).append(["OPTIONS", "preflight", now_ms(), None])
            send(conn, 204, cors(headers.get("access-control-request-headers", "")))
        elif parts[0] == "s" and len(parts) == 2:
            key = parts[1]
            script = query.get("script", ["200"])[0].split(",")
            with LOCK:
                n = sum(1 for seen in SEEN.get(key, []) if seen[0] != "OPTIONS")
            answer_step(conn, method, key, script[min(n, len(script) - 1)])
        elif parts[0] == "log" and len(parts) == 2:
            with LOCK:
                lines = ["%s %s %.1f %s" % (m, s, a, "-" if c is None else "%.1f" % c)
                         for m, s, a, c in SEEN.get(parts[1], [])]
            send(conn, 200, cors(), "\n".join(lines).encode())
        elif parts[0] == "later":
            sock = reserve()
            after_ms = float(query.get("after_ms", ["1000"])[0])
            threading.Thread(target=listen_later, args=(sock, after_ms), daemon=True).start()
            send(conn, 200, cors(), str(sock.getsockname()[1]).encode())
        elif parts[0] == "refusing":
            send(conn, 200, cors(), str(reserve().getsockname()[1]).encode())
        else:
            send(conn, 404, cors())
    except OSError:
        pass
    finally:
        try:
            conn.close()
        except OSError:
            pass


def main():
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", 0))
    listener.listen(128)
    print("http://127.0.0.1:%d" % listener.getsockname()[1], flush=True)
    threading.Thread(target=serve, args=(listener,), daemon=True).start()
    if "--lifeline" in sys.argv[1:]:
        sys.stdin.read()
    else:
        threading.Event().wait()


if __name__ == "__main__":
    main()
