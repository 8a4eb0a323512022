# rlforge_proto_library(NAME PROTOS a.proto b.proto): generated C++ under
# ${CMAKE_BINARY_DIR}/proto/, included as "proto/a.pb.h".
function(rlforge_proto_library name)
  cmake_parse_arguments(ARG "" "" "PROTOS" ${ARGN})
  set(srcs)
  foreach(p ${ARG_PROTOS})
    get_filename_component(base ${p} NAME_WE)
    set(out_cc ${CMAKE_BINARY_DIR}/proto/${base}.pb.cc)
    set(out_h ${CMAKE_BINARY_DIR}/proto/${base}.pb.h)
    add_custom_command(
      OUTPUT ${out_cc} ${out_h}
      COMMAND protobuf::protoc --cpp_out=${CMAKE_BINARY_DIR} -I${CMAKE_SOURCE_DIR}
              ${CMAKE_CURRENT_SOURCE_DIR}/${p}
      DEPENDS ${CMAKE_CURRENT_SOURCE_DIR}/${p} protobuf::protoc
      COMMENT "protoc ${p}")
    list(APPEND srcs ${out_cc})
  endforeach()
  add_library(${name} STATIC ${srcs})
  target_link_libraries(${name} PUBLIC protobuf::libprotobuf)
  target_include_directories(${name} PUBLIC ${CMAKE_BINARY_DIR})
endfunction()
