// An empty shared library, built as libcuslice.so and libother_preload.so for tests that
// only need something ld.so can preload.
extern "C" int cuslice_test_stand_in() { return 0; }
