#include <iostream>
#include <iterator>
#include <map>
#include <string>
#include <unistd.h>

#include "provider/commands.hpp"

int main() {
  std::map<std::string, std::string> environment;
  for (char** entry = environ; *entry != nullptr; ++entry) {
    const std::string text(*entry);
    if (const auto equals = text.find('='); equals != std::string::npos) {
      environment.emplace(text.substr(0, equals), text.substr(equals + 1));
    }
  }
  const auto outcome = garm_edge::provider::run_command(environment, [] {
    return std::string(std::istreambuf_iterator<char>(std::cin), std::istreambuf_iterator<char>());
  });
  std::cout << outcome.out << std::flush;
  std::cerr << outcome.err << std::flush;
  return outcome.exit_code;
}
