# Shared by the cross toolchain files: the target's libraries come from a Debian 12 sysroot
# (scripts/make-sysroot.sh ARCH), not from multiarch packages on the build machine. glibc's and
# libstdc++'s headers, crt files and link-time libc come first from the cross compiler's own
# *-cross packages (/usr/TRIPLET): the same glibc 2.36 and GCC 12 as the sysroot, which
# supplies everything at run time. Set before
# including: GARM_EDGE_SYSROOT_ARCH (Debian's name), CMAKE_LIBRARY_ARCHITECTURE (the triplet)
# and GARM_EDGE_QEMU (the qemu-user program).
#
# The sysroot is /var/cache/garm-edge-sysroot/ARCH unless GARM_EDGE_SYSROOT (cache variable or
# environment) names another.
if(NOT GARM_EDGE_SYSROOT)
  if(DEFINED ENV{GARM_EDGE_SYSROOT})
    set(GARM_EDGE_SYSROOT "$ENV{GARM_EDGE_SYSROOT}")
  else()
    set(GARM_EDGE_SYSROOT "/var/cache/garm-edge-sysroot/${GARM_EDGE_SYSROOT_ARCH}")
  endif()
endif()
set(GARM_EDGE_SYSROOT "${GARM_EDGE_SYSROOT}" CACHE PATH "Debian sysroot of the target")
# try_compile projects read this file again, but not the cache: hand them the sysroot.
list(APPEND CMAKE_TRY_COMPILE_PLATFORM_VARIABLES GARM_EDGE_SYSROOT)
if(NOT EXISTS "${GARM_EDGE_SYSROOT}/.garm-edge-sysroot")
  message(FATAL_ERROR "no sysroot at ${GARM_EDGE_SYSROOT}: "
                      "run scripts/make-sysroot.sh ${GARM_EDGE_SYSROOT_ARCH} first")
endif()

set(CMAKE_SYSROOT "${GARM_EDGE_SYSROOT}")
set(CMAKE_FIND_ROOT_PATH "${GARM_EDGE_SYSROOT}")
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_PACKAGE ONLY)

# pkg-config (libvirt): only the sysroot's .pc files, their paths inside the sysroot.
set(ENV{PKG_CONFIG_SYSROOT_DIR} "${GARM_EDGE_SYSROOT}")
set(ENV{PKG_CONFIG_LIBDIR}
    "${GARM_EDGE_SYSROOT}/usr/lib/${CMAKE_LIBRARY_ARCHITECTURE}/pkgconfig:${GARM_EDGE_SYSROOT}/usr/share/pkgconfig")
set(ENV{PKG_CONFIG_PATH} "")

# ctest, and catch_discover_tests at build time, run the target's binaries under qemu-user with
# the sysroot's loader and libraries (-L). Programs that tests exec themselves go through
# binfmt_misc, where qemu looks in /etc/qemu-binfmt/<qemu arch>: scripts/cross-build.sh links
# that to the sysroot.
find_program(GARM_EDGE_CROSS_EMULATOR ${GARM_EDGE_QEMU})
if(GARM_EDGE_CROSS_EMULATOR)
  set(CMAKE_CROSSCOMPILING_EMULATOR "${GARM_EDGE_CROSS_EMULATOR};-L;${GARM_EDGE_SYSROOT}")
else()
  message(WARNING "${GARM_EDGE_QEMU} not found (apt-get install qemu-user): the tests cannot run")
endif()
