#pragma once

#include <cstddef>
#include <memory>

#include "hub/hub_state.hpp"
#include "net/postgres_client.hpp"

namespace garm_edge::hub {

/// The hub's records in PostgreSQL at `target`, its schema brought to this hub's version first
/// (under the same lock every change holds, so hubs starting together migrate once). Throws
/// net::PostgresError when the database cannot be reached or its schema is newer than this
/// hub's.
std::unique_ptr<HubState> open_postgres_state(const net::PostgresTarget& target);

/// The schema version this hub writes.
std::size_t postgres_schema_version();

}  // namespace garm_edge::hub
