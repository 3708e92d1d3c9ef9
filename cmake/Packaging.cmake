# Two Debian packages (garm-edge-agent, garm-provider-edge) and a tarball of the static
# provider for garm's container image. `cmake --build <dir> --target package` makes them; the
# architecture is the target's (cross builds make arm64 packages on an amd64 host).

set(GARM_EDGE_DOC_FILES README.md docs/architecture.md docs/api.md docs/guests.md)
list(TRANSFORM GARM_EDGE_DOC_FILES PREPEND ${PROJECT_SOURCE_DIR}/)

# The agent: daemon, unit, sysusers, default config (a conffile), docs.
install(TARGETS garm-edge-agent RUNTIME DESTINATION bin COMPONENT agent)
# Debian 12 still ships units in /lib (usrmerge is not complete there).
install(FILES systemd/garm-edge-agent.service DESTINATION /lib/systemd/system COMPONENT agent)
install(FILES systemd/garm-edge.sysusers DESTINATION lib/sysusers.d RENAME garm-edge.conf
        COMPONENT agent)
install(FILES docs/agent.toml.example DESTINATION /etc/garm-edge RENAME agent.toml
        COMPONENT agent)
install(FILES ${GARM_EDGE_DOC_FILES} docs/agent.toml.example packaging/copyright
        DESTINATION share/doc/garm-edge-agent COMPONENT agent)
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/packaging/changelog.Debian.gz
        DESTINATION share/doc/garm-edge-agent COMPONENT agent)

foreach(component IN ITEMS agent provider)
  set(package garm-edge-agent)
  set(tool garm-edge-agent)
  if(component STREQUAL "provider")
    set(package garm-provider-edge)
    set(tool garm-provider-edge)
  endif()
  # What operators import into Prometheus and Grafana (docs/observability.md): in both packages,
  # a host scraped directly and a hub beside garm each have them.
  install(FILES monitoring/garm-edge.rules.yml monitoring/garm-edge-fleet.dashboard.json
          docs/observability.md DESTINATION share/${package}/monitoring COMPONENT ${component})
  install(FILES ${CMAKE_CURRENT_BINARY_DIR}/packaging/${tool}.8.gz DESTINATION share/man/man8
          COMPONENT ${component})
  install(FILES packaging/lintian/${package} DESTINATION share/lintian/overrides
          COMPONENT ${component})
endforeach()

# The provider: the static executable and an example config for garm's host; and the hub that
# runs beside garm (docs/fleet.md), with its unit, account and example config.
install(TARGETS garm-provider-edge garm-edge-hub RUNTIME DESTINATION bin COMPONENT provider)
install(FILES systemd/garm-edge-hub.service DESTINATION /lib/systemd/system COMPONENT provider)
install(FILES systemd/garm-edge-hub.sysusers DESTINATION lib/sysusers.d RENAME garm-edge-hub.conf
        COMPONENT provider)
install(FILES docs/hub.toml.example DESTINATION /etc/garm-edge-hub RENAME hub.toml
        COMPONENT provider)
install(FILES docs/fleet.md docs/hub.toml.example DESTINATION share/doc/garm-provider-edge
        COMPONENT provider)
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/packaging/garm-edge-hub.8.gz DESTINATION share/man/man8
        COMPONENT provider)
install(FILES docs/provider.toml.example DESTINATION /etc/garm RENAME garm-provider-edge.toml
        COMPONENT provider)
install(FILES docs/provider.toml.example packaging/copyright
        DESTINATION share/doc/garm-provider-edge COMPONENT provider)
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/packaging/changelog.Debian.gz
        DESTINATION share/doc/garm-provider-edge COMPONENT provider)

# Debian policy wants a compressed changelog in each package's doc directory.
file(MAKE_DIRECTORY ${CMAKE_CURRENT_BINARY_DIR}/packaging)
add_custom_command(
  OUTPUT ${CMAKE_CURRENT_BINARY_DIR}/packaging/changelog.Debian.gz
  COMMAND gzip -9n -c ${PROJECT_SOURCE_DIR}/packaging/changelog > ${CMAKE_CURRENT_BINARY_DIR}/packaging/changelog.Debian.gz
  DEPENDS ${PROJECT_SOURCE_DIR}/packaging/changelog)
