#include "net/postgres_client.hpp"

#include <algorithm>
#include <array>
#include <charconv>
#include <cstring>

#include <mbedtls/base64.h>
#include <mbedtls/md.h>
#include <mbedtls/md5.h>
#include <mbedtls/pkcs5.h>

#include "common/hex.hpp"
#include "net/random.hpp"
#include "net/socket_io.hpp"
#include "net/tls_config.hpp"

namespace garm_edge::net {
namespace {

using Bytes = std::vector<unsigned char>;

constexpr std::int32_t kProtocol30 = 196608;  // 3 << 16
constexpr std::int32_t kSslRequest = 80877103;
/// No answer of the hub's is near this: a server sending more is not trusted with memory.
constexpr std::size_t kMaxMessageBytes = 64U << 20U;

// ---- messages ----------------------------------------------------------------------------

void put_int32(std::string& out, std::int32_t value) {
  const auto bits = static_cast<std::uint32_t>(value);
  for (int shift = 24; shift >= 0; shift -= 8) {
    out += static_cast<char>((bits >> shift) & 0xffU);
  }
}

void put_int16(std::string& out, std::int16_t value) {
  const auto bits = static_cast<std::uint16_t>(value);
  out += static_cast<char>((bits >> 8U) & 0xffU);
  out += static_cast<char>(bits & 0xffU);
}

void put_cstring(std::string& out, std::string_view text) {
  if (text.find('\0') != std::string_view::npos) {
    throw PostgresError("a value holds a NUL byte, which PostgreSQL cannot take");
  }
  out.append(text);
  out += '\0';
}

/// A frontend message: its type byte (none for the startup packet), its length, its body.
std::string message(char type, std::string_view body) {
  std::string out;
  if (type != '\0') {
    out += type;
  }
  put_int32(out, static_cast<std::int32_t>(body.size() + 4));
  out.append(body);
  return out;
}

/// Reads a backend message's fields in order; a field past its end is a protocol error.
class Reader {
 public:
  explicit Reader(std::string_view body) : body_(body) {}
  std::int32_t int32() {
    const auto bytes = take(4);
    std::uint32_t value = 0;
    for (const char c : bytes) {
      value = (value << 8U) | static_cast<unsigned char>(c);
    }
    return static_cast<std::int32_t>(value);
  }
  std::int16_t int16() {
    const auto bytes = take(2);
    return static_cast<std::int16_t>((static_cast<unsigned char>(bytes[0]) << 8U) |
                                     static_cast<unsigned char>(bytes[1]));
  }
  std::string cstring() {
    const auto end = body_.find('\0', at_);
    if (end == std::string_view::npos) {
      throw PostgresError("the server sent a malformed message");
    }
    std::string text(body_.substr(at_, end - at_));
    at_ = end + 1;
    return text;
  }
  std::string_view take(std::size_t size) {
    if (body_.size() - at_ < size) {
      throw PostgresError("the server sent a malformed message");
    }
    const auto bytes = body_.substr(at_, size);
    at_ += size;
    return bytes;
  }
  std::string_view rest() { return take(body_.size() - at_); }

