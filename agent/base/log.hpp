#pragma once

#include "common/log.hpp"

namespace garm_edge::agent {

using garm_edge::Level;
using garm_edge::Logger;
using garm_edge::StderrLogger;

}  // namespace garm_edge::agent
