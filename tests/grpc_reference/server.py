#!/usr/bin/env python3
"""A gRPC reference server on gRPC's C-core (Python's grpcio): what stagger's gRPC retries are held to.

    python3 server.py --port 0 --log PATH

Binds 127.0.0.1 (port 0: a free one), prints one line `PORT <n>` once it serves, and runs until it is
killed or its stdin reaches EOF (so it dies with the process that started it). Server options are
grpcio's defaults: C-core's 4 MiB limit on a received message is in force.

One service, `ref.Reference`, over raw bytes (a `grpc.GenericRpcHandler`, no protoc). The request
metadata scripts each call; every key is optional:

    x-id           the scenario run: attempt counts and log lines are per id ("" if absent)
    x-fail         how many attempts of this id fail before one succeeds (default 0)
    x-code         the status name they fail with (default UNAVAILABLE)
    x-pushback-ms  sent as the trailing metadata `grpc-retry-pushback-ms` with each failure
    x-delay-ms     how long Unary and Stream wait before they answer or fail (cut short if the call ends)
    x-slow         how many of the first attempts of this id wait x-delay-ms (default: every one)
    x-messages     how many messages Stream and StreamFail send (default 1)
    x-interval-ms  the gap between two of them, and between StreamFail's last one and its failure
                   (default 0)
    x-size         bytes in each response message (default 16)

Methods (`/ref.Other/Unary` is `/ref.Reference/Unary` under another service's name):

    /ref.Reference/Unary       unary: waits x-delay-ms; one of the first x-fail attempts of its id fails
                               with x-code before any message; the others answer x-size bytes.
    /ref.Reference/Echo        unary: answers the request's length in ASCII decimal.
    /ref.Reference/Stream      server streaming: waits x-delay-ms; fails as Unary does (before any
                               message), or sends x-messages messages x-interval-ms apart and ends OK.
                               Stops when the call is cancelled or its deadline passes.
    /ref.Reference/StreamFail  server streaming: sends x-messages messages x-interval-ms apart, then
                               fails with x-code (after messages: no client may retry it).

The log, `--log PATH`: one JSON object per line, appended and flushed as it happens.

    {"event": "arrive", ...}  when C-core hands the call to the application (the generic handler's
                              `service()`), before the request message is read: a call that C-core then
                              rejects (a request over 4 MiB) has this line and no "end".
    {"event": "end", ...}     when the handler is done with it: it returned, failed, or saw the call end.

Fields of both (null where a field does not apply):

    id                 x-id
    method             the full method path, "/ref.Reference/Unary"
    t                  time.monotonic() of the server, in seconds (compare lines with each other only)
    attempt            1-based: how many calls of this id had arrived, this one included
    previous_attempts  the request metadata `grpc-previous-rpc-attempts` as an int, null if absent
    time_remaining     "end" only: context.time_remaining() in seconds when the handler started, null
                       without a deadline (C-core takes `grpc-timeout` out of the metadata: the deadline
                       is seen only here)
    outcome            "end" only: "OK", the status name it failed with, or, when the call ended before
                       the handler did, "DEADLINE_EXCEEDED" (no time left) or "CANCELLED"
    sent               "end" only: how many response messages were handed to C-core and sent
    metadata           "arrive" only: the request metadata as grpcio shows it ({key: value}, the last
                       value of a repeated key, `-bin` values base64-encoded)
"""

import argparse
import base64
import json
import os
import sys
import threading
import time
from concurrent import futures

import grpc

SERVICE = "ref.Reference"
# A second service, whose Unary is ref.Reference's: for a service config's names, which match by
# service.
OTHER = "ref.Other"


class Log:
    """The JSON-lines log, shared by the handler threads."""

    def __init__(self, path):
        self._file = open(path, "a", encoding="utf-8")
        self._lock = threading.Lock()

    def write(self, **fields):
        fields.setdefault("t", time.monotonic())
        line = json.dumps(fields, sort_keys=True)
        with self._lock:
            self._file.write(line + "\n")
            self._file.flush()