 private:
  std::string_view body_;
  std::size_t at_ = 0;
};

/// An ErrorResponse's fields as one line: "ERROR: message (SQLSTATE 23505)".
PostgresError error_from(std::string_view body) {
  Reader fields(body);
  std::string severity = "ERROR";
  std::string code;
  std::string text;
  std::string detail;
  while (true) {
    const auto type = fields.take(1)[0];
    if (type == '\0') {
      break;
    }
    auto value = fields.cstring();
    if (type == 'S') {
      severity = std::move(value);
    } else if (type == 'C') {
      code = std::move(value);
    } else if (type == 'M') {
      text = std::move(value);
    } else if (type == 'D') {
      detail = std::move(value);
    }
  }
  return PostgresError("PostgreSQL: " + severity + ": " + text +
                           (detail.empty() ? "" : " (" + detail + ")") +
                           (code.empty() ? "" : " [SQLSTATE " + code + "]"),
                       code);
}

// ---- SCRAM-SHA-256 (RFC 5802, RFC 7677) ---------------------------------------------------

Bytes hmac_sha256(const Bytes& key, std::string_view data) {
  Bytes out(32);
  mbedtls_md_hmac(mbedtls_md_info_from_type(MBEDTLS_MD_SHA256), key.data(), key.size(),
                  reinterpret_cast<const unsigned char*>(data.data()), data.size(), out.data());
  return out;
}

Bytes sha256(const Bytes& data) {
  Bytes out(32);
  mbedtls_md(mbedtls_md_info_from_type(MBEDTLS_MD_SHA256), data.data(), data.size(), out.data());
  return out;
}

std::string base64(const Bytes& data) {
  std::size_t size = 0;
  mbedtls_base64_encode(nullptr, 0, &size, data.data(), data.size());
  std::string out(size, '\0');
  mbedtls_base64_encode(reinterpret_cast<unsigned char*>(out.data()), out.size(), &size,
                        data.data(), data.size());
  out.resize(size);
  return out;
}

Bytes unbase64(std::string_view text) {
  std::size_t size = 0;
  const auto* in = reinterpret_cast<const unsigned char*>(text.data());
  mbedtls_base64_decode(nullptr, 0, &size, in, text.size());
  Bytes out(size);
  if (mbedtls_base64_decode(out.data(), out.size(), &size, in, text.size()) != 0) {
    throw PostgresError("the server's SCRAM message holds malformed base64");
  }
  out.resize(size);
  return out;
}

/// The value of `key=` among a SCRAM message's comma-separated attributes.
std::string scram_attribute(std::string_view message_text, char key) {
  std::size_t at = 0;
  while (at <= message_text.size()) {
    const auto end = std::min(message_text.find(',', at), message_text.size());
    const auto attribute = message_text.substr(at, end - at);
    if (attribute.size() >= 2 && attribute[0] == key && attribute[1] == '=') {
      return std::string(attribute.substr(2));
    }
    at = end + 1;
  }
  throw PostgresError(std::string("the server's SCRAM message has no ") + key + "= attribute");
}

class Scram {
 public:
  explicit Scram(std::string password) : password_(std::move(password)) {
    std::array<unsigned char, 18> nonce{};
    random_bytes(nonce);
    client_nonce_ = base64(Bytes(nonce.begin(), nonce.end()));
    // The user name is the startup packet's: PostgreSQL ignores SCRAM's own (RFC 5802 n=).
    client_first_bare_ = "n=,r=" + client_nonce_;
  }
  std::string client_first() const { return "n,," + client_first_bare_; }

  std::string client_final(const std::string& server_first) {
    const auto nonce = scram_attribute(server_first, 'r');
    if (!nonce.starts_with(client_nonce_) || nonce.size() == client_nonce_.size()) {
      throw PostgresError("the server's SCRAM nonce does not extend ours");
    }
    const auto salt = unbase64(scram_attribute(server_first, 's'));
    const auto iterations_text = scram_attribute(server_first, 'i');
    unsigned iterations = 0;
    std::from_chars(iterations_text.data(), iterations_text.data() + iterations_text.size(),
                    iterations);
    if (iterations < 1 || iterations > 10'000'000) {
      throw PostgresError("the server's SCRAM iteration count is out of range");
    }
    salted_ = Bytes(32);
    mbedtls_md_context_t md;
    mbedtls_md_init(&md);
    const int rc = mbedtls_md_setup(&md, mbedtls_md_info_from_type(MBEDTLS_MD_SHA256), 1) ||
                   mbedtls_pkcs5_pbkdf2_hmac(
                       &md, reinterpret_cast<const unsigned char*>(password_.data()),
                       password_.size(), salt.data(), salt.size(), iterations, 32, salted_.data());
    mbedtls_md_free(&md);
    if (rc != 0) {
      throw PostgresError("SCRAM: PBKDF2 failed");
    }
    const auto without_proof = "c=biws,r=" + nonce;  // biws: base64 of "n,,"
    auth_message_ = client_first_bare_ + "," + server_first + "," + without_proof;
    const auto client_key = hmac_sha256(salted_, "Client Key");
    const auto signature = hmac_sha256(sha256(client_key), auth_message_);
    Bytes proof(client_key.size());
    for (std::size_t i = 0; i < proof.size(); ++i) {
      proof[i] = client_key[i] ^ signature[i];
    }
    return without_proof + ",p=" + base64(proof);
  }

  /// The server proves it knew the password too: a server that does not is refused.
  void check_server_final(const std::string& server_final) {
    if (server_final.starts_with("e=")) {
      throw PostgresError("SCRAM: the server refused: " + server_final.substr(2));
    }
    const auto expected = hmac_sha256(hmac_sha256(salted_, "Server Key"), auth_message_);
    if (salted_.empty() || unbase64(scram_attribute(server_final, 'v')) != expected) {
      throw PostgresError("SCRAM: the server's signature is wrong: it is not the database asked");
    }
    server_verified_ = true;
  }
  bool server_verified() const { return server_verified_; }

