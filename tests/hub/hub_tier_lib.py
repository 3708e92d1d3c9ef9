"""What the hub tier's phases share (tests/hub/run_hub_tier.py): the namespaces, the hub, the
agents and the provider as real processes, a temporary PostgreSQL, and the checks and figures
the tier prints."""
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO_ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(REPO_ROOT, "tests/garm"))
from garm_tier_lib import Failure, Process, free_port, log, wait_for  # noqa: E402

BUILD = os.path.abspath(sys.argv[1]) if len(sys.argv) > 1 else os.path.join(REPO_ROOT, "build/debug")
HUB = os.path.join(BUILD, "hub/garm-edge-hub")
AGENT = os.path.join(BUILD, "agent/garm-edge-agent")
PROVIDER = os.path.join(BUILD, "provider/garm-provider-edge")
CONTROLLER = "5b9b7a3e-2f0c-4e43-9d61-3d3f4a0c1a01"
POOL_AMD = "5b9b7a3e-2f0c-4e43-9d61-3d3f4a0c1b01"
POOL_ARM = "5b9b7a3e-2f0c-4e43-9d61-3d3f4a0c1b02"
HUB_IP, ROUTER_IP = "10.77.0.1", "10.77.0.2"
TAG = "ge%d" % (os.getpid() % 10000)  # namespace and interface names of this run
checks = []
figures = []


def check(condition, what):
    checks.append((bool(condition), what))
    log(("ok: " if condition else "FAILED: ") + what)
    if not condition:
        raise Failure(what)


def eventually(predicate, timeout=20, interval=0.25):
    """Whether `predicate` holds within `timeout`: for a check on what a background process
    (Prometheus, a hub's watcher) shows only after its next round."""
    try:
        return wait_for("a condition", predicate, timeout, interval)
    except Failure:
        return False


def run(*argv, namespace=None, check_rc=True, capture=True):
    if namespace:
        argv = ("ip", "netns", "exec", namespace) + argv
    result = subprocess.run(argv, capture_output=capture, text=True)
    if check_rc and result.returncode != 0:
        raise Failure("%s: exit %d: %s" % (" ".join(argv), result.returncode, result.stderr))
    return result


class Network:
    """The router namespace and one namespace per NAT'd agent."""

    def __init__(self, agents):
        self.router = TAG + "-nat"
        self.namespaces = {name: "%s-%s" % (TAG, name) for name in agents}
        run("ip", "netns", "add", self.router)
        run("ip", "link", "add", TAG + "-hub", "type", "veth", "peer", "name", "up0", "netns",
            self.router)
        run("ip", "addr", "add", HUB_IP + "/24", "dev", TAG + "-hub")
        run("ip", "link", "set", TAG + "-hub", "up")
        for command in (("ip", "addr", "add", ROUTER_IP + "/24", "dev", "up0"),
                        ("ip", "link", "set", "up0", "up"), ("ip", "link", "set", "lo", "up"),
                        ("sysctl", "-qw", "net.ipv4.ip_forward=1"),
                        ("iptables", "-t", "nat", "-A", "POSTROUTING", "-o", "up0", "-j",
                         "MASQUERADE"),
                        ("iptables", "-A", "FORWARD", "-i", "up0", "-m", "conntrack", "--ctstate",
                         "ESTABLISHED,RELATED", "-j", "ACCEPT"),
                        ("iptables", "-A", "FORWARD", "-i", "up0", "-j", "DROP")):
            run(*command, namespace=self.router)
        for index, (name, namespace) in enumerate(self.namespaces.items(), start=1):
            run("ip", "netns", "add", namespace)
            run("ip", "link", "add", "lan%d" % index, "netns", self.router, "type", "veth", "peer",
                "name", "eth0", "netns", namespace)
            run("ip", "addr", "add", "10.78.%d.1/24" % index, "dev", "lan%d" % index,
                namespace=self.router)
            run("ip", "link", "set", "lan%d" % index, "up", namespace=self.router)
            for command in (("ip", "addr", "add", "10.78.%d.2/24" % index, "dev", "eth0"),
                            ("ip", "link", "set", "eth0", "up"), ("ip", "link", "set", "lo", "up"),
                            ("ip", "route", "add", "default", "via", "10.78.%d.1" % index)):
                run(*command, namespace=namespace)
        # The hub's side gets the best chance there is to reach an agent: a route into the LAN.
        run("ip", "route", "add", "10.78.0.0/16", "via", ROUTER_IP)

    def black_hole(self, name, on):
        """Drops everything of one agent at the router, silently, both ways."""
        address = "10.78.%d.2" % (list(self.namespaces).index(name) + 1)
        for rule in (("-s", address), ("-d", address)):
            run("iptables", "-I" if on else "-D", "FORWARD", *rule, "-j", "DROP",
                namespace=self.router)

    def remove(self):
        run("ip", "route", "del", "10.78.0.0/16", check_rc=False)
        run("ip", "link", "del", TAG + "-hub", check_rc=False)
        for namespace in list(self.namespaces.values()) + [self.router]:
            run("ip", "netns", "del", namespace, check_rc=False)


