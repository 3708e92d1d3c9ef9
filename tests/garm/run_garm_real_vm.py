#!/usr/bin/env python3
"""garm itself creates real QEMU guests through the fleet path, for a GitHub and a Gitea pool,
and reports both runners idle.

Run by run_garm_real_vm.sh after tests/system/vm_fixture.sh has made the host (libvirtd, the
Debian 12 cloud-init image, a NAT network) and written the agent's config. garm (with its fake
GitHub on loopback) gets one provider entry of two agents: the fixture's and one whose host is
down, so placement probes both. The pool's guest boots, fetches its seed, runs garm's own install
template through the agent's relay (the runner archive from the fake GitHub, served by the
agent's cache; config.sh and run.sh stand in for GitHub's runner) and garm shows the runner idle.
The Gitea pool's guest, at the same time, runs garm's Gitea template: it downloads gitea-runner
(a stand-in) from the fake Gitea's releases on the NAT gateway, registers with the token garm
asked Gitea for, starts it under systemd and reports idle. Then garm deletes both and nothing of
them is left on the host.

Usage: run_garm_real_vm.py BUILD_DIR WORK_DIR GARM_BIN_DIR
"""
import json
import os
import re
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from garm_tier_lib import (AGENT_ENTRY, Failure, GarmSite, Process, free_port, log,  # noqa: E402
                           wait_for)

BUILD, WORK, GARM_BIN = (os.path.abspath(a) for a in sys.argv[1:4])
DEADLINE = int(os.environ.get("GARM_EDGE_VM_DEADLINE", "900"))


def virsh(*args):
    return subprocess.run(["virsh", "-q", "-c", "qemu:///system", *args], stdout=subprocess.PIPE,
                          stderr=subprocess.DEVNULL, text=True, timeout=60).stdout


def start_agent(controller):
    """The fixture's agent, serving garm's controller (known only once garm is up)."""
    config = os.path.join(WORK, "agent.toml")
    text = open(config).read()
    text = re.sub(r'controllers = \["[0-9a-f-]+"\]', 'controllers = ["%s"]' % controller, text)
    open(config, "w").write(text)
    ready = os.path.join(WORK, "agent.ready")
    agent = Process([os.path.join(BUILD, "agent/garm-edge-agent"), "serve", "--config", config,
                     "--ready-file", ready], os.path.join(WORK, "agent.log"))
    fields = wait_for("the agent to be ready", lambda: os.path.exists(ready) and dict(
        line.split("=", 1) for line in open(ready).read().split() if "=" in line), 120, 0.1)
    return agent, int(fields["api_port"])


def leftovers(domain_prefix, name):
    found = []
    if any(d.startswith(domain_prefix) for d in virsh("list", "--all", "--name").split()):
        found.append("domain")
    pool_dir = os.environ["pool_dir"]
    if any(name in f for f in os.listdir(pool_dir)):
        found.append("overlay")
    if subprocess.run(["grep", "-rqs", '"%s"' % name, os.path.join(WORK, "state")]).returncode == 0:
        found.append("record")
    return found


def wait_for_idle(site, pool, created):
    """garm shows the pool's runner idle, its install template having reported through the
    agent's relay; returns the runner's name."""
    idle = wait_for("garm to show the real guest's runner of pool %s idle" % pool,
                    lambda: site.idle(pool), DEADLINE, 5)
    runner = idle[0]
    name = runner["name"]
    log("garm shows %s (pool %s) idle %.0f s after the pools were created" %
        (name, pool, time.time() - created))
    print("  garm's view: status %s, runner_status %s, agent_id %s, provider_id %s" % (
        runner.get("status"), runner.get("runner_status"), runner.get("agent_id"),
        runner.get("provider_id")))
    agent_log = open(os.path.join(WORK, "agent.log"), errors="replace").read()
    print("  what garm's install template reported through the relay:")
    for line in agent_log.splitlines():
        if 'instance="%s"' % name in line and "event=guest-" in line:
            print("    " + line.split("event=", 1)[1][:160])
    for status in ("installing", "idle"):
        if "event=guest-%s instance=\"%s\"" % (status, name) not in agent_log:
            raise Failure("the agent's relay did not carry the guest's %s report" % status)
    return name


def main():
    site = GarmSite(WORK, GARM_BIN, os.path.join(BUILD, "provider/garm-provider-edge"),
                    [("edge", "v0.1.0")])
    agent = None
    ok = False
    try:
        site.start_fake_github()
        site.start_fake_gitea(os.environ["gateway"])  # the guest registers there itself
        site.no_proxy = os.environ["gateway"]
        site.start_garm()
        open(os.path.join(WORK, "garm-controller"), "w").write(site.controller)
        agent, api_port = start_agent(site.controller)
        pki = os.path.join(WORK, "pki")
        with open(site.provider_config("edge"), "w") as f:
            f.write('session_dir = "%s"\n' % os.path.join(WORK, "sessions"))
            f.write(AGENT_ENTRY % {"name": "vm", "port": api_port, "pki": pki})
            f.write(AGENT_ENTRY % {"name": "down", "port": free_port(), "pki": pki})
        site.add_github()
        site.add_gitea()
        created = time.time()
        site.add_pool(site.add_repo("repo"), "vm", "edge", 1, 1, 20)
        site.add_pool(site.add_repo("gitea-repo", "gitea"), "gitea", "edge", 1, 1, 20)
        log("pools created: garm creates a GitHub and a Gitea runner on real QEMU guests "
            "(deadline %d s)" % DEADLINE)
        names = {pool: wait_for_idle(site, pool, created) for pool in ("vm", "gitea")}
        registered = [r for r in site.gitea_requests() if r["path"] == "/_test/register"]
        if not registered:
            raise Failure("the Gitea guest's gitea-runner never registered at the fake Gitea")
        log("the Gitea guest downloaded gitea-runner from the endpoint's releases and registered")
        creates = site.calls(command="CreateInstance")
        if not creates or not all(c["exit"] == 0 for c in creates):
            raise Failure("a CreateInstance failed: %s" % creates)

        # garm deletes them: nothing of them is left.
        for pool, name in names.items():
            site.cli("pool", "update", site.pools[pool], "--min-idle-runners", "0",
                     "--max-runners", "0")
            site.cli("runner", "delete", name, parse=False)
        deleted = time.time()
        for pool, name in names.items():
            prefix = "garm-edge-%s-%s" % (site.controller, name)
            wait_for("garm's delete to leave nothing of %s" % name,
                     lambda: not site.runners(pool) and not leftovers(prefix, name), 180, 2)
        log("deleted by garm: domains, overlays and records gone %.1f s after `garm-cli runner "
            "delete`" % (time.time() - deleted))
        ok = True
    except Failure as e:
        log("FAILED: %s" % e)
    finally:
        site.print_calls(site.calls()[0]["started"] / 1000 if site.calls() else time.time())
        if agent:
            agent.stop()
        site.stop()
        if not ok:
            site.print_errors()
            for line in open(os.path.join(WORK, "agent.log"), errors="replace").read().splitlines()[-40:]:
                print("agent: " + line[:300])
    if ok:
        print("garm real-VM tier: garm showed real guests' runners idle (GitHub and Gitea) and "
              "deleted them cleanly")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
