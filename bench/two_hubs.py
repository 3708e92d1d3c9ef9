#!/usr/bin/env python3
"""Hubs on PostgreSQL (docs/fleet.md, "Running more than one hub"), side by side with one hub on
files, measured in one run on loopback with agents on libvirt's test driver:

  - CreateInstance through a hub on files, a hub on the database, and two hubs on the database
    in one provider entry (garm-provider-edge run as garm runs it) (bar: database <= 1.2x files);
  - a hub killed with kill -9 while garm keeps creating: the time from the kill to the first
    create served, by the other hub, against the single hub on files started again at once
    (its cold path);
  - enrolments (garm-edge-agent join, 8 at a time) and revocations (garm-edge-hub remove, one
    after another) per second, on files and on the database.

As root (PostgreSQL runs as nobody). Prints figures; fails only when a step does not work.
Usage: bench/two_hubs.py BUILD_DIR [RUNS]
"""
import concurrent.futures
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO_ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(REPO_ROOT, "tests/garm"))
sys.path.insert(0, os.path.join(REPO_ROOT, "tests/hub"))
from garm_tier_lib import Process, free_port, wait_for  # noqa: E402
from hub import AGENT, CONTROLLER, HUB, POOL, PROVIDER, RUNS  # noqa: E402  (bench/hub.py)
from hub_tier_lib import Postgres  # noqa: E402
import test_driver_host  # noqa: E402  (beside this file)


class BenchHub:
    """One garm-edge-hub on 127.0.0.1: a new CA, or a copy of `pki_from`'s pki/."""

    def __init__(self, work, name, database="", pki_from=None):
        self.dir = os.path.join(work, name)
        self.state = os.path.join(self.dir, "state")
        os.makedirs(self.dir)
        if pki_from:
            os.makedirs(self.state)
            shutil.copytree(pki_from.pki(""), self.pki(""))
        else:
            subprocess.run((HUB, "init", "--state-dir", self.state, "--dns", "localhost", "--ip",
                            "127.0.0.1"), check=True, capture_output=True)
        self.agent_port, self.provider_port = free_port(), free_port()
        self.config = os.path.join(self.dir, "hub.toml")
        with open(self.config, "w") as f:
            f.write('state_dir = "%s"\nurl = "https://127.0.0.1:%d"\n[agents]\naddress = '
                    '"127.0.0.1"\nport = %d\n[providers]\naddress = "127.0.0.1"\nport = %d\n'
                    '[[clients]]\nidentity = "garm"\ncontrollers = ["*"]\n%s'
                    % (self.state, self.agent_port, self.agent_port, self.provider_port,
                       database))
        self.process = None

    def pki(self, name):
        return os.path.join(self.state, "pki", name)

    def start(self):
        self.process = Process((HUB, "serve", "--config", self.config),
                               os.path.join(self.dir, "hub.log"))
        wait_for("the hub", lambda: self.listed() is not None, 10, 0.01)

    def kill(self):
        self.process.stop(signal.SIGKILL)

    def listed(self):
        result = subprocess.run(
            ("curl", "-sf", "--max-time", "5", "--cacert", self.pki("ca.crt"), "--cert",
             self.pki("clients/garm.crt"), "--key", self.pki("clients/garm.key"),
             "https://localhost:%d/v1/agents" % self.provider_port), capture_output=True, text=True)
        return json.loads(result.stdout)["agents"] if result.returncode == 0 else None

    def connected(self, names):
        agents = {a["name"]: a for a in self.listed() or []}
        return all(agents.get(name, {}).get("connected") for name in names)

    def hub_command(self, *arguments):
        return subprocess.run((HUB,) + arguments + ("--config", self.config), check=True,
                              capture_output=True, text=True).stdout.strip()

    def token(self, *arguments):
        return self.hub_command("token", "create", *arguments)


class Fleet:
    """Hubs sharing records (files: one hub), three agents joined at the first, and the
    provider's entry naming every hub."""

    def __init__(self, work, name, hubs):
        self.work, self.hubs, self.agents = os.path.join(work, name), hubs, []
        os.makedirs(self.work)
        for hub in hubs:
            hub.start()
        # Each hub reads the others' announcements every 2 s: agents joining later learn all.
        time.sleep(2.5 if len(hubs) > 1 else 0)
        token = hubs[0].token("--uses", "3")
        for index in range(3):
            directory = os.path.join(self.work, "agent%d" % index)
            os.makedirs(directory)
            with open(os.path.join(directory, "node.xml"), "w") as f:
                f.write(test_driver_host.NODE_XML)
            config = os.path.join(directory, "agent.toml")
            with open(config, "w") as f:
                f.write(test_driver_host.agent_toml("%s-%d" % (name, index), directory))
            subprocess.run((AGENT, "join", token, "--config", config), check=True,
                           capture_output=True)
            self.agents.append(Process((AGENT, "serve", "--config", config),
                                       os.path.join(directory, "agent.log")))
        self.names = ["%s-%d" % (name, index) for index in range(3)]
        wait_for("%s's agents connected to every hub" % name,
                 lambda: all(hub.connected(self.names) for hub in hubs), 30, 0.05)
        self.provider = os.path.join(self.work, "provider.toml")
        urls = ", ".join('"https://localhost:%d"' % hub.provider_port for hub in hubs)
        pki = hubs[0].pki
        with open(self.provider, "w") as f:
            f.write('session_dir = "%s"\n[timeouts]\nprobe_seconds = 3\n[[hubs]]\nname = "lab"\n'
                    'urls = [%s]\nca = "%s"\ncertificate = "%s"\nkey = "%s"\n'
                    % (os.path.join(self.work, "sessions"), urls, pki("ca.crt"),
                       pki("clients/garm.crt"), pki("clients/garm.key")))
        self.created = 0
        self.last_error = ""

    def timed_create(self):
        """Seconds of one CreateInstance that must succeed."""
        seconds, code = self.create()
        if code != 0:
            raise RuntimeError("CreateInstance exited %d: %s" % (code, self.last_error))
        return seconds

    def create(self):
        """One CreateInstance as garm runs it: (seconds, exit code)."""
        self.created += 1
        env = {"GARM_COMMAND": "CreateInstance", "GARM_CONTROLLER_ID": CONTROLLER,
               "GARM_POOL_ID": POOL, "GARM_PROVIDER_CONFIG_FILE": self.provider,
               "GARM_INTERFACE_VERSION": "v0.1.0"}
        started = time.perf_counter()
        result = subprocess.run((PROVIDER,), input=test_driver_host.bootstrap(
            "garm-%d" % self.created, POOL), capture_output=True, text=True, env=env)
        self.last_error = result.stderr.strip()[-300:]
        return time.perf_counter() - started, result.returncode

    def stop(self):
        for agent in self.agents:
            agent.stop(signal.SIGKILL)
        for hub in self.hubs:
            if hub.process:
                hub.process.stop()


