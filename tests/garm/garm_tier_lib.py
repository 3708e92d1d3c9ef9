"""The pieces of the garm tier: processes started and stopped, garm-cli, the agents' control
API over mutual TLS, garm-provider-edge behind a tap that records every call garm makes, and
guests simulated on their reserved 127.0.x.y addresses that report through the agent's relay."""
import base64
import hashlib
import hmac
import http.client
import json
import os
import signal
import socket
import ssl
import statistics
import subprocess
import sys
import threading
import time

CONTROL_TIMEOUT = 10


class Failure(Exception):
    pass


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for(what, predicate, timeout, interval=0.5):
    """Polls `predicate` until it returns something true; that value, or Failure on timeout.
    A predicate's OSError or ValueError (a socket timeout, a half-written answer on a loaded
    machine) counts as not yet, and is named in the Failure if it was the last word."""
    deadline = time.time() + timeout
    last_error = None
    while True:
        try:
            value = predicate()
            last_error = None
        except (OSError, ValueError) as e:
            value, last_error = None, e
        if value:
            return value
        if time.time() > deadline:
            raise Failure("timed out after %d s waiting for %s%s" % (
                timeout, what, "" if last_error is None else " (last: %s)" % last_error))
        time.sleep(interval)


class Process:
    def __init__(self, argv, log_path, env=None):
        self.argv, self.log_path, self.env = argv, log_path, env
        self.proc = None
        self.start()

    def start(self):
        log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(self.argv, stdout=log, stderr=subprocess.STDOUT, env=self.env,
                                     start_new_session=True)
        log.close()

    def stop(self, sig=signal.SIGTERM):
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def alive(self):
        return self.proc is not None and self.proc.poll() is None


TAP = r'''#!/bin/bash
# garm-provider-edge as garm runs it, with a record of the call: command, instance or pool,
# exit code and time. CreateInstance's stdin is kept so the simulated guest can read its token.
tap=%(tap)s
id=$(/bin/date +%%s%%N)-$$
started=$(/bin/date +%%s%%N)
if [ "$GARM_COMMAND" = CreateInstance ]; then /bin/cat > "$tap/$id.stdin"; else : > "$tap/$id.stdin"; fi
[ -e "$tap/env-$GARM_COMMAND-$GARM_INTERFACE_VERSION" ] || /usr/bin/env > "$tap/env-$GARM_COMMAND-$GARM_INTERFACE_VERSION"
%(real)s < "$tap/$id.stdin" > "$tap/$id.out" 2> "$tap/$id.err"
status=$?
ended=$(/bin/date +%%s%%N)
/bin/cat "$tap/$id.out"; /bin/cat "$tap/$id.err" >&2
printf '{"id":"%%s","provider":"%%s","command":"%%s","instance":"%%s","pool":"%%s","interface":"%%s","exit":%%d,"started":%%s,"ms":%%d}\n' \
  "$id" "%(name)s" "$GARM_COMMAND" "$GARM_INSTANCE_ID" "$GARM_POOL_ID" "$GARM_INTERFACE_VERSION" \
  "$status" "$((started / 1000000))" "$(((ended - started) / 1000000))" >> "$tap/calls.jsonl"
exit $status
'''


def write_tap(path, tap_dir, real, name):
    with open(path, "w") as f:
        f.write(TAP % {"tap": tap_dir, "real": real, "name": name})
    os.chmod(path, 0o755)


def read_calls(tap_dir):
    calls = []
    try:
        with open(os.path.join(tap_dir, "calls.jsonl")) as f:
            for line in f:
                try:
                    calls.append(json.loads(line))
                except ValueError:
                    pass
    except FileNotFoundError:
        pass
    return calls


