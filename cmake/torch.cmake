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

add_library(rlforge_torch INTERFACE)
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
