#!/usr/bin/env python3
"""Calls of gRPC's C-core client (Python's grpcio) under a service config given as it is, one after
another on one channel, so that its retry throttling carries from call to call: what stagger's
RetryLayer::grpc_service_config is compared with.

    python3 config_client.py --target 127.0.0.1:PORT --service-config FILE --plan FILE

The plan is a JSON list of calls, each {"method": "Unary" or "ref.Other/Unary", "id": str,
"meta": {key: value}, "timeout_ms": number or null}; a method without a slash is one of
ref.Reference. Prints one JSON line per call, in order:

    {"id": str, "status": "OK" or the status name, "details": str, "elapsed_ms": float}

With --validate instead of --plan, the FILE given is a JSON list of service configs (each a string),
and each is set on a channel of its own to the target, and one call of /ref.Reference/Echo made: one
line per config, {"status": ..., "details": ...}. C-core refuses a service config by failing every
call of its channel with INVALID_ARGUMENT, naming the fields (`field:methodConfig[0].timeout
error:...`).
"""

import argparse
import json
import time

import grpc

SERVICE = "ref.Reference"


def path_of(method):
    return "/" + method if "/" in method else f"/{SERVICE}/{method}"


def call(channel, plan):
    metadata = [("x-id", plan["id"])] + [(k, str(v)) for k, v in plan.get("meta", {}).items()]
    timeout_ms = plan.get("timeout_ms")
    timeout = timeout_ms / 1000 if timeout_ms is not None else None
    started = time.monotonic()
    future = channel.unary_unary(path_of(plan["method"])).future(
        b"", timeout=timeout, metadata=metadata
    )
    try:
        future.result()
    except grpc.RpcError:
        pass
    return {
        "id": plan["id"],
        "status": future.code().name,
        "details": future.details() or "",
        "elapsed_ms": (time.monotonic() - started) * 1000,
    }


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--target", required=True)
    parser.add_argument("--service-config")
    parser.add_argument("--plan")
    parser.add_argument("--validate")
    args = parser.parse_args()

    if args.validate:
        with open(args.validate, encoding="utf-8") as f:
            configs = json.load(f)
        for config in configs:
            options = [("grpc.enable_retries", 1), ("grpc.service_config", config)]
            with grpc.insecure_channel(args.target, options=options) as channel:
                result = call(channel, {"method": "Echo", "id": "validate", "timeout_ms": 5000})
                print(json.dumps({"status": result["status"], "details": result["details"]}),
                      flush=True)
        return

    with open(args.service_config, encoding="utf-8") as f:
        config = f.read()
    with open(args.plan, encoding="utf-8") as f:
        plan = json.load(f)
    options = [("grpc.enable_retries", 1), ("grpc.service_config", config)]
    with grpc.insecure_channel(args.target, options=options) as channel:
        for one in plan:
            print(json.dumps(call(channel, one)), flush=True)


if __name__ == "__main__":
    main()
