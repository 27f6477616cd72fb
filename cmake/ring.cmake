# ring.cmake - context parallelism (ring attention, include/sdpa_ring.h),
# included by CMakeLists.txt once the library, the oracle and the test
# harness are defined.
#
# The schedule (src/ring/*.c) is always part of the library: the CPU tests
# run it over an in-process transport in CI. The NCCL transport and the CUDA
# ops (src/ring/nccl/, src/ring/cuda_ops.cu) are built with the CUDA backend
# when nccl.h is found (SDPA_HAVE_RING); NCCL itself is loaded with dlopen
# when first used, so libsdpa links no NCCL. Without them the public calls
# validate and answer SDPA_ERR_NOT_SUPPORTED.
set(SDPA_RING AUTO CACHE STRING "Build the NCCL ring (context parallelism): AUTO, ON or OFF")
set(SDPA_NCCL_DIR "" CACHE PATH "An NCCL install (include/nccl.h, lib/libnccl.so.2) to use")

set(SDPA_HAVE_RING OFF)
if(NOT SDPA_RING STREQUAL "OFF")
  if(SDPA_HAVE_CUDA)
    find_path(SDPA_NCCL_INCLUDE nccl.h
      HINTS ${SDPA_NCCL_DIR}/include $ENV{NCCL_HOME}/include ${CUDAToolkit_INCLUDE_DIRS})
    if(SDPA_NCCL_INCLUDE)
      set(SDPA_HAVE_RING ON)
      # the copy beside the header: dlopen's last resort, and what the example links
      find_library(SDPA_NCCL_LIBRARY NAMES nccl libnccl.so.2
        HINTS ${SDPA_NCCL_DIR}/lib ${SDPA_NCCL_INCLUDE}/../lib $ENV{NCCL_HOME}/lib
              ${CUDAToolkit_LIBRARY_DIR})
      message(STATUS "sdpa: the NCCL ring with ${SDPA_NCCL_INCLUDE}/nccl.h (NCCL loaded at run time)")
    elseif(SDPA_RING STREQUAL "ON")
      message(FATAL_ERROR "SDPA_RING=ON but nccl.h was not found (set SDPA_NCCL_DIR)")
    else()
      message(STATUS "sdpa: no nccl.h found; the ring's calls will answer SDPA_ERR_NOT_SUPPORTED")
    endif()
  elseif(SDPA_RING STREQUAL "ON")
    message(FATAL_ERROR "SDPA_RING=ON needs the CUDA backend")
  endif()
endif()

