# Every dependency comes from a Debian 12 package; nothing is fetched at build time.

find_package(PkgConfig REQUIRED)
pkg_check_modules(LIBVIRT REQUIRED IMPORTED_TARGET libvirt>=9.0)
find_package(nlohmann_json 3.11 REQUIRED)
find_package(pugixml 1.13 REQUIRED)
find_package(tomlplusplus 3.3 REQUIRED)
find_package(Threads REQUIRED)
