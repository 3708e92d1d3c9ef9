#include "net/admin_protocol.hpp"

#include <stdexcept>

#include <nlohmann/json.hpp>

namespace garm_edge::net {
namespace {

nlohmann::json parse_object(std::string_view line) {
  auto parsed = nlohmann::json::parse(line, nullptr, false);
  if (!parsed.is_object()) {
    throw std::invalid_argument("not a JSON object");
  }
  return parsed;
}

std::string text_field(const nlohmann::json& object, const char* name) {
  const auto found = object.find(name);
  if (found == object.end()) {
    return "";
  }
  if (!found->is_string()) {
    throw std::invalid_argument(std::string("\"") + name + "\" is not a string");
  }
  return found->get<std::string>();
}

}  // namespace

std::string AdminRequest::to_line() const {
  nlohmann::json line{{"command", command}, {"action", action}, {"name", name}};
  if (!arguments.empty()) {
    line["arguments"] = arguments;
  }
  if (command == "images") {
    line["image"] = name;  // what an agent of 0.9 reads
  }
  return line.dump() + "\n";
}

AdminRequest AdminRequest::from_line(std::string_view line) {
  const auto object = parse_object(line);
  std::vector<std::string> arguments;
  if (object.contains("arguments")) {
    if (!object["arguments"].is_array()) {
      throw std::invalid_argument("\"arguments\" is not a list");
    }
    for (const auto& argument : object["arguments"]) {
      if (!argument.is_string()) {
        throw std::invalid_argument("\"arguments\" holds something not a string");
      }
      arguments.push_back(argument.get<std::string>());
    }
  }
  return {
      .command = text_field(object, "command"),
      .action = text_field(object, "action"),
      .name = object.contains("name") ? text_field(object, "name") : text_field(object, "image"),
      .arguments = std::move(arguments)};
}

std::string AdminReplyLine::to_line() const {
  nlohmann::json line = nlohmann::json::object();
  if (progress) {
    line["progress"] = {{"bytes", progress->first}, {"total", progress->second}};
  }
  if (result) {
    // Output may hold any bytes a file name had: replaced, never a broken line.
    const auto replace = nlohmann::json::error_handler_t::replace;
    return nlohmann::json{
               {"exit", result->exit_code}, {"output", result->output}, {"error", result->error}}
               .dump(-1, ' ', false, replace) +
           "\n";
  }
  return line.dump() + "\n";
}

AdminReplyLine AdminReplyLine::from_line(std::string_view line) {
  const auto object = parse_object(line);
  AdminReplyLine reply;
  if (const auto progress = object.find("progress"); progress != object.end()) {
    reply.progress = {progress->value("bytes", std::uint64_t{0}),
                      progress->value("total", std::uint64_t{0})};
  }
  if (const auto exit = object.find("exit"); exit != object.end()) {
    if (!exit->is_number_integer()) {
      throw std::invalid_argument("\"exit\" is not a number");
    }
    reply.result = AdminResult{.exit_code = exit->get<int>(),
                               .output = text_field(object, "output"),
                               .error = text_field(object, "error")};
  }
  return reply;
}

std::filesystem::path admin_socket_path(const std::filesystem::path& state_dir) {
  return state_dir / "admin.sock";
}

}  // namespace garm_edge::net
