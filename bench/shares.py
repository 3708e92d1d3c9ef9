#!/usr/bin/env python3
"""Shares of a shared fleet (docs/shares.md), measured in one run with real parts: agents on
libvirt's test driver, each its own host with 10 instance slots, driven through
`garm-provider-edge` exactly as garm runs it (one process per command, many at once).

  1. Two controllers burst at once on a 3-agent fleet whose agents give A at most 8 instances
     each (and the provider at most 20 across the fleet) and keep 3 each for B: 30 creates of
     each, 24 provider processes at once. A per-agent share is exact; the fleet quota may be
     passed by creates in flight at once (docs/shares.md), which is printed. Printed: what each got against its configured share,
     the provider's refusals, and the agents' refusals by reason (their /metrics).
  2. CreateInstance's latency with shares on against off: the same fleet shape without any
     [[quotas]], creates one at a time alternating between the two fleets (each deleted after),
     so both see the same machine. Bar: on at most 1.05x off.

Usage: bench/shares.py BUILD_DIR [ROUNDS]   (ROUNDS: creates per fleet for part 2, default 100)
"""
import concurrent.futures
import json
import os
import re
import shutil
import ssl
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO_ROOT, "tests/garm"))
from garm_tier_lib import Process, free_port, wait_for  # noqa: E402
import test_driver_host  # noqa: E402  (beside this file)

BUILD = os.path.abspath(sys.argv[1]) if len(sys.argv) > 1 else os.path.join(REPO_ROOT,
                                                                            "build/package")
ROUNDS = int(sys.argv[2]) if len(sys.argv) > 2 else 100
AGENT = os.path.join(BUILD, "agent/garm-edge-agent")
PROVIDER = os.path.join(BUILD, "provider/garm-provider-edge")
A = "aaaaaaaa-0000-4000-8000-00000000000a"
B = "bbbbbbbb-0000-4000-8000-00000000000b"
POOL = "0f1e2d3c-4b5a-4968-8776-a5b4c3d2e1f0"
SLOTS = 10          # per agent
A_MAX = 8           # per agent
B_RESERVED = 3      # per agent
A_FLEET_MAX = 20    # in the provider's config
BURST = {A: 40, B: 15}  # creates per controller: A wants more than the fleet has
AT_ONCE = 24

API_TOML = """[api]
address = "127.0.0.1"
port = %(port)d
ca = "%(pki)s/ca.crt"
certificate = "%(pki)s/agent.crt"
key = "%(pki)s/agent.key"
[[api.clients]]
identity = "garm"
controllers = ["*"]
%(shares)s"""

SHARES_TOML = """[[quotas]]
controller = "%s"
max_instances = %d
[[quotas]]
controller = "%s"
reserved_instances = %d
""" % (A, A_MAX, B, B_RESERVED)


def bootstrap(name):
    return test_driver_host.bootstrap(name, POOL)


def garm(config, controller, command, instance="", stdin=""):
    """One provider process as garm runs it: (seconds, exit code, stdout, stderr)."""
    env = {"GARM_COMMAND": command, "GARM_CONTROLLER_ID": controller, "GARM_POOL_ID": POOL,
           "GARM_PROVIDER_CONFIG_FILE": config, "GARM_INTERFACE_VERSION": "v0.1.1"}
    if instance:
        env["GARM_INSTANCE_ID"] = instance
    started = time.perf_counter()
    result = subprocess.run((PROVIDER,), input=stdin, capture_output=True, text=True, env=env)
    return time.perf_counter() - started, result.returncode, result.stdout, result.stderr


