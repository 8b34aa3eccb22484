# cuslice_grpc_protos(<target> <proto dir> <name>...): a static library of the C++ messages and
# gRPC services protoc generates from <proto dir>/<name>.proto into the build folder, at the
# .proto's own path from the repository root (device_plugin/proto/<name>.pb.h), with that
# folder as a system include directory (generated code: not ours to warn about). The
# kubelet's APIs for the device plugin and the DRA driver, and the test kubelets that link the
# same library, so both sides speak the very same messages.
# Needs find_package(Protobuf), the grpc++ pkg-config target and GRPC_CPP_PLUGIN.
function(cuslice_grpc_protos target proto_dir)
  set(out "${CMAKE_CURRENT_BINARY_DIR}/generated")
  file(MAKE_DIRECTORY "${out}")
  # The DRA API has proto3 `optional` fields, which protoc 3.12 to 3.14 (Debian 11's 3.12, where
  # the release tarball is built) accepts only behind this flag; 3.15 and later by default.
  set(optional_flag)
  if(Protobuf_VERSION VERSION_LESS 3.15)
    set(optional_flag --experimental_allow_proto3_optional)
  endif()
  set(sources)
  file(RELATIVE_PATH rel "${PROJECT_SOURCE_DIR}" "${proto_dir}")
  foreach(name ${ARGN})
    set(stem "${out}/${rel}/${name}")
    set(outputs "${stem}.pb.cc" "${stem}.pb.h" "${stem}.grpc.pb.cc" "${stem}.grpc.pb.h")
    add_custom_command(
      OUTPUT ${outputs}
      COMMAND protobuf::protoc ${optional_flag} --proto_path=${PROJECT_SOURCE_DIR} --cpp_out=${out}
              --grpc_out=${out} --plugin=protoc-gen-grpc=${GRPC_CPP_PLUGIN} "${proto_dir}/${name}.proto"
      DEPENDS "${proto_dir}/${name}.proto"
      COMMENT "Generating the kubelet API ${name}"
      VERBATIM)
    list(APPEND sources ${outputs})
  endforeach()
  add_library(${target} STATIC ${sources})
  target_include_directories(${target} SYSTEM PUBLIC "${out}")
  target_link_libraries(${target} PUBLIC protobuf::libprotobuf PkgConfig::GRPCPP)
  target_compile_options(${target} PRIVATE -w)
endfunction()
