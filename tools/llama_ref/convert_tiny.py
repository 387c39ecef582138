#!/usr/bin/env python3
"""Converts the tiny transformers fixture (tests/fixtures/tiny/model-bf16) to GGUF with llama.cpp's own
converter (convert_hf_to_gguf.py, its conversion/ package and gguf-py, from a llama.cpp checkout given by
--llama), as BF16, F16 and BF16 with the experts' gate and up fused.

The fixture has no multi-token-prediction block, so `--no-mtp` is passed. Two things the converter needs
are supplied here, nothing else is changed:
- The fixture's tokenizer is a small BPE trained with the Qwen3.5 pre-tokenizer, so the converter's
  pre-tokenizer hash (made from the real vocabulary) does not know it. When the hash is not recognised
  and tokenizer.json's Split regex is exactly the Qwen3.5 one, `qwen35` is written, as for the real model.
- The model directory has no tokenizer_config.json; a staged copy of the directory gets one naming the
  same special tokens as Qwen3.5's (eos <|im_end|>, pad <|endoftext|>, no BOS) and the Qwen3.5 chat
  template from tests/fixtures/qwen35-chat.

Needs torch and numpy (a torch without float8 types gets placeholders for the converter's dtype tables:
the fixture holds no float8). transformers is used when installed; without it a stand-in reads the vocabulary
and added tokens from tokenizer.json (all the converter's GPT-2 vocabulary export reads) and the config
comes from config.json (the converter's own fallback).

  python3 tools/llama_ref/convert_tiny.py --llama LLAMA_DIR --out OUT_DIR
"""
import argparse
import hashlib
import json
import os
import sys
import tempfile
import types
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
QWEN35_SPLIT = ("(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?[\\p{L}\\p{M}]+|\\p{N}| ?[^\\s\\p{L}\\p{M}\\p{N}]+"
                "[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+")


def split_regex(tokenizer_json):
    pre = json.loads(Path(tokenizer_json).read_text())["pre_tokenizer"]
    for p in pre.get("pretokenizers", [pre]):
        if p.get("type") == "Split":
            return p["pattern"].get("Regex")
    return None


def install_transformers_stand_in():
    """A minimal `transformers` for the converter's GPT-2 vocabulary path, read from tokenizer.json."""

    class AddedToken:
        def __init__(self, d):
            self.content, self.special, self.normalized = d["content"], d["special"], d.get("normalized", False)

    class Tokenizer:
        def __init__(self, d):
            tj = json.loads((Path(d) / "tokenizer.json").read_text())
            self.vocab = dict(tj["model"]["vocab"])
            self.added_tokens_decoder = {}
            for a in tj["added_tokens"]:
                self.vocab[a["content"]] = a["id"]
                self.added_tokens_decoder[a["id"]] = AddedToken(a)
            self.added = {a["content"]: a["id"] for a in tj["added_tokens"]}

        def get_added_vocab(self):
            return dict(self.added)

        def encode(self, text, add_special_tokens=False):
            if text in self.added:
                return [self.added[text]]
            raise NotImplementedError("the tokenizer.json stand-in only encodes added tokens")

        def decode(self, ids):
            inv = {v: k for k, v in self.added.items()}
            return "".join(inv[i] for i in ids)

    class AutoTokenizer:
        @staticmethod
        def from_pretrained(d, **_):
            return Tokenizer(d)

    class AutoConfig:
        @staticmethod
        def from_pretrained(d, **_):
            raise OSError("transformers is not installed: reading config.json")

    t = types.ModuleType("transformers")
    t.AutoTokenizer, t.AutoConfig = AutoTokenizer, AutoConfig
    sys.modules["transformers"] = t


def stage(model_dir, tmp):
    """The model directory as symlinks, plus tokenizer_config.json and the chat template when missing."""
    d = Path(tmp) / model_dir.name
    d.mkdir()
    for f in model_dir.iterdir():
        (d / f.name).symlink_to(f.resolve())
    if not (d / "tokenizer_config.json").exists():
        cfg = {"tokenizer_class": "PreTrainedTokenizerFast", "bos_token": None, "eos_token": "<|im_end|>",
               "pad_token": "<|endoftext|>", "add_bos_token": False, "add_eos_token": False,
               "clean_up_tokenization_spaces": False, "model_max_length": 8192}
        (d / "tokenizer_config.json").write_text(json.dumps(cfg, indent=2))
    tmpl = REPO / "tests/fixtures/qwen35-chat/Qwen3.5-4B.jinja"
    if not (d / "chat_template.jinja").exists() and tmpl.exists():
        (d / "chat_template.jinja").symlink_to(tmpl)
    return d


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--llama", required=True, help="llama.cpp directory with convert_hf_to_gguf.py, conversion/, gguf-py/")
    ap.add_argument("--model", default=str(REPO / "tests/fixtures/tiny/model-bf16"))
    ap.add_argument("--out", required=True)
    ap.add_argument("--types", default="bf16,f16,bf16-fused")
    args = ap.parse_args()
    llama = Path(args.llama).resolve()
    model = Path(args.model).resolve()
    out = Path(args.out).resolve()
    out.mkdir(parents=True, exist_ok=True)

    try:
        import transformers  # noqa: F401
        stand_in = False
    except ImportError:
        install_transformers_stand_in()
        stand_in = True
    import torch
    for name in ("float8_e4m3fn", "float8_e5m2"):  # older torch: names the converter's tables list, unused here
        if not hasattr(torch, name):
            setattr(torch, name, object())
    sys.path.insert(0, str(llama))
    sys.path.insert(1, str(llama / "gguf-py"))
    import convert_hf_to_gguf  # noqa: E402
    from conversion import base  # noqa: E402

    original_pre = base.TextModel.get_vocab_base_pre

    def vocab_pre(self, tokenizer):
        if not stand_in:
            try:
                return original_pre(self, tokenizer)
            except NotImplementedError:
                pass
        regex = split_regex(self.dir_model / "tokenizer.json")
        if regex != QWEN35_SPLIT:
            raise NotImplementedError(f"pre-tokenizer not recognised and its Split regex is not Qwen3.5's: {regex!r}")
        print("convert_tiny: pre-tokenizer hash not recognised; tokenizer.json has the Qwen3.5 Split regex: "
              "writing tokenizer.ggml.pre = qwen35", file=sys.stderr)
        return "qwen35"

    base.TextModel.get_vocab_base_pre = vocab_pre

    with tempfile.TemporaryDirectory() as tmp:
        staged = stage(model, tmp)
        for t in args.types.split(","):
            outtype, _, extra = t.partition("-")
            fname = out / f"tiny-{t}.gguf"
            argv = ["convert_hf_to_gguf.py", str(staged), "--outtype", outtype, "--outfile", str(fname), "--no-mtp"]
            if extra == "fused":
                argv.append("--fuse-gate-up-exps")
            elif extra:
                raise SystemExit(f"unknown type suffix in {t}")
            sys.argv = argv
            convert_hf_to_gguf.main()
            h = hashlib.sha256(fname.read_bytes()).hexdigest()
            print(f"convert_tiny: {fname.name} {fname.stat().st_size} bytes sha256 {h}"
                  f"{' (transformers stand-in)' if stand_in else ''}", file=sys.stderr)


if __name__ == "__main__":
    main()
