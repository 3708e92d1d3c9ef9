#!/usr/bin/env python3
"""The hub's figures, side by side with the direct path, measured in one run on loopback:

  - CreateInstance through the hub against direct, on the same 8 agents (probe all, place,
    create; garm-provider-edge run as garm runs it) (bar: at most 1.2x direct);
  - ListInstances of 1,000 instances over 8 agents through the hub against direct (bar: 1.0x);
  - 64 agents enrolled and connected: the hub's RSS and CPU while idle, and the time until all
    64 are connected again after the hub restarts (bar: 5 s).

Agents run on libvirt's test driver, each its own host. Prints figures; fails only when a step
does not work. Usage: bench/hub.py BUILD_DIR [RUNS]
"""
import http.client
import json
import os
import shutil
import signal
import ssl
import statistics
import subprocess
import sys
import tempfile
import time

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO_ROOT, "tests/garm"))
from garm_tier_lib import Process, free_port, wait_for  # noqa: E402
import test_driver_host  # noqa: E402  (beside this file)

BUILD = os.path.abspath(sys.argv[1]) if len(sys.argv) > 1 else os.path.join(REPO_ROOT, "build/package")
RUNS = int(sys.argv[2]) if len(sys.argv) > 2 else 15
HUB = os.path.join(BUILD, "hub/garm-edge-hub")
AGENT = os.path.join(BUILD, "agent/garm-edge-agent")
PROVIDER = os.path.join(BUILD, "provider/garm-provider-edge")
CONTROLLER = "9dcf590a-1192-4a9c-b3e4-e0902974c2c0"
POOL = "0f1e2d3c-4b5a-4968-8776-a5b4c3d2e1f0"

API_TOML = """[api]
address = "127.0.0.1"
port = %(port)d
ca = "%(dir)s/state/hub/ca.crt"
certificate = "%(dir)s/state/hub/agent.pem"
key = "%(dir)s/state/hub/agent.pem"
[[api.clients]]
identity = "garm"
controllers = ["%(controller)s"]
"""


def bootstrap(name):
    return test_driver_host.bootstrap(name, POOL)


def garm(config, command, stdin=""):
    env = {"GARM_COMMAND": command, "GARM_CONTROLLER_ID": CONTROLLER, "GARM_POOL_ID": POOL,
           "GARM_PROVIDER_CONFIG_FILE": config, "GARM_INTERFACE_VERSION": "v0.1.0"}
    started = time.perf_counter()
    result = subprocess.run((PROVIDER,), input=stdin, capture_output=True, text=True, env=env)
    if result.returncode != 0:
        raise RuntimeError("%s exited %d: %s" % (command, result.returncode, result.stderr))
    return time.perf_counter() - started, result.stdout


def median_ms(samples):
    return statistics.median(samples) * 1000


class Bench:
    def __init__(self, work):
        self.work = work
        self.state = os.path.join(work, "hub")
        subprocess.run((HUB, "init", "--state-dir", self.state, "--dns", "localhost", "--ip",
                        "127.0.0.1"), check=True, capture_output=True)
        self.agent_port, self.provider_port = free_port(), free_port()
        self.hub_config = os.path.join(work, "hub.toml")
        with open(self.hub_config, "w") as f:
            f.write('state_dir = "%s"\nurl = "https://127.0.0.1:%d"\n[agents]\naddress = '
                    '"127.0.0.1"\nport = %d\n[providers]\naddress = "127.0.0.1"\nport = %d\n'
                    '[[clients]]\nidentity = "garm"\ncontrollers = ["*"]\n'
                    % (self.state, self.agent_port, self.agent_port, self.provider_port))
        self.hub = None
        self.agents = {}
        self.processes = []
        self.token = None

    def pki(self, name):
        return os.path.join(self.state, "pki", name)

    def start_hub(self):
        self.hub = Process((HUB, "serve", "--config", self.hub_config),
                           os.path.join(self.work, "hub.log"))
        wait_for("the hub", lambda: self.hub_agents() is not None, 10, 0.02)

    def hub_agents(self):
        context = ssl.create_default_context(cafile=self.pki("ca.crt"))
        context.load_cert_chain(self.pki("clients/garm.crt"), self.pki("clients/garm.key"))
        try:
            conn = http.client.HTTPSConnection("localhost", self.provider_port, context=context,
                                               timeout=5)
            conn.request("GET", "/v1/agents")
            return json.loads(conn.getresponse().read())["agents"]
        except (OSError, ValueError):
            return None

    def connected(self):
        agents = self.hub_agents() or []
        return sum(1 for a in agents if a.get("connected"))

    def add_agent(self, name, direct):
        directory = os.path.join(self.work, name)
        os.makedirs(directory)
        with open(os.path.join(directory, "node.xml"), "w") as f:
            f.write(test_driver_host.NODE_XML)
        port = free_port() if direct else 0
        api = API_TOML % {"port": port, "dir": directory, "controller": CONTROLLER} if direct else ""
        config = os.path.join(directory, "agent.toml")
        with open(config, "w") as f:
            f.write(test_driver_host.agent_toml(name, directory, rest=api))
        # A host garm reaches directly gets its name and DNS name from a token made for it.
        token = self.create_token("--name", name, "--dns", "localhost") if direct else self.token
        subprocess.run((AGENT, "join", token, "--config", config), check=True,
                       capture_output=True)
        self.processes.append(Process((AGENT, "serve", "--config", config),
                                      os.path.join(directory, "agent.log")))
        self.agents[name] = port

    def create_token(self, *arguments):
        return subprocess.run((HUB, "token", "create", "--config", self.hub_config) + arguments,
                              check=True, capture_output=True, text=True).stdout.strip()

    def provider_configs(self, names):
        direct = os.path.join(self.work, "direct.toml")
        through_hub = os.path.join(self.work, "through-hub.toml")
        with open(direct, "w") as f:
            f.write('session_dir = "%s"\n' % os.path.join(self.work, "sessions-direct"))
            for name in names:
                f.write('[[agents]]\nname = "%s"\nurl = "https://localhost:%d"\nca = "%s"\n'
                        'certificate = "%s"\nkey = "%s"\n'
                        % (name, self.agents[name], self.pki("ca.crt"), self.pki("clients/garm.crt"),
                           self.pki("clients/garm.key")))
        with open(through_hub, "w") as f:
            f.write('session_dir = "%s"\n[[hubs]]\nname = "hub"\nurl = "https://localhost:%d"\n'
                    'ca = "%s"\ncertificate = "%s"\nkey = "%s"\n'
                    % (os.path.join(self.work, "sessions-hub"), self.provider_port,
                       self.pki("ca.crt"), self.pki("clients/garm.crt"), self.pki("clients/garm.key")))
        return direct, through_hub

    def fill(self, name, count):
        """`count` instances on one agent through its own API, on one keep-alive connection."""
        context = ssl.create_default_context(cafile=self.pki("ca.crt"))
        context.load_cert_chain(self.pki("clients/garm.crt"), self.pki("clients/garm.key"))
        conn = http.client.HTTPSConnection("localhost", self.agents[name], context=context,
                                           timeout=30)
        for index in range(count):
            conn.request("POST", "/v1/controllers/%s/instances" % CONTROLLER,
                         body=bootstrap("garm-%s-%d" % (name, index)),
                         headers={"Content-Type": "application/json"})
            response = conn.getresponse()
            response.read()
            if response.status != 200:
                raise RuntimeError("create on %s: HTTP %d" % (name, response.status))
        conn.close()

    def stop(self):
        for process in self.processes:
            process.stop(signal.SIGKILL)
        if self.hub:
            self.hub.stop()


