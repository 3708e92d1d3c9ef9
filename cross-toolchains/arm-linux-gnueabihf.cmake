# Cross toolchain: Debian 12 on x86_64 -> armhf (arm-linux-gnueabihf), through Debian multiarch.
# Needs crossbuild-essential-armhf, the :armhf -dev packages and qemu-user;
# scripts/cross-build.sh armhf installs them. Used by the cross-armhf preset.
#
# No sysroot: multiarch installs the target's libraries and .pc files in
# /usr/lib/arm-linux-gnueabihf, next to the build machine's; the arch-independent headers and
# CMake configs in /usr/include, /usr/share and /usr/lib/cmake serve both.
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR arm)
set(CMAKE_C_COMPILER arm-linux-gnueabihf-gcc)
set(CMAKE_CXX_COMPILER arm-linux-gnueabihf-g++)
set(CMAKE_LIBRARY_ARCHITECTURE arm-linux-gnueabihf)

# GCC notes, for every std::pair or std::variant passed by value, that the ARM ABI for it changed
# in GCC 7.1. That matters only when mixing objects built by GCC < 7; it is not about this code.
set(CMAKE_C_FLAGS_INIT -Wno-psabi)
set(CMAKE_CXX_FLAGS_INIT -Wno-psabi)

# Never pick up the build machine's libraries or package configs.
set(CMAKE_IGNORE_PATH
  /usr/lib/x86_64-linux-gnu /lib/x86_64-linux-gnu /usr/lib/x86_64-linux-gnu/cmake /usr/lib64 /lib64)

# pkg-config (libvirt): only the target's .pc files and the arch-independent ones.
set(ENV{PKG_CONFIG_LIBDIR} /usr/lib/arm-linux-gnueabihf/pkgconfig:/usr/share/pkgconfig)
set(ENV{PKG_CONFIG_PATH} "")

# ctest, and catch_discover_tests at build time, run the target's binaries under qemu-user. No
# `-L /usr/arm-linux-gnueabihf`: with it qemu takes the loader from the cross toolchain's
# libc6-*-cross, which lags the multiarch libc6 that libvirt's packages install, while that loader
# still finds libc.so.6 in /lib/arm-linux-gnueabihf; the mismatched pair hangs threaded code.
# Without -L every library, the loader included, comes from the multiarch packages, as on a target.
find_program(GARM_EDGE_CROSS_EMULATOR qemu-arm)
if(GARM_EDGE_CROSS_EMULATOR)
  set(CMAKE_CROSSCOMPILING_EMULATOR ${GARM_EDGE_CROSS_EMULATOR})
else()
  message(WARNING "qemu-arm not found (apt-get install qemu-user): the tests cannot run")
endif()