class Agent:
    """One garm-edge-agent on its own copy of the libvirt test driver's guests.xml, its guests
    served on 127.0.0.1 and reserved from `addresses`."""

    def __init__(self, name, work, build, fixture, pki, controller, addresses, api_port):
        self.name, self.pki, self.controller = name, pki, controller
        self.dir = os.path.join(work, "agent-" + name)
        os.makedirs(self.dir)
        driver = os.path.join(self.dir, "driver.xml")
        with open(fixture) as src, open(driver, "w") as dst:
            dst.write(src.read())
        self.config = os.path.join(self.dir, "agent.toml")
        self.api_port = api_port
        with open(self.config, "w") as f:
            f.write(AGENT_TOML % {"name": name, "state": os.path.join(self.dir, "state"),
                                  "uri": "test://" + driver, "pki": pki, "port": api_port,
                                  "controller": controller, "addresses": addresses})
        subprocess.run([os.path.join(build, "agent/garm-edge-agent"), "check-config", "--config",
                        self.config], check=True, stdout=subprocess.DEVNULL)
        self.binary = os.path.join(build, "agent/garm-edge-agent")
        self.process = None
        self.guest_port = None
        self.start()

    def start(self):
        ready = os.path.join(self.dir, "ready")
        if os.path.exists(ready):
            os.remove(ready)
        self.process = Process([self.binary, "serve", "--config", self.config, "--ready-file", ready],
                               os.path.join(self.dir, "agent.log"))

        def read_ready():
            if not self.process.alive():
                raise Failure("agent %s exited; see %s/agent.log" % (self.name, self.dir))
            try:
                text = open(ready).read()
            except FileNotFoundError:
                return None
            fields = dict(line.split("=", 1) for line in text.split() if "=" in line)
            return fields if "guest_url" in fields else None
        fields = wait_for("agent %s to be ready" % self.name, read_ready, 30, 0.05)
        self.guest_port = int(fields["guest_url"].rsplit(":", 1)[1].rstrip("/"))

    def stop(self, sig=signal.SIGTERM):
        self.process.stop(sig)

    def control(self, method, path, timeout=CONTROL_TIMEOUT, client="garm"):
        """A control API call as garm's client certificate, or the operator's (every
        controller: draining)."""
        context = ssl.create_default_context(cafile=os.path.join(self.pki, "ca.crt"))
        context.load_cert_chain(os.path.join(self.pki, "clients/%s.crt" % client),
                                os.path.join(self.pki, "clients/%s.key" % client))
        conn = http.client.HTTPSConnection("localhost", self.api_port, context=context,
                                           timeout=timeout)
        try:
            conn.request(method, path)
            response = conn.getresponse()
            body = response.read()
            return response.status, (json.loads(body) if body else None)
        finally:
            conn.close()

    def instances(self, pool):
        status, body = self.control("GET", "/v1/controllers/%s/pools/%s/instances" %
                                    (self.controller, pool))
        if status != 200:
            raise Failure("agent %s listed instances with HTTP %d: %s" % (self.name, status, body))
        return body

    def all_instances(self, pools):
        return {i["name"]: i for pool in pools for i in self.instances(pool)}


AGENT_TOML = '''[agent]
id = "%(name)s"
state_dir = "%(state)s"
reconcile_interval_seconds = 5
[libvirt]
uri = "%(uri)s"
storage_pool = "edge-pool"
network = "edge-net"
[api]
address = "127.0.0.1"
port = %(port)d
ca = "%(pki)s/ca.crt"
certificate = "%(pki)s/agent.crt"
key = "%(pki)s/agent.key"
[[api.clients]]
identity = "garm"
controllers = ["%(controller)s"]
[[api.clients]]
identity = "operator"
controllers = ["*"]
[guests]
address = "127.0.0.1"
port = 0
addresses = "%(addresses)s"
anti_spoofing = "off"
[capacity]
cpu_overcommit = 100
memory_overcommit = 100
reserved_memory_mib = 0
max_instances = 12
[[images]]
name = "debian-12"
base_volume = "debian-12.qcow2"
os_name = "debian"
os_version = "12"
[[flavors]]
name = "small"
vcpus = 1
memory_mib = 512
disk_gib = 4
'''


