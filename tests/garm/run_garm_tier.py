#!/usr/bin/env python3
"""The garm tier: garm itself, built from its source, drives garm-edge on libvirt's test driver.

garm talks to a fake GitHub Enterprise API on loopback (its proxy variables point at a closed
port, so nothing leaves the machine) and runs garm-provider-edge, behind a tap that records each
call, against three agents. Guests are simulated on their reserved 127.0.x.y addresses and report
through the agents' relays. Pools, each on its own tags:
  main    (edge, v0.1.0, min_idle 2)        runners idle; runner delete; a stop behind garm's back
  v011    (edge-v011, v0.1.1, min_idle 1)   creates work; garm's own ListInstances bug shows
  fleet   (edge-fleet: agents b and c)      c killed, b draining: failed creates must not stick
  reap    (edge, bootstrap timeout 1 min)   guests never report: garm's reaper deletes them
  webhook (edge, min_idle 0)                a queued workflow_job makes a runner; scale down
Then agent a is stopped for 30 s and started again. garm's reaper runs 5 minutes after the
repository's pool manager starts (ListInstances, StartInstance, timed-out runners): the tier
waits for it. Prints every provider call garm made with its exit code and time.

Usage: run_garm_tier.py BUILD_DIR   (exit 77: skipped, garm's source tarball is absent)
"""
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from garm_tier_lib import (Agent, Failure, Process, SimulatedGuests, free_port, read_calls,  # noqa: E402
                           wait_for, workflow_job_webhook, write_tap)

HERE = os.path.dirname(os.path.abspath(__file__))
REPO_ROOT = os.path.dirname(os.path.dirname(HERE))
BUILD = os.path.abspath(sys.argv[1])
PASSWORD = "Garm-edge-tier-0nly-on-loopback"
WEBHOOK_SECRET = "tier-webhook-secret"
started_at = time.time()
checks = []


def log(message):
    print("[%6.1f s] %s" % (time.time() - started_at, message), flush=True)


def check(condition, what):
    checks.append((bool(condition), what))
    log(("ok: " if condition else "FAILED: ") + what)
    if not condition:
        raise Failure(what)


def build_garm():
    result = subprocess.run([os.path.join(HERE, "build_garm.sh")], stdout=subprocess.PIPE,
                            text=True)
    if result.returncode == 77:
        if os.environ.get("GARM_EDGE_REQUIRE_GARM"):
            print("FAILED: garm's source tarball is absent and GARM_EDGE_REQUIRE_GARM is set")
            sys.exit(1)
        print("skipped: garm's source tarball is absent (GARM_EDGE_GARM_SOURCE_DIR)")
        sys.exit(77)
    if result.returncode != 0:
        print("FAILED: building garm")
        sys.exit(1)
    return result.stdout.strip().splitlines()[-1]


