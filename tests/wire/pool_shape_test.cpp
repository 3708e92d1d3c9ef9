// The pool-shape keys of extra specs, read once at the edge (wire/pool_shape).
#include "wire/pool_shape.hpp"

#include <catch2/catch.hpp>

#include "wire/error.hpp"
#include "wire/schemas.hpp"

using namespace garm_edge::wire;
using nlohmann::json;

namespace {

std::string error_of(const json& specs) {
  try {
    parse_pool_shape(specs);
  } catch (const WireError& e) {
    return e.what();
  }
  return "(no error)";
}

}  // namespace

TEST_CASE("a pool's shape is read from its extra specs, with defaults for what it leaves out",
          "[shapes]") {
  CHECK(parse_pool_shape(std::nullopt).is_default());
  CHECK(parse_pool_shape(json{{"caches", {"docker"}}, {"root_disk_gib", nullptr}}).is_default());
  const auto shape = parse_pool_shape(json{{"root_disk_gib", 60},
                                           {"scratch_disks",
                                            {{{"pool", "nvme"}, {"size_gib", 100}},
                                             {{"pool", "nvme"}, {"size_gib", 5}, {"mount", "/w"}}}},
                                           {"networks", {"lab", "dmz"}},
                                           {"nested_virtualization", true},
                                           {"virt_type", "kvm"}});
  CHECK(shape.root_disk_gib == 60U);
  CHECK(shape.scratch_disks ==
        std::vector<ScratchDiskRequest>{{.pool = "nvme", .size_gib = 100, .mount = "/mnt/scratch"},
                                        {.pool = "nvme", .size_gib = 5, .mount = "/w"}});
  CHECK(shape.networks == std::vector<std::string>{"lab", "dmz"});
  CHECK(shape.nested_virtualization);
  CHECK(shape.virt_type == VirtTypeRequest::kvm);
  CHECK_FALSE(shape.is_default());
}

TEST_CASE("a wrong shape value names its field", "[shapes]") {
  CHECK_THAT(error_of({{"root_disk_gib", 0}}), Catch::Contains("extra_specs.root_disk_gib"));
  CHECK_THAT(error_of({{"root_disk_gib", "20"}}), Catch::Contains("extra_specs.root_disk_gib"));
  CHECK_THAT(error_of({{"root_disk_gib", 65537}}), Catch::Contains("from 1 to 65536"));
  CHECK_THAT(error_of({{"root_disk_gib", 2.5}}), Catch::Contains("whole number"));
  CHECK_THAT(error_of({{"scratch_disks", {{{"pool", "nvme"}}}}}),
             Catch::Contains("scratch_disks[0]") && Catch::Contains("needs pool and size_gib"));
  CHECK_THAT(error_of({{"scratch_disks", {{{"pool", "NVMe"}, {"size_gib", 1}}}}}),
             Catch::Contains("scratch_disks[0].pool"));
  CHECK_THAT(error_of({{"scratch_disks", {{{"pool", "n"}, {"size_gib", 1}, {"fs", "xfs"}}}}}),
             Catch::Contains("scratch_disks[0].fs") && Catch::Contains("unknown key"));
  for (const auto* mount : {"relative", "/a/../etc", "/a b", "/a;reboot", "/", "//x"}) {
    INFO(mount);
    CHECK_THAT(error_of({{"scratch_disks", {{{"pool", "n"}, {"size_gib", 1}, {"mount", mount}}}}}),
               Catch::Contains("scratch_disks[0].mount"));
  }
  const json same_mount = {{"pool", "n"}, {"size_gib", 1}, {"mount", "/w"}};
  CHECK_THAT(error_of({{"scratch_disks", {same_mount, same_mount}}}),
             Catch::Contains("two disks are mounted at /w"));
  const json five = json::array({same_mount, same_mount, same_mount, same_mount, same_mount});
  CHECK_THAT(error_of({{"scratch_disks", five}}), Catch::Contains("at most 4"));
  CHECK_THAT(error_of({{"networks", {"lab", "lab"}}}), Catch::Contains("names lab twice"));
  CHECK_THAT(error_of({{"networks", "lab"}}), Catch::Contains("extra_specs.networks"));
  CHECK_THAT(error_of({{"nested_virtualization", "yes"}}),
             Catch::Contains("extra_specs.nested_virtualization"));
  CHECK_THAT(error_of({{"virt_type", "xen"}}), Catch::Contains("extra_specs.virt_type"));
}

TEST_CASE("validating a pool's extra specs checks the shape values too", "[shapes]") {
  CHECK_NOTHROW(validate_extra_spec_keys(json{{"root_disk_gib", 40}, {"networks", {"lab"}}}));
  CHECK_THROWS_AS(validate_extra_spec_keys(json{{"root_disk_gib", -1}}), WireError);
  // The schema's rule for caches: at most 8 names of a-z, 0-9 and '-'.
  CHECK_NOTHROW(validate_extra_spec_keys(json{{"caches", {"docker", "go-mod"}}}));
  CHECK_NOTHROW(validate_extra_spec_keys(json{{"caches", nullptr}}));
  CHECK_THROWS_WITH(validate_extra_spec_keys(json{{"caches", "x"}}),
                    Catch::Contains("extra_specs.caches"));
  CHECK_THROWS_WITH(validate_extra_spec_keys(json{{"caches", {"BAD NAME!"}}}),
                    Catch::Contains("extra_specs.caches[0]"));
  CHECK_THROWS_WITH(
      validate_extra_spec_keys(json{{"caches", {"a", "b", "c", "d", "e", "f", "g", "h", "i"}}}),
      Catch::Contains("at most 8"));
  CHECK_THROWS_WITH(validate_extra_spec_keys(json{{"caches", {"a", "a"}}}),
                    Catch::Contains("names a twice"));
  const auto schema = json::parse(extra_specs_json_schema());
  for (const auto* key :
       {"root_disk_gib", "scratch_disks", "networks", "nested_virtualization", "virt_type"}) {
    CHECK(schema.at("properties").contains(key));
  }
}