class Call:
    """One call as it arrived: its script, its attempt number, and its "end" line, written once."""

    def __init__(self, log, method, metadata, attempt):
        self.log = log
        self.method = method
        self.meta = metadata
        self.id = metadata.get("x-id", "")
        self.attempt = attempt
        previous = metadata.get("grpc-previous-rpc-attempts")
        self.previous_attempts = int(previous) if previous is not None else None
        self.time_remaining = None
        self.sent = 0
        self.ended = False
        self.done = threading.Event()

    def int(self, key, default):
        return int(self.meta.get(key, default))

    def fields(self):
        return {
            "id": self.id,
            "method": self.method,
            "attempt": self.attempt,
            "previous_attempts": self.previous_attempts,
        }

    def start(self, context):
        """At the handler's start: the deadline it has, and an event set when the call ends."""
        remaining = context.time_remaining()
        # Without a deadline grpcio gives about 9.2e18 s (C-core's infinite future).
        self.time_remaining = remaining if remaining is not None and remaining < 1e9 else None
        context.add_callback(self.done.set)

    def end(self, outcome):
        if not self.ended:
            self.ended = True
            self.log.write(
                event="end",
                time_remaining=self.time_remaining,
                outcome=outcome,
                sent=self.sent,
                **self.fields(),
            )

    def gone(self, context):
        """The outcome of a call that ended before its handler did."""
        remaining = context.time_remaining()
        if remaining is not None and remaining <= 0:
            return "DEADLINE_EXCEEDED"
        return "CANCELLED"

    def wait(self, context, ms):
        """Waits `ms`, or less if the call ends first; whether it is still live."""
        if ms > 0:
            self.done.wait(ms / 1000)
        return context.is_active()

    def delay_ms(self):
        """x-delay-ms, for the first x-slow attempts of this id (every one without x-slow)."""
        slow = self.meta.get("x-slow")
        if slow is not None and self.attempt > int(slow):
            return 0
        return self.int("x-delay-ms", 0)

    def should_fail(self):
        return self.attempt <= self.int("x-fail", 0)

    def fail(self, context):
        """Fails the call with x-code (and pushback): logs "end", then raises out of the handler."""
        code = grpc.StatusCode[self.meta.get("x-code", "UNAVAILABLE")]
        pushback = self.meta.get("x-pushback-ms")
        if pushback is not None:
            context.set_trailing_metadata((("grpc-retry-pushback-ms", pushback),))
        self.end(code.name)
        context.abort(code, f"scripted failure: attempt {self.attempt} of {self.id}")

    def payload(self):
        return bytes(i % 251 for i in range(self.int("x-size", 16)))


def unary(call):
    def handle(request, context):
        call.start(context)
        try:
            if not call.wait(context, call.delay_ms()):
                call.end(call.gone(context))
                return b""
            if call.should_fail():
                call.fail(context)
            call.sent = 1
            call.end("OK")
            return call.payload()
        finally:
            call.end("UNKNOWN")

    return handle


def echo(call):
    def handle(request, context):
        call.start(context)
        call.sent = 1
        call.end("OK")
        return str(len(request)).encode("ascii")

    return handle


def stream(call, fail_after):
    """Stream (fail_after False) and StreamFail (True). A generator: grpcio sends each message it
    yields and resumes it once that message is sent, so `sent` counts the messages sent."""

    def handle(request, context):
        call.start(context)
        try:
            if not fail_after:
                if not call.wait(context, call.delay_ms()):
                    call.end(call.gone(context))
                    return
                if call.should_fail():
                    call.fail(context)
            interval = call.int("x-interval-ms", 0)
            for n in range(call.int("x-messages", 1)):
                if n > 0 and not call.wait(context, interval):
                    call.end(call.gone(context))
                    return
                yield call.payload()
                call.sent += 1
            if fail_after:
                if call.sent > 0 and not call.wait(context, interval):
                    call.end(call.gone(context))
                    return
                call.fail(context)
            call.end("OK")
        except GeneratorExit:
            # grpcio stopped asking for messages: the call ended while one was being sent.
            call.end(call.gone(context))
            raise
        finally:
            call.end("UNKNOWN")

    return handle


def printable(metadata):
    """The request metadata as JSON: `-bin` values base64-encoded."""
    return {
        key: base64.b64encode(value).decode("ascii") if isinstance(value, bytes) else value
        for key, value in metadata.items()
    }


class Reference(grpc.GenericRpcHandler):
    def __init__(self, log):
        self.log = log
        self.lock = threading.Lock()
        self.arrivals = {}

    def service(self, handler_call_details):
        method = handler_call_details.method
        metadata = {}
        for key, value in handler_call_details.invocation_metadata or ():
            metadata[key] = value
        with self.lock:
            id = metadata.get("x-id", "")
            attempt = self.arrivals.get(id, 0) + 1
            self.arrivals[id] = attempt
        call = Call(self.log, method, metadata, attempt)
        self.log.write(event="arrive", metadata=printable(metadata), **call.fields())
        if method in (f"/{SERVICE}/Unary", f"/{OTHER}/Unary"):
            return grpc.unary_unary_rpc_method_handler(unary(call))
        if method == f"/{SERVICE}/Echo":
            return grpc.unary_unary_rpc_method_handler(echo(call))
        if method == f"/{SERVICE}/Stream":
            return grpc.unary_stream_rpc_method_handler(stream(call, fail_after=False))
        if method == f"/{SERVICE}/StreamFail":
            return grpc.unary_stream_rpc_method_handler(stream(call, fail_after=True))
        return None


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--log", required=True)
    args = parser.parse_args()

    log = Log(args.log)
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=64))
    server.add_generic_rpc_handlers((Reference(log),))
    port = server.add_insecure_port(f"127.0.0.1:{args.port}")
    if port == 0:
        sys.exit(f"could not bind 127.0.0.1:{args.port}")
    server.start()
    print(f"PORT {port}", flush=True)

    # Serve until stdin ends (the parent closed it, or died) or a signal kills us.
    sys.stdin.read()
    server.stop(grace=None)
    os._exit(0)


if __name__ == "__main__":
    main()