file(GLOB SDPA_RING_SOURCES CONFIGURE_DEPENDS ${CMAKE_CURRENT_SOURCE_DIR}/src/ring/*.c)
target_sources(sdpa_objects PRIVATE ${SDPA_RING_SOURCES})
if(SDPA_HAVE_RING)
  file(GLOB SDPA_RING_NCCL_SOURCES CONFIGURE_DEPENDS ${CMAKE_CURRENT_SOURCE_DIR}/src/ring/nccl/*.c)
  set(SDPA_RING_CU ${CMAKE_CURRENT_SOURCE_DIR}/src/ring/cuda_ops.cu)
  target_sources(sdpa_objects PRIVATE ${SDPA_RING_NCCL_SOURCES} ${SDPA_RING_CU})
  # on the ring's own sources only: finding NCCL or not leaves every other
  # object's flags (and its build) alone
  set(ring_defs SDPA_HAVE_RING=1)
  if(SDPA_NCCL_LIBRARY)
    get_filename_component(SDPA_NCCL_REAL ${SDPA_NCCL_LIBRARY} REALPATH)
    set_source_files_properties(${CMAKE_CURRENT_SOURCE_DIR}/src/ring/nccl/nccl_api.c PROPERTIES
      COMPILE_DEFINITIONS "${ring_defs};SDPA_NCCL_BUILD_LIBRARY=\"${SDPA_NCCL_REAL}\""
      INCLUDE_DIRECTORIES ${SDPA_NCCL_INCLUDE})
    list(REMOVE_ITEM SDPA_RING_NCCL_SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/src/ring/nccl/nccl_api.c)
  endif()
  set_source_files_properties(${SDPA_RING_SOURCES} ${SDPA_RING_NCCL_SOURCES} ${SDPA_RING_CU}
    PROPERTIES COMPILE_DEFINITIONS "${ring_defs}" INCLUDE_DIRECTORIES ${SDPA_NCCL_INCLUDE})
  # dlopen (in libc itself from glibc 2.34; libdl before)
  target_link_libraries(sdpa_shared PRIVATE ${CMAKE_DL_LIBS})
  target_link_libraries(sdpa_static INTERFACE ${CMAKE_DL_LIBS})
  list(APPEND SDPA_LINK ${CMAKE_DL_LIBS})
endif()
install(FILES ${CMAKE_CURRENT_SOURCE_DIR}/include/sdpa_ring.h
        DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})

# the example: one process a GPU, NCCL's unique id through a file (links NCCL itself)
if(SDPA_HAVE_RING AND SDPA_NCCL_LIBRARY)
  add_executable(example_ring examples/ring.c)
  target_compile_options(example_ring PRIVATE ${SDPA_WARN})
  target_include_directories(example_ring PRIVATE ${SDPA_NCCL_INCLUDE} ${CUDAToolkit_INCLUDE_DIRS})
  target_link_libraries(example_ring PRIVATE sdpa_shared ${SDPA_NCCL_LIBRARY} CUDA::cudart m)
endif()

if(SDPA_BUILD_TESTS)
  # the schedule on the CPU over the loopback transport: CI
  add_executable(test_ring_cpu tests/dist/test_ring_cpu.c tests/dist/loopback.c tests/dist/rows.c)
  target_compile_options(test_ring_cpu PRIVATE ${SDPA_WARN})
  target_include_directories(test_ring_cpu PRIVATE tests/dist)
  target_link_libraries(test_ring_cpu PRIVATE sdpa_test_common Threads::Threads)
  if(SDPA_HAVE_RING)
    target_compile_definitions(test_ring_cpu PRIVATE SDPA_TEST_HAVE_RING=1)
  endif()
  add_test(NAME test_ring_cpu COMMAND test_ring_cpu)
  set_tests_properties(test_ring_cpu PROPERTIES LABELS cpu)
  if(CMAKE_CXX_COMPILER)
    add_executable(test_ring_header_cxx tests/dist/header_ring_cxx.cpp)
    target_link_libraries(test_ring_header_cxx PRIVATE sdpa_shared)
    add_test(NAME test_ring_header_cxx COMMAND test_ring_header_cxx)
    set_tests_properties(test_ring_header_cxx PROPERTIES LABELS cpu)
  endif()
  # NCCL between GPUs: one process a GPU, forked by the test itself; 77 = skipped
  # (fewer GPUs than ranks, or no NCCL to load). ctest -L dist runs them.
  if(SDPA_HAVE_RING)
    add_executable(test_dist_ring tests/dist/test_dist_ring.c tests/dist/launch.c tests/dist/rows.c)
    target_compile_options(test_dist_ring PRIVATE ${SDPA_WARN})
    target_include_directories(test_dist_ring PRIVATE tests/dist ${CUDAToolkit_INCLUDE_DIRS})
    target_link_libraries(test_dist_ring PRIVATE sdpa_test_common CUDA::cudart_static)
    foreach(n 2 4)
      add_test(NAME test_dist_ring_${n} COMMAND test_dist_ring --ranks ${n})
      set_tests_properties(test_dist_ring_${n} PROPERTIES LABELS "dist;gpu" SKIP_RETURN_CODE 77
                           TIMEOUT 1800 RUN_SERIAL ON)
    endforeach()
    if(TARGET example_ring)
      add_test(NAME test_example_ring COMMAND example_ring 2)
      set_tests_properties(test_example_ring PROPERTIES LABELS "dist;gpu" SKIP_RETURN_CODE 77
                           TIMEOUT 600 RUN_SERIAL ON)
    endif()
  endif()
endif()