 private:
  std::string password_;
  std::string client_nonce_;
  std::string client_first_bare_;
  std::string auth_message_;
  Bytes salted_;
  bool server_verified_ = false;
};

std::string md5_hex(std::string_view text) {
  std::array<unsigned char, 16> digest{};
  mbedtls_md5_ret(reinterpret_cast<const unsigned char*>(text.data()), text.size(), digest.data());
  return to_hex(digest);
}

}  // namespace

std::uint64_t PostgresResult::affected() const {
  const auto space = command.rfind(' ');
  std::uint64_t count = 0;
  if (space != std::string::npos) {
    std::from_chars(command.data() + space + 1, command.data() + command.size(), count);
  }
  return count;
}

// ---- the connection -----------------------------------------------------------------------

/// The socket, TLS over it when asked, and whole messages in and out, each step before the
/// deadline of the exchange it belongs to.
class PostgresConnection::Wire {
 public:
  explicit Wire(const PostgresTarget& target)
      : target_(target),
        deadline_(SteadyClock::now() + target.timeout),
        fd_(target.unix_socket()
                ? connect_unix_before(target.host + "/.s.PGSQL." + std::to_string(target.port),
                                      deadline_)
                : connect_before(target.host, target.port, deadline_)),
        transport_{.fd = fd_.get(), .deadline = deadline_, .stop = nullptr} {}

  void start_tls() {
    std::string request;
    put_int32(request, 8);
    put_int32(request, kSslRequest);
    send_all_plain(transport_, request, where());
    char answer = 0;
    if (receive_plain(transport_, &answer, 1, where()) != 1 || answer != 'S') {
      throw PostgresError(where() + " does not offer TLS (sslmode asks for it)");
    }
    tls_ = target_.tls == PostgresTarget::Tls::verify_full
               ? TlsConfig::client_trusting(target_.root_ca_pem)
               : TlsConfig::client_unverified();
    session_ = std::make_unique<TlsSession>(tls_->ssl_config(), target_.host, transport_);
    session_->handshake(where());
  }
  bool encrypted() const { return session_ != nullptr; }

  void set_deadline(SteadyClock::time_point deadline) { transport_.deadline = deadline; }

  void send(const std::string& bytes) {
    if (session_) {
      session_->write_all(bytes, where());
    } else {
      send_all_plain(transport_, bytes, where());
    }
  }

  /// The next backend message: its type and its body.
  std::pair<char, std::string> receive() {
    fill(5);
    const char type = buffer_[0];
    Reader header(std::string_view(buffer_).substr(1, 4));
    const auto length = header.int32();
    if (length < 4 || static_cast<std::size_t>(length) > kMaxMessageBytes) {
      throw PostgresError(where() + " sent a message of " + std::to_string(length) + " bytes");
    }
    const auto total = 1 + static_cast<std::size_t>(length);
    fill(total);
    std::string body = buffer_.substr(5, total - 5);
    buffer_.erase(0, total);
    return {type, std::move(body)};
  }

  std::string where() const { return target_.describe(); }

 private:
  void fill(std::size_t size) {
    std::array<char, 16384> chunk{};
    while (buffer_.size() < size) {
      const auto got = session_ ? session_->read_some(chunk.data(), chunk.size(), where())
                                : receive_plain(transport_, chunk.data(), chunk.size(), where());
      if (got == 0) {
        throw PostgresError(where() + " closed the connection");
      }
      buffer_.append(chunk.data(), got);
    }
  }

