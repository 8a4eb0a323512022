# libtorch with one shared precompiled header.
#
# Parsing <torch/torch.h> costs ~20 s per file on this machine; every target
# that uses torch reuses one PCH built once (rlforge_use_torch). Targets that
# reuse it must keep the same compile flags: link rlforge_warnings PRIVATE,
# add no -D definitions (put build-time constants in a generated header).
# A CUDA libtorch (the torch wheel's, -DCMAKE_PREFIX_PATH=$(python3 -c 'import torch;
# print(torch.utils.cmake_prefix_path)')) would otherwise probe for the GPUs of this machine to
# pick its architectures, and fail where there are none: Hopper, as the kernels are built for.
if(NOT DEFINED ENV{TORCH_CUDA_ARCH_LIST})
  set(ENV{TORCH_CUDA_ARCH_LIST} "9.0")
endif()
find_package(Torch REQUIRED)
# A CUDA libtorch's TorchConfig finds C10_CUDA_LIBRARY; Debian's CPU-only libtorch does not.
set(RLFORGE_TORCH_CUDA 0)
if(C10_CUDA_LIBRARY)
  set(RLFORGE_TORCH_CUDA 1)
endif()

# A libtorch outside /usr (the torch wheel's) ships third-party headers in its include folder:
# fmt 12 and protobuf, which would shadow the Debian fmt 9 that spdlog was built with and the
# Debian protobuf our generated .pb.h need. Its own headers (ATen, c10, caffe2, torch) must in
# turn win over Debian's libtorch-dev 1.13 in /usr/include. So the imported targets' include
# folder becomes a folder of links to libtorch's own headers only, searched first, and the whole
# bundled folder is searched after the system's (-idirafter) for what Debian lacks. Its libraries
# need the nvidia wheels' libraries (NCCL, cuBLAS, ...) beside it: rpath-link to link, rpath to
# run. Debian's libtorch (prefix /usr) is left exactly as found.
function(rlforge_torch_from_wheel)
  # TorchConfig's find_library(c10) searches the system first and so finds Debian's libc10.
  set(libs)
  foreach(lib IN LISTS TORCH_LIBRARIES)
    get_filename_component(name "${lib}" NAME)
    if(IS_ABSOLUTE "${lib}" AND EXISTS "${TORCH_INSTALL_PREFIX}/lib/${name}")
      set(lib "${TORCH_INSTALL_PREFIX}/lib/${name}")
    endif()
    list(APPEND libs "${lib}")
  endforeach()
  set(TORCH_LIBRARIES "${libs}" PARENT_SCOPE)

  set(bundled "${TORCH_INSTALL_PREFIX}/include")
  set(own "${CMAKE_BINARY_DIR}/torch_include")
  file(REMOVE_RECURSE "${own}")
  file(MAKE_DIRECTORY "${own}")
  foreach(dir ATen c10 caffe2 torch THC)
    if(EXISTS "${bundled}/${dir}")
      file(CREATE_LINK "${bundled}/${dir}" "${own}/${dir}" SYMBOLIC)
    endif()
  endforeach()
  foreach(target torch torch_cpu torch_cuda c10 c10_cuda)
    if(NOT TARGET ${target})
      continue()
    endif()
    foreach(property INTERFACE_INCLUDE_DIRECTORIES INTERFACE_SYSTEM_INCLUDE_DIRECTORIES)
      get_target_property(dirs ${target} ${property})
      list(FIND dirs "${bundled}" at)
      if(dirs AND at GREATER -1)
        list(REMOVE_ITEM dirs "${bundled}")
        list(INSERT dirs ${at} "${own}")
        set_target_properties(${target} PROPERTIES ${property} "${dirs}")
      endif()
    endforeach()
  endforeach()
  target_compile_options(rlforge_torch INTERFACE "$<$<COMPILE_LANGUAGE:CXX>:-idirafter${bundled}>")

  file(GLOB nvidia_libs LIST_DIRECTORIES true "${TORCH_INSTALL_PREFIX}/../nvidia/*/lib")
  if(nvidia_libs)
    list(JOIN nvidia_libs ":" path)
    target_link_options(rlforge_torch INTERFACE "LINKER:-rpath-link,${path}" "LINKER:-rpath,${path}")
  endif()
  message(STATUS "libtorch ${Torch_VERSION} from ${TORCH_INSTALL_PREFIX}: own headers first, "
                 "bundled ones after the system's; nvidia libraries: ${path}")
endfunction()

add_library(rlforge_torch INTERFACE)
if(NOT TORCH_INSTALL_PREFIX STREQUAL "/usr")
  rlforge_torch_from_wheel()
endif()
target_link_libraries(rlforge_torch INTERFACE ${TORCH_LIBRARIES})
separate_arguments(_torch_flags UNIX_COMMAND "${TORCH_CXX_FLAGS}")
target_compile_options(rlforge_torch INTERFACE ${_torch_flags})

add_library(rlforge_torch_pch OBJECT ${CMAKE_SOURCE_DIR}/cmake/torch_pch.cc)
target_link_libraries(rlforge_torch_pch PUBLIC rlforge_torch PRIVATE rlforge_warnings)
target_precompile_headers(rlforge_torch_pch PRIVATE <torch/torch.h>)

# rlforge_use_torch(TARGET): link libtorch and reuse the shared PCH. A test target that
# -DRLFORGE_TESTS=OFF did not create is skipped.
function(rlforge_use_torch target)
  if(NOT TARGET ${target})
    return()
  endif()
  target_link_libraries(${target} PUBLIC rlforge_torch)
  target_precompile_headers(${target} REUSE_FROM rlforge_torch_pch)
endfunction()
