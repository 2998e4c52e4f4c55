// What both communicators (local_communicator.cpp, mpi_communicator.cpp) do
// first in Test: find the request's entry and check that it is pending.
// Private to src/runtime/comm.
#pragma once

#include <string>
#include <vector>

#include "fcp/communicator.h"
#include "fcp/error.h"

namespace fcp::detail {

// The entry of `request` in `entries` (one per request issued, with a `busy`
// flag until it completes). Error(kInvalidArgument) naming `who` for a
// request never issued; an internal error for one already completed.
template <typename Entry>
Entry& PendingRequest(std::vector<Entry>& entries, Communicator::Request request, const char* who) {
  if (request < 0 || request >= static_cast<Communicator::Request>(entries.size()))
    throw Error(ErrorCode::kInvalidArgument, std::string(who) + ": Test of unknown request " +
                                                 std::to_string(request) + " (" +
                                                 std::to_string(entries.size()) + " issued)");
  Entry& entry = entries[static_cast<size_t>(request)];
  FCP_CHECK(entry.busy, "communicator: request " + std::to_string(request) + " already completed");
  return entry;
}

}  // namespace fcp::detail
