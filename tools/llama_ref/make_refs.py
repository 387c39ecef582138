#!/usr/bin/env python3
"""Makes tests/fixtures/gguf-llama: llama.cpp's own quantised files and logits for lily's GGUF cross-check.

From the converter's tiny files (convert_tiny.py: tiny-bf16.gguf, tiny-f16.gguf, tiny-bf16-fused.gguf) it
  1. quantises tiny-bf16.gguf to Q4_0, Q4_K_M, Q5_K_M, Q6_K and Q8_0 (llama_ref quantize: libllama's
     llama_model_quantize with llama-quantize's default parameters);
  2. dumps llama.cpp's logits (llama_ref logits) for the tiny fixture's prompt ids (24 positions, one batch;
     the last KEEP positions are kept) and the first STEPS of its greedy ids (fed one at a time through the
     caches), for every file and for its F32 twin (the same weights decoded to F32 by gguf-py and written
     with the same metadata, where llama.cpp's matrix products stay in f32): llama-NAME.safetensors holds
     prompt_ids, positions, step_ids, logits [rows, V] and twin_logits [rows, V];
  3. dumps llama.cpp's tokenisation of tests/fixtures/tiny/tokenizer_cases.jsonl (llama_ref tokenize);
  4. writes a `lily synth --gguf` file of the small preset (Q4_K_M-like: Q4_K, Q6_K and Q8_0 blocks; the
     tiny model's 64- and 128-wide rows cannot hold 256-wide K-quant blocks, so llama-quantize falls back
     to Q5_0/Q5_1/Q8_0 there) and dumps llama.cpp's logits of it; the test re-creates the file with lily;
  5. writes manifest.json: for every file its size, sha256, whether it is committed, and for every tensor
     its type, shape and FNV-1a 64 checksum of its data (what the tests check re-created files against).
Only the files named by --commit are copied into OUT (the rest stay in WORK), to keep the fixture small.

  python3 tools/llama_ref/make_refs.py --llama-build BUILD --gguf CONVERTED_DIR --lily build-cpu/lily \\
      --work /tmp/gguf-work --out tests/fixtures/gguf-llama
Needs numpy and gguf-py (the llama.cpp tree's, --gguf-py).
"""
import argparse
import hashlib
import json
import shutil
import struct
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
MIXES = ["Q4_0", "Q4_K_M", "Q5_K_M", "Q6_K", "Q8_0"]
STEPS = 3  # greedy ids fed one at a time after the prompt
KEEP = 4   # prompt positions whose logits are kept (the last KEEP)
LOGITS = ["tiny-bf16", "tiny-f16", "tiny-Q4_0", "tiny-Q4_K_M", "tiny-Q5_K_M", "synth-small"]


def run(cmd, log=None):
    print("+", " ".join(str(c) for c in cmd), file=sys.stderr)
    r = subprocess.run([str(c) for c in cmd], capture_output=True, text=True)
    if log:
        Path(log).write_text(r.stdout + r.stderr)
    if r.returncode != 0:
        sys.exit(f"failed ({r.returncode}): {' '.join(map(str, cmd))}\n{r.stderr[-3000:]}")
    return r


def read_safetensors_i32(path, name):
    b = Path(path).read_bytes()
    n = struct.unpack("<Q", b[:8])[0]
    h = json.loads(b[8:8 + n])[name]
    lo, hi = h["data_offsets"]
    return list(struct.unpack(f"<{(hi - lo) // 4}i", b[8 + n + lo:8 + n + hi]))


