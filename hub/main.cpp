#include "hub/cli.hpp"

int main(int argc, char** argv) {
  return garm_edge::hub::run_cli(argc, argv);
}
