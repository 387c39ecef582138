// Synthetic weights in a stored format, through that format's loader (see synthetic_formats.h).
#include "synth/synthetic_formats.h"

#include "core/error.h"
#include "io/gguf.h"
#include "io/safetensors.h"
#include "model/gguf_weights.h"
#include "synth/gguf_checkpoint.h"
#include "synth/synthetic_fp8.h"

namespace lily {

std::vector<std::string> synthetic_formats() { return {"mlx-4bit", "fp8", "gguf-q4km"}; }

std::shared_ptr<ModelWeights> make_synthetic_in_format(const std::string& preset, uint64_t seed,
                                                       const std::string& format, const SynthProgressFn& progress) {
  if (format == "mlx-4bit") return make_synthetic(preset, seed, progress);
  if (format == "fp8") return make_synthetic_fp8(preset, seed, progress);
  if (format == "gguf-q4km") {
    std::vector<uint8_t> bytes;
    int vocab = 0;
    {
      auto mlx = make_synthetic(preset, seed, progress);  // freed once the GGUF bytes are made
      vocab = mlx->cfg.vocab;
      bytes = gguf_checkpoint_bytes(*mlx, synthetic_gguf_tokenizer(preset, vocab), progress);
    }
    const std::string name = "synthetic-" + preset + "-q4km.gguf";
    auto file = std::make_shared<const GgufFile>(MappedFile::from_bytes(std::move(bytes), name));
    return load_model_gguf(std::make_shared<const GgufModel>(std::move(file)));
  }
  std::string known;
  for (const std::string& f : synthetic_formats()) known += (known.empty() ? "" : ", ") + f;
  throw Error("unknown synthetic format '" + format + "' (known: " + known + ")");
}

}  // namespace lily
