// fcp/bfloat16.h — the bfloat16 storage type the CPU attention kernel reads
// (torch.bfloat16's bits: the upper 16 bits of an IEEE float32).
//
// Invariants: BFloat16 is 2 bytes, trivially copyable, so a torch/DLPack
// bfloat16 buffer is an array of it. Widening (ToFloat) is exact; narrowing
// (ToBFloat16) rounds to nearest, ties to even, keeps infinities and turns
// every NaN into a quiet NaN (never into an infinity). Both are O(1).
#pragma once

#include <bit>
#include <cstdint>

namespace fcp {

struct BFloat16 {
  uint16_t bits = 0;
};
static_assert(sizeof(BFloat16) == 2);

inline float ToFloat(BFloat16 x) {
  return std::bit_cast<float>(static_cast<uint32_t>(x.bits) << 16);
}

inline BFloat16 ToBFloat16(float f) {
  const uint32_t u = std::bit_cast<uint32_t>(f);
  if ((u & 0x7fffffffu) > 0x7f800000u)
    return {static_cast<uint16_t>((u >> 16) | 0x0040u)};  // NaN: quiet
  const uint32_t rounding = 0x7fffu + ((u >> 16) & 1u);   // ties to even
  return {static_cast<uint16_t>((u + rounding) >> 16)};
}

}  // namespace fcp