  const PostgresTarget& target_;
  SteadyClock::time_point deadline_;  // of connecting and authenticating
  UniqueFd fd_;
  Transport transport_;
  std::shared_ptr<const TlsConfig> tls_;
  std::unique_ptr<TlsSession> session_;
  std::string buffer_;
};

ServerSideTimeouts server_side_timeouts(std::chrono::milliseconds step) {
  const auto at_least = [](std::int64_t ms, std::int64_t floor) {
    return std::to_string(std::max(ms, floor));
  };
  return {.lock = at_least(step.count() / 2, 50),
          .statement = at_least(step.count() * 3 / 4, 100),
          .idle_in_transaction = at_least(step.count() * 3, 1000)};
}

PostgresConnection::PostgresConnection(const PostgresTarget& target) : target_(target) {
  try {
    wire_ = std::make_unique<Wire>(target_);
    if (target_.tls != PostgresTarget::Tls::disable) {
      wire_->start_tls();
    }
    std::string startup;
    put_int32(startup, kProtocol30);
    const auto server_side = server_side_timeouts(target_.timeout);
    for (const auto& [name, value] :
         {std::pair<std::string_view, std::string_view>{"user", target_.user},
          {"database", target_.database},
          {"application_name", "garm-edge-hub"},
          {"client_encoding", "UTF8"},
          {"lock_timeout", server_side.lock},
          {"statement_timeout", server_side.statement},
          {"idle_in_transaction_session_timeout", server_side.idle_in_transaction}}) {
      put_cstring(startup, name);
      put_cstring(startup, value);
    }
    startup += '\0';
    wire_->send(message('\0', startup));
    std::optional<Scram> scram;
    while (true) {
      auto [type, body] = wire_->receive();
      if (type == 'E') {
        throw error_from(body);
      }
      if (type == 'Z') {
        break;  // ready for queries
      }
      if (type != 'R') {
        continue;  // ParameterStatus, BackendKeyData, notices
      }
      Reader reader(body);
      const auto code = reader.int32();
      const bool private_path = wire_->encrypted() || target_.unix_socket();
      if (code == 0) {
        if (scram && !scram->server_verified()) {
          throw PostgresError(wire_->where() +
                              " ended SCRAM without proving it knows the password");
        }
        continue;
      }
      if (code == 3 || code == 5) {
        if (!private_path) {
          throw PostgresError(wire_->where() +
                              " asks for the password in a form anyone on the path could "
                              "read or replay: use TLS (sslmode) or SCRAM-SHA-256");
        }
        std::string password;
        if (code == 3) {
          password = target_.password;
        } else {
          const auto salt = reader.take(4);
          password = "md5" + md5_hex(md5_hex(target_.password + target_.user) + std::string(salt));
        }
        std::string answer;
        put_cstring(answer, password);
        wire_->send(message('p', answer));
      } else if (code == 10) {
        bool offered = false;
        for (auto mechanism = reader.cstring(); !mechanism.empty(); mechanism = reader.cstring()) {
          offered = offered || mechanism == "SCRAM-SHA-256";
        }
        if (!offered) {
          throw PostgresError(wire_->where() + " offers no SASL mechanism garm-edge speaks");
        }
        scram.emplace(target_.password);
        std::string answer;
        put_cstring(answer, "SCRAM-SHA-256");
        const auto first = scram->client_first();
        put_int32(answer, static_cast<std::int32_t>(first.size()));
        answer += first;
        wire_->send(message('p', answer));
      } else if (code == 11 && scram) {
        wire_->send(message('p', scram->client_final(std::string(reader.rest()))));
      } else if (code == 12 && scram) {
        scram->check_server_final(std::string(reader.rest()));
      } else {
        throw PostgresError(wire_->where() + " asks for authentication method " +
                            std::to_string(code) + ", which garm-edge does not speak");
      }
    }
  } catch (const PostgresError&) {
    wire_.reset();
    throw;
  } catch (const std::exception& e) {  // the socket's, TLS's
    wire_.reset();
    throw PostgresError(e.what());
  }
}

PostgresConnection::~PostgresConnection() = default;

bool PostgresConnection::broken() const {
  return wire_ == nullptr;
}

PostgresResult PostgresConnection::query(
    std::string_view sql, const std::vector<std::optional<std::string>>& parameters) {
  if (!wire_) {
    throw PostgresError("the connection to the database was lost");
  }
  std::string parse;
  put_cstring(parse, "");
  put_cstring(parse, sql);
  put_int16(parse, 0);
  std::string bind;
  put_cstring(bind, "");
  put_cstring(bind, "");
  put_int16(bind, 0);  // every parameter as text
  put_int16(bind, static_cast<std::int16_t>(parameters.size()));
  for (const auto& parameter : parameters) {
    put_int32(bind, parameter ? static_cast<std::int32_t>(parameter->size()) : -1);
    if (parameter) {
      bind += *parameter;
    }
  }
  put_int16(bind, 0);  // every column as text
  const std::string describe = std::string("P") + '\0';
  std::string execute;
  put_cstring(execute, "");
  put_int32(execute, 0);
  try {
    wire_->set_deadline(SteadyClock::now() + target_.timeout);
    wire_->send(message('P', parse) + message('B', bind) + message('D', describe) +
                message('E', execute) + message('S', ""));
    PostgresResult result;
    std::optional<PostgresError> refused;
    while (true) {
      auto [type, body] = wire_->receive();
      Reader reader(body);
      if (type == 'T') {
        const auto count = reader.int16();
        for (int i = 0; i < count; ++i) {
          result.columns.push_back(reader.cstring());
          reader.take(18);  // table, column, type, size, modifier, format
        }
      } else if (type == 'D') {
        auto& row = result.rows.emplace_back();
        const auto count = reader.int16();
        for (int i = 0; i < count; ++i) {
          const auto size = reader.int32();
          row.push_back(
              size < 0 ? std::nullopt
                       : std::optional(std::string(reader.take(static_cast<std::size_t>(size)))));
        }
      } else if (type == 'C') {
        result.command = reader.cstring();
      } else if (type == 'E') {
        refused = error_from(body);
      } else if (type == 'Z') {
        break;
      }
    }
    if (refused) {
      throw *refused;
    }
    return result;
  } catch (const PostgresError& e) {
    if (e.sqlstate().empty()) {
      wire_.reset();  // mid-exchange: nothing more can be read from it reliably
    }
    throw;
  } catch (const TransportError& e) {
    wire_.reset();
    throw PostgresError(e.what());
  }
}

}  // namespace garm_edge::net
