# Makes cpack's tarball self-contained (run by cpack through CPACK_PRE_BUILD_SCRIPTS, after it
# has installed the tree into its staging folder; the .deb is left alone, it depends on
# Debian's packages instead).
#
# Copies into lib/ every shared library that bin/cuslice, bin/cuslice-scheduler,
# bin/cuslice-device-plugin, bin/cuslice-dra-plugin and lib/libcuslice.so load, directly or
# through each other, except the system's own set below,
# and sets RUNPATH so that the loader finds the copies wherever the tarball is unpacked:
# $ORIGIN/../lib on the programs, $ORIGIN on the copies (each copy's own dependencies are then
# found beside it, not in the system). Lists what was copied in share/cuslice/bundled-libraries.txt.
#
# The system's set, never copied: glibc (the programs need 2.36 or newer), libstdc++ and
# libgcc_s (GCC 12's or newer), and libsystemd with what it loads: it speaks to the running
# systemd and journald, and every system with systemd or apt has it. The hook needs only libc
# (libstdc++ is linked into it statically).
if(CPACK_GENERATOR MATCHES "^(DEB|RPM)$")
  return()
endif()

set(root "${CPACK_TEMPORARY_INSTALL_DIRECTORY}")
if(NOT EXISTS "${root}/bin/cuslice-scheduler")
  message(FATAL_ERROR "BundleRuntime: no bin/cuslice-scheduler under ${root}")
endif()
find_program(PATCHELF patchelf)
if(NOT PATCHELF)
  message(FATAL_ERROR "BundleRuntime: patchelf is needed to build the tarball (apt-get install patchelf)")
endif()

set(programs "${root}/bin/cuslice" "${root}/bin/cuslice-scheduler" "${root}/bin/cuslice-device-plugin"
             "${root}/bin/cuslice-dra-plugin")
file(GET_RUNTIME_DEPENDENCIES
  EXECUTABLES ${programs}
  LIBRARIES "${root}/lib/libcuslice.so"
  RESOLVED_DEPENDENCIES_VAR resolved
  UNRESOLVED_DEPENDENCIES_VAR unresolved
  PRE_EXCLUDE_REGEXES
    "^linux-vdso\\.so" "^ld-linux" "^libc\\.so" "^libm\\.so" "^libmvec\\.so" "^libpthread\\.so"
    "^libdl\\.so" "^librt\\.so" "^libresolv\\.so" "^libutil\\.so" "^libanl\\.so" "^libnss_"
    "^libstdc\\+\\+\\.so" "^libgcc_s\\.so" "^libsystemd\\.so")
if(unresolved)
  message(FATAL_ERROR "BundleRuntime: libraries not found on this machine: ${unresolved}")
endif()

set(listing "# Shared libraries copied into lib/ from the build machine (soname <- source)\n")
foreach(path IN LISTS resolved)
  get_filename_component(name "${path}" NAME)
  file(REAL_PATH "${path}" source)
  file(COPY_FILE "${source}" "${root}/lib/${name}")
  file(CHMOD "${root}/lib/${name}" FILE_PERMISSIONS OWNER_READ OWNER_WRITE GROUP_READ WORLD_READ)
  execute_process(COMMAND "${PATCHELF}" --set-rpath "$ORIGIN" "${root}/lib/${name}"
                  COMMAND_ERROR_IS_FATAL ANY)
  string(APPEND listing "${name} <- ${source}\n")
endforeach()
foreach(program IN LISTS programs)
  execute_process(COMMAND "${PATCHELF}" --set-rpath "$ORIGIN/../lib" "${program}"
                  COMMAND_ERROR_IS_FATAL ANY)
endforeach()
file(WRITE "${root}/share/cuslice/bundled-libraries.txt" "${listing}")

# The unit names the folder the tree was staged in: point it at /opt/cuslice, where
# docs/reference/getting-started.md unpacks the tarball.
set(unit "${root}/lib/systemd/system/cuslice-scheduler.service")
file(READ "${unit}" text)
string(REPLACE "${root}/" "/opt/cuslice/" text "${text}")
file(WRITE "${unit}" "${text}")
