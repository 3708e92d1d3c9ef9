#!/usr/bin/env python3
"""The hub tier: a fleet behind NAT, run from one place (docs/fleet.md, docs/observability.md).

Network namespaces made here: the hub stays in the test's own namespace on 10.77.0.1; a router
namespace masquerades two agent namespaces (10.78.1.2, 10.78.2.2) and drops every connection
that starts on the hub's side, so nothing can reach the agents. The agents (libvirt's test
driver; a2 an arm64 host) join the hub with tokens and serve garm's whole command set through it,
run by garm-provider-edge exactly as garm runs it, beside an agent garm reaches directly (a
certificate of the same CA) in the same provider entry. A real Prometheus scrapes the hub and
sees every agent's series under its name, and a killed one down. Then: token refusals, the fleet checks
(spread, arch, a killed agent, a black-holed one), revocation, renewal without a restart, and the
hub killed in the middle of a burst of creates and started again; the records moved into a
temporary PostgreSQL and back; and two hubs on one database with three more NAT'd agents
(tests/hub/two_hubs.py): either hub killed mid-burst, the provider moving to the other.

Usage: run_hub_tier.py BUILD_DIR   (root: namespaces and iptables; exit 77 without them)
"""
import concurrent.futures
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from hub_tier_lib import (  # noqa: E402
    Failure,
    Process,
    free_port,
    log,
    wait_for,
    eventually,
    HUB,
    PROVIDER,
    CONTROLLER,
    POOL_AMD,
    POOL_ARM,
    ROUTER_IP,
    checks,
    figures,
    check,
    run,
    Network,
    EdgeAgent,
    Hub,
    port_open,
    Provider,
    agent_of,
    curl_status,
    PG_BIN,
    Postgres,
    enrolled_names,
    REPO_ROOT)
from two_hubs import two_hubs_on_postgres  # noqa: E402


def a_token_holder_stays_a_host(hub, direct, provider, work):
    """Issue 37's attacks, as someone holding one ordinary join token would try them."""
    as_garm = EdgeAgent(work, "garm", "amd64")
    refused = as_garm.join(hub.token())
    check(refused.returncode == 1 and "no host may be named so" in refused.stderr,
          "a token holder cannot become garm (a host named as a client): "
          + refused.stderr.strip()[-160:])
    # A host the operator let be reached at the direct agent's name (a mistake, or a host left
    # on an old address), then serving at the direct agent's URL: the provider pins the name.
    impostor = EdgeAgent(work, "mallory", "amd64", api_port=direct.api_port)
    joined = impostor.join(hub.token("--name", "mallory", "--dns", "localhost"))
    check(joined.returncode == 0, "the operator's token for mallory enrols it: " + joined.stderr)
    pem = os.path.join(impostor.state, "hub", "agent.pem")
    url = "https://localhost:%d/v1/controllers/%s/instances" % (direct.api_port, CONTROLLER)
    check(curl_status(url, hub.pki("ca.crt"), pem, pem) == 403,
          "a host's certificate is no client of a direct agent, whatever its CN")
    check(curl_status("https://localhost:%d/v1/agents" % hub.provider_port, hub.pki("ca.crt"),
                      pem, pem) == 403, "nor of the hub")
    direct.stop()
    impostor.start()
    wait_for("the impostor's port", lambda: port_open("127.0.0.1", direct.api_port), 10, 0.05)
    listing = provider.call("ListInstances", pool=POOL_AMD)
    check(listing.returncode == 1 and 'host "mallory", not of host "direct"' in listing.stderr,
          "ListInstances refuses another host at the direct agent's URL: "
          + listing.stderr.strip()[-200:])
    created = provider.create("garm-impostor-0")
    check(created.returncode != 0 or agent_of(created) != "direct",
          "no create goes to the impostor as the direct agent")
    # mallory is also an agent of the hub: a create placed on it through the hub is its own.
    if created.returncode != 0 or agent_of(created) != "mallory":
        check("garm-impostor-0" not in impostor.log_text(),
              "the impostor never saw garm's bootstrap")
    if created.returncode == 0:
        provider.call("DeleteInstance", instance="garm-impostor-0")
    impostor.stop()
    hub.cli("remove", "mallory")
    direct.start()
    wait_for("the direct agent back", lambda: port_open("127.0.0.1", direct.api_port), 10, 0.05)
    wait_for("the direct agent answering", lambda: provider.call(
        "ListInstances", pool=POOL_AMD).returncode == 0, 15, 0.2)


def relay_repeats_cost_one_request(hub):
    """One relay naming one agent 1,000 times, from three callers at once."""
    before = hub.rss_mib()
    with concurrent.futures.ThreadPoolExecutor(3) as pool:
        answers = list(pool.map(lambda _: hub.relay(
            {"method": "GET", "target": "/v1/capacity", "agents": ["a1"] * 1000}), range(3)))
    check(all(status == 200 and parts == ["a1"] for status, parts in answers),
          "a relay naming a1 1,000 times asks it once: %s" % [a[1][:3] for a in answers])
    figures.append(("hub RSS before / after three 1,000-name relays (MiB)",
                    "%.1f / %.1f" % (before, hub.rss_mib())))


