#pragma once
// Writes token files in the formats other trainers read:
//   llmc      llm.c's shard: 256 x int32 header, then the tokens; version 1
//             (magic 20240520, uint16) when the vocabulary fits 65536 ids,
//             else llm.c's Llama-3 version 7 (magic 20240801, uint32)
//   megatron  Megatron-LM's indexed dataset: PREFIX.bin (the tokens) and
//             PREFIX.idx (sequence lengths, byte offsets, document index);
//             uint16 below a 65500-token vocabulary, else int32
// Each file goes to NAME.new (fsynced); the caller renames the set into place.
#include <cstdint>
#include <string>
#include <vector>

namespace trainer {

enum class ShardFormat { Llmc, Megatron };

// Writes tokens [0, n) to the files of `base` (no extension) with temporary
// names; returns the final paths (without ".new"). doc_lengths: the lengths
// of the documents (or document pieces) that make up the n tokens, in order.
std::vector<std::string> write_shard(ShardFormat f, const std::string& base, const uint32_t* tokens, size_t n,
                                     const std::vector<uint64_t>& doc_lengths, uint32_t vocab_size);

// Megatron's dtype codes (indexed_dataset.py) and their sizes.
enum MegatronDtype : uint8_t { kMgU8 = 1, kMgI8 = 2, kMgI16 = 3, kMgI32 = 4, kMgI64 = 5, kMgU16 = 8 };
constexpr char kMegatronMagicBytes[9] = {'M', 'M', 'I', 'D', 'I', 'D', 'X', 0, 0};

}  // namespace trainer
