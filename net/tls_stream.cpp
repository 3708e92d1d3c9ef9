#include "net/tls_stream.hpp"

#include <mbedtls/oid.h>

#include "common/hex.hpp"

namespace garm_edge::net {

PeerIdentity identity_of(const mbedtls_x509_crt* certificate) {
  PeerIdentity identity;
  if (certificate == nullptr) {
    return identity;
  }
  for (const mbedtls_x509_name* name = &certificate->subject; name != nullptr; name = name->next) {
    if (name->oid.p != nullptr && MBEDTLS_OID_CMP(MBEDTLS_OID_AT_CN, &name->oid) == 0) {
      identity.common_name.assign(reinterpret_cast<const char*>(name->val.p), name->val.len);
    }
  }
  identity.serial = to_hex({certificate->serial.p, certificate->serial.len});
  for (const mbedtls_x509_sequence* san = &certificate->subject_alt_names; san != nullptr;
       san = san->next) {
    constexpr int kUniformResourceIdentifier = 6;
    if (san->buf.p != nullptr &&
        (san->buf.tag & MBEDTLS_ASN1_TAG_VALUE_MASK) == kUniformResourceIdentifier) {
      identity.uri_names.emplace_back(reinterpret_cast<const char*>(san->buf.p), san->buf.len);
    }
  }
  return identity;
}

void SslContextFree::operator()(mbedtls_ssl_context* ssl) const {
  mbedtls_ssl_free(ssl);
  delete ssl;  // NOLINT(cppcoreguidelines-owning-memory): the deleter of SslContextPtr
}

SslContextPtr make_ssl_context() {
  SslContextPtr ssl(new mbedtls_ssl_context);
  mbedtls_ssl_init(ssl.get());
  return ssl;
}

}  // namespace garm_edge::net
