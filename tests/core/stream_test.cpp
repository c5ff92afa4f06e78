// The stream context (core/stream.h): CUDA's per-thread default stream unless a scope
// names another, scopes nest and restore, and each thread has its own.
#include <gtest/gtest.h>

#include <thread>

#include "amber/core/stream.h"

namespace amber {
namespace {

cuda::Stream fake_stream(uintptr_t bits) { return reinterpret_cast<cuda::Stream>(bits); }

TEST(StreamTest, DefaultIsThePerThreadStreamAndScopesNestAndRestore) {
  EXPECT_EQ(cuda::current_stream(), cuda::per_thread_stream());
  EXPECT_EQ(reinterpret_cast<uintptr_t>(cuda::per_thread_stream()), 0x2u);
  {
    const cuda::StreamScope outer(fake_stream(0x1000));
    EXPECT_EQ(cuda::current_stream(), fake_stream(0x1000));
    {
      const cuda::StreamScope inner(fake_stream(0x2000));
      EXPECT_EQ(cuda::current_stream(), fake_stream(0x2000));
      const cuda::StreamScope back(nullptr);
      EXPECT_EQ(cuda::current_stream(), cuda::per_thread_stream());
    }
    EXPECT_EQ(cuda::current_stream(), fake_stream(0x1000));
  }
  EXPECT_EQ(cuda::current_stream(), cuda::per_thread_stream());
}

TEST(StreamTest, AScopeSwitchesOnlyItsOwnThread) {
  const cuda::StreamScope scope(fake_stream(0x1000));
  cuda::Stream seen = nullptr;
  std::thread other([&] { seen = cuda::current_stream(); });
  other.join();
  EXPECT_EQ(seen, cuda::per_thread_stream());
  EXPECT_EQ(cuda::current_stream(), fake_stream(0x1000));
}

}  // namespace
}  // namespace amber