class Tier:
    def __init__(self, work, garm_bin):
        self.work, self.garm_bin = work, garm_bin
        self.tap = os.path.join(work, "tap")
        os.makedirs(self.tap)
        self.processes = []
        self.agents = {}
        self.guests = None

    # ---- garm and garm-cli ------------------------------------------------------------------
    def cli(self, *args, parse=True):
        env = {"HOME": self.work, "PATH": "/usr/bin:/bin"}
        result = subprocess.run([os.path.join(self.garm_bin, "garm-cli"), *args] +
                                (["--format", "json"] if parse else []),
                                env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                timeout=60)
        if result.returncode != 0:
            raise Failure("garm-cli %s: %s%s" % (" ".join(args), result.stdout, result.stderr))
        return json.loads(result.stdout) if parse and result.stdout.strip() else result.stdout

    def start_fake_github(self):
        self.github = Process([sys.executable, os.path.join(HERE, "fake_github.py"), self.work],
                              os.path.join(self.work, "fake-github.log"))
        self.processes.append(self.github)
        port_file = os.path.join(self.work, "github.port")
        self.github_port = int(wait_for("the fake GitHub", lambda: os.path.exists(port_file) and
                                        open(port_file).read(), 10, 0.05))
        self.github_url = "http://127.0.0.1:%d" % self.github_port

    def start_garm(self):
        self.garm_port = free_port()
        closed = free_port()  # nothing listens there: garm's way out of loopback is shut
        providers = ""
        for name, version in (("edge", "v0.1.0"), ("edge-v011", "v0.1.1"), ("edge-fleet", "v0.1.0")):
            # garm checks that it exists; the agents' entries are written once garm's
            # controller ID is known.
            open(os.path.join(self.work, name + ".toml"), "w").close()
            write_tap(os.path.join(self.work, "provider-" + name), self.tap,
                      os.path.join(BUILD, "provider/garm-provider-edge"), name)
            providers += PROVIDER_TOML % {"name": name, "version": version,
                                          "config": os.path.join(self.work, name + ".toml"),
                                          "exe": os.path.join(self.work, "provider-" + name)}
        with open(os.path.join(self.work, "garm.toml"), "w") as f:
            f.write(GARM_TOML % {"port": self.garm_port, "db": os.path.join(self.work, "garm.db"),
                                 "providers": providers})
        env = {"PATH": "/usr/bin:/bin", "HOME": self.work,
               "HTTP_PROXY": "http://127.0.0.1:%d" % closed,
               "HTTPS_PROXY": "http://127.0.0.1:%d" % closed, "NO_PROXY": ""}
        self.garm = Process([os.path.join(self.garm_bin, "garm"), "--config",
                             os.path.join(self.work, "garm.toml")],
                            os.path.join(self.work, "garm.log"), env)
        self.processes.append(self.garm)
        url = "http://127.0.0.1:%d" % self.garm_port
        wait_for("garm's API", lambda: self.garm_answers(), 30, 0.2)
        self.cli("init", "--name", "tier", "--url", url, "--username", "admin", "--password",
                 PASSWORD, "--email", "admin@example.com", "--full-name", "Tier Admin",
                 "--metadata-url", url + "/api/v1/metadata", "--callback-url",
                 url + "/api/v1/callbacks", "--webhook-url", url + "/webhooks", parse=False)
        self.controller = self.cli("controller", "show")["controller_id"]
        log("garm %s up on 127.0.0.1:%d, controller %s" % (self.garm_bin, self.garm_port,
                                                           self.controller))

    def garm_answers(self):
        if not self.garm.alive():
            raise Failure("garm exited; see garm.log")
        import http.client
        try:
            conn = http.client.HTTPConnection("127.0.0.1", self.garm_port, timeout=2)
            conn.request("GET", "/api/v1/")
            conn.getresponse().read()
            return True
        except OSError:
            return False

    # ---- agents and provider configs --------------------------------------------------------
    def start_agents(self):
        pki = os.path.join(self.work, "pki")
        subprocess.run([os.path.join(BUILD, "agent/garm-edge-agent"), "pki", "init", "--dir", pki,
                        "--dns", "localhost", "--ip", "127.0.0.1"], check=True,
                       stdout=subprocess.DEVNULL)
        subprocess.run([os.path.join(BUILD, "agent/garm-edge-agent"), "pki", "issue-client",
                        "operator", "--dir", pki], check=True, stdout=subprocess.DEVNULL)
        fixture = os.path.join(REPO_ROOT, "tests/data/guests.xml")
        for index, name in enumerate(("a", "b", "c")):
            self.agents[name] = Agent(name, self.work, BUILD, fixture, pki, self.controller,
                                      "127.0.%d.2-127.0.%d.60" % (index + 1, index + 1), free_port())
        for provider, members in (("edge", "a"), ("edge-v011", "a"), ("edge-fleet", "bc")):
            with open(os.path.join(self.work, provider + ".toml"), "w") as f:
                f.write('session_dir = "%s"\n[timeouts]\nprobe_seconds = 2\n' %
                        os.path.join(self.work, "sessions-" + provider))
                for name in members:
                    f.write(AGENT_ENTRY % {"name": name, "port": self.agents[name].api_port,
                                           "pki": pki})

    def configure_garm(self):
        self.cli("github", "endpoint", "create", "--name", "fake-ghes", "--description", "loopback",
                 "--base-url", self.github_url, "--api-base-url", self.github_url + "/api/v3/",
                 "--upload-url", self.github_url + "/api/uploads/")
        self.cli("github", "credentials", "add", "--name", "fake", "--description", "fake",
                 "--endpoint", "fake-ghes", "--auth-type", "pat", "--pat-oauth-token", "fake-pat")
        repo = self.cli("repo", "add", "--owner", "owner", "--name", "repo", "--credentials", "fake",
                        "--webhook-secret", WEBHOOK_SECRET)
        self.repo = repo["id"]
        self.pools = {}
        for name, provider, min_idle, max_runners, timeout in (
                ("main", "edge", 2, 4, 20), ("v011", "edge-v011", 1, 2, 20),
                ("fleet", "edge-fleet", 1, 2, 20), ("reap", "edge", 1, 1, 1),
                ("webhook", "edge", 0, 1, 20)):
            pool = self.cli("pool", "add", "--repo", self.repo, "--provider-name", provider,
                            "--image", "debian-12", "--flavor", "small", "--os-type", "linux",
                            "--os-arch", "amd64", "--tags", "edge-" + name,
                            "--min-idle-runners", str(min_idle), "--max-runners", str(max_runners),
                            "--runner-bootstrap-timeout", str(timeout), "--enabled=true")
            self.pools[name] = pool["id"]
        self.pool_names = {v: k for k, v in self.pools.items()}
        self.repo_created = time.time()
        log("repository and pools created: %s" % self.pools)

    # ---- what garm says ---------------------------------------------------------------------
    def runners(self, pool=None):
        listed = self.cli("runner", "list", "--all")
        return [r for r in listed if pool is None or r.get("pool_id") == self.pools[pool]]

    def idle(self, pool):
        return [r for r in self.runners(pool)
                if r.get("status") == "running" and r.get("runner_status") == "idle"]

    def garm_log(self):
        return open(os.path.join(self.work, "garm.log"), errors="replace").read()

    def calls(self, **match):
        return [c for c in read_calls(self.tap)
                if all(c.get(k) == v for k, v in match.items())]

    def deferred(self, provider):
        result = subprocess.run([os.path.join(BUILD, "provider/garm-provider-edge"), "status",
                                 "--config", os.path.join(self.work, provider + ".toml"), "--json"],
                                stdout=subprocess.PIPE, text=True, timeout=30)
        return {row["name"]: len(row.get("deferred_deletes", [])) for row in json.loads(result.stdout)}

    def stop(self):
        for agent in self.agents.values():
            agent.stop()
        for process in reversed(self.processes):
            process.stop()


