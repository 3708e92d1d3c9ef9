#!/usr/bin/env python3
"""The garm tier: garm itself, built from its source, drives garm-edge on libvirt's test driver.

garm talks to a fake GitHub Enterprise API on loopback (its proxy variables point at a closed
port, so nothing leaves the machine) and runs garm-provider-edge, behind a tap that records each
call, against three agents. Guests are simulated on their reserved 127.0.x.y addresses and report
through the agents' relays. Pools, each on its own tags:
  main    (edge, v0.1.0, min_idle 2)        runners idle; runner delete; a stop behind garm's back
  v011    (edge-v011, v0.1.1, min_idle 1)   creates work; garm's own ListInstances bug shows
          (in a repository of its own: the bug aborts its repository's whole reaper round)
  fleet   (edge-fleet: agents b and c)      c killed, b draining: failed creates must not stick;
                                            c back; then scale down to 0
  reap    (edge, bootstrap timeout 1 min)   guests never report: garm's reaper deletes them
  webhook (edge, min_idle 0)                a queued workflow_job makes a runner; scale down
  gitea   (edge-gitea, a Gitea repository)   a fake Gitea API and gitea-runner releases: the
                                            guest registers with the token garm asked Gitea
                                            for, reports idle; scale down removes it at Gitea
  edge-ss (a scale set, its own repository)  the fake GitHub's Actions service: a runner idle,
                                            listed by garm's consolidation, scaled down to 0
Then agent a is stopped (SIGSTOP) for 30 s, and agent c comes back. garm's reaper runs every 5
minutes from the repository's start: the first round deletes runners past their bootstrap
timeout; the second (10 min) looks up runners GitHub shows offline with ListInstances and starts
what is stopped: the tier waits for both (about 11 minutes, nearly all of it waiting). Prints every provider call garm made with its exit code and time.

Usage: run_garm_tier.py BUILD_DIR   (exit 77: skipped, garm's source tarball is absent)
"""
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from garm_tier_lib import (AGENT_ENTRY, WEBHOOK_SECRET, Agent, Failure, GarmSite,  # noqa: E402
                           SimulatedGuests, build_garm, free_port, log, read_calls, wait_for,
                           workflow_job_webhook)

HERE = os.path.dirname(os.path.abspath(__file__))
REPO_ROOT = os.path.dirname(os.path.dirname(HERE))
BUILD = os.path.abspath(sys.argv[1])
started_at = time.time()
checks = []


def check(condition, what):
    checks.append((bool(condition), what))
    log(("ok: " if condition else "FAILED: ") + what)
    if not condition:
        raise Failure(what)


class Tier(GarmSite):
    def __init__(self, work, garm_bin):
        super().__init__(work, garm_bin, os.path.join(BUILD, "provider/garm-provider-edge"),
                         [("edge", "v0.1.0"), ("edge-v011", "v0.1.1"), ("edge-fleet", "v0.1.0")])
        self.agents = {}
        self.guests = None

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
            with open(self.provider_config(provider), "w") as f:
                f.write('session_dir = "%s"\n[timeouts]\nprobe_seconds = 2\nrequest_seconds = 10\n'
                        'create_seconds = 20\n' % os.path.join(self.work, "sessions-" + provider))
                for name in members:
                    f.write(AGENT_ENTRY % {"name": name, "port": self.agents[name].api_port,
                                           "pki": pki})

    def configure_garm(self):
        self.add_github()
        self.add_gitea()  # before any repository: see add_gitea
        # The v0.1.1 pool has a repository of its own: garm's ListInstances bug there aborts the
        # reaper round of every pool of its repository.
        repo, repo_v011 = self.add_repo("repo"), self.add_repo("repo-v011")
        for name, provider, min_idle, max_runners, timeout in (
                ("main", "edge", 2, 4, 20), ("v011", "edge-v011", 1, 2, 20),
                ("fleet", "edge-fleet", 1, 2, 20), ("reap", "edge", 1, 1, 1),
                ("webhook", "edge", 0, 1, 20)):
            self.add_pool(repo_v011 if name == "v011" else repo, name, provider, min_idle,
                          max_runners, timeout)
        self.repo_created = time.time()
        # A Gitea repository with a pool on the same provider: garm's other forge.
        self.add_pool(self.add_repo("gitea-repo", "gitea"), "gitea", "edge", 1, 1, 20)
        # A scale set, in a repository of its own (its runners are listed by the Actions
        # service, not by the repository's runners API).
        self.repo_ss = self.add_repo("repo-ss")
        self.scale_set = self.cli("scaleset", "add", "--repo", self.repo_ss,
                                  "--provider-name", "edge", "--name", "edge-ss", "--image",
                                  "debian-12", "--flavor", "small", "--os-type", "linux",
                                  "--os-arch", "amd64", "--labels", "edge-ss",
                                  "--min-idle-runners", "1", "--max-runners", "1",
                                  "--runner-bootstrap-timeout", "20", "--enabled=true")["id"]
        log("repositories and pools created: %s, scale set %s" % (self.pools, self.scale_set))

    def stop(self):
        for agent in self.agents.values():
            agent.stop()
        super().stop()