foreach(page IN ITEMS garm-edge-agent garm-provider-edge garm-edge-hub)
  add_custom_command(
    OUTPUT ${CMAKE_CURRENT_BINARY_DIR}/packaging/${page}.8.gz
    COMMAND gzip -9n -c ${PROJECT_SOURCE_DIR}/packaging/man/${page}.8 > ${CMAKE_CURRENT_BINARY_DIR}/packaging/${page}.8.gz
    DEPENDS ${PROJECT_SOURCE_DIR}/packaging/man/${page}.8)
endforeach()
add_custom_target(packaging_docs ALL DEPENDS
  ${CMAKE_CURRENT_BINARY_DIR}/packaging/changelog.Debian.gz
  ${CMAKE_CURRENT_BINARY_DIR}/packaging/garm-edge-agent.8.gz
  ${CMAKE_CURRENT_BINARY_DIR}/packaging/garm-provider-edge.8.gz
  ${CMAKE_CURRENT_BINARY_DIR}/packaging/garm-edge-hub.8.gz)

# Debian architecture names from the target's.
if(CMAKE_SYSTEM_PROCESSOR MATCHES "^(x86_64|AMD64|amd64)$")
  set(GARM_EDGE_DEB_ARCH amd64)
elseif(CMAKE_SYSTEM_PROCESSOR MATCHES "^(aarch64|arm64)$")
  set(GARM_EDGE_DEB_ARCH arm64)
elseif(CMAKE_SYSTEM_PROCESSOR MATCHES "^arm")
  set(GARM_EDGE_DEB_ARCH armhf)
else()
  set(GARM_EDGE_DEB_ARCH ${CMAKE_SYSTEM_PROCESSOR})
endif()

set(CPACK_PACKAGE_NAME garm-edge)
set(CPACK_PACKAGE_VENDOR "garm-edge")
set(CPACK_PACKAGE_CONTACT "garm-edge maintainers <maintainers@garm-edge.dev>")
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
# CPack prepends a non-default summary to every component's description; each package's own
# first line is its summary, so the summary is set to CPack's default, which it leaves out.
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY "${CPACK_PACKAGE_NAME} built using CMake")
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
set(CPACK_STRIP_FILES ON)
set(CPACK_GENERATOR DEB)
set(CPACK_DEB_COMPONENT_INSTALL ON)
set(CPACK_COMPONENTS_ALL agent provider)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_ARCHITECTURE ${GARM_EDGE_DEB_ARCH})
set(CPACK_DEBIAN_PACKAGE_PRIORITY optional)
set(CPACK_DEBIAN_PACKAGE_HOMEPAGE "https://github.com/garm-edge/garm-edge")
set(CPACK_DEBIAN_PACKAGE_RELEASE 1)
set(CPACK_DEBIAN_COMPRESSION_TYPE xz)

set(CPACK_DEBIAN_AGENT_PACKAGE_NAME garm-edge-agent)
set(CPACK_DEBIAN_AGENT_PACKAGE_SECTION admin)
# Listed by hand (no dpkg-shlibdeps): right for cross builds too. mbedTLS, libstdc++, libgcc,
# pugixml and toml++ are inside the binary. libcurl (with OpenSSL) downloads images and runner
# archives at the link's rate (docs/performance.md). procps is /bin/kill, the unit's
# ExecReload: it is not Essential, and a minimal system (debootstrap's minbase) has no
# /bin/kill without it.
set(CPACK_DEBIAN_AGENT_PACKAGE_DEPENDS
    "libc6 (>= 2.36), libvirt0 (>= 9.0.0), libcurl4 (>= 7.88.0), adduser, procps")
set(CPACK_DEBIAN_AGENT_PACKAGE_RECOMMENDS "libvirt-daemon-system, qemu-system, qemu-utils, xz-utils")
# [mirror] runs its registry (docs/caches.md). Only suggested: its package starts a registry
# of its own on :5000, which a host that only needs the mirror disables.
set(CPACK_DEBIAN_AGENT_PACKAGE_SUGGESTS "docker-registry")
set(CPACK_DEBIAN_AGENT_PACKAGE_CONTROL_EXTRA
    ${PROJECT_SOURCE_DIR}/packaging/agent/postinst ${PROJECT_SOURCE_DIR}/packaging/agent/prerm
    ${PROJECT_SOURCE_DIR}/packaging/agent/postrm ${PROJECT_SOURCE_DIR}/packaging/agent/conffiles)