def kept_deletes_in_parallel(provider, direct, work):
    """garm's parallel DeleteInstances for an agent that is down: every one is kept."""
    direct.stop(signal.SIGKILL)
    ids = ["direct:%s" % __import__("uuid").uuid4() for _ in range(40)]
    with concurrent.futures.ThreadPoolExecutor(40) as pool:
        results = list(pool.map(lambda i: provider.call("DeleteInstance", instance=i), ids))
    failed = [r.stderr.strip()[-160:] for r in results if r.returncode != 0]
    kept = os.path.join(work, "sessions", "deferred-deletes", CONTROLLER, "direct")
    files = [f for f in os.listdir(kept) if not f.startswith(".")] if os.path.isdir(kept) else []
    check(not failed and len(files) == 40,
          "40 parallel DeleteInstances for a down agent all exit 0 and are kept (%d kept, "
          "failures: %s)" % (len(files), failed[:2]))
    direct.start()
    wait_for("the direct agent back", lambda: port_open("127.0.0.1", direct.api_port), 10, 0.05)
    # Each call that reaches it carries out what its probe deadline leaves room for.
    calls = 0

    def carried_out():
        nonlocal calls
        calls += 1
        provider.instances()
        return not [f for f in os.listdir(kept) if not f.startswith(".")]
    wait_for("the kept deletes carried out", carried_out, 30, 0.2)
    check(calls <= 5, "the kept deletes are carried out once it answers (in %d call(s))" % calls)


def revocation_reaches_the_direct_path(hub, direct, provider, work):
    """remove and revoke-client, measured on the hub and on the direct path."""
    hub.cli("issue-client", "ops")
    ops = (hub.pki("ca.crt"), hub.pki("clients/ops.crt"), hub.pki("clients/ops.key"))
    url = "https://localhost:%d/v1/capacity" % direct.api_port
    check(curl_status(url, *ops) == 200, "the operator's client certificate works directly")
    saved = (open(ops[1]).read(), open(ops[2]).read())
    check(hub.cli("revoke-client", "ops").returncode == 0, "revoke-client ops")
    revoked_at = time.time()
    kept = (ops[0], os.path.join(work, "ops.crt"), os.path.join(work, "ops.key"))
    for path, text in zip(kept[1:], saved):
        with open(path, "w") as f:
            f.write(text)
    wait_for("the direct agent refusing the revoked client",
             lambda: curl_status(url, *kept) != 200, 40, 0.25)
    figures.append(("revoke-client to refusal by a direct agent (s)", time.time() - revoked_at))
    check(time.time() - revoked_at <= 20,
          "a direct agent refuses a revoked client within 20 s (the agent fetches the CRL "
          "every 15 s)")
    check(curl_status("https://localhost:%d/v1/agents" % hub.provider_port, *kept) != 200,
          "the hub refuses the revoked client too")
    removed_at = time.time()
    hub.cli("remove", "direct")
    status = run(PROVIDER, "status", "--config", provider.config, check_rc=False)
    figures.append(("remove to refusal by the provider on the direct path (s)",
                    time.time() - removed_at))
    check(status.returncode == 1 and "revoked" in status.stdout,
          "the provider refuses the removed host on the direct path at its next call:\n"
          + status.stdout[-400:])


class Prometheus:
    """Debian's Prometheus, scraping the hub every second with the metrics reader's certificate
    and loading the shipped rules (docs/observability.md)."""

    def __init__(self, work, hub):
        self.dir = os.path.join(work, "prometheus")
        os.makedirs(self.dir)
        made = hub.cli("issue-client", "prometheus", "--role", "metrics")
        if made.returncode != 0:
            raise Failure("issue-client --role metrics: " + made.stderr)
        self.port = free_port()
        config = os.path.join(self.dir, "prometheus.yml")
        with open(config, "w") as f:
            f.write("""global:
  scrape_interval: 2s
  # One scrape of the hub asks every agent: on a loaded machine that can pass a second.
  scrape_timeout: 2s
  evaluation_interval: 1s
rule_files: ["%(rules)s"]
scrape_configs:
  - job_name: garm-edge-hub
    scheme: https
    tls_config:
      ca_file: %(pki)s/ca.crt
      cert_file: %(pki)s/clients/prometheus.crt
      key_file: %(pki)s/clients/prometheus.key
      server_name: localhost
    static_configs:
      - targets: ["127.0.0.1:%(port)d"]
""" % {"rules": os.path.join(REPO_ROOT, "monitoring/garm-edge.rules.yml"),
       "pki": hub.pki(""), "port": hub.provider_port})
        self.process = Process(("prometheus", "--config.file", config, "--storage.tsdb.path",
                                os.path.join(self.dir, "data"), "--web.listen-address",
                                "127.0.0.1:%d" % self.port), os.path.join(self.dir, "log"))
        wait_for("Prometheus ready", lambda: self.get("/-/ready") is not None, 30, 0.2)

    def get(self, path):
        import urllib.request
        try:
            with urllib.request.urlopen("http://127.0.0.1:%d%s" % (self.port, path),
                                        timeout=5) as answer:
                return answer.read().decode()
        except OSError:
            return None

    def query(self, expr):
        """{labels-as-tuple: value} of an instant query."""
        import urllib.parse
        text = self.get("/api/v1/query?query=" + urllib.parse.quote(expr))
        if text is None:
            return {}
        return {tuple(sorted(r["metric"].items())): float(r["value"][1])
                for r in json.loads(text)["data"]["result"]}

    def values_by(self, expr, label):
        return {dict(labels).get(label): value for labels, value in self.query(expr).items()}

    def stop(self):
        self.process.stop()


