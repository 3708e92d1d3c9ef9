# Cross toolchain: Debian 12 on x86_64 -> arm64 (aarch64-linux-gnu), through Debian multiarch.
# Needs crossbuild-essential-arm64, the :arm64 -dev packages and qemu-user;
# scripts/cross-build.sh arm64 installs them. Used by the cross-arm64 preset.
#
# No sysroot: multiarch installs the target's libraries and .pc files in
# /usr/lib/aarch64-linux-gnu, next to the build machine's; the arch-independent headers and
# CMake configs in /usr/include, /usr/share and /usr/lib/cmake serve both.
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)
set(CMAKE_C_COMPILER aarch64-linux-gnu-gcc)
set(CMAKE_CXX_COMPILER aarch64-linux-gnu-g++)
set(CMAKE_LIBRARY_ARCHITECTURE aarch64-linux-gnu)

# Never pick up the build machine's libraries or package configs.
set(CMAKE_IGNORE_PATH
  /usr/lib/x86_64-linux-gnu /lib/x86_64-linux-gnu /usr/lib/x86_64-linux-gnu/cmake /usr/lib64 /lib64)

# pkg-config (libvirt): only the target's .pc files and the arch-independent ones.
set(ENV{PKG_CONFIG_LIBDIR} /usr/lib/aarch64-linux-gnu/pkgconfig:/usr/share/pkgconfig)
set(ENV{PKG_CONFIG_PATH} "")

# ctest, and catch_discover_tests at build time, run the target's binaries under qemu-user. No
# `-L /usr/aarch64-linux-gnu`: with it qemu takes the loader from the cross toolchain's
# libc6-*-cross, which lags the multiarch libc6 that libvirt's packages install, while that loader
# still finds libc.so.6 in /lib/aarch64-linux-gnu; the mismatched pair hangs threaded code.
# Without -L every library, the loader included, comes from the multiarch packages, as on a target.
find_program(GARM_EDGE_CROSS_EMULATOR qemu-aarch64)
if(GARM_EDGE_CROSS_EMULATOR)
  set(CMAKE_CROSSCOMPILING_EMULATOR ${GARM_EDGE_CROSS_EMULATOR})
else()
  message(WARNING "qemu-aarch64 not found (apt-get install qemu-user): the tests cannot run")
endif()
