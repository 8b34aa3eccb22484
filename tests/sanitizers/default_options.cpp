// The sanitizers' options for every program of a sanitized build (-DCUSLICE_SANITIZE), built
// into it: tests start programs with environments of their own, without ASAN_OPTIONS. A
// variable that is set still adds to these and overrides them.
//
// verify_asan_link_order=0: the CLI's tests start the instrumented `cuslice` with stand-in
// libraries in LD_PRELOAD (empty, uninstrumented, defining nothing ASan intercepts); tests
// that preload the instrumented hook put ASan's runtime first themselves.
//
// With -DCUSLICE_SANITIZER_REPORTS=DIR every report goes to DIR/report.<program>.<pid> instead
// of stderr: programs that tests start with their own environment, whose output or exit
// status the test may not look at, report there too, and CI fails on any report
// (.ci/hardened).
#ifdef CUSLICE_SANITIZER_REPORTS
#define CUSLICE_LOG_OPTIONS ":log_path=" CUSLICE_SANITIZER_REPORTS "/report:log_exe_name=1"
#else
#define CUSLICE_LOG_OPTIONS ""
#endif

extern "C" {
__attribute__((visibility("default"))) const char* __asan_default_options() {
  return "verify_asan_link_order=0:detect_stack_use_after_return=1:strict_string_checks=1" CUSLICE_LOG_OPTIONS;
}
__attribute__((visibility("default"))) const char* __ubsan_default_options() {
  return "print_stacktrace=1:halt_on_error=1" CUSLICE_LOG_OPTIONS;
}
__attribute__((visibility("default"))) const char* __tsan_default_options() {
  return "halt_on_error=1:second_deadlock_stack=1" CUSLICE_LOG_OPTIONS;
}
}
