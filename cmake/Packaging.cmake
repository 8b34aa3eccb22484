# What `cmake --install` and `cpack` ship, and how.
#
#   cpack -G DEB --config build/CPackConfig.cmake   # cuslice_<version>_<arch>.deb
#   cpack -G TGZ --config build/CPackConfig.cmake   # cuslice-<version>-linux-<arch>.tar.gz
#
# Both hold the same install tree: bin/cuslice and bin/cuslice-scheduler, lib/libcuslice.so
# (lib/, not the multiarch libdir: `cuslice` looks for the hook at ../lib beside itself), the
# systemd unit under lib/systemd/system, share/cuslice/ (the container entrypoint wrapper and
# an example configuration) and share/doc/cuslice/ (README.md and the pages of docs/reference,
# docs/design and docs/evidence, side by side).
#
# The .deb installs under /usr and depends on Debian's packages of the libraries the programs
# link (dpkg-shlibdeps computes them). The tarball is relocatable and self-contained for any
# x86-64 glibc system: cmake/BundleRuntime.cmake copies every shared library the programs
# need into lib/, except the system's own set (glibc, libstdc++, libgcc_s and libsystemd, the
# last because it must match the running systemd and every systemd or apt system has it), and
# sets RUNPATH ($ORIGIN/../lib on the programs, $ORIGIN on the copies) with patchelf.

# The documentation, where the unit's Documentation= line points.
file(GLOB cuslice_docs CONFIGURE_DEPENDS "${PROJECT_SOURCE_DIR}/docs/*/*.md")
install(FILES "${PROJECT_SOURCE_DIR}/README.md" ${cuslice_docs} DESTINATION share/doc/cuslice)

# What deploy/ ships to a node with the tools: the container entrypoint wrapper (the
# Kubernetes DaemonSet copies it from <prefix>/share/cuslice), an example configuration, and
# the scheduler's unit, whose ExecStart and Documentation lines are rewritten for the prefix
# the tree is installed to (the source names /usr/local).
install(PROGRAMS "${PROJECT_SOURCE_DIR}/deploy/container/cuslice-entrypoint.sh"
        DESTINATION share/cuslice)
install(FILES "${PROJECT_SOURCE_DIR}/deploy/cuslice.example.yaml" DESTINATION share/cuslice)
set(CUSLICE_UNIT_SOURCE "${PROJECT_SOURCE_DIR}/deploy/systemd/cuslice-scheduler.service")
install(CODE "
  file(READ \"${CUSLICE_UNIT_SOURCE}\" unit)
  string(REPLACE \"/usr/local/\" \"\${CMAKE_INSTALL_PREFIX}/\" unit \"\${unit}\")
  set(dest \"\$ENV{DESTDIR}\${CMAKE_INSTALL_PREFIX}/lib/systemd/system\")
  file(MAKE_DIRECTORY \"\${dest}\")
  message(STATUS \"Installing: \${dest}/cuslice-scheduler.service\")
  file(WRITE \"\${dest}/cuslice-scheduler.service\" \"\${unit}\")
  list(APPEND CMAKE_INSTALL_MANIFEST_FILES \"\${dest}/cuslice-scheduler.service\")
")

set(CPACK_PACKAGE_NAME cuslice)
set(CPACK_PACKAGE_VENDOR cuslice)
set(CPACK_PACKAGE_CONTACT "cuslice maintainers <cuslice@localhost>" CACHE STRING
    "Maintainer field of the .deb")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY
    "Share one NVIDIA GPU between tenants: memory quotas and GPU time slices")
set(CPACK_PACKAGE_DESCRIPTION
    "cuslice preloads an interposer of the CUDA Driver API and NVML (libcuslice.so) into\n\
unmodified GPU programs to enforce per-tenant memory quotas and to gate kernel launches\n\
with GPU time-slice tokens granted by a per-node scheduler (cuslice-scheduler) by share,\n\
cap and priority. The cuslice tool runs programs as tenants and shows their status.")
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_PACKAGE_FILE_NAME "cuslice-${PROJECT_VERSION}-linux-${CMAKE_SYSTEM_PROCESSOR}")
set(CPACK_STRIP_FILES ON)
set(CPACK_SOURCE_IGNORE_FILES "/build.*/" "/\\\\.git/" "__pycache__")

# .deb: /usr, dependencies from the libraries the programs link.
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_SECTION admin)
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
set(CPACK_DEBIAN_PACKAGE_CONTROL_EXTRA
    "${PROJECT_SOURCE_DIR}/cmake/debian/postinst"
    "${PROJECT_SOURCE_DIR}/cmake/debian/prerm"
    "${PROJECT_SOURCE_DIR}/cmake/debian/postrm")
set(CPACK_DEBIAN_PACKAGE_CONTROL_STRICT_PERMISSION ON)

# Tarball: the libraries inside, RUNPATH set (cmake/BundleRuntime.cmake, run by cpack after it
# has installed the tree into its staging folder). patchelf is needed only there.
set(CPACK_PRE_BUILD_SCRIPTS "${PROJECT_SOURCE_DIR}/cmake/BundleRuntime.cmake")
set(CPACK_GENERATOR "DEB;TGZ")

include(CPack)
