# The test kit's CMake side: which Python runs the tests, and how a pytest file becomes ctest
# entries. Owns the interpreter's choice, the entries' names, labels and skip rules; never
# what a test checks (the files themselves) nor the C++ fixtures (tests/kit/CMakeLists.txt).
#
# Labels: every entry carries exactly one of `unit` (no processes, fast) and `e2e` (processes
# across the fake driver), plus `timing` where it measures time (and then runs alone), `root`
# where it needs root (it skips without), and the suite's own (concurrency, package, fuzz, ...).

# The tests' interpreter must import pytest: the first python3 on PATH that does, unless
# Python3_EXECUTABLE is given (a version manager's shim may come first and lack it).
if(NOT Python3_EXECUTABLE)
  string(REPLACE ":" ";" cuslice_path_dirs "$ENV{PATH}")
  foreach(dir ${cuslice_path_dirs})
    if(EXISTS "${dir}/python3")
      execute_process(COMMAND "${dir}/python3" -c "import pytest"
                      RESULT_VARIABLE cuslice_no_pytest OUTPUT_QUIET ERROR_QUIET)
      if(cuslice_no_pytest EQUAL 0)
        set(Python3_EXECUTABLE "${dir}/python3" CACHE FILEPATH "Python for the tests (with pytest)")
        break()
      endif()
    endif()
  endforeach()
endif()
find_package(Python3 REQUIRED COMPONENTS Interpreter)

set(CUSLICE_KIT_DIR "${CMAKE_CURRENT_LIST_DIR}")

# cuslice_test_kind(unit|e2e): the kind of every test of this folder and the folders below,
# GoogleTest's discovered ones included (their PROPERTIES take one label only).
function(cuslice_test_kind kind)
  set_property(DIRECTORY PROPERTY LABELS ${kind})
endfunction()

# cuslice_pytest(<component> <file> KIND unit|e2e [LABELS l...] [ROOT] [ROOT_TESTS t...]
#                [RUN_SERIAL] [RESOURCE_LOCK r...] [FIXTURES_REQUIRED f...] [TIMEOUT s]
#                [SKIP_RETURN_CODE n] [ENVIRONMENT VAR=value...])
# One ctest entry per test function of <file> (its `def test_<name>(` at the line's start,
# read at configure time), named <component>.<name>, running `pytest <file>::test_<name>`.
# An entry whose every test skipped shows as skipped (-rs prints why), not as passed; pytest's
# exit 5 (nothing collected) fails it. ROOT labels every entry `root`, ROOT_TESTS those named.
# PYTHONPATH holds tests/kit and tests/scheduler (the harness modules).
function(cuslice_pytest component file)
  cmake_parse_arguments(PARSE_ARGV 2 arg "ROOT;RUN_SERIAL" "KIND;TIMEOUT;SKIP_RETURN_CODE"
                        "LABELS;ROOT_TESTS;RESOURCE_LOCK;FIXTURES_REQUIRED;ENVIRONMENT")
  if(NOT arg_KIND MATCHES "^(unit|e2e)$")
    message(FATAL_ERROR "cuslice_pytest(${component}): KIND unit or e2e")
  endif()
  get_filename_component(path "${file}" ABSOLUTE)
  set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS "${path}")
  file(STRINGS "${path}" defs REGEX "^def test_[A-Za-z0-9_]+\\(")
  if(NOT defs)
    message(FATAL_ERROR "cuslice_pytest(${component}): no test in ${path}")
  endif()
  if(NOT arg_TIMEOUT)
    set(arg_TIMEOUT 120)
  endif()
  set(env PYTHONDONTWRITEBYTECODE=1
      "PYTHONPATH=${CUSLICE_KIT_DIR}:${PROJECT_SOURCE_DIR}/tests/scheduler" ${arg_ENVIRONMENT})
  foreach(def ${defs})
    string(REGEX REPLACE "^def test_([A-Za-z0-9_]+)\\(.*" "\\1" name "${def}")
    set(test ${component}.${name})
    add_test(NAME ${test}
             COMMAND Python3::Interpreter -m pytest -p no:cacheprovider -v -rs "${path}::test_${name}")
    set(labels ${arg_KIND} ${arg_LABELS})
    if(arg_ROOT OR name IN_LIST arg_ROOT_TESTS)
      list(APPEND labels root)
    endif()
    set_tests_properties(${test} PROPERTIES
      LABELS "${labels}"
      TIMEOUT ${arg_TIMEOUT}
      SKIP_REGULAR_EXPRESSION "= [0-9]+ skipped in "
      ENVIRONMENT "${env}")
    if(arg_RUN_SERIAL OR "timing" IN_LIST arg_LABELS)
      set_tests_properties(${test} PROPERTIES RUN_SERIAL TRUE)
    endif()
    if(arg_RESOURCE_LOCK)
      set_tests_properties(${test} PROPERTIES RESOURCE_LOCK "${arg_RESOURCE_LOCK}")
    endif()
    if(arg_FIXTURES_REQUIRED)
      set_tests_properties(${test} PROPERTIES FIXTURES_REQUIRED "${arg_FIXTURES_REQUIRED}")
    endif()
    if(arg_SKIP_RETURN_CODE)
      set_tests_properties(${test} PROPERTIES SKIP_RETURN_CODE ${arg_SKIP_RETURN_CODE})
    endif()
  endforeach()
endfunction()