def fleet_scraped_by_prometheus(prometheus, created):
    """One scrape of the hub gives every NAT'd agent's series under its name."""
    wait_for("Prometheus sees a1, a2 and direct up through the hub",
             lambda: prometheus.values_by("garm_edge_agent_up", "agent")
             == {"a1": 1.0, "a2": 1.0, "direct": 1.0}, 30, 0.5)
    check(eventually(lambda: prometheus.values_by('up{job="garm-edge-hub"}', "job")
                     == {"garm-edge-hub": 1.0}),
          "Prometheus parses the hub's whole answer (its scrape is up)")
    every_agent = {"a1": 1.0, "a2": 1.0, "direct": 1.0}
    check(eventually(lambda: prometheus.values_by(
              'garm_edge_libvirt_up{job="garm-edge-hub"}', "agent") == every_agent),
          "each agent's own series reach Prometheus labelled with its name: %s"
          % prometheus.values_by('garm_edge_libvirt_up{job="garm-edge-hub"}', "agent"))
    on_a1 = sum(1 for agent in created.values() if agent == "a1")
    started_phases = 'sum by (agent) (garm_edge_startup_phase_seconds_count{phase="started"})'
    eventually(lambda: prometheus.values_by(started_phases, "agent").get("a1", 0) >= on_a1)
    started = prometheus.values_by(started_phases, "agent")
    check(started.get("a1", 0) >= on_a1 > 0,
          "the start-up phases of a1's %d instances arrive through the hub: %s" % (on_a1, started))
    rules = json.loads(prometheus.get("/api/v1/rules"))["data"]["groups"]
    unhealthy = [r["name"] for g in rules for r in g["rules"] if r.get("health") != "ok"]
    check(rules and not unhealthy, "the shipped rules load and evaluate on the fleet's series: %s"
          % (unhealthy or [g["name"] for g in rules]))
    figures.append(("hub scrape by Prometheus (3 agents)", "%.3f s, %d samples" % (
        list(prometheus.query('scrape_duration_seconds{job="garm-edge-hub"}').values())[0],
        list(prometheus.query('scrape_samples_scraped{job="garm-edge-hub"}').values())[0])))


def hub_metric(hub, name, label=""):
    """A sample of the hub's own /metrics, read with the metrics reader's certificate (0 when
    the hub shows no such sample); a Failure when the hub does not answer, never a silent 0."""
    for attempt in range(3):
        # One scrape of the hub asks every agent (8 s each at most): slow on a loaded machine.
        scraped = subprocess.run(("curl", "-sS", "--fail", "--max-time", "30", "--cacert",
                                  hub.pki("ca.crt"), "--cert", hub.pki("clients/prometheus.crt"),
                                  "--key", hub.pki("clients/prometheus.key"),
                                  "https://localhost:%d/metrics" % hub.provider_port),
                                 capture_output=True, text=True)
        if scraped.returncode == 0 and "garm_edge_hub_" in scraped.stdout:
            break
        time.sleep(0.5)
    else:
        raise Failure("the hub's /metrics did not answer: %s" % scraped.stderr.strip()[-300:])
    text = scraped.stdout
    for line in text.splitlines():
        if line.startswith(name + (("{" + label + "}") if label else " ")):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


