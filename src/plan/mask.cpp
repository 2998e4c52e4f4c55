#include "fcp/mask.h"

#include "enum_names.h"
#include "fcp/error.h"

namespace fcp {

void Mask::validate() const {
  if (kind == MaskKind::kSlidingWindow && window < 1)
    throw Error(ErrorCode::kInvalidArgument,
                "mask: sliding_window needs window >= 1, got " + std::to_string(window));
  if (kind != MaskKind::kSlidingWindow && window != 0)
    throw Error(ErrorCode::kInvalidArgument,
                std::string("mask: window is only meaningful for sliding_window, got window ") +
                    std::to_string(window) + " with mask " + MaskKindName(kind));
}

constexpr detail::EnumName<MaskKind> kMaskKindNames[] = {
    {MaskKind::kCausal, "causal"},
    {MaskKind::kFull, "full"},
    {MaskKind::kSlidingWindow, "sliding_window"},
};

const char* MaskKindName(MaskKind kind) { return detail::NameOf(kMaskKindNames, kind); }

MaskKind ParseMaskKind(const std::string& name) {
  return detail::ValueNamed(kMaskKindNames, name, "mask: unknown kind");
}

}  // namespace fcp
