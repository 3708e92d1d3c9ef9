// mbedTLS's X.509 self test (mbedtls_x509_self_test, in the same object of Debian's static
// libmbedx509 as the parser the agent uses) names four of mbedTLS's test certificates, and the
// linker then takes certs.c.o whole: 56 KB of test keys and certificates in every agent. These
// empty definitions satisfy the references instead; the self test is never run.
#include <cstddef>

extern "C" {
extern const char* mbedtls_test_ca_crt;
extern const std::size_t mbedtls_test_ca_crt_len;
extern const char* mbedtls_test_cli_crt;
extern const std::size_t mbedtls_test_cli_crt_len;

const char* mbedtls_test_ca_crt = "";
const std::size_t mbedtls_test_ca_crt_len = 0;
const char* mbedtls_test_cli_crt = "";
const std::size_t mbedtls_test_cli_crt_len = 0;
}
