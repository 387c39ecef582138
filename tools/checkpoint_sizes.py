#!/usr/bin/env python3
"""Bytes of the Qwen3.6-35B-A3B text weights in each checkpoint layout lily loads, computed from the model's
shapes (hidden 2048, 40 layers of which every 4th is full attention, 16 q / 2 kv heads of 256, DeltaNet 16 key /
32 value heads of 128, 256 experts of 512 + a shared expert of 512, vocabulary 248320). Vision and MTP tensors
are not counted; the formats' per-group scales are. Columns: on disk, in memory after loading, on the GPU.

    python3 tools/checkpoint_sizes.py
"""
H, L, V, E, I, IS = 2048, 40, 248320, 256, 512, 512
NQ, NKV, HD, HK, HV, DK = 16, 2, 256, 16, 32, 128
GiB = 1024 ** 3


def matrices():
    """(name, rows, cols, count) of every matrix; kinds: 'big' (quantised everywhere), 'gate' (router and
    shared_expert_gate), 'ab' (in_proj_a / in_proj_b), 'embed' (embeddings and lm_head)."""
    out = [("embed", V, H, 1, "embed"), ("lm_head", V, H, 1, "embed")]
    for i in range(L):
        if (i + 1) % 4 == 0:
            out += [("q", 2 * NQ * HD, H, 1, "big"), ("k", NKV * HD, H, 1, "big"), ("v", NKV * HD, H, 1, "big"),
                    ("o", H, NQ * HD, 1, "big")]
        else:
            conv = 2 * HK * DK + HV * DK
            out += [("qkv", conv, H, 1, "big"), ("z", HV * DK, H, 1, "big"), ("a", HV, H, 1, "ab"),
                    ("b", HV, H, 1, "ab"), ("out", H, HV * DK, 1, "big")]
        out += [("router", E, H, 1, "gate"), ("sh_gate_w", 1, H, 1, "gate"), ("sh_gate", IS, H, 1, "big"),
                ("sh_up", IS, H, 1, "big"), ("sh_down", H, IS, 1, "big"), ("gate", I, H, E, "big"),
                ("up", I, H, E, "big"), ("down", H, I, E, "big")]
    return out


def affine(rows, cols, bits, group):
    return rows * cols * bits / 8 + 2 * rows * (cols // group) * 2


def size(layout):
    total = 0
    for _, r, c, n, kind in matrices():
        if layout == "bf16":
            b = r * c * 2
        elif layout.startswith("mlx"):
            bits = {"mlx-4bit": 4, "mlx-5bit": 5, "mlx-6bit": 6, "mlx-8bit": 8}[layout]
            b = affine(r, c, 8 if kind == "gate" else bits, 64)
        elif layout == "fp8":
            b = r * c * 2 if kind != "big" else r * c + ((r + 127) // 128) * ((c + 127) // 128) * 2
        else:  # int4 GPTQ / AWQ group 128: codes, fp16 scales, packed zeros; non-linear modules BF16
            b = r * c * 2 if kind != "big" else r * c / 2 + r * (c // 128) * 2 + r * (c // 128) / 2
        total += b * n
    return total


def loaded(layout):
    """Bytes in memory after loading: MLX 5/6-bit are repacked to 8-bit codes; GPTQ/AWQ to affine 4-bit group 64
    with f32 scales and biases; the rest stays as stored."""
    if layout in ("mlx-5bit", "mlx-6bit"):
        return size("mlx-8bit")
    if layout == "int4":
        total = 0
        for _, r, c, n, kind in matrices():
            total += n * (r * c * 2 if kind != "big" else r * c / 2 + 2 * r * (c // 64) * 4)
        return total
    return size(layout)


def on_cuda(layout):
    """Bytes of the weights on the GPU: FP8 as e4m3 codes with the block scale repeated per row (f32, one per 128
    columns); the affine forms with one bf16 (scale, bias) word per group (f32 repacks included); the rest as
    loaded."""
    total = 0
    for _, r, c, n, kind in matrices():
        if layout == "fp8":
            b = r * c * 2 if kind != "big" else r * c + r * ((c + 127) // 128) * 4
        elif layout == "int4":
            b = r * c * 2 if kind != "big" else r * c / 2 + r * (c // 64) * 4
        else:
            return loaded(layout)
        total += b * n
    return total


if __name__ == "__main__":
    for layout in ("bf16", "fp8", "mlx-4bit", "mlx-5bit", "mlx-6bit", "mlx-8bit", "int4"):
        print(f"{layout:9s} disk {size(layout) / GiB:6.1f} GiB   loaded {loaded(layout) / GiB:6.1f} GiB   "
              f"on the GPU {on_cuda(layout) / GiB:6.1f} GiB")
