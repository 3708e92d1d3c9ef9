#include "wire/metric_families.hpp"

namespace garm_edge::wire {

const std::map<std::string, std::string, std::less<>>& agent_metric_types() {
  static const std::map<std::string, std::string, std::less<>> kTypes = {
      {"garm_edge_cache_generation", "gauge"},
      {"garm_edge_cache_generation_age_seconds", "gauge"},
      {"garm_edge_cache_last_refresh_seconds", "gauge"},
      {"garm_edge_cache_ready", "gauge"},
      {"garm_edge_cache_refreshes_total", "counter"},
      {"garm_edge_cache_retired_generations", "gauge"},
      {"garm_edge_capacity_flavor_instances", "gauge"},
      {"garm_edge_capacity_instances", "gauge"},
      {"garm_edge_capacity_memory_bytes", "gauge"},
      {"garm_edge_capacity_vcpus", "gauge"},
      {"garm_edge_certificate_expiry_timestamp_seconds", "gauge"},
      {"garm_edge_command_errors_total", "counter"},
      {"garm_edge_draining", "gauge"},
      {"garm_edge_guest_addresses", "gauge"},
      {"garm_edge_guest_agent_sockets", "gauge"},
      {"garm_edge_guest_reports_not_recorded_total", "counter"},
      {"garm_edge_guest_requests_total", "counter"},
      {"garm_edge_hub_link_enrolled", "gauge"},
      {"garm_edge_hub_link_tunnels", "gauge"},
      {"garm_edge_image_pulled_bytes_total", "counter"},
      {"garm_edge_image_pulls_total", "counter"},
      {"garm_edge_image_ready", "gauge"},
      {"garm_edge_instances", "gauge"},
      {"garm_edge_libvirt_up", "gauge"},
      {"garm_edge_mirror_blobs_total", "counter"},
      {"garm_edge_mirror_flushes_total", "counter"},
      {"garm_edge_mirror_requests_total", "counter"},
      {"garm_edge_mirror_restarts_total", "counter"},
      {"garm_edge_mirror_saved_bytes_total", "counter"},
      {"garm_edge_mirror_served_bytes_total", "counter"},
      {"garm_edge_mirror_stored_bytes", "gauge"},
      {"garm_edge_mirror_up", "gauge"},
      {"garm_edge_request_duration_seconds", "summary"},
      {"garm_edge_requests_total", "counter"},
      {"garm_edge_runner_archive_cache_archives", "gauge"},
      {"garm_edge_runner_archive_cache_bytes", "gauge"},
      {"garm_edge_runner_archive_downloaded_bytes_total", "counter"},
      {"garm_edge_runner_archive_downloads_total", "counter"},
      {"garm_edge_runner_archive_evictions_total", "counter"},
      {"garm_edge_runner_archive_part_bytes", "gauge"},
      {"garm_edge_runner_archive_requests_total", "counter"},
      {"garm_edge_startup_failures_total", "counter"},
      {"garm_edge_startup_phase_seconds", "histogram"},
      {"garm_edge_startup_seconds", "histogram"},
      {"garm_edge_startups_in_progress", "gauge"},
      {"garm_edge_storage_pool_bytes", "gauge"},
      {"garm_edge_warm_guests", "gauge"},
      {"garm_edge_warm_guests_total", "counter"},
  };
  return kTypes;
}

}  // namespace garm_edge::wire
