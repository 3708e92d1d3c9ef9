#include "wire/join_token.hpp"

#include <nlohmann/json.hpp>

#include "common/hex.hpp"
#include "wire/base64.hpp"

namespace garm_edge::wire {

bool is_token_id(std::string_view text) {
  return is_lower_hex(text, 16);
}

std::string JoinToken::encode() const {
  const nlohmann::json fields = {{"u", hub_url}, {"f", ca_fingerprint}, {"i", id}, {"s", secret}};
  return std::string(kJoinTokenPrefix) + base64_encode(fields.dump());
}

std::optional<JoinToken> JoinToken::decode(std::string_view text) {
  while (!text.empty() && (text.back() == '\n' || text.back() == '\r' || text.back() == ' ')) {
    text.remove_suffix(1);
  }
  if (text.size() > 4096 || text.substr(0, kJoinTokenPrefix.size()) != kJoinTokenPrefix) {
    return std::nullopt;
  }
  const auto json = base64_decode(text.substr(kJoinTokenPrefix.size()));
  if (!json) {
    return std::nullopt;
  }
  const auto fields = nlohmann::json::parse(*json, nullptr, false);
  if (!fields.is_object() || fields.size() != 4) {
    return std::nullopt;
  }
  JoinToken token;
  for (auto [key, target] : {std::pair{"u", &token.hub_url}, std::pair{"f", &token.ca_fingerprint},
                             std::pair{"i", &token.id}, std::pair{"s", &token.secret}}) {
    const auto found = fields.find(key);
    if (found == fields.end() || !found->is_string()) {
      return std::nullopt;
    }
    *target = found->get<std::string>();
  }
  if (token.hub_url.rfind("https://", 0) != 0 || !is_lower_hex(token.ca_fingerprint, 64) ||
      !is_token_id(token.id) || token.secret.empty() || token.secret.size() > 128) {
    return std::nullopt;
  }
  return token;
}

}  // namespace garm_edge::wire
