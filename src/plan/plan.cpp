#include "fcp/plan.h"

#include <string>

#include "fcp/error.h"
#include "fcp/required_pairs.h"

namespace fcp {

int64_t Block::tokens() const {
  int64_t n = 0;
  for (const Segment& s : segments) n += s.length;
  return n;
}

void AttentionShape::validate() const {
  const auto positive = [](const char* name, int32_t v) {
    if (v <= 0)
      throw Error(ErrorCode::kInvalidArgument,
                  std::string("attention: ") + name + " must be > 0, got " + std::to_string(v));
  };
  positive("heads_q", heads_q);
  positive("heads_kv", heads_kv);
  positive("head_dim", head_dim);
  positive("dtype_bytes", dtype_bytes);
  // Byte counts are int64: Q, K, V and O of one token must stay far below
  // 2^63 / 2^40 tokens. Real models are ~2^15 (Llama-3-70B: 36 KiB).
  const __int128 bytes_per_token =
      (2 * static_cast<__int128>(heads_q) + 2 * static_cast<__int128>(heads_kv)) * head_dim *
      dtype_bytes;
  if (bytes_per_token > (int64_t{1} << 22))
    throw Error(ErrorCode::kInvalidArgument,
                "attention: (2 * heads_q + 2 * heads_kv) * head_dim * dtype_bytes must be <= "
                "2^22 bytes per token, got heads_q " +
                    std::to_string(heads_q) + ", heads_kv " + std::to_string(heads_kv) +
                    ", head_dim " + std::to_string(head_dim) + ", dtype_bytes " +
                    std::to_string(dtype_bytes));
  if (heads_q % heads_kv != 0)
    throw Error(ErrorCode::kInvalidArgument, "attention: heads_q (" + std::to_string(heads_q) +
                                                 ") must be a multiple of heads_kv (" +
                                                 std::to_string(heads_kv) + ")");
}

int64_t Plan::total_tokens() const {
  int64_t total = 0;
  for (size_t i = 0; i < sequences.size(); ++i)
    if (__builtin_add_overflow(total, sequences[i], &total))
      throw Error(ErrorCode::kInvalidArgument,
                  "plan: total tokens overflow int64 at sequence " + std::to_string(i));
  return total;
}

double ForwardFlops(const AttentionShape& shape, int64_t allowed_token_pairs) {
  return 4.0 * shape.heads_q * shape.head_dim * static_cast<double>(allowed_token_pairs);
}

int64_t QueryTransferBytes(const AttentionShape& shape, int64_t tokens, bool backward) {
  const int64_t rows = int64_t{shape.heads_q} * shape.head_dim * shape.dtype_bytes;
  return (backward ? 3 * rows + int64_t{4} * shape.heads_q : rows) * tokens;
}

int64_t PartialOutputBytes(const AttentionShape& shape, int64_t tokens) {
  return (int64_t{shape.heads_q} * shape.head_dim * shape.dtype_bytes +
          int64_t{4} * shape.heads_q) *
         tokens;
}

bool UsesRemoteCompute(const Plan& plan) {
  const auto remote = [](const std::vector<BlockPair>& compute) {
    for (const BlockPair& p : compute)
      if (p.worker != kOwner) return true;
    return false;
  };
  for (const ForwardStage& s : plan.forward)
    if (!s.send_q.empty() || !s.send_o.empty() || remote(s.compute)) return true;
  for (const BackwardStage& s : plan.backward)
    if (!s.send_q.empty() || !s.send_dq.empty() || remote(s.compute)) return true;
  return false;
}

int64_t KvTransferBytes(const AttentionShape& shape, int64_t tokens) {
  return int64_t{2} * shape.heads_kv * shape.head_dim * shape.dtype_bytes * tokens;
}

std::vector<int64_t> SequenceOffsets(const std::vector<int64_t>& sequences) {
  std::vector<int64_t> offsets(sequences.size() + 1, 0);
  for (size_t s = 0; s < sequences.size(); ++s) offsets[s + 1] = offsets[s] + sequences[s];
  return offsets;
}

}  // namespace fcp
