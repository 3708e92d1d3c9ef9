#!/usr/bin/python3
"""Hostile load against a running garm-edge-agent: silent, slow and foreign connections, huge
bodies and headers, deep JSON on the control API; the same plus token guessing and request
smuggling on the guest service. While each attack runs, a legitimate GetInstance through
garm-provider-edge (run as garm runs it) must be answered within 1 s, and the agent's RSS must
stay bounded. Prints one row per attack: the legitimate call's slowest time, RSS before, during
and after. Exits 1 when a bound is broken.

Usage: hostile_load.py CONFIG.json   (written by run_hostile_load.sh)
"""

import json
import os
import random
import resource
import socket
import ssl
import string
import subprocess
import sys
import threading
import time

LEGIT_BOUND_S = 1.0
RSS_BOUND_MIB = 96  # the agent on the test driver idles near 25 MiB

cfg = json.load(open(sys.argv[1]))
failures = []
rows = []


def rss_mib():
    with open("/proc/%d/status" % cfg["agent_pid"]) as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024.0
    raise RuntimeError("the agent is gone")


def legit_get():
    """garm's GetInstance through the provider; seconds taken (inf when it failed)."""
    env = {"GARM_COMMAND": "GetInstance", "GARM_CONTROLLER_ID": cfg["controller"],
           "GARM_INSTANCE_ID": cfg["instance"], "GARM_PROVIDER_CONFIG_FILE": cfg["provider_config"],
           "GARM_INTERFACE_VERSION": "v0.1.0"}
    started = time.monotonic()
    done = subprocess.run([cfg["provider"]], env=env, stdin=subprocess.DEVNULL,
                          capture_output=True, timeout=30)
    took = time.monotonic() - started
    if done.returncode != 0 or cfg["instance"] not in done.stdout.decode(errors="replace"):
        return float("inf"), done.stderr.decode(errors="replace").strip()
    return took, ""


# Guests' reserved addresses: the probes' (a wrong seed token counts as one of the guest's
# 20 misses a minute, so each address answers only a few probes) and the attackers'.
guests = cfg["guest_addresses"]
probe_addresses = guests[:20]
attacking_guests = guests[20:]
probes = iter(range(0, 1000))


def legit_guest():
    """A seed request from a guest's address no attack uses (a guest's one fetch, never a run of
    guesses that the rate limit would count); seconds taken for the agent's answer."""
    started = time.monotonic()
    try:
        source = probe_addresses[next(probes) % len(probe_addresses)]
        conn = socket.create_connection((cfg["guest_host"], cfg["guest_port"]), timeout=5,
                                        source_address=(source, 0))
        conn.sendall(b"GET /%s/meta-data HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
                     % token().encode())
        answer = conn.recv(4096)
        conn.close()
    except OSError as error:
        return float("inf"), str(error)
    took = time.monotonic() - started
    return (took, "") if answer.startswith(b"HTTP/1.1 404") else (float("inf"), answer[:60])


def token():
    return "".join(random.choice(string.ascii_letters + string.digits) for _ in range(43))


def run(name, attack, probe, rss_bound=RSS_BOUND_MIB, settle=0.5):
    """Starts `attack` (returns a stop function), probes while it runs, and records a row."""
    before = rss_mib()
    stop = attack()
    time.sleep(settle)
    slowest, during, problem = 0.0, before, ""
    for _ in range(5):
        took, why = probe()
        slowest = max(slowest, took)
        problem = problem or why
        during = max(during, rss_mib())
        time.sleep(0.2)
    stop()
    time.sleep(1.0)
    after = rss_mib()
    rows.append((name, slowest, before, during, after))
    if slowest > LEGIT_BOUND_S:
        failures.append("%s: the legitimate request took %.3f s %s" % (name, slowest, problem))
    if during > rss_bound or after > rss_bound:
        failures.append("%s: RSS reached %.1f MiB (bound %d)" % (name, max(during, after), rss_bound))


# ---- connections ------------------------------------------------------------------------------

def raw_connections(count, port, sources=("127.0.0.1",)):
    def attack():
        opened = []
        for i in range(count):
            try:
                opened.append(socket.create_connection(
                    ("127.0.0.1", port), timeout=2, source_address=(sources[i % len(sources)], 0)))
            except OSError:
                pass  # refused or reset: the server's choice
        return lambda: [s.close() for s in opened]
    return attack


def client_context(cert, key):
    context = ssl.create_default_context(cafile=cfg["ca"])
    context.check_hostname = False
    context.load_cert_chain(cert, key)
    return context


def slowloris(count, port, tls, sources=("127.0.0.1",)):
    """`count` connections that send a request head one byte every 2 s."""
    def attack():
        stopping = threading.Event()
        conns = []
        for i in range(count):
            try:
                raw = socket.create_connection(("127.0.0.1", port), timeout=5,
                                               source_address=(sources[i % len(sources)], 0))
                conns.append(tls.wrap_socket(raw, server_hostname="localhost") if tls else raw)
            except (OSError, ssl.SSLError):
                pass
        head = b"GET /healthz HTTP/1.1\r\nHost: localhost\r\nX-Slow: " + b"a" * 100

        def drip():
            position = 0
            while not stopping.wait(2.0) and position < len(head):
                for conn in conns:
                    try:
                        conn.send(head[position:position + 1])
                    except (OSError, ssl.SSLError):
                        pass
                position += 1
        dripper = threading.Thread(target=drip)
        dripper.start()

        def stop():
            stopping.set()
            dripper.join()
            for conn in conns:
                conn.close()
        return stop
    return attack


