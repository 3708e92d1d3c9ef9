# Compiler settings shared by every target: warnings, sanitizers, ccache.

find_program(CCACHE_PROGRAM ccache)
if(CCACHE_PROGRAM AND NOT CMAKE_CXX_COMPILER_LAUNCHER)
  # The test targets use precompiled headers, which ccache caches only with this sloppiness.
  # Paths are hashed relative to the source tree, so that another checkout (the upgrade tier's
  # build of the previous commit) hits the cache for every file that did not change.
  set(CMAKE_CXX_COMPILER_LAUNCHER env
      "CCACHE_SLOPPINESS=pch_defines,time_macros,include_file_mtime,include_file_ctime"
      "CCACHE_BASEDIR=${PROJECT_SOURCE_DIR}" "${CCACHE_PROGRAM}")
endif()

# -Os rather than CMake's -O3: the stripped agent must stay under 4 MiB (product brief), and
# nothing here is bound by inner loops; the request path in net/ keeps -O2 (net/CMakeLists.txt).
set(CMAKE_CXX_FLAGS_RELEASE "-Os -DNDEBUG")

if(NOT CMAKE_BUILD_TYPE AND NOT CMAKE_CONFIGURATION_TYPES)
  set(CMAKE_BUILD_TYPE RelWithDebInfo CACHE STRING "Build type" FORCE)
endif()

add_library(garm_edge_options INTERFACE)
target_compile_options(garm_edge_options INTERFACE
  -Wall -Wextra -Wpedantic -Wshadow -Wconversion -Wsign-conversion
  -Wnon-virtual-dtor -Wold-style-cast -Woverloaded-virtual
  -Wimplicit-fallthrough -Wformat=2)
# GCC 12 reports -Wrestrict false positives inside libstdc++'s std::string concatenation at
# -O2 and above (GCC bug 105329). -Wnull-dereference is left out for the same reason: at -O3 it
# fires inside Asio's scheduler, inlined into our code.
if(CMAKE_CXX_COMPILER_ID STREQUAL "GNU" AND CMAKE_CXX_COMPILER_VERSION VERSION_LESS 13)
  target_compile_options(garm_edge_options INTERFACE -Wno-restrict)
  # At -Os GCC 12 takes std::optional<unsigned>'s engaged value for uninitialized (its
  # -Wmaybe-uninitialized false positives on std::optional); the ASan/UBSan and fuzz builds
  # still catch real uses of uninitialized memory.
  if(CMAKE_BUILD_TYPE STREQUAL "Release")
    target_compile_options(garm_edge_options INTERFACE -Wno-maybe-uninitialized)
  endif()
endif()
if(GARM_EDGE_WERROR)
  target_compile_options(garm_edge_options INTERFACE -Werror)
endif()
# 32-bit targets (armhf): 64-bit file offsets, so pread and stat reach past 2 GiB (runner
# archives and overlays can be that large). time_t stays 32-bit: _TIME_BITS=64 would change the
# layout of mbedTLS's structures against Debian's prebuilt libmbedtls.
if(CMAKE_SIZEOF_VOID_P EQUAL 4)
  target_compile_definitions(garm_edge_options INTERFACE _FILE_OFFSET_BITS=64)
endif()
if(GARM_EDGE_SANITIZE)
  target_compile_options(garm_edge_options INTERFACE
    -fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer)
  target_link_options(garm_edge_options INTERFACE -fsanitize=address,undefined)
endif()
if(GARM_EDGE_FUZZ)
  # Coverage instrumentation for the libraries the fuzz targets drive.
  target_compile_options(garm_edge_options INTERFACE -fsanitize=fuzzer-no-link)
endif()

# Release executables: drop unused code and data (the agent has a 4 MiB budget, issue 5).
if(CMAKE_BUILD_TYPE MATCHES "^(Release|MinSizeRel|RelWithDebInfo)$" AND NOT GARM_EDGE_FUZZ)
  target_compile_options(garm_edge_options INTERFACE -ffunction-sections -fdata-sections)
  target_link_options(garm_edge_options INTERFACE -Wl,--gc-sections)
endif()
