#!/usr/bin/env python3
"""The fleet at garm's scale, with real parts: one hub and N `garm-edge-agent serve` processes on
libvirt's test driver, each in its own state directory and dialling the hub as a host behind NAT
does (no API port of its own), driven through `garm-provider-edge` exactly as garm runs it (one
process per command, a clean environment, many at once).

For each N (the agents are added, never restarted, between sizes) it prints one row:

  - CreateInstance, then GetInstance, then DeleteInstance of each, with C provider processes
    at once (C = 16 and 64; 256 with --wide): the p50 and p99 of each command as garm sees it
    (process start to exit), and failures;
  - ListInstances of one pool across the whole fleet (the reaper's call): its median;
  - the hub: CPU seconds per 1,000 relayed commands, RSS, open descriptors, tunnels;
  - `kill -9` of the hub and a restart: the time until every agent holds a tunnel again.

The figures go to FLEET_SCALE_OUT (default BUILD_DIR/fleet-scale) as fleet-scale.tsv and, with
gnuplot installed (`apt-get install gnuplot-nox`), fleet-scale.png (latency and hub CPU
against N). It fails only when a step
does not work: a command that fails is counted, not fatal.

Usage: bench/fleet_scale.py BUILD_DIR [N ...] [--wide] [--replay]
  --replay adds #381's shape at the largest N: 1,600 creates over 8 minutes, then their deletes.
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

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hub as hub_bench  # noqa: E402
from garm_tier_lib import wait_for  # noqa: E402

ARGS = [a for a in sys.argv[1:] if not a.startswith("--")]
BUILD = os.path.abspath(ARGS[0]) if ARGS else hub_bench.BUILD
SIZES = [int(n) for n in ARGS[1:]] or [8, 64, 256]
WIDE = "--wide" in sys.argv
REPLAY = "--replay" in sys.argv
OUT = os.path.abspath(os.environ.get("FLEET_SCALE_OUT", os.path.join(BUILD, "fleet-scale")))
PROVIDER = os.path.join(BUILD, "provider/garm-provider-edge")
hub_bench.HUB = os.path.join(BUILD, "hub/garm-edge-hub")
hub_bench.AGENT = os.path.join(BUILD, "agent/garm-edge-agent")


def run_garm(config, command, instance="", stdin=""):
    """One provider process as garm runs it: (seconds, exit code, stdout)."""
    env = {"GARM_COMMAND": command, "GARM_CONTROLLER_ID": hub_bench.CONTROLLER,
           "GARM_POOL_ID": hub_bench.POOL, "GARM_PROVIDER_CONFIG_FILE": config,
           "GARM_INTERFACE_VERSION": "v0.1.1"}
    if instance:
        env["GARM_INSTANCE_ID"] = instance
    started = time.perf_counter()
    result = subprocess.run((PROVIDER,), input=stdin, capture_output=True, text=True, env=env)
    return time.perf_counter() - started, result.returncode, result.stdout


def percentile(samples, fraction):
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(round(fraction * (len(ordered) - 1))))]


def provider_id(stdout, name):
    """What garm stores of a create and passes to every later command: the provider ID."""
    try:
        return json.loads(stdout).get("provider_id") or name
    except ValueError:
        return name


def burst(config, concurrency, ids, command):
    """`command` for every ID (a name for a create), `concurrency` processes at once:
    (times, failures, the provider IDs the creates answered)."""
    def one(instance):
        stdin = hub_bench.bootstrap(instance) if command == "CreateInstance" else ""
        seconds, code, out = run_garm(config, command, instance, stdin)
        return seconds, code == 0, provider_id(out, instance)
    with concurrent.futures.ThreadPoolExecutor(max_workers=concurrency) as pool:
        results = list(pool.map(one, ids))
    return ([r[0] for r in results], sum(1 for r in results if not r[1]),
            [r[2] for r in results])


def hub_fds(pid):
    return len(os.listdir("/proc/%d/fd" % pid))


def fleet_idle_cpu(bench, seconds=5.0):
    """The agents' own CPU while garm asks nothing (heartbeats, views, reconcile), all of them
    together, in % of one core: what the machine gives the fleet before any command."""
    pids = [p.proc.pid for p in bench.processes]
    before = sum(hub_bench.cpu_seconds(pid) for pid in pids)
    time.sleep(seconds)
    return (sum(hub_bench.cpu_seconds(pid) for pid in pids) - before) / seconds * 100


def solo_create_ms(config, size, count=5):
    """One create at a time (nothing else asked): its median, and each deleted after."""
    times = []
    for index in range(count):
        name = "garm-solo-n%d-%d" % (size, index)
        seconds, code, out = run_garm(config, "CreateInstance", name, hub_bench.bootstrap(name))
        if code == 0:
            times.append(seconds)
            run_garm(config, "DeleteInstance", provider_id(out, name))
    return statistics.median(times) * 1000 if times else float("nan")


def measure_size(bench, config, size, concurrencies, log):
    row = {"agents": size}
    pid = bench.hub.proc.pid
    row["fleet_idle_cpu_pct"] = fleet_idle_cpu(bench)
    row["solo_create_ms"] = solo_create_ms(config, size)
    for concurrency in concurrencies:
        ids = ["garm-n%d-c%d-%d" % (size, concurrency, i) for i in range(concurrency)]
        cpu_before = hub_bench.cpu_seconds(pid)
        commands = 0
        for command in ("CreateInstance", "GetInstance", "DeleteInstance"):
            times, failed, answered = burst(config, concurrency, ids, command)
            if command == "CreateInstance":
                ids = answered  # garm asks by provider ID from now on
            commands += len(ids)
            key = "%s_c%d" % (command, concurrency)
            row[key + "_p50"] = statistics.median(times) * 1000
            row[key + "_p99"] = percentile(times, 0.99) * 1000
            row[key + "_failed"] = failed
        row["hub_cpu_s_per_1000_c%d" % concurrency] = (
            (hub_bench.cpu_seconds(pid) - cpu_before) / commands * 1000)
    lists = [run_garm(config, "ListInstances")[0] for _ in range(5)]
    # garm's delete by name (after a failed create, and the reaper's orphans): every agent asked.
    row["delete_by_name_ms"] = run_garm(config, "DeleteInstance", "garm-never-created")[0] * 1000
    row["list_ms"] = statistics.median(lists) * 1000
    row["hub_rss_mib"] = hub_bench.rss_mib(pid)
    row["hub_fds"] = hub_fds(pid)
    row["tunnels"] = sum(a["tunnels"] for a in bench.hub_agents())
    bench.hub.stop(signal.SIGKILL)
    killed = time.time()
    bench.start_hub()
    wait_for("all %d agents back" % size, lambda: bench.connected() == size, 120, 0.05)
    row["reconnect_s"] = time.time() - killed
    log.write(json.dumps(row) + "\n")
    log.flush()
    return row


def replay_381(config, concurrency=64):
    """1,600 creates over 8 minutes (200 a minute, as garm's own test started them), one every
    0.3 s, each its own process as garm runs them; then every delete."""
    names = ["garm-r381-%d" % i for i in range(1600)]
    interval = 480.0 / len(names)
    started = time.time()
    futures = []
    with concurrent.futures.ThreadPoolExecutor(max_workers=concurrency) as pool:
        for index, name in enumerate(names):
            time.sleep(max(0.0, started + index * interval - time.time()))
            futures.append(pool.submit(run_garm, config, "CreateInstance", name,
                                       hub_bench.bootstrap(name)))
        created = [f.result() for f in futures]
    wall = time.time() - started
    failed = sum(1 for _, code, _ in created if code != 0)
    ids = [provider_id(out, name) for (_, _, out), name in zip(created, names)]
    _, delete_failures, _ = burst(config, concurrency, ids, "DeleteInstance")
    return wall, [s for s, _, _ in created], failed, delete_failures


def plot(rows):
    if not shutil.which("gnuplot") or len(rows) < 2:
        return None
    data = os.path.join(OUT, "fleet-scale.tsv")
    png = os.path.join(OUT, "fleet-scale.png")
    script = """set terminal png size 900,500
set output '%(png)s'
set logscale x 2
set xlabel 'agents behind the hub'
set ylabel 'ms (process start to exit)'
set y2label 'hub CPU s per 1,000 commands'
set y2tics
set key top left
plot '%(data)s' using 1:2 with linespoints title 'CreateInstance p99, 64 at once', \\
     '%(data)s' using 1:3 with linespoints title 'GetInstance p99, 64 at once', \\
     '%(data)s' using 1:4 with linespoints title 'ListInstances, one pool', \\
     '%(data)s' using 1:5 axes x1y2 with linespoints title 'hub CPU s / 1,000 commands'
""" % {"png": png, "data": data}
    subprocess.run(("gnuplot",), input=script, text=True, check=True)
    return png


def main():
    os.makedirs(OUT, exist_ok=True)
    work = tempfile.mkdtemp(prefix="garm-edge-bench-fleet-scale-")
    bench = hub_bench.Bench(work)
    concurrencies = [16, 64] + ([256] if WIDE else [])
    rows = []
    try:
        bench.start_hub()
        bench.token = bench.create_token("--uses", "5000")
        _, config = bench.provider_configs([])
        with open(os.path.join(OUT, "fleet-scale.jsonl"), "w") as log:
            for size in sorted(SIZES):
                for index in range(len(bench.processes), size):
                    bench.add_agent("host%04d" % index, direct=False)
                wait_for("%d agents connected" % size, lambda: bench.connected() == size,
                         60 + size // 2, 0.2)
                agent_rss = statistics.median(hub_bench.rss_mib(p.proc.pid)
                                              for p in bench.processes)
                row = measure_size(bench, config, size, concurrencies, log)
                row["agent_rss_mib"] = agent_rss
                rows.append(row)
                print("N=%4d | 16 at once: create p50/p99 %6.1f/%6.1f, get p99 %5.1f ms | 64 at "
                      "once: create p50/p99 %6.1f/%6.1f, get p99 %6.1f, delete p99 %6.1f ms, %d "
                      "failed | list %6.1f ms | delete by name %6.1f ms | hub %.2f CPU s/1,000, "
                      "RSS %5.1f MiB, %d fds, %d tunnels | back after kill -9: %.2f s | agent "
                      "RSS %.1f MiB | one create alone %.1f ms | the idle agents' CPU %.0f %% "
                      "of a core"
                      % (size, row["CreateInstance_c16_p50"], row["CreateInstance_c16_p99"],
                         row["GetInstance_c16_p99"], row["CreateInstance_c64_p50"],
                         row["CreateInstance_c64_p99"], row["GetInstance_c64_p99"],
                         row["DeleteInstance_c64_p99"],
                         row["CreateInstance_c64_failed"] + row["GetInstance_c64_failed"] +
                         row["DeleteInstance_c64_failed"], row["list_ms"],
                         row["delete_by_name_ms"], row["hub_cpu_s_per_1000_c64"],
                         row["hub_rss_mib"], row["hub_fds"], row["tunnels"], row["reconnect_s"],
                         agent_rss, row["solo_create_ms"], row["fleet_idle_cpu_pct"]),
                      flush=True)
        with open(os.path.join(OUT, "fleet-scale.tsv"), "w") as tsv:
            for row in rows:
                tsv.write("%d\t%.2f\t%.2f\t%.2f\t%.3f\n" % (
                    row["agents"], row["CreateInstance_c64_p99"], row["GetInstance_c64_p99"],
                    row["list_ms"], row["hub_cpu_s_per_1000_c64"]))
        png = plot(rows)
        if png:
            print("plot:", png)
        if REPLAY:
            pid = bench.hub.proc.pid
            cpu_before = hub_bench.cpu_seconds(pid)
            wall, times, failed, delete_failures = replay_381(config)
            cpu = (hub_bench.cpu_seconds(pid) - cpu_before) / wall * 100
            print("#381 replay at N=%d: 1,600 creates in %.0f s, %d failed, create p50/p99 "
                  "%.1f/%.1f ms, hub CPU %.1f %% of one core on average; %d deletes failed"
                  % (len(bench.processes), wall, failed, statistics.median(times) * 1000,
                     percentile(times, 0.99) * 1000, cpu, delete_failures))
    finally:
        bench.stop()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