set(CPACK_DEBIAN_AGENT_PACKAGE_CONTROL_STRICT_PERMISSION ON)
set(CPACK_DEBIAN_AGENT_DESCRIPTION "garm runners on local libvirt VMs: the host agent
garm-edge-agent manages libvirt VMs as runner instances for garm (GitHub and
Gitea Actions runners): qcow2 overlays on base images, cloud-init seeds and
garm's callback relay for guests, and garm's provider command set over mutual
TLS.")

set(CPACK_DEBIAN_PROVIDER_PACKAGE_NAME garm-provider-edge)
set(CPACK_DEBIAN_PROVIDER_PACKAGE_SECTION admin)
# adduser for the hub's account where systemd-sysusers is not there.
set(CPACK_DEBIAN_PROVIDER_PACKAGE_DEPENDS "adduser")
set(CPACK_DEBIAN_PROVIDER_PACKAGE_CONTROL_EXTRA
    ${PROJECT_SOURCE_DIR}/packaging/provider/postinst ${PROJECT_SOURCE_DIR}/packaging/provider/prerm
    ${PROJECT_SOURCE_DIR}/packaging/provider/postrm ${PROJECT_SOURCE_DIR}/packaging/provider/conffiles)
set(CPACK_DEBIAN_PROVIDER_PACKAGE_CONTROL_STRICT_PERMISSION ON)
set(CPACK_DEBIAN_PROVIDER_DESCRIPTION "garm external provider for garm-edge agents
garm-provider-edge is the executable garm runs for each provider operation.
It is fully static and drives one or more garm-edge-agent hosts over mutual
TLS. garm-edge-hub, also here, enrols hosts and relays to those behind NAT.")

include(CPack)

# The static provider alone, for garm's container image (FROM busybox, providers copied into
# /opt/garm/providers.d/).
set(GARM_EDGE_PROVIDER_TARBALL
    ${CMAKE_BINARY_DIR}/garm-provider-edge_${PROJECT_VERSION}_linux_${GARM_EDGE_DEB_ARCH}.tar.gz)
add_custom_target(provider_tarball
  COMMAND ${CMAKE_COMMAND} -E make_directory ${CMAKE_BINARY_DIR}/provider-tarball
  COMMAND ${CMAKE_STRIP} -o ${CMAKE_BINARY_DIR}/provider-tarball/garm-provider-edge
          $<TARGET_FILE:garm-provider-edge>
  COMMAND ${CMAKE_COMMAND} -E copy ${PROJECT_SOURCE_DIR}/docs/provider.toml.example
          ${CMAKE_BINARY_DIR}/provider-tarball/garm-provider-edge.toml.example
  COMMAND tar --sort=name --owner=0 --group=0 --numeric-owner -czf ${GARM_EDGE_PROVIDER_TARBALL}
          -C ${CMAKE_BINARY_DIR}/provider-tarball .
  DEPENDS garm-provider-edge
  COMMENT "static provider tarball: ${GARM_EDGE_PROVIDER_TARBALL}")

# The stripped size of each executable, printed by the build. The 4 MiB budget is the shipped
# agent's: optimized and compiled as unity files (the package and cross presets; the package
# preset also links with LTO, which took the x86_64 agent from 4,223,288 to 4,006,200 bytes);
# an optimized build of separate files (4.3 MB) only prints its size.
set(GARM_EDGE_AGENT_SIZE_LIMIT 0)
if(CMAKE_BUILD_TYPE MATCHES "^(Release|MinSizeRel)$" AND CMAKE_UNITY_BUILD AND NOT GARM_EDGE_SANITIZE)
  set(GARM_EDGE_AGENT_SIZE_LIMIT 4194304)
endif()
add_custom_target(binary_sizes ALL
  COMMAND ${CMAKE_COMMAND} -DSTRIP=${CMAKE_STRIP} -DLIMIT=${GARM_EDGE_AGENT_SIZE_LIMIT}
          -DAGENT=$<TARGET_FILE:garm-edge-agent> -DPROVIDER=$<TARGET_FILE:garm-provider-edge>
          -P ${PROJECT_SOURCE_DIR}/cmake/PrintBinarySizes.cmake
  DEPENDS garm-edge-agent garm-provider-edge
  VERBATIM)
