#!/usr/bin/env python3
"""Per-token cost of constrained decoding on a running `lily serve`.

For each mode (free text, json_object, json_schema, a forced tool call) it times requests of 1 and of N
output tokens (thinking off, same prompt, after a warm-up request so that every timed one finds the prompt in
the session cache) and reports (min T_N - min T_1) / (tokens_N - tokens_1) over the repetitions: the decode
time per token, prefill excluded. Every mode takes the backend's sampling path (decode_sample: on the GPU
for CUDA); the constrained ones add the allowed-token mask the host computes for each token (uploaded and
applied inside the device sampler on CUDA). Greedy by default; --temperature T samples (seeded).

  python3 tools/serve/constraint_cost.py --url http://127.0.0.1:8080 [--tokens 128] [--reps 3] [--temperature T]
"""
import argparse
import json
import time
import urllib.request

SCHEMA = {
    "type": "object",
    "properties": {
        "name": {"type": "string"},
        "age": {"type": "integer"},
        "tags": {"type": "array", "items": {"type": "string"}},
        "kind": {"enum": ["cat", "dog", "bird"]},
        "home": {"type": "object", "properties": {"city": {"type": "string"}, "zip": {"type": "string"}},
                 "required": ["city"], "additionalProperties": False},
    },
    "required": ["name", "age", "tags", "kind", "home"],
    "additionalProperties": False,
}
TOOL = {"type": "function", "function": {"name": "lookup", "parameters": SCHEMA}}

MODES = {
    "text": {},
    "json_object": {"response_format": {"type": "json_object"}},
    "json_schema": {"response_format": {"type": "json_schema", "json_schema": {"name": "p", "schema": SCHEMA}}},
    "forced_tool": {"tools": [TOOL], "tool_choice": "required"},
}


def post(url, body, key):
    req = urllib.request.Request(url + "/v1/chat/completions", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json", "Authorization": "Bearer " + key})
    t0 = time.perf_counter()
    with urllib.request.urlopen(req) as r:
        out = json.load(r)
    return time.perf_counter() - t0, out["usage"]["completion_tokens"]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--url", default="http://127.0.0.1:8080")
    ap.add_argument("--key", default="none")
    ap.add_argument("--tokens", type=int, default=128)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--temperature", type=float, default=0.0)
    a = ap.parse_args()
    prompt = [{"role": "user", "content": "Describe a person as JSON: name, age, tags, kind, home."}]
    print(f"{'mode':<12} {'ms/token':>9} {'tokens':>7}")
    for mode, extra in MODES.items():
        base = {"messages": prompt, "temperature": a.temperature, "seed": 1,
                "chat_template_kwargs": {"enable_thinking": False}, **extra}
        post(a.url, {**base, "max_tokens": 1}, a.key)  # warm-up: later requests find the prompt in the cache
        t1s, tns, n1, nn = [], [], 0, 0
        for _ in range(a.reps):
            t1, n1 = post(a.url, {**base, "max_tokens": 1}, a.key)
            tn, nn = post(a.url, {**base, "max_tokens": a.tokens}, a.key)
            t1s.append(t1)
            tns.append(tn)
        # the fastest of each length (same cache state), so that one slow request cannot bias the difference
        best = (min(tns) - min(t1s)) / (nn - n1) if nn > n1 else None
        toks = nn
        print(f"{mode:<12} {best * 1e3 if best else float('nan'):>9.3f} {toks if best else 0:>7}")


if __name__ == "__main__":
    main()
