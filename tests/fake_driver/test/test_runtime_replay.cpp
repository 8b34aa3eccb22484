// The runtime-replay harness against the fake driver: what cudart would get from the real one.
#include "tests/fake_driver/runtime_replay.h"

#include <dlfcn.h>
#include <gtest/gtest.h>

#include <map>
#include <string>

namespace {

// The file dladdr() names for a code address.
std::string library_of(void* address) {
  Dl_info info = {};
  return dladdr(address, &info) != 0 && info.dli_fname != nullptr ? info.dli_fname : "";
}

TEST(RuntimeReplay, FindsTheDriverThroughItsOwnSelfQuery) {
  const runtime_replay::Replay replay = runtime_replay::replay();
  ASSERT_TRUE(replay.ok()) << replay.error;
  EXPECT_EQ(replay.entry_point, dlsym(replay.library, "cuGetProcAddress_v2"));
  EXPECT_EQ(replay.self_result, CUDA_SUCCESS);
  EXPECT_EQ(replay.self_status, CU_GET_PROC_ADDRESS_SUCCESS);
  EXPECT_EQ(replay.self_lookup, replay.entry_point);  // "cuGetProcAddress" at 12000 is _v2
  EXPECT_NE(library_of(replay.entry_point).find("fake_driver/libcuda.so"), std::string::npos)
      << library_of(replay.entry_point);
}

TEST(RuntimeReplay, EveryDefaultQueryResolvesToItsExactName) {
  const runtime_replay::Replay replay = runtime_replay::replay();
  ASSERT_TRUE(replay.ok()) << replay.error;
  ASSERT_EQ(replay.lookups.size(), runtime_replay::default_queries().size());
  const std::string driver = library_of(replay.entry_point);
  for (const runtime_replay::Lookup& lookup : replay.lookups) {
    SCOPED_TRACE(lookup.query.exact_name);
    EXPECT_EQ(lookup.result, CUDA_SUCCESS);
    EXPECT_EQ(lookup.status, CU_GET_PROC_ADDRESS_SUCCESS);
    EXPECT_EQ(lookup.pfn, dlsym(replay.library, lookup.query.exact_name));
    EXPECT_EQ(library_of(lookup.pfn), driver);
  }
}

TEST(RuntimeReplay, LegacyAndPerThreadPointersDifferWhereATwinExists) {
  const runtime_replay::Replay replay = runtime_replay::replay();
  ASSERT_TRUE(replay.ok()) << replay.error;
  std::map<std::string, void*> legacy;
  int twins = 0;
  for (const auto& lookup : replay.lookups) {
    if (lookup.query.flags == CU_GET_PROC_ADDRESS_LEGACY_STREAM) {
      legacy[lookup.query.symbol] = lookup.pfn;
    }
  }
  for (const auto& lookup : replay.lookups) {
    if (lookup.query.flags != CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM) continue;
    ASSERT_TRUE(legacy.count(lookup.query.symbol)) << lookup.query.symbol;
    EXPECT_NE(lookup.pfn, legacy[lookup.query.symbol]) << lookup.query.symbol;
    ++twins;
  }
  EXPECT_EQ(twins, 7);
}

TEST(RuntimeReplay, RecordsWhatTheDriverAnswersForOddQueries) {
  const runtime_replay::Query queries[] = {
      {"cuNoSuchEntryPoint", 13000, CU_GET_PROC_ADDRESS_LEGACY_STREAM, nullptr},
      {"cuMemAlloc", 13000, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, "cuMemAlloc_v2"},
      {"cuMemAlloc", 13010, CU_GET_PROC_ADDRESS_LEGACY_STREAM, nullptr}};
  const runtime_replay::Replay replay = runtime_replay::replay(queries);
  ASSERT_TRUE(replay.ok()) << replay.error;
  ASSERT_EQ(replay.lookups.size(), 3u);
  EXPECT_EQ(replay.lookups[0].status, CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND);
  EXPECT_EQ(replay.lookups[0].pfn, nullptr);
  EXPECT_EQ(replay.lookups[1].pfn, dlsym(replay.library, "cuMemAlloc_v2"));  // no twin: legacy
  EXPECT_EQ(replay.lookups[2].result, CUDA_ERROR_INVALID_VALUE);
}

TEST(RuntimeReplay, ReportsALibraryThatCannotBeLoaded) {
  const runtime_replay::Replay replay = runtime_replay::replay({}, "libcuda-does-not-exist.so.1");
  EXPECT_FALSE(replay.ok());
  EXPECT_EQ(replay.library, nullptr);
  EXPECT_TRUE(replay.lookups.empty());
}

}  // namespace