class SimulatedGuests(threading.Thread):
    """Reads each successful CreateInstance garm made (its bootstrap and the provider ID), asks
    the agent for the guest's reserved address and, from that address, reports `installing`
    then `idle` through the agent's relay, as garm's install script does; the runner is marked
    online at the fake GitHub first, as run.sh's connection would. Pools in `silent` never
    report (their runners time out)."""

    def __init__(self, tap_dir, agents, github_port, silent, gitea_port=None):
        super().__init__(daemon=True)
        self.tap_dir, self.agents, self.github_port, self.silent = tap_dir, agents, github_port, silent
        self.gitea_port = gitea_port
        self.gitea_runners = {}  # name -> its ID at the fake Gitea
        self.done = set()
        self.installing = set()
        self.errors = {}  # call id -> the last error of a report not made yet
        self.reported = {}  # name -> time of its idle report
        self.stopped = threading.Event()

    def run(self):
        while not self.stopped.is_set():
            for call in read_calls(self.tap_dir):
                if call["command"] != "CreateInstance" or call["exit"] != 0 or call["id"] in self.done:
                    continue
                if call["pool"] in self.silent:
                    self.done.add(call["id"])
                    continue
                try:
                    if self.report(call):
                        self.done.add(call["id"])
                        self.errors.pop(call["id"], None)
                except Exception as e:  # noqa: BLE001 - kept until a retry succeeds
                    self.errors[call["id"]] = repr(e)
            time.sleep(0.3)

    def report(self, call):
        bootstrap = json.load(open(os.path.join(self.tap_dir, call["id"] + ".stdin")))
        created = json.load(open(os.path.join(self.tap_dir, call["id"] + ".out")))
        agent = self.agents[created["provider_id"].split(":")[0]]
        status, guest = agent.control("GET", "/v1/controllers/%s/instances/%s/guest" %
                                      (agent.controller, bootstrap["name"]))
        if status != 200 or not guest.get("address"):
            return False  # deleted meanwhile, or the agent is down: try again
        address, token = guest["address"], bootstrap["instance-token"]
        if call["id"] not in self.installing:
            self.callback(agent, address, token, {"status": "installing", "message": "simulated"})
            self.installing.add(call["id"])
        if self.gitea_port and bootstrap["repo_url"].startswith("http://127.0.0.1:%d" % self.gitea_port):
            runner_id = self.register_at_gitea(agent, address, token, bootstrap)
        else:
            runner_id = self.mark_online(bootstrap["name"])
        if runner_id is None:
            raise Failure("no runner named %s at the fake GitHub" % bootstrap["name"])
        self.callback(agent, address, token, {"status": "idle", "message": "simulated runner",
                                              "agent_id": runner_id})
        self.reported[bootstrap["name"]] = time.time()
        return True

    def callback(self, agent, address, token, payload):
        conn = http.client.HTTPConnection("127.0.0.1", agent.guest_port, timeout=15,
                                          source_address=(address, 0))
        try:
            conn.request("POST", "/api/v1/callbacks/status", json.dumps(payload),
                         {"Authorization": "Bearer " + token, "Content-Type": "application/json"})
            response = conn.getresponse()
            body = response.read()
            if response.status != 200:
                raise Failure("relay answered %d: %s" % (response.status, body[:200]))
        finally:
            conn.close()

    def register_at_gitea(self, agent, address, token, bootstrap):
        """What garm's Gitea install template does (gitea_linux_userdata.tmpl): a registration
        token from garm's metadata (garm asks Gitea for it), then `gitea-runner register` with
        the bootstrap's name and labels, which Gitea lists from then on. garm gives each
        instance one token: a retried report reuses the registration."""
        name = bootstrap["name"]
        if name in self.gitea_runners:
            return self.gitea_runners[name]
        conn = http.client.HTTPConnection("127.0.0.1", agent.guest_port, timeout=15,
                                          source_address=(address, 0))
        try:
            conn.request("GET", "/api/v1/metadata/runner-registration-token/", headers={
                "Authorization": "Bearer " + token})
            response = conn.getresponse()
            registration = response.read().decode()
            if response.status != 200 or not registration.startswith("gitea-registration-token"):
                raise Failure("registration token through the relay: %d %s" %
                              (response.status, registration[:200]))
        finally:
            conn.close()
        conn = http.client.HTTPConnection("127.0.0.1", self.gitea_port, timeout=10)
        try:
            conn.request("POST", "/_test/register", json.dumps(
                {"name": name, "labels": ",".join(bootstrap.get("labels") or [])}),
                {"Content-Type": "application/json"})
            self.gitea_runners[name] = json.loads(conn.getresponse().read())
        finally:
            conn.close()
        return self.gitea_runners[name]

    def mark_online(self, name):
        conn = http.client.HTTPConnection("127.0.0.1", self.github_port, timeout=10)
        try:
            conn.request("POST", "/_test/runners/%s/online" % name)
            conn.getresponse().read()
            conn.request("GET", "/_test/runners")
            runners = json.loads(conn.getresponse().read())
        finally:
            conn.close()
        return next((r["id"] for r in runners if r["name"] == name), None)


