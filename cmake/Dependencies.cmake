# Every dependency comes from a Debian 12 package; nothing is fetched at build time.

find_package(PkgConfig REQUIRED)
pkg_check_modules(LIBVIRT REQUIRED IMPORTED_TARGET libvirt>=9.0)
find_package(nlohmann_json 3.11 REQUIRED)
find_package(pugixml 1.13 REQUIRED)
# toml++ and pugixml go into the executables (header-only, static archive): the packages then
# depend on nothing but libc and libvirt (issue 5), and the agent on libcurl4 for its large
# downloads (net/CMakeLists.txt).
# (Debian's tomlplusplus CMake target forces its shared library, so only its header is used.)
find_path(TOMLPLUSPLUS_INCLUDE_DIR toml++/toml.h REQUIRED)
add_library(tomlplusplus_header_only INTERFACE)
target_include_directories(tomlplusplus_header_only SYSTEM INTERFACE ${TOMLPLUSPLUS_INCLUDE_DIR})
target_compile_definitions(tomlplusplus_header_only INTERFACE TOML_HEADER_ONLY=1)
find_package(Threads REQUIRED)

# mbedTLS ships no CMake or pkg-config files in Debian 12; its static archives link into PIE
# executables, which keeps the agent independent of the host's mbedTLS (issue 5).
find_path(MBEDTLS_INCLUDE_DIR mbedtls/ssl.h REQUIRED)
foreach(part IN ITEMS mbedtls mbedx509 mbedcrypto)
  find_library(MBEDTLS_${part}_LIBRARY NAMES lib${part}.a ${part} REQUIRED)
endforeach()
add_library(mbedtls_static INTERFACE)
target_include_directories(mbedtls_static INTERFACE ${MBEDTLS_INCLUDE_DIR})
target_link_libraries(mbedtls_static INTERFACE
  ${MBEDTLS_mbedtls_LIBRARY} ${MBEDTLS_mbedx509_LIBRARY} ${MBEDTLS_mbedcrypto_LIBRARY})

# Nettle's SHA-256 uses the CPU's SHA extensions (7x mbedTLS's on x86-64 with SHA-NI): the image
# digests of multi-GB pulls (docs/images.md). Its static archive, so the agent still depends on
# nothing new (libnettle8 is on every libvirt host anyway, under libgnutls30).
find_path(NETTLE_INCLUDE_DIR nettle/sha2.h REQUIRED)
find_library(NETTLE_LIBRARY NAMES libnettle.a REQUIRED)
add_library(nettle_static INTERFACE)
target_include_directories(nettle_static INTERFACE ${NETTLE_INCLUDE_DIR})
target_link_libraries(nettle_static INTERFACE ${NETTLE_LIBRARY})

# Standalone Asio: header-only, no CMake or pkg-config files in Debian 12.
find_path(ASIO_INCLUDE_DIR asio.hpp REQUIRED)
add_library(asio_standalone INTERFACE)
target_include_directories(asio_standalone SYSTEM INTERFACE ${ASIO_INCLUDE_DIR})
target_compile_definitions(asio_standalone INTERFACE ASIO_STANDALONE ASIO_NO_DEPRECATED)
target_link_libraries(asio_standalone INTERFACE Threads::Threads)
