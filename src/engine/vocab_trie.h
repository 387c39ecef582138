// The vocabulary's token texts as a byte trie, for judging every token against a byte constraint in one walk
// (JsonReplyGate::allowed_mask): tokens that share a prefix share the constraint's work on it, and a prefix the
// constraint refuses skips every token below it. Nodes are stored in preorder, so a walk is one loop over the array
// and skipping a subtree is a jump to Node::end.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace lily {

class VocabTrie {
 public:
  using TokenText = std::function<std::string(int32_t)>;  // a token's bytes; "" = no node (special tokens)

  VocabTrie(const TokenText& text, int vocab);

  struct Node {
    uint8_t byte = 0;        // the byte on the edge from the parent
    uint32_t depth = 0;      // bytes from the root (>= 1; the root is implicit)
    uint32_t end = 0;        // one past the last node of this subtree
    uint32_t tok_begin = 0;  // ids()[tok_begin, tok_end): the tokens whose text ends here
    uint32_t tok_end = 0;
    uint32_t sub_end = 0;    // ids()[tok_begin, sub_end): every token of the subtree
    bool plain_sub = false;  // every byte of the subtree (this node's included) is plain (is_plain_byte)
  };
  const std::vector<Node>& nodes() const { return nodes_; }
  const std::vector<int32_t>& ids() const { return ids_; }
  int vocab() const { return vocab_; }
  uint32_t max_depth() const { return max_depth_; }

 private:
  std::vector<Node> nodes_;
  std::vector<int32_t> ids_;  // token ids in the order of their texts
  int vocab_ = 0;
  uint32_t max_depth_ = 0;
};

// Printable ASCII other than '"' and '\\': the bytes that leave a JSON string's state as it is inside a free string.
inline bool is_plain_byte(uint8_t b) { return b >= 0x20 && b < 0x7f && b != '"' && b != '\\'; }

// Bit i % 32 of word i / 32 set: token i is allowed. (vocab + 31) / 32 words.
inline int mask_words(int vocab) { return (vocab + 31) / 32; }
inline bool mask_bit(const uint32_t* words, int32_t id) { return (words[id >> 5] >> (id & 31)) & 1u; }
// out[i] = logits[i] where token i is allowed, else -inf: the host reference of the CUDA step sampler's mask.
void apply_token_mask(const float* logits, const uint32_t* words, int vocab, float* out);

}  // namespace lily