def scale_set_idle(tier):
    listed = tier.cli("scaleset", "runner", "list", str(tier.scale_set))
    return [r for r in listed if r.get("status") == "running" and r.get("runner_status") == "idle"]


def check_scale_set(tier, a):
    """A GitHub scale set's runner idle on garm-edge. garm names the scale set's instances'
    pool `<scale set name>-<repository ID>`; returns that pool ID and the runner's name."""
    runner = wait_for("an idle runner of the scale set", lambda: scale_set_idle(tier), 180, 2)[0]
    log("scale set: %s idle %.1f s after it was created" %
        (runner["name"], time.time() - tier.repo_created))
    create = next(c for c in tier.calls(provider="edge", command="CreateInstance")
                  if c["pool"].startswith("edge-ss-") and c["exit"] == 0)
    check(create["pool"] == "edge-ss-" + tier.repo_ss,
          "garm's CreateInstance for the scale set gives GARM_POOL_ID <name>-<repository ID> (%s)"
          % create["pool"])
    check(runner["name"] in a.all_instances([create["pool"]]),
          "agent a lists the scale set's runner under that pool ID")
    return create["pool"], runner["name"]


def check_gitea_pool(tier, a):
    """garm's Gitea forge: a runner of the Gitea repository's pool idle on garm-edge, made from
    what garm sends for Gitea. Returns the runner's ID at Gitea."""
    runner = wait_for("an idle runner in pool gitea", lambda: tier.idle("gitea"), 300, 2)[0]
    log("pool gitea: %s idle %.1f s after the pool was created" %
        (runner["name"], time.time() - tier.repo_created))
    create = next(c for c in tier.calls(provider="edge", command="CreateInstance")
                  if c["pool"] == tier.pools["gitea"] and c["exit"] == 0)
    bootstrap = json.load(open(os.path.join(tier.tap, create["id"] + ".stdin")))
    tool = (bootstrap.get("tools") or [{}])[0]
    check(tool.get("download_url", "").endswith("/_download/gitea-runner-0.2.13-linux-amd64") and
          not tool.get("sha256_checksum"),
          "garm's Gitea bootstrap carries the gitea-runner binary from the endpoint's releases "
          "(%s, no checksum)" % tool.get("download_url"))
    check(not bootstrap.get("jit_config_enabled") and
          "runner-controller-id=" + tier.controller in bootstrap.get("labels", []) and
          bootstrap.get("repo_url") == tier.gitea_url + "/",
          "no JIT for Gitea: labels carry runner-controller-id, repo_url is the API base (%s)" %
          bootstrap.get("repo_url"))
    requests = tier.gitea_requests()
    check(any(r["method"] == "POST" and r["path"].endswith(
        "/repos/owner/gitea-repo/actions/runners/registration-token") and
        r["authorization"] == "Bearer fake-gitea-pat" for r in requests),
        "the guest's registration token came through the relay from garm, which asked Gitea")
    check(sorted(a.all_instances([tier.pools["gitea"]])) ==
          sorted(r["name"] for r in tier.runners("gitea")),
          "agent a holds exactly garm's runners of the Gitea pool")
    return runner["agent_id"]