def fnv1a64(buf):
    import numpy as np
    h = 0xCBF29CE484222325
    for byte in bytes(np.ascontiguousarray(buf).view(np.uint8).reshape(-1)):
        h ^= byte
        h = (h * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return h


def read_safetensors(path):
    import numpy as np
    b = Path(path).read_bytes()
    n = struct.unpack("<Q", b[:8])[0]
    out = {}
    for k, h in json.loads(b[8:8 + n]).items():
        if k == "__metadata__":
            continue
        lo, hi = h["data_offsets"]
        dt = {"F32": np.float32, "I32": np.int32}[h["dtype"]]
        out[k] = np.frombuffer(b[8 + n + lo:8 + n + hi], dtype=dt).reshape(h["shape"])
    return out


def write_safetensors(path, tensors):
    import numpy as np
    header, blobs, off = {}, [], 0
    for k, a in tensors.items():
        a = np.ascontiguousarray(a)
        header[k] = {"dtype": {np.dtype(np.float32): "F32", np.dtype(np.int32): "I32"}[a.dtype],
                     "shape": list(a.shape), "data_offsets": [off, off + a.nbytes]}
        blobs.append(a.tobytes())
        off += a.nbytes
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    Path(path).write_bytes(struct.pack("<Q", len(h)) + h + b"".join(blobs))


def write_ref(path, file_dump, twin_dump, positions):
    """llama.cpp's logits on a file and on its F32 twin: the kept prompt positions, then the steps."""
    import numpy as np
    a, b = read_safetensors(file_dump), read_safetensors(twin_dump)
    assert (a["prompt_ids"] == b["prompt_ids"]).all() and (a["step_ids"] == b["step_ids"]).all()
    rows = lambda d: np.concatenate([d["prompt_logits"][positions], d["step_logits"]])  # noqa: E731
    write_safetensors(path, {"prompt_ids": a["prompt_ids"], "positions": np.array(positions, dtype=np.int32),
                             "step_ids": a["step_ids"], "logits": rows(a), "twin_logits": rows(b)})


def f32_twin(src, dst, gguf):
    """The same file with every tensor decoded to F32 (metadata copied): llama.cpp computes it in f32."""
    import numpy as np
    r = gguf.GGUFReader(str(src))
    w = gguf.GGUFWriter(str(dst), arch=r.fields["general.architecture"].contents())
    for f in r.fields.values():
        if f.name.startswith("GGUF.") or f.name == "general.architecture":
            continue
        vt = f.types[0]
        w.add_key_value(f.name, f.contents(), vt, sub_type=f.types[-1] if vt == gguf.GGUFValueType.ARRAY else None)
    for t in r.tensors:
        if t.tensor_type == gguf.GGMLQuantizationType.F32:
            a = np.array(t.data, dtype=np.float32)
        else:
            a = gguf.quants.dequantize(t.data, t.tensor_type).astype(np.float32)
        w.add_tensor(t.name, a.reshape([int(x) for x in reversed(t.shape)]))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def describe(path, gguf):
    r = gguf.GGUFReader(str(path))
    tensors = []
    for t in r.tensors:
        tensors.append({"name": t.name, "type": t.tensor_type.name, "shape": [int(x) for x in reversed(t.shape)],
                        "fnv1a64": f"{fnv1a64(t.data):016x}"})
    counts = {}
    for t in tensors:
        counts[t["type"]] = counts.get(t["type"], 0) + 1
    return {"bytes": path.stat().st_size, "sha256": hashlib.sha256(path.read_bytes()).hexdigest(),
            "type_counts": counts, "tensors": tensors}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--llama-build", required=True)
    ap.add_argument("--gguf", required=True, help="directory with convert_tiny.py's output")
    ap.add_argument("--gguf-py", default=str(REPO / ".devpack-llama/gguf-py"))
    ap.add_argument("--lily", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--out", default=str(REPO / "tests/fixtures/gguf-llama"))
    ap.add_argument("--commit", default="tiny-Q4_0,tiny-Q4_K_M,tiny-Q5_K_M")
    ap.add_argument("--synth-seed", default="7")
    args = ap.parse_args()
    sys.path.insert(0, args.gguf_py)
    import gguf

    build, src, work, out = Path(args.llama_build), Path(args.gguf), Path(args.work), Path(args.out)
    ref = build / "llama_ref/llama_ref"
    work.mkdir(parents=True, exist_ok=True)
    out.mkdir(parents=True, exist_ok=True)
    files = {}
    for name in ["tiny-bf16", "tiny-f16", "tiny-bf16-fused"]:
        shutil.copy(src / f"{name}.gguf", work / f"{name}.gguf")
        files[name] = work / f"{name}.gguf"
    for q in MIXES:
        f = work / f"tiny-{q}.gguf"
        run([ref, "quantize", work / "tiny-bf16.gguf", f, q], log=work / f"quantize-{q}.log")
        files[f"tiny-{q}"] = f
    synth = work / "synth-small.gguf"
    run([args.lily, "synth", "--gguf", synth, "--preset", "small", "--seed", args.synth_seed])
    files["synth-small"] = synth

    ref_st = REPO / "tests/fixtures/tiny/reference-bf16.safetensors"
    prompt = read_safetensors_i32(ref_st, "prompt_ids")
    steps = read_safetensors_i32(ref_st, "greedy_ids")[:STEPS]
    (work / "prompt.txt").write_text(",".join(map(str, prompt)))
    (work / "steps.txt").write_text(",".join(map(str, steps)))

    commit = set(args.commit.split(","))
    manifest = {"prompt_ids": prompt, "positions": list(range(len(prompt) - KEEP, len(prompt))), "step_ids": steps,
                "synth": {"preset": "small", "seed": int(args.synth_seed)}, "files": {}}
    for name, f in files.items():
        twin = work / f"{name}-f32twin.gguf"
        f32_twin(f, twin, gguf)
        dumps = {}
        for which, path in (("file", f), ("twin", twin)):
            dumps[which] = work / f"dump-{name}-{which}.safetensors"
            run([ref, "logits", path, work / "prompt.txt", dumps[which], work / "steps.txt"])
        d = describe(f, gguf)
        d["committed"] = name in commit
        manifest["files"][name] = d
        if name in commit:
            shutil.copy(f, out / f.name)
        if name in LOGITS:
            write_ref(out / f"llama-{name}.safetensors", dumps["file"], dumps["twin"], manifest["positions"])
        print(f"{name}: {d['bytes']} bytes, {d['type_counts']}", file=sys.stderr)
    run([ref, "tokenize", work / "tiny-bf16.gguf", REPO / "tests/fixtures/tiny/tokenizer_cases.jsonl",
         out / "llama-tokens.jsonl"])
    (out / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n")


if __name__ == "__main__":
    main()
