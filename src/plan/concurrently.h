// concurrently.h — the planner's one way to use a second core: run a
// function on a thread of its own and take its result later. Private to the
// planning layer (src/plan).
//
// Invariant: nothing a plan holds depends on whether the function ran on its
// own thread or at get(); callers run concurrently only functions that read
// what the calling thread does not write meanwhile.
#pragma once

#include <future>
#include <utility>

namespace fcp::detail {

// f(args...) on a thread of its own, its result (or exception) from the
// future's get(). Where no thread can be started the standard library
// (libstdc++, libc++) runs it at get() instead: a host that refuses a
// thread still gets its plan, the same one. The future's destructor waits
// for the thread, so an exception on the calling thread leaves none running.
template <typename F, typename... Args>
auto Concurrently(F&& f, Args&&... args) {
  return std::async(std::launch::async | std::launch::deferred, std::forward<F>(f),
                    std::forward<Args>(args)...);
}

}  // namespace fcp::detail