PROVIDER_TOML = '''
[[provider]]
name = "%(name)s"
provider_type = "external"
description = "garm-edge, interface %(version)s"
  [provider.external]
  config_file = "%(config)s"
  provider_executable = "%(exe)s"
  interface_version = "%(version)s"
'''

GARM_TOML = '''[default]
enable_webhook_management = false
[logging]
log_format = "text"
log_level = "debug"
[metrics]
enable = false
[jwt_auth]
secret = "garm-edge-tier-secret-garm-edge-tier-secret-0123456789"
time_to_live = "8760h"
[apiserver]
bind = "127.0.0.1"
port = %(port)d
use_tls = false
[apiserver.webui]
enable = false
[database]
backend = "sqlite3"
passphrase = "garmEdgeTierPassphrase0123456789"
[database.sqlite3]
db_file = "%(db)s"
%(providers)s'''

AGENT_ENTRY = '''[[agents]]
name = "%(name)s"
url = "https://localhost:%(port)d"
ca = "%(pki)s/ca.crt"
certificate = "%(pki)s/clients/garm.crt"
key = "%(pki)s/clients/garm.key"
'''


def scenario(tier):
    a, b, c = tier.agents["a"], tier.agents["b"], tier.agents["c"]
    # The fleet pool's first creates must fail: b refuses (draining), c is dead.
    check(b.control("POST", "/v1/draining", client="operator")[0] == 200, "agent b drains")
    c.stop(signal.SIGKILL)
    tier.configure_garm()
    guests = tier.guests = SimulatedGuests(tier.tap, tier.agents, tier.github_port,
                                           {tier.pools["reap"]})
    guests.start()

    idle_main = wait_for("2 idle runners in pool main", lambda: len(tier.idle("main")) >= 2 and
                         tier.idle("main"), 90)
    log("pool main: %s idle %.1f s after the pool was created" %
        ([r["name"] for r in idle_main], time.time() - tier.repo_created))
    on_a = a.all_instances([tier.pools["main"]])
    check(sorted(on_a) == sorted(r["name"] for r in tier.runners("main")),
          "agent a holds exactly garm's runners of pool main")
    wait_for("an idle runner in pool v011", lambda: tier.idle("v011"), 60)
    check(True, "interface v0.1.1: CreateInstance and the relay work (runner idle)")

    # ---- the fleet pool with one dead host: failed creates must not stick ------------------
    def failed_fleet_delete():
        return [d for d in tier.calls(provider="edge-fleet", command="DeleteInstance")
                if not d["instance"].count(":")]
    wait_for("garm to delete a failed fleet create by name", failed_fleet_delete, 60)
    deletes = failed_fleet_delete()
    check(all(d["exit"] == 0 for d in deletes),
          "with c dead, DeleteInstance by name exits 0 (%d calls)" % len(deletes))
    check(tier.deferred("edge-fleet").get("c", 0) >= 1,
          "the deletes c could not be asked are kept (status shows %d)" %
          tier.deferred("edge-fleet").get("c", 0))
    check(b.control("DELETE", "/v1/draining", client="operator")[0] == 200, "agent b takes creates again")
    undrained = time.time()
    wait_for("an idle runner in pool fleet while c is dead", lambda: tier.idle("fleet"), 60)
    log("pool fleet: a runner idle on b %.1f s after b took creates again, c still dead" %
        (time.time() - undrained))
    check(not c.process.alive(), "agent c is still dead")

    # ---- a webhook makes a runner; scale down takes it away --------------------------------
    status, body = workflow_job_webhook(tier.garm_port, tier.github_url, WEBHOOK_SECRET,
                                        ["edge-webhook"], 4242)
    check(status == 200, "garm accepts a signed workflow_job webhook (HTTP %d %s)" % (status, body[:100]))
    hooked = time.time()

    # ---- garm-cli runner delete --------------------------------------------------------------
    victim = tier.idle("main")[0]["name"]
    tier.cli("runner", "delete", victim, parse=False)
    deleted = time.time()
    wait_for("the deleted runner to leave agent a",
             lambda: victim not in a.all_instances([tier.pools["main"]]), 30)
    log("runner delete: %s gone from agent a in %.1f s" % (victim, time.time() - deleted))
    wait_for("pool main back to 2 idle", lambda: len(tier.idle("main")) >= 2, 60)

    wait_for("a runner in pool webhook", lambda: tier.idle("webhook"), 90)
    log("webhook: a runner idle %.1f s after the queued workflow_job" % (time.time() - hooked))
    webhook_runner = tier.idle("webhook")[0]["name"]
    # The job ran there and finished: garm deletes the ephemeral runner, and the job no longer
    # counts as queued (a queued job keeps an idle runner from scale down).
    status, body = workflow_job_webhook(tier.garm_port, tier.github_url, WEBHOOK_SECRET,
                                        ["edge-webhook"], 4242, "completed", webhook_runner)
    check(status == 200, "garm accepts the job's completed webhook (HTTP %d %s)" % (status, body[:100]))
    completed = time.time()
    wait_for("the runner that finished its job to leave agent a",
             lambda: webhook_runner not in a.all_instances([tier.pools["webhook"]]), 60)
    log("job completed: its runner gone from agent a in %.1f s" % (time.time() - completed))

    # ---- scale down: min_idle 2 -> 1 in pool main --------------------------------------------
    tier.cli("pool", "update", tier.pools["main"], "--min-idle-runners", "1")
    scaled = time.time()
    wait_for("scale down to leave one runner in pool main",
             lambda: len(a.all_instances([tier.pools["main"]])) == 1 and len(tier.runners("main")) == 1,
             150)
    log("scale down: pool main at 1 runner %.1f s after min_idle 2 -> 1 (garm's 1-minute tick)" %
        (time.time() - scaled))

    # ---- agent a down for 30 s ---------------------------------------------------------------
    a.stop()
    down = time.time()
    log("agent a stopped")
    victim = tier.idle("main")[0]["name"]
    tier.cli("runner", "delete", victim, parse=False)  # garm's delete meets a dead agent
    time.sleep(max(0, 30 - (time.time() - down)))
    a.start()
    log("agent a back after %.1f s" % (time.time() - down))
    wait_for("pool main back to 1 idle after the outage", lambda: len(tier.idle("main")) >= 1, 90)
    wait_for("the runner deleted during the outage to leave agent a",
             lambda: victim not in a.all_instances([tier.pools["main"]]), 60)
    log("pool main whole again %.1f s after agent a came back" % (time.time() - down - 30))

    # ---- agent c back: its kept deletes are carried out --------------------------------------
    c.start()
    tier.cli("pool", "update", tier.pools["fleet"], "--min-idle-runners", "2")
    wait_for("the deletes kept for c to be carried out",
             lambda: tier.deferred("edge-fleet").get("c", 1) == 0, 90)
    check(True, "agent c back: the next calls that reached it carried out its kept deletes")

    # ---- stopped behind garm's back, then garm's reaper tick --------------------------------
    stopped_main = tier.idle("main")[0]["name"]
    stopped_v011 = tier.idle("v011")[0]["name"]
    for name in (stopped_main, stopped_v011):
        status, _ = a.control("POST", "/v1/controllers/%s/instances/%s/stop?force=true" %
                              (tier.controller, name))
        check(status == 200, "%s stopped behind garm's back" % name)
    tick = tier.repo_created + 5 * 60
    log("waiting for garm's reaper tick (5 min after the repository was added): %.0f s" %
        max(0, tick - time.time()))
    wait_for("garm to start the stopped instance of pool main again",
             lambda: a.all_instances([tier.pools["main"]]).get(stopped_main, {}).get("status") ==
             "running", max(60, tick - time.time() + 90), 2)
    check(any(c["command"] == "StartInstance" and c["instance"].endswith(
        a.all_instances([tier.pools["main"]])[stopped_main]["provider_id"]) and c["exit"] == 0
        for c in tier.calls(provider="edge")), "garm called StartInstance for it (exit 0)")
    reaped = wait_for("garm's reaper to delete the silent runner of pool reap",
                      lambda: [d for d in tier.calls(provider="edge", command="DeleteInstance")
                               if d["exit"] == 0 and d["instance"].count(":")
                               and any(cr["pool"] == tier.pools["reap"] for cr in tier.calls(
                                   provider="edge", command="CreateInstance"))], 60, 2)
    check(reaped, "the bootstrap-timeout reaper deleted a runner that never reported")
    v011_lists = tier.calls(provider="edge-v011", command="ListInstances")
    check(v011_lists and all(c["exit"] == 0 for c in v011_lists),
          "v0.1.1: the provider's ListInstances exits 0 (%d calls)" % len(v011_lists))
    garm_bug = "returned error: %!s(<nil>)" in tier.garm_log()
    still_stopped = a.all_instances([tier.pools["v011"]]).get(stopped_v011, {}).get("status")
    log("v0.1.1: garm rejected the successful ListInstances (its own bug): %s; the instance "
        "stopped behind its back is %s" % (garm_bug, still_stopped))
    check(garm_bug, "garm's v0.1.1 ListInstances bug shows in its log (recorded as garm's)")

    # ---- nothing leaked, nothing duplicated --------------------------------------------------
    time.sleep(6)
    for pool in ("main", "v011", "reap", "webhook"):
        garm_names = sorted(r["name"] for r in tier.runners(pool))
        agent_names = sorted(a.all_instances([tier.pools[pool]]))
        check(garm_names == agent_names, "pool %s: agent a holds exactly garm's runners %s" %
              (pool, garm_names))
    fleet = sorted(r["name"] for r in tier.runners("fleet"))
    on_bc = sorted(list(b.all_instances([tier.pools["fleet"]])) +
                   list(c.all_instances([tier.pools["fleet"]])))
    check(fleet == on_bc, "pool fleet: agents b and c hold exactly garm's runners %s" % fleet)
    check(not guests.errors, "simulated guests reported without errors %s" % guests.errors[:3])