AGENT_TOML = '''[agent]
id = "%(name)s"
state_dir = "%(state)s"
reconcile_interval_seconds = 5
[libvirt]
uri = "test://%(fixture)s"
storage_pool = "edge-pool"
network = "edge-net"
[capacity]
cpu_overcommit = 100
memory_overcommit = 100
reserved_memory_mib = 0
[[images]]
name = "debian-12"
base_volume = "debian-12.qcow2"
os_name = "debian"
os_version = "12"
arch = "%(arch)s"
[[flavors]]
name = "small"
vcpus = 1
memory_mib = 512
disk_gib = 4
%(api)s'''

DIRECT_API = '''[api]
address = "127.0.0.1"
port = %(port)d
ca = "%(state)s/hub/ca.crt"
certificate = "%(state)s/hub/agent.pem"
key = "%(state)s/hub/agent.pem"
[[api.clients]]
identity = "garm"
controllers = ["%(controller)s"]
[[api.clients]]
identity = "ops"
controllers = ["*"]
'''


class EdgeAgent:
    def __init__(self, work, name, arch, namespace=None, api_port=None):
        self.name, self.namespace, self.api_port = name, namespace, api_port
        self.dir = os.path.join(work, name)
        os.makedirs(self.dir)
        fixture = os.path.join(self.dir, "host.xml")
        shutil.copy(os.path.join(REPO_ROOT, "tests/data",
                                 "fleet-arm.xml" if arch == "arm64" else "api.xml"), fixture)
        self.state = os.path.join(self.dir, "state")
        api = DIRECT_API % {"port": api_port, "state": self.state,
                            "controller": CONTROLLER} if api_port else ""
        self.config = os.path.join(self.dir, "agent.toml")
        with open(self.config, "w") as f:
            f.write(AGENT_TOML % {"name": name, "state": self.state, "fixture": fixture,
                                  "arch": arch, "api": api})
        self.process = None

    def argv(self, *arguments):
        prefix = ("ip", "netns", "exec", self.namespace) if self.namespace else ()
        return prefix + (AGENT,) + arguments

    def join(self, token, *extra):
        return subprocess.run(self.argv("join", token, "--config", self.config, *extra),
                              capture_output=True, text=True, timeout=60)

    def start(self):
        self.process = Process(self.argv("serve", "--config", self.config),
                               os.path.join(self.dir, "agent.log"))

    def stop(self, sig=signal.SIGTERM):
        self.process.stop(sig)

    def log_text(self):
        path = os.path.join(self.dir, "agent.log")
        return open(path, errors="replace").read() if os.path.exists(path) else ""