def workflow_job_webhook(garm_port, github_url, secret, labels, job_id, action="queued",
                         runner_name=""):
    body = json.dumps({
        "action": action,
        "workflow_job": {"id": job_id, "run_id": job_id, "status": action, "name": "build",
                         "conclusion": "success" if action == "completed" else None,
                         "html_url": "%s/owner/repo/actions/runs/%d/job/%d" % (github_url, job_id, job_id),
                         "labels": labels, "runner_id": 0, "runner_name": runner_name,
                         "started_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())},
        "repository": {"name": "repo", "full_name": "owner/repo", "owner": {"login": "owner"}},
    }).encode()
    signature = "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()
    conn = http.client.HTTPConnection("127.0.0.1", garm_port, timeout=10)
    try:
        conn.request("POST", "/webhooks", body, {
            "X-Github-Event": "workflow_job", "X-Hub-Signature-256": signature,
            "X-Github-Hook-Installation-Target-Type": "repository",
            "Content-Type": "application/json"})
        response = conn.getresponse()
        return response.status, response.read()
    finally:
        conn.close()


def b64(text):
    return base64.b64encode(text.encode()).decode()


PASSWORD = "Garm-edge-tier-0nly-on-loopback"
WEBHOOK_SECRET = "tier-webhook-secret"
HERE = os.path.dirname(os.path.abspath(__file__))
_started_at = time.time()


def log(message):
    print("[%6.1f s] %s" % (time.time() - _started_at, message), flush=True)


def build_garm():
    """garm's bin directory, built (or cached) by build_garm.sh; exits 77 when garm's source
    tarball is absent, unless GARM_EDGE_REQUIRE_GARM makes that a failure."""
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


class GarmSite:
    """garm on loopback with its fake GitHub Enterprise API, a sqlite database and external
    providers, each garm-provider-edge behind a tap; driven with garm-cli."""

    def __init__(self, work, garm_bin, provider_bin, providers):
        self.work, self.garm_bin, self.provider_bin = work, garm_bin, provider_bin
        self.providers = providers  # [(name, interface version)]
        self.tap = os.path.join(work, "tap")
        os.makedirs(self.tap)
        self.processes = []
        self.pools = {}
        self.pool_names = {}
        self.no_proxy = ""  # what garm reaches without its (closed) proxy, besides loopback

    def cli(self, *args, parse=True):
        env = {"HOME": self.work, "PATH": "/usr/bin:/bin"}
        result = subprocess.run([os.path.join(self.garm_bin, "garm-cli"), *args] +
                                (["--format", "json"] if parse else []),
                                env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                timeout=60)
        if result.returncode != 0:
            raise Failure("garm-cli %s: %s%s" % (" ".join(args), result.stdout, result.stderr))
        return json.loads(result.stdout) if parse and result.stdout.strip() else result.stdout

    def start_fake(self, forge, *args):
        """fake_<forge>.py (on loopback unless `args` say otherwise); its port once it listens."""
        process = Process([sys.executable, os.path.join(HERE, "fake_%s.py" % forge), self.work,
                           *args], os.path.join(self.work, "fake-%s.log" % forge))
        self.processes.append(process)
        port_file = os.path.join(self.work, forge + ".port")
        return int(wait_for("the fake " + forge, lambda: os.path.exists(port_file) and
                            open(port_file).read(), 10, 0.05))

    def start_fake_github(self):
        self.github_port = self.start_fake("github")
        self.github_url = "http://127.0.0.1:%d" % self.github_port

    def start_fake_gitea(self, address="127.0.0.1"):
        """On `address`: where real guests reach it too."""
        self.gitea_port = self.start_fake("gitea", address)
        self.gitea_url = "http://%s:%d" % (address, self.gitea_port)

    def gitea_requests(self):
        try:
            return [json.loads(line) for line in open(os.path.join(self.work, "gitea-requests.jsonl"))]
        except FileNotFoundError:
            return []

    def add_gitea(self):
        """A Gitea endpoint whose gitea-runner releases are the fake's (garm reads its tools from
        there, not from Gitea's API), and a token for it; a repository with these credentials is
        a Gitea one. garm (at afda4e76) gives every cached entity whose credentials have the ID
        of credentials it stores the stored ones, of either forge (cache/entity_cache.go,
        UpdateCredentialsInAffectedEntities): the Gitea credentials in use get an ID no GitHub
        credentials in use have (a spare takes ID 1), and all are made before any repository."""
        self.cli("gitea", "endpoint", "create", "--name", "fake-gitea", "--description", "loopback",
                 "--base-url", self.gitea_url, "--api-base-url", self.gitea_url + "/",
                 "--tools-metadata-url", self.gitea_url + "/_releases")
        for name in ("gitea-spare", "gitea"):
            self.cli("gitea", "credentials", "add", "--name", name, "--description", "fake",
                     "--endpoint", "fake-gitea", "--auth-type", "pat", "--pat-oauth-token",
                     "fake-gitea-pat")

    def start_garm(self):
        self.garm_port = free_port()
        closed = free_port()  # nothing listens there: garm's way out of loopback is shut
        providers = ""
        for name, version in self.providers:
            # garm checks that it exists; the agents' entries are written once garm's
            # controller ID is known.
            open(self.provider_config(name), "w").close()
            write_tap(os.path.join(self.work, "provider-" + name), self.tap, self.provider_bin, name)
            providers += PROVIDER_TOML % {"name": name, "version": version,
                                          "config": self.provider_config(name),
                                          "exe": os.path.join(self.work, "provider-" + name)}
        with open(os.path.join(self.work, "garm.toml"), "w") as f:
            f.write(GARM_TOML % {"port": self.garm_port, "db": os.path.join(self.work, "garm.db"),
                                 "providers": providers})
        env = {"PATH": "/usr/bin:/bin", "HOME": self.work,
               "HTTP_PROXY": "http://127.0.0.1:%d" % closed,
               "HTTPS_PROXY": "http://127.0.0.1:%d" % closed, "NO_PROXY": self.no_proxy}
        self.garm = Process([os.path.join(self.garm_bin, "garm"), "--config",
                             os.path.join(self.work, "garm.toml")],
                            os.path.join(self.work, "garm.log"), env)
        self.processes.append(self.garm)
        url = "http://127.0.0.1:%d" % self.garm_port
        wait_for("garm's API", self.garm_answers, 30, 0.2)
        self.cli("init", "--name", "tier", "--url", url, "--username", "admin", "--password",
                 PASSWORD, "--email", "admin@example.com", "--full-name", "Tier Admin",
                 "--metadata-url", url + "/api/v1/metadata", "--callback-url",
                 url + "/api/v1/callbacks", "--webhook-url", url + "/webhooks", parse=False)
        self.controller = self.cli("controller", "show")["controller_id"]
        log("garm %s up on 127.0.0.1:%d, controller %s" % (self.garm_bin, self.garm_port,
                                                           self.controller))

    def provider_config(self, name):
        return os.path.join(self.work, name + ".toml")

    def garm_answers(self):
        if not self.garm.alive():
            raise Failure("garm exited; see garm.log")
        try:
            conn = http.client.HTTPConnection("127.0.0.1", self.garm_port, timeout=2)
            conn.request("GET", "/api/v1/")
            conn.getresponse().read()
            return True
        except OSError:
            return False

    def add_github(self):
        self.cli("github", "endpoint", "create", "--name", "fake-ghes", "--description", "loopback",
                 "--base-url", self.github_url, "--api-base-url", self.github_url + "/api/v3/",
                 "--upload-url", self.github_url + "/api/uploads/")
        self.cli("github", "credentials", "add", "--name", "fake", "--description", "fake",
                 "--endpoint", "fake-ghes", "--auth-type", "pat", "--pat-oauth-token", "fake-pat")

    def add_repo(self, name, credentials="fake"):
        return self.cli("repo", "add", "--owner", "owner", "--name", name, "--credentials",
                        credentials, "--webhook-secret", WEBHOOK_SECRET)["id"]

    def add_pool(self, repo, name, provider, min_idle, max_runners, bootstrap_timeout):
        pool = self.cli("pool", "add", "--repo", repo, "--provider-name", provider,
                        "--image", "debian-12", "--flavor", "small", "--os-type", "linux",
                        "--os-arch", "amd64", "--tags", "edge-" + name,
                        "--min-idle-runners", str(min_idle), "--max-runners", str(max_runners),
                        "--runner-bootstrap-timeout", str(bootstrap_timeout), "--enabled=true")
        self.pools[name] = pool["id"]
        self.pool_names[pool["id"]] = name
        return pool["id"]

    # ---- what garm says ---------------------------------------------------------------------
    def runners(self, pool=None):
        listed = self.cli("runner", "list", "--all")
        return [r for r in listed if pool is None or r.get("pool_id") == self.pools[pool]]

    def idle(self, pool):
        return [r for r in self.runners(pool)
                if r.get("status") == "running" and r.get("runner_status") == "idle"]

    def garm_log(self):
        try:
            return open(os.path.join(self.work, "garm.log"), errors="replace").read()
        except FileNotFoundError:
            return ""

    def calls(self, **match):
        return [c for c in read_calls(self.tap)
                if all(c.get(k) == v for k, v in match.items())]

    def github_test(self, method, path):
        conn = http.client.HTTPConnection("127.0.0.1", self.github_port, timeout=10)
        try:
            conn.request(method, path)
            return conn.getresponse().read()
        finally:
            conn.close()

    def deferred(self, provider):
        result = subprocess.run([self.provider_bin, "status", "--config",
                                 self.provider_config(provider), "--json"],
                                stdout=subprocess.PIPE, text=True, timeout=30)
        return {row["name"]: len(row.get("deferred_deletes", [])) for row in json.loads(result.stdout)}

    def stop(self):
        for process in reversed(self.processes):
            process.stop()

    def print_calls(self, since):
        calls = read_calls(self.tap)
        print("\nEvery provider call garm made (%d):" % len(calls))
        print("%-10s %-10s %-16s %-6s %-4s %-7s %s" % ("t (s)", "provider", "command", "iface",
                                                       "exit", "ms", "instance / pool"))
        for call in sorted(calls, key=lambda c: c["started"]):
            target = call["instance"] or self.pool_names.get(call["pool"], call["pool"])
            if call["command"] == "CreateInstance":
                try:
                    target += " " + json.load(open(os.path.join(self.tap, call["id"] + ".stdin")))["name"]
                except (OSError, ValueError, KeyError):
                    pass
            print("%-10.1f %-10s %-16s %-6s %-4d %-7d %s" % (
                call["started"] / 1000 - since, call["provider"], call["command"],
                call["interface"], call["exit"], call["ms"], target))
        print("\nSummary by command and exit code:")
        summary = {}
        for call in calls:
            summary.setdefault((call["provider"], call["command"], call["exit"]), []).append(call["ms"])
        for (provider, command, code), times in sorted(summary.items()):
            print("  %-10s %-16s exit %-3d x%-4d median %5d ms, max %5d ms" % (
                provider, command, code, len(times), statistics.median(times), max(times)))
        for name in sorted(os.listdir(self.tap)):
            if name.startswith("env-"):
                keys = sorted(line.split("=", 1)[0] for line in open(os.path.join(self.tap, name)))
                print("  environment of %s: %s" % (name[4:], " ".join(keys)))

    def print_errors(self):
        print("\n--- garm.log (errors and warnings) ---")
        for line in self.garm_log().splitlines():
            if "level=ERROR" in line or "level=WARN" in line:
                print(line[:400])


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