def cpu_seconds(pid):
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def rss_mib(pid):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def main():
    work = tempfile.mkdtemp(prefix="garm-edge-bench-hub-")
    bench = Bench(work)
    try:
        bench.start_hub()
        bench.token = bench.create_token("--uses", "100")
        names = ["rack%d" % i for i in range(1, 9)]
        for name in names:
            bench.add_agent(name, direct=True)
        wait_for("8 agents connected", lambda: bench.connected() == 8, 60, 0.1)
        for name in names:  # until each API listens
            wait_for(name, lambda n=name: bench.fill(n, 0) is None, 30, 0.1)
        direct, through_hub = bench.provider_configs(names)

        print("== CreateInstance through the hub against direct, 8 agents, %d each, interleaved"
              % RUNS)
        garm(direct, "CreateInstance", bootstrap("garm-warm-d"))  # TLS sessions saved
        garm(through_hub, "CreateInstance", bootstrap("garm-warm-h"))
        create = {"direct": [], "hub": []}
        for run in range(RUNS):
            create["direct"].append(garm(direct, "CreateInstance", bootstrap("garm-d%d" % run))[0])
            create["hub"].append(garm(through_hub, "CreateInstance", bootstrap("garm-h%d" % run))[0])
        d, h = median_ms(create["direct"]), median_ms(create["hub"])
        print("  direct     : %6.1f ms (median)" % d)
        print("  via the hub: %6.1f ms (median)  = %.2fx direct (bar: 1.2x)" % (h, h / d))

        print("== ListInstances of 1,000 over 8 agents through the hub against direct")
        existing = len(json.loads(garm(direct, "ListInstances")[1]))
        per_agent = (1000 - existing + 7) // 8
        for name in names:
            bench.fill(name, per_agent)
        total = len(json.loads(garm(direct, "ListInstances")[1]))
        listed_via_hub = len(json.loads(garm(through_hub, "ListInstances")[1]))
        print("  instances listed: %d direct, %d via the hub" % (total, listed_via_hub))
        assert total == listed_via_hub >= 1000
        listing = {"direct": [], "hub": []}
        for _ in range(RUNS):
            listing["direct"].append(garm(direct, "ListInstances")[0])
            listing["hub"].append(garm(through_hub, "ListInstances")[0])
        d, h = median_ms(listing["direct"]), median_ms(listing["hub"])
        print("  direct     : %6.1f ms (median)" % d)
        print("  via the hub: %6.1f ms (median)  = %.2fx direct (bar: 1.0x)" % (h, h / d))

        if os.environ.get("BENCH_HUB_SKIP_64"):
            return
        print("== 64 agents enrolled and connected")
        for index in range(9, 65):
            bench.add_agent("lab%02d" % index, direct=False)
        wait_for("64 agents connected", lambda: bench.connected() == 64, 120, 0.2)
        time.sleep(2)
        pid = bench.hub.proc.pid
        cpu_before, wall_before = cpu_seconds(pid), time.time()
        time.sleep(10)
        cpu = (cpu_seconds(pid) - cpu_before) / (time.time() - wall_before) * 100
        tunnels = sum(a["tunnels"] for a in bench.hub_agents())
        print("  hub idle: RSS %.1f MiB, CPU %.2f %% of one core over 10 s, %d tunnels open"
              % (rss_mib(pid), cpu, tunnels))
        bench.hub.stop()
        restarted = time.time()
        bench.start_hub()
        wait_for("all 64 back", lambda: bench.connected() == 64, 60, 0.05)
        print("  all 64 connected again %.2f s after the hub restarted (bar: 5 s)"
              % (time.time() - restarted))
        agent_rss = [rss_mib(p.proc.pid) for p in bench.processes]
        print("  (an agent on the test driver: RSS %.1f MiB median)" % statistics.median(agent_rss))
    finally:
        bench.stop()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
