#!/usr/bin/env python3
"""One call of gRPC's C-core client (Python's grpcio) to the reference server, with C-core's own retries
(gRPC's retry design, A6) turned on by a service config: what stagger's gRPC retries are compared with.

    python3 client.py --target 127.0.0.1:PORT --method Unary --id ID [--meta k=v ...] [--timeout-ms N]
        [--request-bytes N] [--retry-codes UNAVAILABLE,RESOURCE_EXHAUSTED] [--max-attempts 5]
        [--initial-backoff-ms 100] [--max-backoff-ms 1000] [--multiplier 2] [--no-retry-policy]

Sends x-id and each --meta pair as request metadata, with a deadline if --timeout-ms is given, and
prints one JSON line:

    {"status": "OK" or the status name, "details": str, "messages": response messages received
     (1 for a unary OK), "elapsed_ms": float, "trailing_metadata": {key: value}}

A server-streaming method (Stream, StreamFail) is read to its end or its error. Binary (`-bin`)
metadata values are printed base64-encoded; a key that repeats has a list of its values.
C-core caps maxAttempts at 5 whatever the config says.
"""

import argparse
import base64
import json
import time

import grpc

SERVICE = "ref.Reference"
STREAMING = {"Stream", "StreamFail"}


def seconds(ms):
    """A google.protobuf.Duration in its JSON form, as a service config takes it."""
    return f"{ms / 1000:.9f}s"


def service_config(args):
    if args.no_retry_policy:
        # A method config without a retryPolicy: the method is not retried (transparent retries aside).
        return {"methodConfig": [{"name": [{"service": SERVICE}]}]}
    codes = [code.strip() for code in args.retry_codes.split(",") if code.strip()]
    return {
        "methodConfig": [
            {
                "name": [{"service": SERVICE}],
                "retryPolicy": {
                    "maxAttempts": args.max_attempts,
                    "initialBackoff": seconds(args.initial_backoff_ms),
                    "maxBackoff": seconds(args.max_backoff_ms),
                    "backoffMultiplier": args.multiplier,
                    "retryableStatusCodes": codes,
                },
            }
        ]
    }


def metadata_dict(metadata):
    result = {}
    for key, value in metadata or ():
        if isinstance(value, bytes):
            value = base64.b64encode(value).decode("ascii")
        if key in result:
            previous = result[key]
            result[key] = (previous if isinstance(previous, list) else [previous]) + [value]
        else:
            result[key] = value
    return result


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--target", required=True)
    parser.add_argument("--method", required=True)
    parser.add_argument("--id", required=True)
    parser.add_argument("--meta", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument("--timeout-ms", type=float)
    parser.add_argument("--request-bytes", type=int, default=0)
    parser.add_argument("--retry-codes", default="UNAVAILABLE")
    parser.add_argument("--max-attempts", type=int, default=5)
    parser.add_argument("--initial-backoff-ms", type=float, default=100)
    parser.add_argument("--max-backoff-ms", type=float, default=1000)
    parser.add_argument("--multiplier", type=float, default=2)
    parser.add_argument("--no-retry-policy", action="store_true")
    args = parser.parse_args()

    metadata = [("x-id", args.id)]
    for pair in args.meta:
        key, _, value = pair.partition("=")
        metadata.append((key, value))
    timeout = args.timeout_ms / 1000 if args.timeout_ms is not None else None
    request = bytes(args.request_bytes)
    path = f"/{SERVICE}/{args.method}"

    options = [
        ("grpc.enable_retries", 1),
        ("grpc.service_config", json.dumps(service_config(args))),
    ]
    with grpc.insecure_channel(args.target, options=options) as channel:
        messages = 0
        started = time.monotonic()
        if args.method in STREAMING:
            call = channel.unary_stream(path)(request, timeout=timeout, metadata=metadata)
            try:
                for _ in call:
                    messages += 1
            except grpc.RpcError:
                pass  # the call itself holds the status
        else:
            call = channel.unary_unary(path).future(request, timeout=timeout, metadata=metadata)
            try:
                call.result()
                messages = 1
            except grpc.RpcError:
                pass
        elapsed_ms = (time.monotonic() - started) * 1000
        print(
            json.dumps(
                {
                    "status": call.code().name,
                    "details": call.details() or "",
                    "messages": messages,
                    "elapsed_ms": elapsed_ms,
                    "trailing_metadata": metadata_dict(call.trailing_metadata()),
                }
            ),
            flush=True,
        )


if __name__ == "__main__":
    main()