class Fleet:
    """`count` agents sharing one PKI, each its own test-driver host; `shares`: agent.toml text
    every agent gets; `fleet_quota`: the provider's [[quotas]] text."""

    def __init__(self, work, label, count, shares, fleet_quota):
        self.work = os.path.join(work, label)
        self.pki = os.path.join(self.work, "pki")
        os.makedirs(self.work)
        subprocess.run((AGENT, "pki", "init", "--dir", self.pki, "--dns", "localhost"),
                       check=True, capture_output=True)
        self.processes, self.ports = [], []
        for index in range(count):
            name = "%s-%d" % (label, index)
            directory = os.path.join(self.work, name)
            os.makedirs(directory)
            with open(os.path.join(directory, "node.xml"), "w") as f:
                f.write(test_driver_host.NODE_XML)
            port = free_port()
            config = os.path.join(directory, "agent.toml")
            with open(config, "w") as f:
                f.write(test_driver_host.agent_toml(
                    name, directory, "max_instances = %d\n" % SLOTS,
                    API_TOML % {"port": port, "pki": self.pki, "shares": shares}))
            self.processes.append(Process((AGENT, "serve", "--config", config),
                                          os.path.join(directory, "agent.log")))
            self.ports.append(port)
        self.config = os.path.join(self.work, "provider.toml")
        with open(self.config, "w") as f:
            f.write('session_dir = "%s"\n' % os.path.join(self.work, "sessions"))
            for index, port in enumerate(self.ports):
                f.write('[[agents]]\nname = "%s-%d"\nurl = "https://localhost:%d"\nca = "%s"\n'
                        'certificate = "%s"\nkey = "%s"\n'
                        % (label, index, port, os.path.join(self.pki, "ca.crt"),
                           os.path.join(self.pki, "clients/garm.crt"),
                           os.path.join(self.pki, "clients/garm.key")))
            f.write(fleet_quota)
        for port in self.ports:
            wait_for("agent on %d" % port, lambda p=port: self.metrics(p) is not None, 20, 0.05)

    def metrics(self, port):
        context = ssl.create_default_context(cafile=os.path.join(self.pki, "ca.crt"))
        context.load_cert_chain(os.path.join(self.pki, "clients/garm.crt"),
                                os.path.join(self.pki, "clients/garm.key"))
        try:
            with urllib.request.urlopen("https://localhost:%d/metrics" % port, context=context,
                                        timeout=5) as answer:
                return answer.read().decode()
        except OSError:
            return None

    def refusals(self):
        totals = {}
        pattern = re.compile(r'^garm_edge_create_refusals_total\{reason="([a-z]+)"\} (\d+)', re.M)
        for port in self.ports:
            for reason, count in pattern.findall(self.metrics(port) or ""):
                totals[reason] = totals.get(reason, 0) + int(count)
        return totals

    def held(self, controller):
        _, code, out, err = garm(self.config, controller, "ListInstances")
        if code != 0:
            raise RuntimeError("ListInstances: " + err)
        return len(json.loads(out))

    def stop(self):
        for process in self.processes:
            process.stop()


def burst(fleet):
    """BURST creates of each controller at once, in the order they came (8 of A for every 3 of
    B), AT_ONCE processes at a time."""
    jobs = []
    for index in range(max(BURST.values())):
        for controller in (A, B):
            if index < BURST[controller]:
                jobs.append((controller, "garm-%s-%d" % (controller[:1], index)))
    jobs.sort(key=lambda job: int(job[1].rsplit("-", 1)[1]) / BURST[job[0]])

    def one(job):
        controller, name = job
        seconds, code, _, err = garm(fleet.config, controller, "CreateInstance", name,
                                     bootstrap(name))
        return controller, seconds, code, err

    with concurrent.futures.ThreadPoolExecutor(max_workers=AT_ONCE) as pool:
        results = list(pool.map(one, jobs))
    refused = {}
    for controller, _, code, err in results:
        if code != 0:
            why = ("fleet quota" if "fleet quota" in err else
                   "no agent can take it" if "no agent can take" in err else err.strip()[-80:])
            key = (controller, why)
            refused[key] = refused.get(key, 0) + 1
    return results, refused


