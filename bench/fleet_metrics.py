#!/usr/bin/env python3
"""The fleet scrape's figures, measured in one run on loopback (docs/observability.md):

  - one scrape of the hub with 64 agents connected (each holding 20 instances): its time and
    bytes, side by side with one agent's own /metrics scraped directly; the hub's RSS before the
    first scrape and after 20;
  - the agent's cost of the new metrics: its RSS and GetInstance latency (median of 500 on one
    keep-alive connection) with 200 instances, while /metrics is scraped ten times a second and
    while it is not; and, given an agent built before the start-up metrics (BEFORE_AGENT=path),
    the same figures of that agent side by side.

Agents run on libvirt's test driver. Prints figures; fails only when a step does not work.
Usage: bench/fleet_metrics.py BUILD_DIR
"""
import http.client
import os
import shutil
import ssl
import statistics
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hub as hub_bench  # noqa: E402  (the same hub, agents and provider set-up)
from garm_tier_lib import wait_for  # noqa: E402


def connection(bench, port, client):
    context = ssl.create_default_context(cafile=bench.pki("ca.crt"))
    context.load_cert_chain(bench.pki("clients/%s.crt" % client), bench.pki("clients/%s.key" % client))
    return http.client.HTTPSConnection("localhost", port, context=context, timeout=60)


def get(conn, path, method="GET", body=None):
    conn.request(method, path, body=body, headers={"Content-Type": "application/json"})
    answer = conn.getresponse()
    data = answer.read()
    if answer.status != 200:
        raise RuntimeError("%s %s: HTTP %d %s" % (method, path, answer.status, data[:200]))
    return data


def timed(action, runs):
    samples = []
    for _ in range(runs):
        started = time.perf_counter()
        result = action()
        samples.append(time.perf_counter() - started)
    return statistics.median(samples), result


def fill_through_hub(bench, names, per_agent):
    conn = connection(bench, bench.provider_port, "garm")
    for name in names:
        for index in range(per_agent):
            get(conn, "/v1/agents/%s/relay/v1/controllers/%s/instances" % (name, hub_bench.CONTROLLER),
                "POST", hub_bench.bootstrap("garm-%s-%d" % (name, index)))
    conn.close()


def agent_cost(bench, agent_binary, label):
    """RSS and GetInstance latency of one direct agent with 200 instances."""
    name = "cost-" + "".join(c if c.isalnum() else "-" for c in label)
    original = hub_bench.AGENT
    hub_bench.AGENT = agent_binary
    try:
        bench.add_agent(name, direct=True)
    finally:
        hub_bench.AGENT = original
    process = bench.processes[-1]

    def listening():
        try:
            conn = connection(bench, bench.agents[name], "garm")
            get(conn, "/healthz")
            conn.close()
            return True
        except (OSError, RuntimeError):
            return False

    wait_for(name + " listening", listening, 30, 0.1)
    bench.fill(name, 200)
    conn = connection(bench, bench.agents[name], "garm")
    path = "/v1/controllers/%s/instances/garm-%s-100" % (hub_bench.CONTROLLER, name)
    get(conn, path)
    quiet, _ = timed(lambda: get(conn, path), 500)
    stop = threading.Event()

    def scrape():
        scraper = connection(bench, bench.agents[name], "garm")
        while not stop.is_set():
            get(scraper, "/metrics")
            time.sleep(0.1)
        scraper.close()

    scraper = threading.Thread(target=scrape)
    scraper.start()
    time.sleep(0.5)
    scraped, _ = timed(lambda: get(conn, path), 500)
    stop.set()
    scraper.join()
    metrics_bytes = len(get(conn, "/metrics"))
    conn.close()
    rss = hub_bench.rss_mib(process.proc.pid)
    print("  %-34s RSS %5.1f MiB | GetInstance %5.2f ms, %5.2f ms while /metrics is scraped 10/s"
          " | /metrics %6d bytes" % (label, rss, quiet * 1000, scraped * 1000, metrics_bytes))


def main():
    work = tempfile.mkdtemp(prefix="garm-edge-bench-fleet-metrics-")
    bench = hub_bench.Bench(work)
    try:
        bench.start_hub()
        subprocess.run((hub_bench.HUB, "issue-client", "prometheus", "--role", "metrics",
                        "--config", bench.hub_config), check=True, capture_output=True)
        bench.token = bench.create_token("--uses", "100")
        print("== the agent's cost of the new metrics (200 instances on the test driver)")
        agent_cost(bench, hub_bench.AGENT, "this build")
        before = os.environ.get("BEFORE_AGENT")
        if before:
            agent_cost(bench, before, "before the start-up metrics")
        else:
            print("  (BEFORE_AGENT unset: no agent built before the start-up metrics to compare)")

        names = ["lab%02d" % index for index in range(1, 65)]
        for name in names:
            bench.add_agent(name, direct=False)
        wait_for("64 agents connected", lambda: bench.connected() >= 64, 120, 0.2)
        fill_through_hub(bench, names, 20)
        print("== one scrape of the hub, 64 agents connected (20 instances each)")
        pid = bench.hub.proc.pid
        rss_before = hub_bench.rss_mib(pid)
        hub = connection(bench, bench.provider_port, "prometheus")
        hub_time, text = timed(lambda: get(hub, "/metrics"), 20)
        hub.close()
        rss_after = hub_bench.rss_mib(pid)
        lines = text.decode().split("\n")
        up = sum(1 for line in lines if line.startswith("garm_edge_agent_up{") and line.endswith(" 1"))
        samples = sum(1 for line in lines if line and not line.startswith("#"))
        # The reference: one agent's own /metrics (what a scrape of each host costs without a hub).
        direct_name = next(n for n in bench.agents if bench.agents[n])
        direct = connection(bench, bench.agents[direct_name], "garm")
        one_time, one_text = timed(lambda: get(direct, "/metrics"), 20)
        direct.close()
        print("  the hub, 64 agents : %7.1f ms (median of 20), %8d bytes, %d samples, %d agents up"
              % (hub_time * 1000, len(text), samples, up))
        print("  one agent directly : %7.1f ms (median of 20), %8d bytes  (x64 in turn: %.0f ms)"
              % (one_time * 1000, len(one_text), one_time * 64000))
        print("  hub RSS: %.1f MiB before the first scrape, %.1f MiB after 20" % (rss_before, rss_after))
    finally:
        bench.stop()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
