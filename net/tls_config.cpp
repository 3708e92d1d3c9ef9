#include "net/tls_config.hpp"

#include <algorithm>
#include <cstring>

#include <mbedtls/ctr_drbg.h>
#include <mbedtls/ecp.h>
#include <mbedtls/error.h>
#include <mbedtls/pk.h>

#include "net/drbg.hpp"
#include "net/secret_token.hpp"

namespace garm_edge::net {
namespace {

// mbedTLS keeps pointers to these lists: they must outlive every config.
constexpr int kCipherSuites[] = {MBEDTLS_TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256,
                                 MBEDTLS_TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384,
                                 MBEDTLS_TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256,
                                 MBEDTLS_TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256,
                                 MBEDTLS_TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384,
                                 MBEDTLS_TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256,
                                 0};
constexpr mbedtls_ecp_group_id kCurves[] = {MBEDTLS_ECP_DP_SECP256R1, MBEDTLS_ECP_DP_CURVE25519,
                                            MBEDTLS_ECP_DP_SECP384R1, MBEDTLS_ECP_DP_NONE};

void check(int rc, const std::string& what) {
  if (rc != 0) {
    throw TlsError(describe_tls_error(what, rc));
  }
}

constexpr int kSessionCacheSeconds = 3600;
/// mbedTLS keeps 50 by default: a hub's hundreds of agents resume their tunnels' sessions, and
/// garm's provider processes theirs. About 1 KB each (the peer's certificate included).
constexpr int kSessionCacheEntries = 4096;

}  // namespace

std::string describe_tls_error(const std::string& what, int code) {
  char text[200] = {};
  mbedtls_strerror(code, text, sizeof text);
  return what + ": " + text;
}

bool TlsConfig::accepts(const mbedtls_x509_crt* peer) const {
  if (peer == nullptr) {
    return false;
  }
  uint32_t flags = 0;
  // mbedtls_x509_crt_verify does not modify the chain or CRL it is given.
  auto* ca = const_cast<mbedtls_x509_crt*>(&ca_);
  auto* crl = crl_.version != 0 ? const_cast<mbedtls_x509_crl*>(&crl_) : nullptr;
  return mbedtls_x509_crt_verify(const_cast<mbedtls_x509_crt*>(peer), ca, crl, nullptr, &flags,
                                 nullptr, nullptr) == 0;
}

namespace {

bool same_name(const mbedtls_x509_buf& a, const mbedtls_x509_buf& b) {
  return a.len == b.len && std::memcmp(a.p, b.p, a.len) == 0;
}

bool within_dates(const mbedtls_x509_time& from, const mbedtls_x509_time& to) {
  return mbedtls_x509_time_is_future(&from) == 0 && mbedtls_x509_time_is_past(&to) == 0;
}

/// 0 when `key` is the private key of `certificate`'s public key. A server checks in full (a
/// scalar multiplication, once per start or reload); a client, which a provider loads once per
/// process, compares the public point the key file carries with the certificate's (three
/// quarters of a GetInstance process's instructions otherwise). A key file whose private half
/// does not match its public half fails at the handshake instead.
int key_matches(TlsConfig::Role role, const mbedtls_pk_context& certificate,
                const mbedtls_pk_context& key) {
  auto& public_key = const_cast<mbedtls_pk_context&>(certificate);
  auto& private_key = const_cast<mbedtls_pk_context&>(key);
  if (role == TlsConfig::Role::server || mbedtls_pk_get_type(&public_key) != MBEDTLS_PK_ECKEY ||
      mbedtls_pk_get_type(&private_key) != MBEDTLS_PK_ECKEY) {
    return mbedtls_pk_check_pair(&public_key, &private_key);
  }
  const auto* shown = mbedtls_pk_ec(public_key);
  const auto* held = mbedtls_pk_ec(private_key);
  if (shown->grp.id != held->grp.id ||
      mbedtls_ecp_is_zero(const_cast<mbedtls_ecp_point*>(&held->Q)) ||
      mbedtls_ecp_point_cmp(&shown->Q, &held->Q) != 0) {
    return MBEDTLS_ERR_ECP_BAD_INPUT_DATA;
  }
  return 0;
}

}  // namespace

bool TlsConfig::still_accepts(const mbedtls_x509_crt* peer) const {
  if (peer == nullptr || !within_dates(peer->valid_from, peer->valid_to)) {
    return false;
  }
  bool issuer_trusted = false;
  for (const auto* ca = &ca_; ca != nullptr && ca->version != 0; ca = ca->next) {
    issuer_trusted = issuer_trusted || (same_name(ca->subject_raw, peer->issuer_raw) &&
                                        within_dates(ca->valid_from, ca->valid_to));
  }
  if (!issuer_trusted) {
    return false;
  }
  for (const auto* crl = &crl_; crl != nullptr && crl->version != 0; crl = crl->next) {
    if (!same_name(crl->issuer_raw, peer->issuer_raw)) {
      continue;
    }
    if (mbedtls_x509_time_is_future(&crl->this_update) != 0 ||
        (crl->next_update.year != 0 && mbedtls_x509_time_is_past(&crl->next_update) != 0)) {
      return false;
    }
    for (const auto* entry = &crl->entry; entry != nullptr && entry->serial.len != 0;
         entry = entry->next) {
      if (same_name(entry->serial, peer->serial)) {
        return false;
      }
    }
  }
  return true;
}

TlsConfig::TlsConfig() {
  mbedtls_ssl_config_init(&config_);
  mbedtls_x509_crt_init(&ca_);
  mbedtls_x509_crl_init(&crl_);
  mbedtls_x509_crt_init(&own_);
  mbedtls_pk_init(&key_);
  mbedtls_ssl_cache_init(&cache_);
}

TlsConfig::~TlsConfig() {
  mbedtls_ssl_cache_free(&cache_);
  mbedtls_pk_free(&key_);
  mbedtls_x509_crt_free(&own_);
  mbedtls_x509_crl_free(&crl_);
  mbedtls_x509_crt_free(&ca_);
  mbedtls_ssl_config_free(&config_);
}

void TlsConfig::apply_common_settings(Role role) {
  auto* conf = &config_;
  check(mbedtls_ssl_config_defaults(
            conf, role == Role::server ? MBEDTLS_SSL_IS_SERVER : MBEDTLS_SSL_IS_CLIENT,
            MBEDTLS_SSL_TRANSPORT_STREAM, MBEDTLS_SSL_PRESET_DEFAULT),
        "TLS defaults");
  mbedtls_ssl_conf_rng(conf, mbedtls_ctr_drbg_random, &random_generator());
  // Debian's build also enables TLS 1.0 and 1.1.
  mbedtls_ssl_conf_min_version(conf, MBEDTLS_SSL_MAJOR_VERSION_3, MBEDTLS_SSL_MINOR_VERSION_3);
  mbedtls_ssl_conf_max_version(conf, MBEDTLS_SSL_MAJOR_VERSION_3, MBEDTLS_SSL_MINOR_VERSION_3);
  mbedtls_ssl_conf_ciphersuites(conf, kCipherSuites);
  mbedtls_ssl_conf_curves(conf, kCurves);
  mbedtls_ssl_conf_authmode(conf, MBEDTLS_SSL_VERIFY_REQUIRED);
  mbedtls_ssl_conf_renegotiation(conf, MBEDTLS_SSL_RENEGOTIATION_DISABLED);
}

std::shared_ptr<const TlsConfig> TlsConfig::load(Role role, const TlsFiles& files,
                                                 ClientCertificates client_certificates) {
  std::shared_ptr<TlsConfig> tls(new TlsConfig());
  check(mbedtls_x509_crt_parse_file(&tls->ca_, files.ca.c_str()), "CA " + files.ca.string());
  if (!files.crl.empty()) {
    check(mbedtls_x509_crl_parse_file(&tls->crl_, files.crl.c_str()), "CRL " + files.crl.string());
  }
  for (const auto& crl : files.crls_when_present) {
    std::error_code error;
    if (std::filesystem::exists(crl, error)) {
      check(mbedtls_x509_crl_parse_file(&tls->crl_, crl.c_str()), "CRL " + crl.string());
    }
  }
  const bool has_crl = tls->crl_.version != 0;
  check(mbedtls_x509_crt_parse_file(&tls->own_, files.certificate.c_str()),
        "certificate " + files.certificate.string());
  check(mbedtls_pk_parse_keyfile(&tls->key_, files.key.c_str(), nullptr),
        "key " + files.key.string());
  check(key_matches(role, tls->own_.pk, tls->key_), "key " + files.key.string() +
                                                        " does not belong to certificate " +
                                                        files.certificate.string());
  tls->own_tag_ =
      sha256_hex({reinterpret_cast<const char*>(tls->own_.raw.p), tls->own_.raw.len}).substr(0, 16);
  std::string trusted;
  for (const auto* ca = &tls->ca_; ca != nullptr && ca->version != 0; ca = ca->next) {
    trusted.append(reinterpret_cast<const char*>(ca->raw.p), ca->raw.len);
  }
  tls->ca_tag_ = sha256_hex(trusted);

  tls->apply_common_settings(role);
  auto* conf = &tls->config_;
  mbedtls_ssl_conf_ca_chain(conf, &tls->ca_, has_crl ? &tls->crl_ : nullptr);
  check(mbedtls_ssl_conf_own_cert(conf, &tls->own_, &tls->key_),
        "certificate and key do not match");
  if (role == Role::server && client_certificates == ClientCertificates::optional) {
    mbedtls_ssl_conf_authmode(conf, MBEDTLS_SSL_VERIFY_OPTIONAL);
  }
  if (role == Role::server) {
    mbedtls_ssl_cache_set_timeout(&tls->cache_, kSessionCacheSeconds);
    mbedtls_ssl_cache_set_max_entries(&tls->cache_, kSessionCacheEntries);
    mbedtls_ssl_conf_session_cache(conf, &tls->cache_, mbedtls_ssl_cache_get,
                                   mbedtls_ssl_cache_set);
  }
  return tls;
}

std::shared_ptr<const TlsConfig> TlsConfig::client_trusting(
    std::string_view extra_ca_pem, const std::filesystem::path& system_bundle) {
  std::shared_ptr<TlsConfig> tls(new TlsConfig());
  if (!extra_ca_pem.empty()) {
    // mbedTLS takes PEM only with its terminating NUL counted in the length.
    const std::string pem(extra_ca_pem);
    const int rc = mbedtls_x509_crt_parse(
        &tls->ca_, reinterpret_cast<const unsigned char*>(pem.c_str()), pem.size() + 1);
    // A positive result counts certificates that did not parse: the operator's bundle must be
    // valid as a whole, or a typo would silently drop the CA garm's certificate needs.
    if (rc > 0) {
      throw TlsError("extra CA bundle: " + std::to_string(rc) + " certificate(s) do not parse");
    }
    check(rc, "extra CA bundle");
  }
  std::error_code ignored;
  if (!system_bundle.empty() && std::filesystem::exists(system_bundle, ignored)) {
    // A positive result counts certificates mbedTLS could not parse: a system bundle may hold
    // a few it does not support, and the rest still count.
    if (const int rc = mbedtls_x509_crt_parse_file(&tls->ca_, system_bundle.c_str()); rc < 0) {
      check(rc, "CA bundle " + system_bundle.string());
    }
  }
  if (tls->ca_.version == 0) {
    throw TlsError("no CA to trust: the extra CA bundle is empty and " + system_bundle.string() +
                   " holds none");
  }
  tls->apply_common_settings(Role::client);
  mbedtls_ssl_conf_ca_chain(&tls->config_, &tls->ca_, nullptr);
  return tls;
}

std::shared_ptr<const TlsConfig> TlsConfig::client_unverified() {
  std::shared_ptr<TlsConfig> tls(new TlsConfig());
  tls->apply_common_settings(Role::client);
  mbedtls_ssl_conf_authmode(&tls->config_, MBEDTLS_SSL_VERIFY_NONE);
  return tls;
}

std::shared_ptr<const TlsConfig> ClientTrustCache::trusting(const std::string& extra_ca_pem) {
  const auto key = sha256_hex(extra_ca_pem);
  std::lock_guard lock(mutex_);
  if (const auto found = configs_.find(key); found != configs_.end()) {
    found->second.last_used = ++uses_;
    return found->second.config;
  }
  auto config = TlsConfig::client_trusting(extra_ca_pem);
  make_room();
  configs_[key] = Cached{.config = config, .last_used = ++uses_};
  return config;
}

void ClientTrustCache::make_room() {
  while (!configs_.empty() && configs_.size() >= capacity_) {
    const auto oldest = std::min_element(
        configs_.begin(), configs_.end(),
        [](const auto& a, const auto& b) { return a.second.last_used < b.second.last_used; });
    configs_.erase(oldest);
  }
}

std::size_t ClientTrustCache::size() const {
  std::lock_guard lock(mutex_);
  return configs_.size();
}

}  // namespace garm_edge::net