class Hub:
    """garm-edge-hub on HUB_IP. `pki_from`: a second hub of the same fleet, with a copy of that
    hub's pki/ (as the operator makes it); `database`: hub.toml's [database] lines."""

    def __init__(self, work, name="hub", pki_from=None, database=""):
        self.dir = os.path.join(work, name)
        self.state = os.path.join(self.dir, "state")
        self.pki_from = pki_from
        os.makedirs(self.dir)
        self.make_state()
        self.agent_port, self.provider_port = free_port(), free_port()
        self.url = "https://%s:%d" % (HUB_IP, self.agent_port)
        self.config = os.path.join(self.dir, "hub.toml")
        with open(self.config, "w") as f:
            f.write('state_dir = "%s"\nurl = "%s"\n[agents]\naddress = "%s"\nport = %d\n'
                    '[providers]\naddress = "127.0.0.1"\nport = %d\n'
                    # Renewals at once (not after two thirds of 30 days), and then a short
                    # interval: the tier sees both the renewal and its rate limit.
                    '[certificates]\nrenewal_window = 1.0\nmin_renewal_interval_seconds = 20\n'
                    '[[clients]]\nidentity = "garm"\ncontrollers = ["%s"]\n%s'
                    % (self.state, self.url, HUB_IP, self.agent_port, self.provider_port,
                       CONTROLLER, database))
        self.process = None

    def make_state(self):
        if self.pki_from:
            os.makedirs(self.state)
            shutil.copytree(self.pki_from.pki(""), os.path.join(self.state, "pki"))
        else:
            run(HUB, "init", "--state-dir", self.state, "--dns", "localhost", "--ip", HUB_IP,
                "--ip", "127.0.0.1")

    def start(self):
        self.process = Process((HUB, "serve", "--config", self.config),
                               os.path.join(self.dir, "hub.log"))
        wait_for("the hub's port", lambda: port_open("127.0.0.1", self.provider_port), 10, 0.05)

    def token(self, *arguments):
        return run(HUB, "token", "create", "--config", self.config, *arguments).stdout.strip()

    def cli(self, *arguments):
        return run(HUB, *arguments, "--config", self.config, check_rc=False)

    def pki(self, name):
        return os.path.join(self.state, "pki", name)

    def agents(self):
        """The hub's own list, as the provider gets it."""
        import http.client
        import ssl
        context = ssl.create_default_context(cafile=self.pki("ca.crt"))
        context.load_cert_chain(self.pki("clients/garm.crt"), self.pki("clients/garm.key"))
        conn = http.client.HTTPSConnection("localhost", self.provider_port, context=context,
                                           timeout=5)
        try:
            conn.request("GET", "/v1/agents")
            return {a["name"]: a for a in json.loads(conn.getresponse().read())["agents"]}
        finally:
            conn.close()

    def relay(self, body):
        """POST /v1/relay as garm; the framed answer's parts (agent names)."""
        import http.client
        import ssl
        context = ssl.create_default_context(cafile=self.pki("ca.crt"))
        context.load_cert_chain(self.pki("clients/garm.crt"), self.pki("clients/garm.key"))
        conn = http.client.HTTPSConnection("localhost", self.provider_port, context=context,
                                           timeout=30)
        try:
            conn.request("POST", "/v1/relay", json.dumps(body))
            answer = conn.getresponse()
            text = answer.read().decode(errors="replace")
            return answer.status, [line.split(" ")[0] for line in text.split("\n")[1:]
                                   if line.startswith("a") and " " in line]
        finally:
            conn.close()

    def rss_mib(self):
        for line in open("/proc/%d/status" % self.process.proc.pid):
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024.0
        return 0.0

    def connected(self, name):
        try:
            return self.agents().get(name, {}).get("connected", False)
        except (OSError, ValueError):
            return False


def port_open(host, port, timeout=0.5):
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


class Provider:
    """garm-provider-edge run as garm runs it: a clean environment, the command in it. It reads
    the hub's CRL file itself (garm's host is the hub's) and pins the direct agent's name."""

    def __init__(self, work, hub, direct, name="provider.toml", hubs=None):
        """`hubs`: the hubs of one database, one [[hubs]] entry with their URLs (else `hub`)."""
        hubs = hubs or [hub]
        self.config = os.path.join(work, name)
        with open(self.config, "w") as f:
            f.write('placement = "spread"\nsession_dir = "%s"\ncrl = "%s"\n'
                    'require_host_identity = true\n[timeouts]\nprobe_seconds = 3\n'
                    'request_seconds = 15\ncreate_seconds = 30\n'
                    % (os.path.join(work, "sessions"), hub.pki("crl.pem")))
            if direct:
                f.write('[[agents]]\nname = "%s"\nurl = "https://localhost:%d"\nca = "%s"\n'
                        'certificate = "%s"\nkey = "%s"\n'
                        % (direct.name, direct.api_port, hub.pki("ca.crt"),
                           hub.pki("clients/garm.crt"), hub.pki("clients/garm.key")))
            urls = ['"https://localhost:%d"' % h.provider_port for h in hubs]
            where = "url = %s" % urls[0] if len(urls) == 1 else "urls = [%s]" % ", ".join(urls)
            f.write('[[hubs]]\nname = "lab"\n%s\nca = "%s"\ncertificate = "%s"\nkey = "%s"\n'
                    % (where, hub.pki("ca.crt"), hub.pki("clients/garm.crt"),
                       hub.pki("clients/garm.key")))

    def call(self, command, stdin="", instance=None, pool=None, timeout=120):
        env = {"GARM_COMMAND": command, "GARM_CONTROLLER_ID": CONTROLLER,
               "GARM_PROVIDER_CONFIG_FILE": self.config, "GARM_INTERFACE_VERSION": "v0.1.0"}
        if instance:
            env["GARM_INSTANCE_ID"] = instance
        if pool:
            env["GARM_POOL_ID"] = pool
        started = time.time()
        result = subprocess.run((PROVIDER,), input=stdin, capture_output=True, text=True, env=env,
                                timeout=timeout)
        result.seconds = time.time() - started
        return result

    def create(self, name, pool=POOL_AMD, arch="amd64"):
        bootstrap = {"name": name, "tools": [], "repo_url": "https://github.com/o/r",
                     "callback-url": "https://garm.example/api/v1/callbacks",
                     "metadata-url": "https://garm.example/api/v1/metadata",
                     "instance-token": "token", "os_type": "linux", "arch": arch,
                     "flavor": "small", "image": "debian-12", "labels": ["edge"],
                     "pool_id": pool}
        return self.call("CreateInstance", json.dumps(bootstrap))

    def instances(self, pool=POOL_AMD):
        result = self.call("ListInstances", pool=pool)
        if result.returncode != 0:
            raise Failure("ListInstances exited %d: %s" % (result.returncode, result.stderr))
        return {i["name"]: i for i in json.loads(result.stdout)}


