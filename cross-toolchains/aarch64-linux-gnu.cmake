# Cross toolchain: Debian 12 on x86_64 -> arm64 (aarch64-linux-gnu), against a Debian sysroot.
# Needs g++-aarch64-linux-gnu, qemu-user and the sysroot of scripts/make-sysroot.sh arm64;
# scripts/cross-build.sh arm64 sets all of it up. Used by the cross-arm64 preset.
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)
set(CMAKE_C_COMPILER aarch64-linux-gnu-gcc)
set(CMAKE_CXX_COMPILER aarch64-linux-gnu-g++)
set(CMAKE_LIBRARY_ARCHITECTURE aarch64-linux-gnu)
set(GARM_EDGE_SYSROOT_ARCH arm64)
set(GARM_EDGE_QEMU qemu-aarch64)

include(${CMAKE_CURRENT_LIST_DIR}/debian-sysroot.cmake)