def fleet_of_32(hub, work):
    """Issue 50: 32 agents behind the hub and garm's burst of 32 provider processes at once:
    no command fails, the hub answers the placement probes itself, nothing is left behind."""
    count = 32
    token = hub.token("--uses", str(count), "--label", "burst")
    # The hub's own agents (a1, a2) have views already: the wait below is for the 32's.
    views_before = hub_metric(hub, "garm_edge_hub_placement_views")
    fleet = [EdgeAgent(work, "f%02d" % index, "amd64") for index in range(count)]
    try:
        with concurrent.futures.ThreadPoolExecutor(8) as pool:
            joined = list(pool.map(lambda agent: agent.join(token), fleet))
        check(all(j.returncode == 0 for j in joined), "32 agents join with one token: %s"
              % [j.stderr.strip()[-120:] for j in joined if j.returncode != 0][:2])
        started = time.time()
        for agent in fleet:
            agent.start()
        names = {agent.name for agent in fleet}
        wait_for("32 agents connected", lambda: all(
            a.get("connected") for n, a in hub.agents().items() if n in names), 60, 0.2)
        figures.append(("32 agents connected after start", time.time() - started))
        wait_for("the hub holds a placement view of each", lambda: hub_metric(
            hub, "garm_edge_hub_placement_views") >= views_before + count, 30, 0.2)
        provider = Provider(work, hub, None, name="provider-32.toml")
        views_lost = open(os.path.join(hub.dir, "hub.log")).read().count("gives no placement view")
        by_hub = hub_metric(hub, "garm_edge_hub_placement_probes_total", 'answered_by="hub"')
        relayed = hub_metric(hub, "garm_edge_hub_placement_probes_total", 'answered_by="agent"')
        burst = ["garm-fleet-%02d" % index for index in range(count)]
        started = time.time()
        with concurrent.futures.ThreadPoolExecutor(count) as pool:
            created = dict(zip(burst, pool.map(provider.create, burst)))
            figures.append(("32 creates at once over 32+3 agents", time.time() - started))
            failed = {n: r.stderr.strip()[-200:] for n, r in created.items() if r.returncode}
            check(not failed, "32 creates at once through the hub all succeed: %s" % failed)
            got = list(pool.map(lambda n: provider.call("GetInstance", instance=n), burst))
            check(all(r.returncode == 0 for r in got), "GetInstance of each succeeds: %s"
                  % [r.stderr.strip()[-300:] for r in got if r.returncode][:2])
        placed_on = {agent_of(result) for result in created.values()}
        check(len(placed_on) >= count // 2, "spread puts the burst on %d of the 32 agents"
              % len(placed_on))
        asked_hub = hub_metric(hub, "garm_edge_hub_placement_probes_total",
                               'answered_by="hub"') - by_hub
        asked_agents = hub_metric(hub, "garm_edge_hub_placement_probes_total",
                                  'answered_by="agent"') - relayed
        figures.append(("placement probes of the burst", "%d answered by the hub, %d relayed"
                        % (asked_hub, asked_agents)))
        # `direct` gives the hub no view (its [api.clients] has no hub), so its probe of each
        # create is relayed: count. Each view lost during the burst to a slow answer (the
        # designed fallback: that agent is asked itself) may add as many again.
        views_lost = open(os.path.join(hub.dir, "hub.log")).read().count(
            "gives no placement view") - views_lost
        check(asked_hub >= count * (count - views_lost) and
              asked_agents <= count * (1 + views_lost),
              "the hub answers the burst's placement probes from its views (%d), agents are "
              "asked only of what they may hold (%d; views lost meanwhile: %d)"
              % (asked_hub, asked_agents, views_lost))
        check(set(provider.instances()) == set(burst), "ListInstances shows the burst, once each")
        with concurrent.futures.ThreadPoolExecutor(count) as pool:
            deleted = list(pool.map(lambda n: provider.call("DeleteInstance", instance=n), burst))
        check(all(r.returncode == 0 for r in deleted) and provider.instances() == {},
              "32 deletes at once leave nothing listed")
        left = [a.name for a in fleet if os.listdir(os.path.join(a.state, "instances"))]
        check(not left, "no agent of the 32 keeps an instance record: %s" % left)
    finally:
        for agent in fleet:
            if agent.process:
                agent.stop()
            hub.cli("remove", agent.name)


def tokens_are_refused(hub, agent, work):
    before = set(os.listdir(os.path.join(hub.state, "agents")))
    expired = hub.token("--ttl-seconds", "1")
    time.sleep(1.5)
    used_up = hub.token("--uses", "1")
    check(agent.join(used_up).returncode == 0, "a fresh token enrols a host")
    shutil.rmtree(os.path.join(agent.state, "hub"))
    hub.cli("remove", agent.name)
    good = hub.token("--uses", "5")
    fields = json.loads(__import__("base64").b64decode(good[len("gejoin1."):]))
    wrong_secret = dict(fields, s="x" * 43)
    wrong_fingerprint = dict(fields, f="0" * 64)

    def encode(token_fields):
        return "gejoin1." + __import__("base64").b64encode(
            json.dumps(token_fields).encode()).decode()

    for token, expected, what in (
            (expired, "expired", "an expired token"),
            (used_up, "used up", "a used-up token"),
            (encode(wrong_secret), "wrong secret", "a token with a wrong secret"),
            (encode(wrong_fingerprint), "fingerprint", "a token with a wrong CA fingerprint"),
            ("gejoin1.garbage", "malformed", "a malformed token")):
        result = agent.join(token)
        check(result.returncode == 1 and expected in result.stderr,
              "%s is refused with a clear message: %s" % (what, result.stderr.strip()[-160:]))
        check(not os.path.exists(os.path.join(agent.state, "hub", "hub.json")),
              "%s leaves the host unenrolled" % what)
    after = set(os.listdir(os.path.join(hub.state, "agents")))
    check(after == before, "no refused token issued a certificate (agents: %s)" % sorted(after))
    hub_log = open(os.path.join(hub.dir, "hub.log")).read()
    check(fields["s"] not in hub_log and wrong_secret["s"] not in hub_log,
          "no token secret reaches the hub's log")
    # Bad guesses at speed: the address is refused for the rest of the minute.
    results = [agent.join(encode(wrong_secret)).stderr for _ in range(6)]
    check(any("too many failed enrolments" in text for text in results),
          "repeated bad tokens from one address are rate limited")
    check(agent.join(hub.token()).returncode == 0,
          "another token from the same address (a host behind the same NAT) still enrols")
    shutil.rmtree(os.path.join(agent.state, "hub"))
    hub.cli("remove", agent.name)
    return good


