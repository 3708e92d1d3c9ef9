// Shell steps that warm and cold Linux guests share: garm's CA added without rebuilding the
// bundle, and the runner archive taken from the agent's cache ahead of the install script.

#include <string>

#include "userdata/internal.hpp"
#include "wire/base64.hpp"

namespace garm_edge::userdata::detail {
namespace {

/// What update-ca-certificates does for added certificates, without rebuilding the whole bundle
/// from every CA the image trusts: that spawns a few processes per CA, about 40 s under TCG,
/// on the path from CreateInstance to idle. The trust is the same: the certificate under
/// /usr/local/share/ca-certificates (kept by later full runs), its .pem link and hash link in
/// /etc/ssl/certs (none for a file openssl cannot read, none when an identical one is linked,
/// as openssl rehash), the bundle (appended to, where a full run sorts local certificates by
/// name), and the update.d hooks told what was added.
constexpr std::string_view kAddCaCertificates = R"bash(add_ca_certificates() {
  local certs=${CA_CERTS_DIR:-/etc/ssl/certs} hooks=${CA_HOOKS_DIR:-/etc/ca-certificates/update.d}
  local bundle added crt pem hash n
  bundle=$certs/ca-certificates.crt
  if [ ! -s "$bundle" ]; then
    update-ca-certificates >/dev/null
    return
  fi
  added=$(mktemp)
  cp "$bundle" "$bundle.garm-edge"
  for crt in "$@"; do
    pem=$certs/$(basename "$crt" .crt).pem
    ln -sf "$crt" "$pem"
    printf '+%s\n' "$pem" >> "$added"
    cat "$crt" >> "$bundle.garm-edge"
    if [ -n "$(tail -c 1 "$crt")" ]; then echo >> "$bundle.garm-edge"; fi  # as its sed '$a'
    hash=$(openssl x509 -hash -noout -in "$crt" 2>/dev/null) || continue
    n=0
    while [ -e "$certs/$hash.$n" ] && ! cmp -s "$certs/$hash.$n" "$crt"; do n=$((n + 1)); done
    if [ ! -e "$certs/$hash.$n" ]; then ln -s "$(basename "$pem")" "$certs/$hash.$n"; fi
  done
  mv "$bundle.garm-edge" "$bundle"
  if [ -d "$hooks" ]; then
    run-parts --test -- "$hooks" | while read -r hook; do
      "$hook" < "$added" || true
    done
  fi
  rm -f "$added"
}
)bash";

}  // namespace

void assign_shell(std::string& script, std::string_view name, std::string_view value) {
  script.append(name).append("=").append(shell_quote(value)).append("\n");
}

void write_file(std::string& script, std::string_view path, std::string_view content,
                std::string_view mode) {
  script += "base64 -d > " + shell_quote(path) + " <<'GARM_EDGE_BASE64'\n" +
            wire::base64_encode(content) + "\nGARM_EDGE_BASE64\nchmod " + std::string(mode) + " " +
            shell_quote(path) + "\n";
}

std::string ca_certificates_steps(const wire::BootstrapInstance& bootstrap) {
  if (!bootstrap.ca_cert_bundle || bootstrap.ca_cert_bundle->empty()) {
    return "";
  }
  const auto certificates = pem_certificates(*bootstrap.ca_cert_bundle);
  std::string script;
  std::string files;
  for (std::size_t i = 0; i < certificates.size(); ++i) {
    const auto file =
        "/usr/local/share/ca-certificates/garm-edge-" + std::to_string(i + 1) + ".crt";
    write_file(script, file, certificates[i] + "\n", "0644");
    files += " " + shell_quote(file);
  }
  return script + std::string(kAddCaCertificates) + "add_ca_certificates" + files + "\n";
}

}  // namespace garm_edge::userdata::detail