def print_calls(tier):
    calls = read_calls(tier.tap)
    print("\nEvery provider call garm made (%d):" % len(calls))
    print("%-10s %-10s %-16s %-6s %-4s %-7s %s" % ("t (s)", "provider", "command", "iface",
                                                   "exit", "ms", "instance / pool"))
    for call in sorted(calls, key=lambda c: c["started"]):
        target = call["instance"] or tier.pool_names.get(call["pool"], call["pool"])
        if call["command"] == "CreateInstance":
            try:
                target += " " + json.load(open(os.path.join(tier.tap, call["id"] + ".stdin")))["name"]
            except (OSError, ValueError, KeyError):
                pass
        print("%-10.1f %-10s %-16s %-6s %-4d %-7d %s" % (
            call["started"] / 1000 - started_at, call["provider"], call["command"],
            call["interface"], call["exit"], call["ms"], target))
    print("\nSummary by command and exit code:")
    summary = {}
    for call in calls:
        summary.setdefault((call["provider"], call["command"], call["exit"]), []).append(call["ms"])
    for (provider, command, code), times in sorted(summary.items()):
        print("  %-10s %-16s exit %-3d x%-4d median %5d ms, max %5d ms" % (
            provider, command, code, len(times), statistics.median(times), max(times)))
    for name in sorted(os.listdir(tier.tap)):
        if name.startswith("env-"):
            keys = sorted(line.split("=", 1)[0] for line in open(os.path.join(tier.tap, name)))
            print("  environment of %s: %s" % (name[4:], " ".join(keys)))