def fleet_quota_through_the_hub(hub, direct, work):
    """A fleet quota (docs/shares.md) counted over agents behind NAT and a direct one, each
    create right after the last: the hub must not answer from a view older than the
    controller's last create there."""
    provider = Provider(work, hub, direct, name="provider-quota.toml")
    with open(provider.config, "a") as f:
        f.write('[[quotas]]\ncontroller = "%s"\nmax_instances = 3\n' % CONTROLLER)
    placed = {}
    for name, pool, arch in (("garm-quota-arm", POOL_ARM, "arm64"),
                             ("garm-quota-0", POOL_AMD, "amd64"),
                             ("garm-quota-1", POOL_AMD, "amd64")):
        result = provider.create(name, pool=pool, arch=arch)
        check(result.returncode == 0, "CreateInstance %s under the fleet quota: %s"
              % (name, result.stderr.strip()[-300:]))
        placed[name] = agent_of(result)
    check(placed["garm-quota-arm"] == "a2", "the arm64 instance is behind NAT: %s" % placed)
    over = provider.create("garm-quota-2")
    check(over.returncode == 1 and "fleet quota" in over.stderr and "holds 3" in over.stderr,
          "the fourth create is refused by the fleet quota, counting the NAT'd agent's: "
          + (over.stderr.strip()[-300:] or over.stdout))
    check("garm-quota-2" not in provider.instances(), "the refused create made nothing")
    status = run(PROVIDER, "status", "--config", provider.config, check_rc=False)
    check("max_instances 3" in status.stdout and CONTROLLER in status.stdout,
          "status shows the controller's use beside its fleet quota:\n" + status.stdout[-800:])
    # garm deletes a runner and creates the next at once: each create right after the delete
    # that made its room, which the hub's view of the NAT'd agent may not show yet.
    gone = "garm-quota-arm"
    for index in range(2, 8):
        check(provider.call("DeleteInstance", instance=gone).returncode == 0,
              "deleting %s (on %s)" % (gone, placed[gone]))
        name = "garm-quota-%d" % index
        again = provider.create(name, pool=POOL_ARM, arch="arm64")
        check(again.returncode == 0, "the delete of %s through the hub gives the quota its room "
              "back at once: %s" % (gone, again.stderr.strip()[-300:]))
        placed[name] = agent_of(again)
        gone = name
    check(provider.call("RemoveAllInstances").returncode == 0, "the quota test leaves nothing")


def hub_on_postgres(hub, work):
    """Issue 53: the hub's records moved into PostgreSQL and back, and the database restarted
    under the running hub."""
    if not os.path.exists(PG_BIN + "/initdb"):
        raise Failure("PostgreSQL 15's server binaries are missing (scripts/install-deps.sh)")
    postgres = Postgres()
    try:
        enrolled = enrolled_names(hub)
        check(enrolled, "hosts are enrolled before the move: %s" % enrolled)
        on_files = open(hub.config).read()
        with open(hub.config, "a") as f:
            f.write(postgres.hub_database(hub.dir))
        hub.process.stop()
        refused = run(HUB, "serve", "--config", hub.config, check_rc=False)
        check(refused.returncode == 1 and "migrate --to database" in refused.stderr,
              "a hub on a database does not start beside records left on files: "
              + refused.stderr.strip()[-200:])
        moved = hub.cli("migrate", "--to", "database")
        check(moved.returncode == 0 and "%d agents" % len(enrolled) in moved.stdout,
              "migrate --to database copies every record: " + (moved.stdout + moved.stderr).strip())
        check(postgres.sql("SELECT count(*) FROM hub_agents", "garm_edge") == str(len(enrolled)),
              "the agents are rows of the database")
        started = time.time()
        hub.start()
        wait_for("a1 and a2 back on the hub on PostgreSQL",
                 lambda: hub.connected("a1") and hub.connected("a2"), 15, 0.05)
        figures.append(("agents back on the hub moved to PostgreSQL", time.time() - started))
        check(enrolled_names(hub) == enrolled, "the hub's list is the same from the database")
        provider = Provider(work, hub, None, name="provider-postgres.toml")
        created = provider.create("garm-on-postgres")
        check(created.returncode == 0, "a create through the hub on PostgreSQL: "
              + created.stderr.strip()[-200:])
        hub.token()
        check(postgres.sql("SELECT count(*) FROM hub_tokens", "garm_edge") != "0",
              "a token made now is a row of the database")

        # The database restarted under the running hub: it relays from what it read last.
        postgres.stop()
        down = time.time()
        listed = provider.call("ListInstances", pool=POOL_AMD)
        check(listed.returncode == 0 and "garm-on-postgres" in listed.stdout,
              "with the database down, the hub still relays garm's commands: "
              + listed.stderr.strip()[-200:])
        check(hub.cli("agents").returncode == 1, "with the database down, a command that "
                                                 "reads the records fails (exit 1)")
        hub_log = os.path.join(hub.dir, "hub.log")
        wait_for("the hub to say it cannot read its records",
                 lambda: "records cannot be read" in open(hub_log).read(), 5, 0.1)
        postgres.start()
        wait_for("the hub to read its records again",
                 lambda: "can be read again" in open(hub_log).read(), 10, 0.1)
        figures.append(("database down and back, the hub reading again", time.time() - down))
        check(open(hub_log).read().count("records cannot be read") == 1,
              "the outage is logged once, not at every read")
        check(hub.connected("a1") and hub.connected("a2"), "no agent lost its tunnels meanwhile")
        check(provider.call("DeleteInstance", instance="garm-on-postgres").returncode == 0,
              "DeleteInstance after the database came back")

        # And back to files, as an operator leaving the database would.
        hub.process.stop()
        back = hub.cli("migrate", "--to", "files")
        check(back.returncode == 0 and "%d agents" % len(enrolled) in back.stdout,
              "migrate --to files copies the records back: " + (back.stdout + back.stderr).strip())
        with open(hub.config, "w") as f:
            f.write(on_files)
        hub.start()
        wait_for("a1 and a2 back on the hub on files",
                 lambda: hub.connected("a1") and hub.connected("a2"), 15, 0.05)
        check(enrolled_names(hub) == enrolled, "the hub on files again lists the same hosts")
    finally:
        postgres.remove()