def foreign_handshakes(count, port):
    context = client_context(cfg["foreign_cert"], cfg["foreign_key"])

    def attack():
        stopping = threading.Event()

        def hammer():
            while not stopping.is_set():
                try:
                    raw = socket.create_connection(("127.0.0.1", port), timeout=5)
                    tls = context.wrap_socket(raw, server_hostname="localhost")
                    tls.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
                    tls.recv(100)
                    tls.close()
                except (OSError, ssl.SSLError):
                    pass
        workers = [threading.Thread(target=hammer) for _ in range(count // 25)]
        for worker in workers:
            worker.start()

        def stop():
            stopping.set()
            for worker in workers:
                worker.join()
        return stop
    return attack


# ---- requests ---------------------------------------------------------------------------------

def try_read_status(conn, wait):
    """The status line if the server has answered within `wait` seconds, else ''."""
    conn.settimeout(wait)
    try:
        answer = conn.recv(4096)
    except (socket.timeout, BlockingIOError, ssl.SSLWantReadError):
        return ""
    except (OSError, ssl.SSLError):
        return "(reset)"
    return answer.split(b"\r\n", 1)[0].decode(errors="replace") or "(closed)"


def send_and_answer(port, tls, payload, total=0, source="127.0.0.1"):
    """Sends `payload`, then `total` more bytes in 64 KiB pieces while looking for an answer.
    Returns the status line, or how far the upload got before the server cut it off."""
    raw = socket.create_connection(("127.0.0.1", port), timeout=30, source_address=(source, 0))
    conn = tls.wrap_socket(raw, server_hostname="localhost") if tls else raw
    sent = 0
    status = ""
    try:
        conn.sendall(payload)
        status = try_read_status(conn, 0.2)
        piece = b"x" * 65536
        while not status and sent < total:
            conn.settimeout(30)
            conn.sendall(piece)
            sent += len(piece)
            status = try_read_status(conn, 0)
    except (OSError, ssl.SSLError):
        status = status or try_read_status(conn, 1.0)
        if status in ("", "(reset)", "(closed)"):
            status = "cut off after %d KiB" % (sent >> 10)
    if not status:
        status = try_read_status(conn, 30)
    conn.close()
    return status


def streamed(port, tls, head, total, expected, parallel=1, source="127.0.0.1"):
    """`parallel` uploads of `head` and `total` bytes; each must be refused with `expected`, or
    cut off within the first 2 MiB."""
    def attack():
        results = []

        def one():
            results.append(send_and_answer(port, tls, head, total, source))
        threads = [threading.Thread(target=one) for _ in range(parallel)]
        for thread in threads:
            thread.start()

        def stop():
            for thread in threads:
                thread.join()
            for status in results:
                cut_early = status.startswith("cut off after") and int(status.split()[3]) <= 2048
                if expected not in status and not cut_early:
                    failures.append("expected %s, got '%s'" % (expected, status))
            outcomes.append("%s: %s" % (expected, ", ".join(sorted(set(results)))))
        return stop
    return attack


outcomes = []


def main():
    resource.setrlimit(resource.RLIMIT_NOFILE, (8192, 8192))
    garm = client_context(cfg["garm_cert"], cfg["garm_key"])
    api, guest_port = cfg["api_port"], cfg["guest_port"]
    controller = cfg["controller"]
    many_sources = tuple("127.0.1.%d" % i for i in range(1, 30))

    print("== control API (mutual TLS), while garm-provider-edge runs GetInstance")
    run("1,000 idle TCP connections", raw_connections(1000, api), legit_get)
    run("200 slowloris (TLS done, a byte every 2 s)", slowloris(200, api, garm), legit_get)
    run("200 handshakes with a foreign CA's certificate", foreign_handshakes(200, api), legit_get)
    run("a 100 MB body", streamed(api, garm, b"POST /v1/controllers/%s/instances HTTP/1.1\r\n"
                                  b"Host: x\r\nContent-Length: %d\r\n\r\n" % (controller.encode(), 100 << 20),
                                  100 << 20, "413"), legit_get)
    run("a 1 MB header line", streamed(api, garm, b"GET /healthz HTTP/1.1\r\nX-Big: ",
                                       1 << 20, "431"), legit_get)
    deep = b"[" * 500000 + b"]" * 500000
    run("16 x 1 MB of nested JSON in parallel",
        streamed(api, garm, b"POST /v1/controllers/%s/instances HTTP/1.1\r\nHost: x\r\n"
                 b"Content-Length: %d\r\n\r\n%s" % (controller.encode(), len(deep), deep), 0, "400",
                 parallel=16), legit_get)

    print("== guest service (plain HTTP), while a guest nobody attacks from asks for a seed")
    strangers = tuple("127.0.1.%d" % i for i in range(1, 33))
    run("32 addresses that are no guest's x 16 idle connections (closed at accept)",
        raw_connections(512, guest_port, strangers), legit_guest)
    run("1,000 idle TCP connections from one guest", raw_connections(1000, guest_port, attacking_guests[:1]),
        legit_guest)
    run("1,000 idle TCP connections from 16 guests",
        raw_connections(1000, guest_port, tuple(attacking_guests[:16])), legit_guest)
    run("200 slowloris from 16 guests", slowloris(200, guest_port, None, tuple(attacking_guests[:16])),
        legit_guest)
    run("a 100 MB body", streamed(guest_port, None, b"POST /api/v1/callbacks/status HTTP/1.1\r\n"
                                  b"Host: x\r\nContent-Length: %d\r\n\r\n" % (100 << 20),
                                  100 << 20, "413", source=attacking_guests[0]), legit_guest)
    run("a 1 MB header line", streamed(guest_port, None, b"GET /x/meta-data HTTP/1.1\r\nX-Big: ",
                                       1 << 20, "431", source=attacking_guests[0]), legit_guest)

    # 10,000 guesses from one address: uniform 404 until the limit, 429 after it.
    statuses, bodies = [], set()
    guesser_address = attacking_guests[17]
    guesser = socket.create_connection(("127.0.0.1", guest_port), timeout=10,
                                       source_address=(guesser_address, 0))
    reader = guesser.makefile("rb")
    for _ in range(10000):
        try:
            guesser.sendall(b"GET /%s/user-data HTTP/1.1\r\nHost: x\r\n\r\n" % token().encode())
            status = reader.readline().split()[1].decode()
            length = 0
            while True:
                line = reader.readline()
                if line in (b"\r\n", b""):
                    break
                if line.lower().startswith(b"content-length:"):
                    length = int(line.split(b":")[1])
            body = reader.read(length)
        except (OSError, IndexError):
            guesser = socket.create_connection(("127.0.0.1", guest_port), timeout=10,
                                               source_address=(guesser_address, 0))
            reader = guesser.makefile("rb")
            continue
        statuses.append(status)
        if status == "404":
            bodies.add(body)
    guesser.close()
    first_429 = statuses.index("429") if "429" in statuses else None
    print("10,000 random seed tokens from one address: %d answered 404 (%d distinct bodies), "
          "then 429 from request %s on; %d other answers" % (
              statuses.count("404"), len(bodies), first_429, len(statuses) - statuses.count("404") - statuses.count("429")))
    if first_429 is None or "404" in statuses[first_429:] or len(bodies) != 1 or \
            set(statuses) - {"404", "429"}:
        failures.append("token guessing was not a uniform 404 then 429")
    took, why = legit_guest()
    print("a seed request from another address meanwhile: %.0f ms %s" % (took * 1000, why))
    if took > LEGIT_BOUND_S:
        failures.append("the guest service was slow for an address that did not guess")

    smuggling = {
        "Content-Length with Transfer-Encoding":
            b"POST /api/v1/callbacks/status HTTP/1.1\r\nHost: x\r\nContent-Length: 4\r\n"
            b"Transfer-Encoding: chunked\r\n\r\n0\r\n\r\nGET /x HTTP/1.1\r\n\r\n",
        "two different Content-Lengths":
            b"POST /api/v1/callbacks/status HTTP/1.1\r\nHost: x\r\nContent-Length: 4\r\n"
            b"Content-Length: 40\r\n\r\nabcdGET /x HTTP/1.1\r\n\r\n",
        "two equal Content-Lengths":
            b"POST /api/v1/callbacks/status HTTP/1.1\r\nHost: x\r\nContent-Length: 4\r\n"
            b"Content-Length: 4\r\n\r\nabcd",
        "a Content-Length with a sign": b"POST /x HTTP/1.1\r\nHost: x\r\nContent-Length: +4\r\n\r\nabcd",
        "an obsolete folded header": b"GET /x HTTP/1.1\r\nHost: x\r\nX-A: a\r\n b\r\n\r\n",
        "a bare LF line end": b"GET /x HTTP/1.1\nHost: x\n\n",
    }
    for what, payload in smuggling.items():
        status = send_and_answer(guest_port, None, payload, source=attacking_guests[18])
        status = status if status else "(no answer)"
        refused = status.split(" ")[1:2] in (["400"], ["501"])
        print("smuggling, %s: %s" % (what, status or "(closed)"))
        if not refused:
            failures.append("smuggling with %s was not refused: '%s'" % (what, status))

    print()
    print("| attack | legit request, slowest | agent RSS before / during / after |")
    print("|---|---|---|")
    for name, slowest, before, during, after in rows:
        print("| %s | %.0f ms | %.1f / %.1f / %.1f MiB |" % (name, slowest * 1000, before, during, after))
    for outcome in outcomes:
        print("refusal seen (wanted " + outcome + ")")
    for failure in failures:
        print("FAILED: " + failure)
    if failures:
        sys.exit(1)
    print("hostile load: every legitimate request answered within 1 s, RSS bounded")


main()
