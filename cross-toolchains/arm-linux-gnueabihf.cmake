# Cross toolchain: Debian 12 on x86_64 -> armhf (arm-linux-gnueabihf), against a Debian sysroot.
# Needs g++-arm-linux-gnueabihf, qemu-user and the sysroot of scripts/make-sysroot.sh armhf;
# scripts/cross-build.sh armhf sets all of it up. Used by the cross-armhf preset.
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR arm)
set(CMAKE_C_COMPILER arm-linux-gnueabihf-gcc)
set(CMAKE_CXX_COMPILER arm-linux-gnueabihf-g++)
set(CMAKE_LIBRARY_ARCHITECTURE arm-linux-gnueabihf)
set(GARM_EDGE_SYSROOT_ARCH armhf)
set(GARM_EDGE_QEMU qemu-arm)

# GCC notes, for every std::pair or std::variant passed by value, that the ARM ABI for it changed
# in GCC 7.1. That matters only when mixing objects built by GCC < 7; it is not about this code.
set(CMAKE_C_FLAGS_INIT -Wno-psabi)
set(CMAKE_CXX_FLAGS_INIT -Wno-psabi)

include(${CMAKE_CURRENT_LIST_DIR}/debian-sysroot.cmake)
