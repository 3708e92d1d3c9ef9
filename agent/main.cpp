#include "agent/daemon/cli.hpp"

int main(int argc, char** argv) {
  return garm_edge::agent::run_cli(argc, argv);
}