def median_ms(samples):
    return statistics.median(samples) * 1000


def first_create_after_kill(fleet, victim, restart=False):
    """Seconds from kill -9 of `victim` to the end of the first create that succeeds, creates
    asked one after another (garm's retries); with `restart` the hub is started again at once."""
    victim.kill()
    killed = time.perf_counter()
    if restart:
        victim.start()
    while True:
        _, code = fleet.create()
        if code == 0:
            return time.perf_counter() - killed


def enrol_and_revoke_rates(hub, work, count=40):
    """Joins per second (8 at a time, each a new key and certificate) and removals per second
    (one after another, each a new CRL)."""
    token = hub.token("--uses", str(count))
    configs = []
    for index in range(count):
        directory = os.path.join(work, "join%02d" % index)
        os.makedirs(directory)
        configs.append(os.path.join(directory, "agent.toml"))
        with open(configs[-1], "w") as f:
            f.write(test_driver_host.agent_toml("joiner-%02d" % index, directory))
    started = time.perf_counter()
    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        joined = list(pool.map(lambda config: subprocess.run(
            (AGENT, "join", token, "--config", config), capture_output=True), configs))
    joins = count / (time.perf_counter() - started)
    if any(result.returncode != 0 for result in joined):
        raise RuntimeError("a join failed: %s" % next(r.stderr for r in joined if r.returncode))
    started = time.perf_counter()
    for index in range(count):
        hub.hub_command("remove", "joiner-%02d" % index)
    return joins, count / (time.perf_counter() - started)


def main():
    if os.geteuid() != 0:
        print("bench/two_hubs.py runs as root (its PostgreSQL runs as nobody)")
        return 2
    work = tempfile.mkdtemp(prefix="garm-edge-bench-two-hubs-")
    postgres = Postgres()
    fleets = []
    try:
        database = postgres.hub_database(work)
        on_files = Fleet(work, "files", [BenchHub(work, "hub-files")])
        hub_a = BenchHub(work, "hub-a", database)
        hub_b = BenchHub(work, "hub-b", database, pki_from=hub_a)
        two = Fleet(work, "db", [hub_a, hub_b])
        fleets = [on_files, two]
        one_url = os.path.join(two.work, "provider-one-url.toml")
        with open(two.provider) as f:
            text = f.read()
        with open(one_url, "w") as f:
            f.write(text.replace(', "https://localhost:%d"' % hub_b.provider_port, ""))

        print("== CreateInstance through the hub, %d each, interleaved (3 agents)" % RUNS)
        for fleet in fleets:
            fleet.create()  # TLS sessions saved
        samples = {"files": [], "database": [], "two hubs": []}
        for _ in range(RUNS):
            samples["files"].append(on_files.timed_create())
            two.provider, kept = one_url, two.provider
            samples["database"].append(two.timed_create())
            two.provider = kept
            samples["two hubs"].append(two.timed_create())
        base = median_ms(samples["files"])
        for what, runs in samples.items():
            print("  %-28s %6.1f ms (median)  = %.2fx files%s" % (
                "hub on " + what if what != "two hubs" else "two hubs on the database",
                median_ms(runs), median_ms(runs) / base, " (bar: 1.2x)" if what == "database" else ""))

        rounds = max(3, RUNS // 3)
        print("== kill -9 of a hub while garm creates: to the first create served, %d rounds"
              % rounds)
        failover = []
        for index in range(rounds):
            victim = two.hubs[index % 2]
            failover.append(first_create_after_kill(two, victim))
            victim.start()
            wait_for("the agents back", lambda: victim.connected(two.names), 20, 0.02)
        cold = []
        for _ in range(rounds):
            cold.append(first_create_after_kill(on_files, on_files.hubs[0], restart=True))
        print("  two hubs, the other serving    : %6.0f ms median, %6.0f ms worst"
              % (median_ms(failover), max(failover) * 1000))
        print("  one hub started again at once : %6.0f ms median, %6.0f ms worst (the cold path)"
              % (median_ms(cold), max(cold) * 1000))

        print("== enrolments and revocations per second (40 hosts)")
        for what, hub in (("files", on_files.hubs[0]), ("database", hub_a)):
            joins, removals = enrol_and_revoke_rates(hub, os.path.join(work, "rates-" + what))
            print("  hub on %-9s: %5.1f joins/s (8 at a time), %5.1f removals/s" % (
                what, joins, removals))
    finally:
        for fleet in fleets:
            fleet.stop()
        postgres.remove()
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