def scenario(tier):
    a, b, c = tier.agents["a"], tier.agents["b"], tier.agents["c"]
    # The fleet pool's first creates must fail: b refuses (draining), c is dead.
    check(b.control("POST", "/v1/draining", client="operator")[0] == 200, "agent b drains")
    c.stop(signal.SIGKILL)
    tier.configure_garm()
    guests = tier.guests = SimulatedGuests(tier.tap, tier.agents, tier.github_port,
                                           {tier.pools["reap"]}, tier.gitea_port)
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
    if os.environ.get("GARM_TIER_UNTIL") == "fleet":  # a short run, e.g. against an old provider
        return
    if os.environ.get("GARM_TIER_UNTIL") == "forges":
        check_gitea_pool(tier, a)
        check_scale_set(tier, a)
        return

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

    # ---- agent a stopped for 30 s ------------------------------------------------------------
    # SIGSTOP, not a restart: on the test driver the VMs live in the agent's own process (on a
    # real host libvirtd keeps them), so a restart would take them away with it.
    victim = tier.idle("main")[0]["name"]
    a.process.proc.send_signal(signal.SIGSTOP)
    down = time.time()
    log("agent a stopped (SIGSTOP)")
    tier.cli("runner", "delete", victim, parse=False)  # garm's delete meets a stopped agent
    wait_for("the delete garm made during the outage to be kept for agent a",
             lambda: tier.deferred("edge").get("a", 0) >= 1, 25, 1)
    time.sleep(max(0, 30 - (time.time() - down)))
    a.process.proc.send_signal(signal.SIGCONT)
    log("agent a back after %.1f s" % (time.time() - down))
    wait_for("pool main back to 1 idle after the outage", lambda: len(tier.idle("main")) >= 1, 90)
    wait_for("the runner deleted during the outage to leave agent a",
             lambda: victim not in a.all_instances([tier.pools["main"]]), 60)
    wait_for("the deletes kept for agent a to be carried out",
             lambda: tier.deferred("edge").get("a", 1) == 0, 60, 1)
    log("pool main whole again %.1f s after agent a came back" % (time.time() - down - 30))

    # ---- agent c back: its kept deletes are carried out --------------------------------------
    c.start()
    tier.cli("pool", "update", tier.pools["fleet"], "--min-idle-runners", "2")
    wait_for("the deletes kept for c to be carried out",
             lambda: tier.deferred("edge-fleet").get("c", 1) == 0, 90)
    check(True, "agent c back: the next calls that reached it carried out its kept deletes")

    # ---- stopped behind garm's back: its runner goes offline at GitHub ----------------------
    stopped_main = tier.idle("main")[0]["name"]
    stopped_v011 = tier.idle("v011")[0]["name"]
    for name in (stopped_main, stopped_v011):
        status, body = a.control("POST", "/v1/controllers/%s/instances/%s/stop?force=true" %
                                 (tier.controller, name))
        check(status == 200, "%s stopped behind garm's back (HTTP %d %s)" % (name, status, body))
        tier.github_test("POST", "/_test/runners/%s/offline" % name)

    gitea_runner = check_gitea_pool(tier, a)
    scale_set_pool, scale_set_runner = check_scale_set(tier, a)

    # ---- garm's reaper: every 5 minutes from the repository's pool manager start -------------
    # First round: the silent runner of pool reap is past its 1-minute bootstrap timeout.
    reap_names = {json.load(open(os.path.join(tier.tap, c["id"] + ".stdin")))["name"]
                  for c in tier.calls(provider="edge", command="CreateInstance")
                  if c["pool"] == tier.pools["reap"] and c["exit"] == 0}
    first_tick = tier.repo_created + 5 * 60
    log("waiting for garm's first reaper round (5 min after the repository was added): %.0f s" %
        max(0, first_tick - time.time()))
    wait_for("garm's reaper to delete the silent runner of pool reap",
             lambda: "reaping timed-out/failed runner" in tier.garm_log() and
             not (reap_names & set(a.all_instances([tier.pools["reap"]]))),
             max(60, first_tick - time.time() + 90), 2)
    check(True, "the bootstrap-timeout reaper deleted the runner that never reported (%s)" %
          ", ".join(sorted(reap_names)))
    # Meanwhile, scale the fleet and Gitea pools down to 0: garm takes half the surplus each
    # minute.
    tier.cli("pool", "update", tier.pools["fleet"], "--min-idle-runners", "0")
    tier.cli("pool", "update", tier.pools["gitea"], "--min-idle-runners", "0")
    scaled = time.time()
    wait_for("scale down to 0 to empty the fleet pool on agents b and c",
             lambda: not tier.runners("fleet") and not b.all_instances([tier.pools["fleet"]]) and
             not c.all_instances([tier.pools["fleet"]]), 200, 2)
    log("scale down to 0: the fleet pool's runners gone from agents b and c %.1f s after "
        "min_idle 2 -> 0" % (time.time() - scaled))
    wait_for("scale down to 0 to empty the Gitea pool",
             lambda: not tier.runners("gitea") and not a.all_instances([tier.pools["gitea"]]), 120, 2)
    check(any(r["method"] == "DELETE" and r["path"].endswith("/actions/runners/%d" % gitea_runner)
              and r["status"] == 204 for r in tier.gitea_requests()),
          "scale down: garm removed the Gitea runner (id %d) from Gitea and the guest from agent a"
          % gitea_runner)
    # Second round: an offline runner whose instance garm has not heard of for 5 minutes is
    # looked up with ListInstances and, being stopped, started again.
    second_tick = tier.repo_created + 10 * 60
    log("waiting for garm's second reaper round (10 min after the repository was added): %.0f s"
        % max(0, second_tick - time.time()))
    wait_for("garm to start the stopped instance of pool main again",
             lambda: a.all_instances([tier.pools["main"]]).get(stopped_main, {}).get("status") ==
             "running", max(60, second_tick - time.time() + 90), 2)
    check(any(c["command"] == "StartInstance" and c["instance"].endswith(
        a.all_instances([tier.pools["main"]])[stopped_main]["provider_id"]) and c["exit"] == 0
        for c in tier.calls(provider="edge")), "garm called StartInstance for it (exit 0)")
    # The v0.1.1 repository's round comes a moment after the other's (it was added after it).
    v011_lists = wait_for("garm's ListInstances for the v0.1.1 pool",
                          lambda: tier.calls(provider="edge-v011", command="ListInstances") and
                          "returned error: %!s(<nil>)" in tier.garm_log() and
                          tier.calls(provider="edge-v011", command="ListInstances"), 90, 2)
    check(v011_lists and all(c["exit"] == 0 for c in v011_lists),
          "v0.1.1: the provider's ListInstances exits 0 (%d calls)" % len(v011_lists))
    garm_bug = "returned error: %!s(<nil>)" in tier.garm_log()
    still_stopped = a.all_instances([tier.pools["v011"]]).get(stopped_v011, {}).get("status")
    log("v0.1.1: garm rejected the successful ListInstances (its own bug): %s; the instance "
        "stopped behind its back is %s" % (garm_bug, still_stopped))
    check(garm_bug, "garm's v0.1.1 ListInstances bug shows in its log (recorded as garm's)")

    # ---- the scale set after garm's consolidation (its entity worker, every 5 minutes) -------
    lists = tier.calls(provider="edge", command="ListInstances", pool=scale_set_pool)
    check(lists and all(c["exit"] == 0 for c in lists),
          "garm listed the scale set's instances by %s (%d calls, exit 0)" % (scale_set_pool, len(lists)))
    check(scale_set_runner in a.all_instances([scale_set_pool]) and scale_set_idle(tier),
          "the scale set's runner survived garm's consolidation")
    tier.cli("scaleset", "update", str(tier.scale_set), "--min-idle-runners", "0")
    wait_for("the scale set scaled down to 0", lambda: not a.all_instances([scale_set_pool]) and
             not tier.cli("scaleset", "runner", "list", str(tier.scale_set)), 120, 2)
    check(True, "scale down: the scale set's runner left agent a")

    # ---- nothing leaked, nothing duplicated --------------------------------------------------
    # Once settled: the reaper's second round may have just replaced pool reap's silent runner,
    # and garm lists the new one before its create has reached the agent.
    def same_runners(pool):
        garm_names = sorted(r["name"] for r in tier.runners(pool))
        agent_names = sorted(a.all_instances([tier.pools[pool]]))
        return garm_names if garm_names == agent_names else None

    for pool in ("main", "v011", "reap", "webhook"):
        settled = wait_for("garm's and agent a's runners of pool %s to agree" % pool,
                           lambda: same_runners(pool) is not None and [same_runners(pool)], 60, 2)
        check(settled, "pool %s: agent a holds exactly garm's runners %s" % (pool, settled[0]))
    for name in ("b", "c"):
        left = tier.agents[name].all_instances(list(tier.pools.values()))
        check(not left, "agent %s holds nothing after scale down to 0 %s" % (name, sorted(left)))
    check(not guests.errors, "every simulated guest's report was made %s" %
          list(guests.errors.values())[:3])


def main():
    garm_bin = build_garm()
    work = tempfile.mkdtemp(prefix="garm-tier.")
    tier = Tier(work, garm_bin)
    ok = False
    try:
        tier.start_fake_github()
        tier.start_fake_gitea()
        tier.start_garm()
        tier.start_agents()
        scenario(tier)
        ok = True
    except Failure as e:
        log("FAILED: %s" % e)
        if tier.guests:
            print("simulated guests' errors: %s" % list(tier.guests.errors.values())[-10:])
        if os.environ.get("GARM_TIER_HOLD"):  # to look at the processes by hand
            log("holding for %s s (GARM_TIER_HOLD)" % os.environ["GARM_TIER_HOLD"])
            time.sleep(int(os.environ["GARM_TIER_HOLD"]))
    finally:
        tier.print_calls(started_at)
        tier.stop()
        if not ok:
            tier.print_errors()
            print("work directory kept: %s" % work)
        else:
            shutil.rmtree(work, ignore_errors=True)
    if ok:
        print("garm tier: garm drove garm-edge through %d checks in %.0f s" %
              (len(checks), time.time() - started_at))
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