def main():
    if os.geteuid() != 0 or shutil.which("iptables") is None:
        print("skipped: the hub tier needs root and iptables (network namespaces)")
        return 77
    work = tempfile.mkdtemp(prefix="garm-edge-hub-tier-")
    network = None
    hub = None
    prometheus = None
    agents = {}
    try:
        # b1-b3: the NAT'd agents of the two hubs on one database (tests/hub/two_hubs.py).
        network = Network(["a1", "a2", "b1", "b2", "b3"])
        hub = Hub(work)
        hub.start()
        agents["a1"] = EdgeAgent(work, "a1", "amd64", network.namespaces["a1"])
        agents["a2"] = EdgeAgent(work, "a2", "arm64", network.namespaces["a2"])
        agents["direct"] = EdgeAgent(work, "direct", "amd64", api_port=free_port())

        # A probe target inside a1's namespace: if anything there could be reached from the
        # hub's side, this would be.
        listener = Process(("ip", "netns", "exec", network.namespaces["a1"], "python3", "-m",
                            "http.server", "--bind", "10.78.1.2", "18080"),
                           os.path.join(work, "probe-listener.log"))
        time.sleep(0.5)
        check(not port_open("10.78.1.2", 18080, timeout=2),
              "nothing in a NAT'd agent's namespace can be reached from the hub's side")
        listener.stop()

        tokens_are_refused(hub, agents["a1"], work)
        token = hub.token("--uses", "3", "--label", "lab")
        check("ran `token` for the operator's CLI" in open(os.path.join(hub.dir, "hub.log")).read(),
              "on files, the CLI's token create runs in the running hub (its admin socket)")
        for name in ("a1", "a2"):
            joined = subprocess.run(agents[name].argv("join", "-", "--config", agents[name].config),
                                    input=token + "\n", capture_output=True, text=True, timeout=60)
            check(joined.returncode == 0, "%s joins through NAT with one command: %s"
                  % (name, joined.stdout.strip() or joined.stderr.strip()))
        refused = agents["direct"].join(token, "--dns", "localhost")
        check(refused.returncode == 1 and "grants the DNS names none" in refused.stderr,
              "a token without names grants no name garm reaches a host by: "
              + refused.stderr.strip()[-200:])
        direct_token = hub.token("--name", "direct", "--dns", "localhost", "--label", "lab")
        joined = agents["direct"].join(direct_token)
        check(joined.returncode == 0 and "reached directly as localhost" in joined.stdout,
              "the directly reached agent gets its names from its token, and its certificate "
              "from the same CA: %s" % (joined.stdout.strip() or joined.stderr))
        for agent in agents.values():
            agent.start()
        started = time.time()
        wait_for("a1 and a2 connected", lambda: hub.connected("a1") and hub.connected("a2"), 15,
                 0.05)
        figures.append(("agents connected after start", time.time() - started))
        hub_log = open(os.path.join(hub.dir, "hub.log")).read()
        check("enrolled agent a1 from %s" % ROUTER_IP in hub_log,
              "the hub sees a NAT'd agent from the router's address (masqueraded)")
        listening = run("ss", "-ltn", namespace=network.namespaces["a1"]).stdout
        check(":8443" not in listening and "10.78.1.2:" not in listening,
              "nothing of the agent listens in its namespace:\n" + listening)

        provider = Provider(work, hub, agents["direct"])
        status = run(PROVIDER, "status", "--config", provider.config, check_rc=False)
        check(status.returncode == 0 and all(n in status.stdout for n in ("a1", "a2", "direct")),
              "status lists the direct agent and the hub's agents:\n" + status.stdout)
        a_token_holder_stays_a_host(hub, agents["direct"], provider, work)
        relay_repeats_cost_one_request(hub)

        # garm's command set, spread over the fleet.
        created = {}
        for index in range(3):
            result = provider.create("garm-spread-%d" % index)
            check(result.returncode == 0, "CreateInstance garm-spread-%d: %s"
                  % (index, result.stderr.strip()))
            created["garm-spread-%d" % index] = agent_of(result)
        check(set(created.values()) == {"a1", "direct"},
              "spread places amd64 runners on both amd64 agents, through the hub and directly: %s"
              % created)
        arm = provider.create("garm-arm-0", pool=POOL_ARM, arch="arm64")
        check(arm.returncode == 0 and agent_of(arm) == "a2",
              "an arm64 pool goes to the arm64 agent behind NAT: %s" % (arm.stdout or arm.stderr))
        listed = provider.instances()
        check(set(listed) == set(created), "ListInstances merges the hub's agents and the direct "
                                           "one: %s" % sorted(listed))
        through_hub = next(n for n, a in created.items() if a == "a1")
        for command in ("GetInstance", "StopInstance", "StartInstance"):
            result = provider.call(command, instance=through_hub)
            check(result.returncode == 0, "%s through the hub" % command)
        deleted = provider.call("DeleteInstance", instance=through_hub)
        check(deleted.returncode == 0 and through_hub not in provider.instances(),
              "DeleteInstance through the hub")
        gone = provider.call("GetInstance", instance=through_hub)
        check(gone.returncode == 30, "GetInstance of the deleted instance is not found (30)")

        prometheus = Prometheus(work, hub)
        fleet_scraped_by_prometheus(prometheus, created)

        # A killed agent: its tunnels close; creates go elsewhere; lists fail naming it.
        agents["a1"].stop(signal.SIGKILL)
        wait_for("a1 disconnected", lambda: not hub.connected("a1"), 10, 0.1)
        wait_for("Prometheus sees a1 down at the next scrape",
                 lambda: prometheus.values_by("garm_edge_agent_up", "agent").get("a1") == 0.0,
                 10, 0.2)
        check(eventually(lambda: prometheus.values_by('up{job="garm-edge-hub"}', "job")
                         == {"garm-edge-hub": 1.0}),
              "a killed agent is garm_edge_agent_up 0, and the hub's scrape still succeeds")
        prometheus.stop()
        result = provider.create("garm-after-kill")
        check(result.returncode == 0 and agent_of(result) == "direct",
              "with a1 killed, a create goes to the direct agent")
        listing = provider.call("ListInstances", pool=POOL_AMD)
        check(listing.returncode == 1 and "a1" in listing.stderr,
              "with a1 killed, ListInstances fails naming it, never a partial list")
        agents["a1"].start()
        wait_for("a1 back", lambda: hub.connected("a1"), 10, 0.05)
        # The test driver keeps its domains in the process: a1 restarted holds none.
        expected = {n for n, a in created.items() if a == "direct"} | {"garm-after-kill"}
        check(set(provider.instances()) == expected, "a1 back: the list is whole again")

        # A black-holed agent: nothing arrives and nothing leaves; the hub's heartbeat finds out.
        network.black_hole("a2", True)
        blackholed = time.time()
        wait_for("a2 seen gone", lambda: not hub.connected("a2"), 30, 0.2)
        figures.append(("black-holed agent dropped by the hub", time.time() - blackholed))
        # The design's worst case is 15 s (a heartbeat every 10 s, 5 s to answer); the polls
        # and a loaded machine's timers take up to a few seconds more.
        check(time.time() - blackholed <= 20,
              "a dead path is found within 20 s (heartbeat every 10 s, 5 s to answer)")
        arm = provider.create("garm-arm-1", pool=POOL_ARM, arch="arm64")
        check(arm.returncode == 1 and "a2" in arm.stderr,
              "the arm64 pool has no agent while a2 is black-holed, and says so")
        network.black_hole("a2", False)
        wait_for("a2 back", lambda: hub.connected("a2"), 15, 0.1)

        # Revocation: removed at the hub, refused within a second.
        refusals = agents["a2"].log_text().count("refused a tunnel")
        check(hub.cli("remove", "a2").returncode == 0, "remove a2")
        removed_at = time.time()  # once the command returned: the CLI's own start is not counted
        wait_for("a2's tunnels closed", lambda: not hub.connected("a2"), 10, 0.02)
        figures.append(("removed agent cut off", time.time() - removed_at))
        check(time.time() - removed_at < 1.0, "a removed agent is cut off within 1 s")
        wait_for("a2 refused when it dials again",
                 lambda: agents["a2"].log_text().count("refused a tunnel") > refusals, 15, 0.1)
        check("a2" not in hub.agents() and not hub.connected("a2"),
              "the removed agent's certificate is refused when it dials again")
        # Back the way an operator brings it back: a new token, joined again, no restart.
        shutil.rmtree(os.path.join(agents["a2"].state, "hub"))
        # Joined by root for an agent that runs as its own account (as packaged): the files go
        # to the owner of the state directory.
        os.chown(agents["a2"].state, 65534, 65534)
        check(agents["a2"].join(hub.token()).returncode == 0, "the removed agent joins again")
        owners = {os.stat(os.path.join(agents["a2"].state, "hub", f)).st_uid
                  for f in ("ca.crt", "agent.pem", "hub.json")}
        check(owners == {65534}, "join run by root leaves the files to the agent's account")
        wait_for("a2 back after joining again", lambda: hub.connected("a2"), 10, 0.05)

        # Renewal without a restart: the tunnels open keep serving, new ones use the new
        # certificate (all of them after the hub's restart below).
        pid = agents["a1"].process.proc.pid
        pem = os.path.join(agents["a1"].state, "hub", "agent.pem")
        before = open(pem).read()
        renewed = subprocess.run(agents["a1"].argv("renew", "--config", agents["a1"].config),
                                 capture_output=True, text=True, timeout=30)
        check(renewed.returncode == 0 and open(pem).read() != before,
              "a1 renews its certificate: " + renewed.stderr.strip())
        again = subprocess.run(agents["a1"].argv("renew", "--config", agents["a1"].config),
                               capture_output=True, text=True, timeout=30)
        check(again.returncode != 0 and "at most one renewal per 20 s" in again.stderr,
              "a second renewal at once is refused: " + again.stderr.strip()[-160:])
        for index in range(4):
            answer = json.loads(run(PROVIDER, "status", "--config", provider.config, "--json",
                                    check_rc=False).stdout)
            check(next(a for a in answer if a["name"] == "a1")["reachable"],
                  "a1 keeps serving after renewal (call %d)" % index)
        check(agents["a1"].process.proc.pid == pid and agents["a1"].process.alive(),
              "renewal needed no restart")

        # The hub killed in the middle of a burst of creates, then started again.
        names = ["garm-burst-%d" % i for i in range(16)]
        with concurrent.futures.ThreadPoolExecutor(16) as pool:
            futures = {pool.submit(provider.create, name): name for name in names}
            time.sleep(0.05)
            hub.process.stop(signal.SIGKILL)
            results = {futures[f]: f.result() for f in futures}
        failed = [n for n, r in results.items() if r.returncode != 0]
        status = run(PROVIDER, "status", "--config", provider.config, check_rc=False)
        check(status.returncode == 1 and "direct" in status.stdout and "hub lab: error" in status.stdout,
              "with the hub down, status still shows the direct agent, and the hub's error:\n"
              + status.stdout[-600:])
        log("burst: %d of 16 creates failed with the hub killed: %s"
            % (len(failed), {n: results[n].stderr.strip()[-120:] for n in failed[:3]}))
        check(all(r.returncode in (0, 1) for r in results.values()),
              "every create in flight ends with 0 or 1 (garm retries 1)")
        hub.start()
        restarted = time.time()  # the hub listens: what is left is the agents' own redial
        # Every enrolled agent, not the first one back: each dials on its own backoff (at most
        # 3 s, jittered by up to half: 4.5 s).
        wait_for("every agent back after the hub's restart",
                 lambda: all(hub.connected(name) for name in agents), 15, 0.05)
        figures.append(("agents back after a hub restart", time.time() - restarted))
        check(time.time() - restarted < 6,
              "every agent is back within 6 s of the hub's restart (the longest backoff, 4.5 s, "
              "and a dial)")
        for name in failed:  # as garm does: delete the failed instance, create it again
            check(provider.call("DeleteInstance", instance=name).returncode == 0,
                  "garm's delete of failed %s" % name)
            check(provider.create(name).returncode == 0, "garm's retry of %s" % name)
        listed = provider.instances()
        burst = sorted(n for n in listed if n.startswith("garm-burst-"))
        check(burst == sorted(names), "after the retries every burst instance exists once: %s"
              % burst)
        removed = provider.call("RemoveAllInstances")
        check(removed.returncode == 0 and provider.instances() == {},
              "RemoveAllInstances through the hub and directly leaves nothing")
        for name, agent in agents.items():
            left = os.listdir(os.path.join(agent.state, "instances"))
            check(not left, "agent %s keeps no instance record (nothing leaked): %s" % (name, left))
        fleet_quota_through_the_hub(hub, agents["direct"], work)
        fleet_of_32(hub, work)
        kept_deletes_in_parallel(provider, agents["direct"], work)
        revocation_reaches_the_direct_path(hub, agents["direct"], provider, work)
        hub_on_postgres(hub, work)
        two_hubs_on_postgres(network, work)
    except Exception as e:  # noqa: BLE001: a timeout or an OSError must show the logs too
        log("FAILED: %s%s" % ("" if isinstance(e, Failure) else type(e).__name__ + ": ", e))
        for name, agent in agents.items():
            log("--- %s log tail:\n%s" % (name, agent.log_text()[-3000:]))
        if hub:
            log("--- hub log tail:\n%s" % open(os.path.join(hub.dir, "hub.log")).read()[-3000:])
        return 1
    finally:
        if prometheus:
            prometheus.stop()
        for agent in agents.values():
            if agent.process:
                agent.stop()
        if hub and hub.process:
            hub.process.stop()
        if network:
            network.remove()
        if os.environ.get("GARM_EDGE_KEEP_WORK") is None:
            shutil.rmtree(work, ignore_errors=True)
    for what, seconds in figures:
        log("figure: %s: %s" % (what, seconds if isinstance(seconds, str) else "%.2f s" % seconds))
    log("%d checks passed" % len(checks))
    return 0


if __name__ == "__main__":
    sys.exit(main())