def agent_of(created):
    return json.loads(created.stdout)["provider_id"].split(":")[0]


def curl_status(url, ca, certificate, key):
    """The HTTP status curl gets with that client certificate; 0 when TLS refused it."""
    result = subprocess.run(("curl", "-s", "-o", "/dev/null", "-w", "%{http_code}", "--max-time",
                             "5", "--cacert", ca, "--cert", certificate, "--key", key, url),
                            capture_output=True, text=True)
    return int(result.stdout or "0")


PG_BIN = "/usr/lib/postgresql/15/bin"


class Postgres:
    """A temporary cluster of Debian's binaries, run as nobody (PostgreSQL refuses root), on
    127.0.0.1 with SCRAM passwords and a unix socket in its own directory: no system service."""

    def __init__(self):
        # Its own directory: the tier's work directory is root's alone (0700).
        self.dir = tempfile.mkdtemp(prefix="garm-edge-hub-postgres-")
        self.data = os.path.join(self.dir, "data")
        os.chown(self.dir, 65534, 65534)
        self.port = free_port()
        self.owner(PG_BIN + "/initdb", "-D", self.data, "-U", "postgres", "-E", "UTF8",
                   "--no-sync", "-A", "trust")
        with open(os.path.join(self.data, "pg_hba.conf"), "w") as f:
            f.write("local all all trust\nhost all all 127.0.0.1/32 scram-sha-256\n")
        self.start()
        self.sql("CREATE ROLE garm_edge_hub LOGIN PASSWORD 'hub-secret'")
        self.sql("CREATE DATABASE garm_edge OWNER garm_edge_hub")

    def owner(self, *argv, check_rc=True):
        return run("runuser", "-u", "nobody", "--", *argv, check_rc=check_rc)

    def hub_database(self, directory):
        """hub.toml's [database] lines for this cluster, its password in a 0600 file of
        `directory` (as an operator keeps it out of hub.toml)."""
        password_file = os.path.join(directory, "db-password")
        with open(password_file, "w") as f:
            f.write("hub-secret\n")
        os.chmod(password_file, 0o600)
        return ('[database]\nurl = "postgresql://garm_edge_hub@127.0.0.1:%d/garm_edge'
                '?sslmode=disable"\npassword_file = "%s"\n' % (self.port, password_file))

    def start(self):
        self.owner(PG_BIN + "/pg_ctl", "-D", self.data, "-l", os.path.join(self.dir, "log"),
                   "-w", "-t", "60", "-o", "-c listen_addresses=127.0.0.1 -p %d -k %s -c fsync=off"
                   % (self.port, self.dir), "start")

    def stop(self):
        self.owner(PG_BIN + "/pg_ctl", "-D", self.data, "-m", "immediate", "-w", "stop",
                   check_rc=False)

    def remove(self):
        self.stop()
        shutil.rmtree(self.dir, ignore_errors=True)

    def sql(self, statement, database="postgres"):
        return self.owner(PG_BIN + "/psql", "-X", "-A", "-t", "-v", "ON_ERROR_STOP=1", "-h",
                          self.dir, "-p", str(self.port), "-U", "postgres", "-d", database,
                          "-c", statement).stdout.strip()


def enrolled_names(hub):
    """The hosts `garm-edge-hub agents` lists (from the files or the database)."""
    listed = hub.cli("agents")
    if listed.returncode != 0:
        raise Failure("garm-edge-hub agents: " + listed.stderr.strip())
    return sorted(line.split()[0] for line in listed.stdout.splitlines()[1:] if line.strip())