def main():
    garm_bin = build_garm()
    work = tempfile.mkdtemp(prefix="garm-tier.")
    tier = Tier(work, garm_bin)
    ok = False
    try:
        tier.start_fake_github()
        tier.start_garm()
        tier.start_agents()
        scenario(tier)
        ok = True
    except Failure as e:
        log("FAILED: %s" % e)
        if tier.guests:
            print("simulated guests' errors: %s" % tier.guests.errors[-10:])
        if os.environ.get("GARM_TIER_HOLD"):  # to look at the processes by hand
            log("holding for %s s (GARM_TIER_HOLD)" % os.environ["GARM_TIER_HOLD"])
            time.sleep(int(os.environ["GARM_TIER_HOLD"]))
    finally:
        if hasattr(tier, "pool_names"):
            print_calls(tier)
        tier.stop()
        if not ok:
            print("\n--- garm.log (errors) ---")
            for line in tier.garm_log().splitlines() if os.path.exists(
                    os.path.join(work, "garm.log")) else []:
                if "level=ERROR" in line or "level=WARN" in line:
                    print(line[:400])
            print("work directory kept: %s" % work)
        else:
            shutil.rmtree(work, ignore_errors=True)
    if ok:
        print("garm tier: garm drove garm-edge through %d checks in %.0f s" %
              (len(checks), time.time() - started_at))
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
