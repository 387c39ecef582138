#include "cli/command_help.h"

#include <cstring>

namespace lily {

namespace {

// Flags shared by several commands.
const FlagHelp kModel{"model", "DIR", "checkpoint directory (config.json, safetensors, tokenizer.json)"};
const FlagHelp kModelOrDemo{"model", "DIR",
                            "checkpoint directory; without it the bundled demo model demo/tiny-model (random "
                            "weights: its output is noise)"};
const FlagHelp kSynthetic{"synthetic", "PRESET",
                          "random weights built in memory instead of --model: qwen3.6-35b-a3b (the real shapes, "
                          "19.5 GB), medium (its matrices, 4 layers), small or tiny"};
const FlagHelp kSeed{"seed", "N", "seed of the --synthetic weights (default 1)"};
const FlagHelp kSynthFormat{"synthetic-format", "NAME",
                            "stored format of the --synthetic weights, built in memory and read by its loader: "
                            "mlx-4bit (default), fp8 (the FP8 release's: e4m3 with 128x128 block scales; bf16 "
                            "embeddings, lm_head, routers, in_proj_a/b) or gguf-q4km (the Q4_K_M-like GGUF of synth "
                            "--gguf)"};
const FlagHelp kBackendAuto{"backend", "KIND",
                            "auto (CUDA when built and a GPU is present, else cpu), cuda, cpu, cpu-ref (default auto)"};
const FlagHelp kPrefillChunk{"prefill-chunk", "N", "prompt tokens per forward chunk (default 0: the backend's own)"};
const FlagHelp kCtx{"ctx", "N", "context length in tokens (default min(32768, the model's max_position_embeddings))"};

const FlagHelp kMtp{"mtp", "K|off",
                    "speculative decoding with the checkpoint's multi-token-prediction block, K drafts per step (default "
                    "on when the model has mtp.* weights and the backend runs them, with the backend's count: 1 on "
                    "the CPU; off: plain decoding, the block not loaded)"};
const FlagHelp kMtpFrom{"mtp-from", "DIR",
                        "read the mtp.* weights from another checkpoint of the model (only its shards holding them)"};

const std::vector<CommandHelp>& table() {
  static const std::vector<CommandHelp> t = {
      {"bench",
       "bench (--model DIR | --synthetic PRESET) [flags]   or   bench --plot F.svg --series A.json,B.json",
       {kModel, kSynthetic, kSeed, kSynthFormat, kBackendAuto,
        {"prefill-lengths", "L,..", "prompt lengths to time (K = 1024; default 256,512,1K,2K,4K,8K,16K,32K,64K,128K)"},
        {"decode-contexts", "C,..", "contexts to time 64 decode steps after (default: the same list)"},
        {"decode-steps", "N", "decode steps timed after each context (default 64)"},
        {"sampled", "", "also time sampled decoding (device sampler at T=1 and T=0.7/top-k 20/top-p 0.9, host sampler)"},
        {"decode-context", "MODE",
         "prefilled (prefill the context first, default) or unfilled (a zero state of that length, timing only)"},
        {"reps", "N", "repetitions of each measurement; the median is reported (default 3)"},
        kPrefillChunk,
        {"limits", "", "also measure the device's copy and matmul limits (the \"of limit\" columns)"},
        {"limits-seconds", "S", "time spent on each limit probe (default 4)"},
        {"json", "F", "write the results as JSON to F"},
        {"plot", "F.svg", "write an SVG chart (of this run, or of the --series files without a model)"},
        {"series", "A.json,..", "earlier --json files to draw as series with --plot"},
        {"mtp", "K", "also time speculative decoding with K MTP drafts per step at each prefilled decode context, "
                     "and one verify step against one plain step"},
        kMtpFrom,
        {"mtp-accept", "P,..", "with --mtp: emulated acceptance, each draft replaced with probability P by the plain "
                               "greedy token (labelled emulated in the report)"}}},
      {"chat",
       "chat [--model DIR] [flags]",
       {kModelOrDemo, kBackendAuto, kCtx,
        {"max-tokens", "N", "most tokens per reply (default 2048)"},
        {"temperature", "T", "sampling temperature (default 0.7; 0 is greedy)"},
        {"top-p", "P", "nucleus sampling mass (default 0.95)"},
        {"top-k", "K", "sample among the K most likely tokens (default 20; 0: all)"},
        {"seed", "N", "sampling seed (default: random)"},
        {"no-think", "", "start with reasoning off (/think on|off switches it)"},
        {"hide-reasoning", "", "do not print the reasoning"},
        {"system", "TEXT", "system message"},
        {"cache-mb", "N", "memory for cached conversation states, MiB (default 2048)"},
        kMtp, kMtpFrom}},
      {"eval",
       "eval (--model DIR | --synthetic PRESET) --ref F.safetensors [flags]",
       {kModel, kSynthetic, kSeed, kSynthFormat,
        {"ref", "F.safetensors", "reference logits: prompt_ids i32 [L], prompt_logits f32 [L, V] (required)"},
        kBackendAuto, kPrefillChunk,
        {"min-top1", "X", "exit 1 when the top-1 agreement is below X (0..1)"},
        {"max-mean-kl", "X", "exit 1 when the mean KL(reference || ours) is above X"},
        {"max-kl", "X", "another name of --max-mean-kl"},
        {"max-abs", "X", "exit 1 when the largest |logit difference| is above X"},
        {"json", "F", "write the figures as JSON to F"}}},
      {"logits",
       "logits [--model DIR | --synthetic PRESET] --ids 1,2,3 --out F.safetensors [flags]",
       {kModelOrDemo, kSynthetic, kSeed, kSynthFormat,
        {"ids", "I,I,..", "prompt token ids (required)"},
        {"decode", "N", "also N greedy steps: greedy_ids i32 [N] and greedy_logits f32 [N, V] (default 0)"},
        kPrefillChunk,
        {"out", "F.safetensors", "output file; prompt_logits f32 [L, V] (required)"},
        {"backend", "KIND", "cpu, cpu-ref, cuda or auto (default cpu)"}}},
      {"perplexity",
       "perplexity (--model DIR | --synthetic PRESET) (--text F | --ids F) [flags]",
       {kModel, kSynthetic, kSeed, kSynthFormat,
        {"text", "F", "text file, tokenized with the model's tokenizer.json (needs --model)"},
        {"ids", "F", "token ids, separated by spaces or commas"},
        kBackendAuto,
        {"window", "N", "tokens per window (default 2048)"},
        {"stride", "N", "tokens between window starts (default window / 2)"},
        kPrefillChunk,
        {"json", "F", "write the result as JSON to F"}}},
      {"quantize",
       "quantize --model SRC --out DST [flags]",
       {{"model", "SRC", "source checkpoint directory (BF16, FP8 or any other loadable layout) (required)"},
        {"out", "DST", "output directory, written as MLX writes it (required)"},
        {"bits", "N", "bits of the affine codes: 2, 3, 4, 5, 6 or 8 (default 4)"},
        {"group-size", "N", "weights per scale and bias: 32, 64 or 128 (default 64)"},
        {"gate-bits", "N", "bits of the router and shared-expert gate (default 8)"},
        {"shard-gb", "X", "largest output shard, GB (default 5)"},
        {"kl-tokens", "N", "tokens of the closing KL check against the source (default 16; 0 skips it)"},
        {"kl-backend", "KIND", "backend that runs the KL check (default cpu)"}}},
      {"run",
       "run --prompt TEXT [flags]",
       {kModelOrDemo,
        {"prompt", "TEXT", "the prompt (required)"},
        {"chat", "", "wrap the prompt in the chat template as one user turn"},
        {"no-think", "", "with --chat: reasoning off"},
        {"max-tokens", "N", "tokens to generate (default 128)"},
        {"ctx", "N", "context length (default: prompt + max-tokens + 1)"},
        kBackendAuto, kPrefillChunk,
        {"temperature", "T", "sampling temperature (default 0: greedy)"},
        {"top-p", "P", "nucleus sampling mass (default 1)"},
        {"top-k", "K", "sample among the K most likely tokens (default 0: all)"},
        {"min-p", "P", "drop tokens below P times the top probability (default 0)"},
        {"seed", "N", "sampling seed (default: random)"},
        kMtp, kMtpFrom}},
      {"serve",
       "serve [--model DIR] [flags]",
       {kModelOrDemo,
        {"host", "ADDR", "address to listen on (default 127.0.0.1)"},
        {"port", "N", "port (default 8080; 0: any free port, printed at start)"},
        kCtx,
        {"api-key", "KEY", "require 'Authorization: Bearer KEY' (or x-api-key) on the API routes; visible in ps: "
                           "prefer --api-key-file or LILY_API_KEY"},
        {"api-key-file", "FILE", "read the key from the first line of FILE"},
        {"cors", "", "let any web origin call the server (--cors=ORIGIN,... for only those); off by default"},
        {"queue", "N", "requests waiting at most; more get 429 (default 16)"},
        {"cache-mb", "N", "memory for cached conversation states, MiB (default 2048; 0: off)"},
        kBackendAuto,
        {"max-body-mb", "N", "largest request body, MiB (default 8)"},
        {"model-id", "NAME", "the model name requests use (default: the model directory's name)"},
        {"max-connections", "N", "open connections at most; more get 503 (default 128)"},
        {"allow-special-tokens", "", "parse special tokens typed in message text (default: plain text)"},
        kPrefillChunk, kMtp, kMtpFrom}},
      {"synth",
       "synth --out DIR [flags]",
       {{"out", "DIR", "directory to write (this or --gguf is required)"},
        {"layout", "NAME", "mlx-4bit (default) or hf-bf16"},
        {"preset", "NAME", "qwen3.6-35b-a3b (default: the real shapes, 19.5 GB as mlx-4bit), medium, small or tiny"},
        {"seed", "N", "weight seed (default 1)"},
        {"shard-gb", "G", "largest safetensors shard, GB (default 4)"},
        {"gguf", "FILE", "write a Q4_K_M-like llama.cpp GGUF file instead of a safetensors directory"}}},
      {"template",
       "template (--model DIR | --template F.jinja) --input CTX.json",
       {{"model", "DIR", "use the model's chat template (tokenizer_config.json or chat_template.jinja)"},
        {"template", "F.jinja", "use this template file"},
        {"input", "CTX.json", "the context: messages, tools, add_generation_prompt, enable_thinking, ..."}}},
      {"tokenize",
       "tokenize (--tokenizer F | --model DIR) (--text TEXT | --decode I,I,..)",
       {{"tokenizer", "F", "tokenizer.json"},
        {"model", "DIR", "use DIR/tokenizer.json"},
        {"text", "TEXT", "encode TEXT and print the ids as a JSON list"},
        {"decode", "I,I,..", "decode the ids and print the text"}}},
  };
  return t;
}

}  // namespace

const CommandHelp* find_command_help(const std::string& command) {
  for (const auto& h : table())
    if (command == h.command) return &h;
  return nullptr;
}

void print_command_help(std::FILE* out, const CommandHelp& h, const char* summary) {
  std::fprintf(out, "usage: lily %s\n\n%s\n\nflags:\n", h.usage, summary);
  auto line = [&](const std::string& left, const char* text) {
    if (left.size() <= 24) {
      std::fprintf(out, "  %-24s %s\n", left.c_str(), text);
    } else {
      std::fprintf(out, "  %s\n  %-24s %s\n", left.c_str(), "", text);
    }
  };
  for (const auto& f : h.flags) line(std::string("--") + f.name + (std::strlen(f.value) ? " " : "") + f.value, f.text);
  line("-h, --help", "print this help");
}

}  // namespace lily