def latency(on, off, rounds):
    """One create at a time, alternating fleets, each deleted after: medians in ms."""
    times = {"on": [], "off": []}
    for index in range(rounds):
        for label, fleet in (("on", on), ("off", off)) if index % 2 == 0 else (("off", off),
                                                                                 ("on", on)):
            name = "garm-lat-%s-%d" % (label, index)
            seconds, code, out, err = garm(fleet.config, A, "CreateInstance", name,
                                           bootstrap(name))
            if code != 0:
                raise RuntimeError("create on the %s fleet: %s" % (label, err))
            times[label].append(seconds)
            garm(fleet.config, A, "DeleteInstance", json.loads(out)["provider_id"])
    return {label: statistics.median(samples) * 1000 for label, samples in times.items()}


def main():
    work = tempfile.mkdtemp(prefix="garm-edge-bench-shares-")
    fleets = []
    try:
        fleet_quota = '[[quotas]]\ncontroller = "%s"\nmax_instances = %d\n' % (A, A_FLEET_MAX)
        shared = Fleet(work, "shared", 3, SHARES_TOML, fleet_quota)
        fleets.append(shared)
        plain = Fleet(work, "plain", 3, "", "")
        fleets.append(plain)
        got, ok = {}, True
        for label, fleet in (("with shares", shared), ("without", plain)):
            started = time.time()
            results, refused = burst(fleet)
            wall = time.time() - started
            got[label] = {A: fleet.held(A), B: fleet.held(B)}
            print("burst %s: %d creates of A and %d of B at once, %d provider processes at a "
                  "time, 3 agents x %d slots (%.1f s)"
                  % (label, BURST[A], BURST[B], AT_ONCE, SLOTS, wall))
            print("  provider refusals: %s" % (
                ", ".join("%s %s: %d" % ("A" if c == A else "B", why, n)
                          for (c, why), n in sorted(refused.items())) or "none"))
            print("  agents' refusals by reason: %s" % json.dumps(fleet.refusals(),
                                                                  sort_keys=True))
            for controller in (A, B):
                created = sorted(s for c, s, code, _ in results if c == controller and code == 0)
                if created:
                    print("  %s creates: p50 %.0f ms, p99 %.0f ms" % (
                        "A" if controller == A else "B", statistics.median(created) * 1000,
                        created[int(0.99 * (len(created) - 1))] * 1000))
            for controller in (A, B):
                garm(fleet.config, controller, "RemoveAllInstances")
        print("  %-4s %-50s %-13s %s" % ("", "configured share", "with shares", "without"))
        print("  %-4s %-50s %-13d %d" % ("A", "at most %d per agent, %d across the fleet"
                                         % (A_MAX, A_FLEET_MAX), got["with shares"][A],
                                         got["without"][A]))
        print("  %-4s %-50s %-13d %d" % ("B", "%d per agent kept for it (at least %d)"
                                         % (B_RESERVED, 3 * B_RESERVED), got["with shares"][B],
                                         got["without"][B]))
        held = got["with shares"]
        # Exact: each agent's quota and reservation (A at most SLOTS - B_RESERVED per agent).
        ok = (held[A] <= 3 * min(A_MAX, SLOTS - B_RESERVED) and held[B] >= 3 * B_RESERVED and
              held[A] + held[B] <= 3 * SLOTS)
        print("  per-agent shares held: %s; A past its fleet quota by %d (creates in flight at "
              "once)" % ("yes" if ok else "NO", max(0, held[A] - A_FLEET_MAX)))
        medians = latency(shared, plain, ROUNDS)
        ratio = medians["on"] / medians["off"]
        print("create latency, one at a time, %d each: shares on %.1f ms, off %.1f ms: %.3fx "
              "(bar 1.05x)" % (ROUNDS, medians["on"], medians["off"], ratio))
        return 0 if ok else 1
    finally:
        for fleet in fleets:
            fleet.stop()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
