#!/usr/bin/python3
"""One tenant attack of issue 25 against a running garm-edge-agent (started by bench/tenants.sh):
the attack runs, the legitimate tenant's requests are timed meanwhile, and the agent's RSS,
threads and descriptors are sampled (their highest value while the attack runs). Prints one
JSON line: legit (what the other tenant got), slowest ("N ms"; "none" when one got no answer;
"-" when nothing was timed), rss (MiB), threads, fds and note.

Usage: tenants.py PROBE CONFIG.json
"""

import base64
import collections
import hashlib
import json
import multiprocessing
import os
import resource
import socket
import ssl
import sys
import threading
import time

BOUND_S = 1.0  # the bar: answered within 1 s
cfg = json.load(open(sys.argv[2]))
pki = cfg["pki"]


# ---- the agent's figures ----------------------------------------------------------------------

def proc_figures():
    pid = cfg["agent_pid"]
    with open("/proc/%d/status" % pid) as status:
        fields = dict(line.split(":", 1) for line in status)
    return (int(fields["VmRSS"].split()[0]) / 1024.0, int(fields["Threads"]),
            len(os.listdir("/proc/%d/fd" % pid)))


class Sampler:
    """The highest RSS, thread and descriptor counts from start until stop."""

    def __init__(self):
        self.high = proc_figures()
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self.loop, daemon=True)
        self.thread.start()

    def loop(self):
        while not self.stopping.wait(0.1):
            try:
                self.high = tuple(max(a, b) for a, b in zip(self.high, proc_figures()))
            except OSError:
                return

    def stop(self):
        self.stopping.set()
        self.thread.join()
        return self.high


def report(legit, slowest, figures, note=""):
    rss, threads, fds = figures
    if slowest is not None:
        slowest = "none" if slowest == float("inf") else "%d ms" % round(slowest * 1000)
    print(json.dumps({"legit": legit, "slowest": slowest or "-",
                      "rss": round(rss, 1), "threads": threads, "fds": fds, "note": note}))


# ---- the control API ---------------------------------------------------------------------------

def client_context(client):
    context = ssl.create_default_context(cafile=pki + "/ca.crt")
    context.check_hostname = False
    context.load_cert_chain("%s/clients/%s.crt" % (pki, client), "%s/clients/%s.key" % (pki, client))
    return context


def api_request(client, method, path, body=None, timeout=2.0, source="127.0.0.1"):
    """One request on a new connection: (status, body), status 0 when it failed."""
    try:
        raw = socket.create_connection(("127.0.0.1", cfg["api_port"]), timeout=timeout,
                                       source_address=(source, 0))
        conn = client_context(client).wrap_socket(raw, server_hostname="localhost")
        payload = json.dumps(body).encode() if body is not None else b""
        conn.sendall(b"%s %s HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n"
                     b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n%s"
                     % (method.encode(), path.encode(), len(payload), payload))
        answer = b""
        while True:
            piece = conn.recv(65536)
            if not piece:
                break
            answer += piece
        conn.close()
        head, _, rest = answer.partition(b"\r\n\r\n")
        return int(head.split()[1]), rest
    except (OSError, ssl.SSLError, IndexError, ValueError):
        return 0, b""


def controller_of(client):
    return cfg["controllers"][client]


def answered_within_bound(tries, attempt):
    """`tries` calls of `attempt` (seconds to a 200, inf without one), one after another:
    ("answered within 1 s/tries", slowest)."""
    took = [attempt() for _ in range(tries)]
    return "%d/%d" % (sum(t <= BOUND_S for t in took), tries), max(took)


def legit_api(client, tries):
    """`tries` ListInstances of `client`'s controller."""
    path = "/v1/controllers/%s/pools/%s/instances" % (controller_of(client), cfg["pool"])

    def attempt():
        started = time.monotonic()
        status, _ = api_request(client, "GET", path)
        return time.monotonic() - started if status == 200 else float("inf")
    return answered_within_bound(tries, attempt)


def bootstrap(name, token="not-printed", tools=(), ca_bundle=None):
    """garm's CreateInstance input: relay-mode guest whose garm is the fake garm."""
    garm = "http://127.0.0.1:%d" % cfg["garm_port"]
    return {"name": name, "tools": list(tools), "repo_url": "https://github.com/example",
            "callback-url": garm + "/api/v1/callbacks", "metadata-url": garm + "/api/v1/metadata",
            "instance-token": token, "ssh-keys": None,
            "extra_specs": {"runner_install_template": "IyEvYmluL2Jhc2gK"},
            "github-runner-group": "",
            "ca-cert-bundle": base64.b64encode(ca_bundle).decode() if ca_bundle else None,
            "arch": "amd64", "os_type": "linux", "flavor": "small", "image": "debian-12",
            "labels": None, "pool_id": cfg["pool"],
            "user_data_options": {"disable_updates_on_boot": False, "extra_packages": None,
                                  "enable_boot_debug": False},
            "jit_config_enabled": True,
            "proxy_config": {"http_proxy": "", "https_proxy": "", "no_proxy": ""}}


def create(client, body):
    status, answer = api_request(client, "POST", "/v1/controllers/%s/instances" % controller_of(client),
                                 body, timeout=30)
    if status != 200:
        raise SystemExit("create %s: %d %s" % (body["name"], status, answer[:200]))
    return json.loads(answer)["addresses"][0]["address"]


def delete(client, name):
    api_request(client, "DELETE", "/v1/controllers/%s/instances/%s" % (controller_of(client), name),
                timeout=30)


def tool(url, sha256):
    return {"os": "linux", "architecture": "x64", "download_url": url,
            "filename": "actions-runner-linux-x64.tar.gz", "sha256_checksum": sha256}


# ---- attackers --------------------------------------------------------------------------------

def client_hello():
    """The first flight of a TLS client: what a stalled handshake sends before it stops."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    tls = context.wrap_bio(incoming, outgoing, server_hostname="localhost")
    try:
        tls.do_handshake()
    except ssl.SSLWantReadError:
        pass
    return outgoing.read()


class Holders:
    """Connections from `sources` to `port` that send `payload` (or nothing) and then stall; one
    the agent closes is opened again (the attacker's best move), checked every 0.5 s."""

    def __init__(self, port, sources, payload=None):
        self.port, self.payload = port, payload
        self.conns = [self.open(source) for source in sources]
        self.sources = list(sources)
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self.reopen, daemon=True)
        self.thread.start()

    def open(self, source):
        try:
            conn = socket.create_connection(("127.0.0.1", self.port), timeout=2,
                                            source_address=(source, 0))
            if self.payload:
                conn.sendall(self.payload)
            return conn
        except OSError:
            return None

    def reopen(self):
        while not self.stopping.wait(0.5):
            for i, conn in enumerate(self.conns):
                if conn is not None:
                    try:
                        if conn.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT):
                            continue  # an answer (a server hello): still held
                    except BlockingIOError:
                        continue  # nothing yet: still held
                    except OSError:
                        pass
                    conn.close()
                self.conns[i] = self.open(self.sources[i])

    def stop(self):
        self.stopping.set()
        self.thread.join()
        for conn in self.conns:
            if conn is not None:
                conn.close()


def held_tls(client, count, request):
    """`count` TLS connections of `client`, each sending `request` and reading its answer, then
    kept open (keep-alive): how many the agent let it hold."""
    context, held = client_context(client), []
    for _ in range(count):
        try:
            raw = socket.create_connection(("127.0.0.1", cfg["api_port"]), timeout=5)
            conn = context.wrap_socket(raw, server_hostname="localhost")
            conn.sendall(request)
            conn.recv(4096)
            held.append(conn)
        except (OSError, ssl.SSLError):
            pass
    return held


# ---- the guest service ------------------------------------------------------------------------

def guest_request(source, path, token, body=None, timeout=2.0, conn=None):
    """One HTTP/1.1 request from a guest's address: (status, seconds, connection kept)."""
    started = time.monotonic()
    try:
        if conn is None:
            conn = socket.create_connection((cfg["guest_host"], cfg["guest_port"]), timeout=timeout,
                                            source_address=(source, 0))
        payload = json.dumps(body).encode() if body is not None else b""
        conn.sendall(b"%s %s HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\n"
                     b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n%s"
                     % (b"POST" if body is not None else b"GET", path.encode(), token.encode(),
                        len(payload), payload))
        reader = conn.makefile("rb")
        status = int(reader.readline().split()[1])
        length, chunked, close = 0, False, False
        while True:
            line = reader.readline()
            if line in (b"\r\n", b""):
                break
            name, _, value = line.decode().partition(":")
            name, value = name.strip().lower(), value.strip().lower()
            length = int(value) if name == "content-length" else length
            chunked = chunked or (name == "transfer-encoding" and "chunked" in value)
            close = close or (name == "connection" and value == "close")
        if chunked:
            while True:
                size = int(reader.readline().split(b";")[0], 16)
                reader.read(size + 2)
                if size == 0:
                    break
        else:
            reader.read(length)
        reader.close()
        if close:
            conn.close()
            conn = None
        return status, time.monotonic() - started, conn
    except (OSError, ValueError, IndexError):
        if conn is not None:
            conn.close()
        return 0, float("inf"), None


def legit_guest(source, path, token, tries, timeout=2.0):
    """`tries` requests of one guest, each on a new connection and read to its end."""
    def attempt():
        status, took, conn = guest_request(source, path, token, timeout=timeout)
        if conn is not None:
            conn.close()
        return took if status == 200 else float("inf")
    return answered_within_bound(tries, attempt)


def slow_download(source, token, stopping):
    """garm-agent's download read at about 20 KB/s through a small receive buffer."""
    try:
        conn = socket.socket()
        conn.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        conn.bind((source, 0))
        conn.settimeout(5)
        conn.connect((cfg["guest_host"], cfg["guest_port"]))
        conn.sendall(b"GET /api/v1/metadata/tools/garm-agent/4f1e/download HTTP/1.1\r\nHost: x\r\n"
                     b"Authorization: Bearer %s\r\n\r\n" % token.encode())
        while not stopping.wait(0.05) and conn.recv(1024):
            pass
        conn.close()
    except OSError:
        pass


# ---- the probes -------------------------------------------------------------------------------

def stalled_hellos():
    hello = client_hello()
    sampler = Sampler()
    stalled = Holders(cfg["api_port"], ["127.0.0.%d" % (2 + i // 16) for i in range(64)], hello)
    silent = Holders(cfg["api_port"], ["127.0.0.%d" % (6 + i % 4) for i in range(1000)])
    time.sleep(1.0)
    legit, slowest = legit_api("garm", 20)
    stalled.stop()
    silent.stop()
    report(legit, slowest, sampler.stop(), "garm's ListInstances from 127.0.0.1")


def reopen_silent(stopping):
    """200 silent sockets from garm's address, the oldest closed (without a byte) as a new one
    opens, every 0.5 ms: in a process of its own, so the legitimate client does not slow it."""
    silent = collections.deque()
    while not stopping.is_set():
        try:
            silent.append(socket.create_connection(("127.0.0.1", cfg["api_port"]), timeout=2))
        except OSError:
            pass
        if len(silent) > 200:
            silent.popleft().close()
        time.sleep(0.0005)


def silent_own_address():
    sampler = Sampler()
    stopping = multiprocessing.Event()
    reopener = multiprocessing.Process(target=reopen_silent, args=(stopping,))
    reopener.start()
    time.sleep(1.0)
    legit, slowest = legit_api("garm", 20)
    stopping.set()
    reopener.join()
    report(legit, slowest, sampler.stop(), "garm's ListInstances from the same address")


def one_client_holds(holder, request, note):
    sampler = Sampler()
    held = held_tls(holder, cfg["max_connections"], request)
    time.sleep(0.5)
    victim = "other" if holder == "garm" else "garm"
    legit, slowest = legit_api(victim, 10)
    for conn in held:
        conn.close()
    report(legit, slowest, sampler.stop(), note % len(held))


def strangers_fill_guest_service():
    create("garm", bootstrap("garm-tenant-a", cfg["token_a"]))
    address = create("garm", bootstrap("garm-tenant-b", cfg["token_b"]))
    sampler = Sampler()
    strangers = Holders(cfg["guest_port"], ["127.0.1.%d" % (1 + i % 32) for i in range(512)])
    time.sleep(1.0)
    legit, slowest = legit_guest(address, "/api/v1/metadata/install-script/", cfg["token_b"], 11)
    strangers.stop()
    report(legit, slowest, sampler.stop(), "a guest's relayed install-script calls")


def slow_reader_downloads():
    slow_address = create("garm", bootstrap("garm-tenant-a", cfg["token_a"]))
    address = create("garm", bootstrap("garm-tenant-b", cfg["token_b"]))
    sampler = Sampler()
    stopping = threading.Event()
    readers = [threading.Thread(target=slow_download, args=(slow_address, cfg["token_a"], stopping))
               for _ in range(4)]
    for reader in readers:
        reader.start()
    time.sleep(1.0)
    legit, slowest = legit_guest(address, "/api/v1/metadata/tools/garm-agent/4f1e/download",
                                 cfg["token_b"], 3, timeout=5)  # the whole 3 MB each time
    stopping.set()
    for reader in readers:
        reader.join()
    report(legit, slowest, sampler.stop(),
           "another guest's 3 MB garm-agent download, whole within 1 s (5 s timeout)")


def report_flood():
    log = cfg["agent_log"]
    create("other", bootstrap("garm-tenant-b"))  # the other controller's history
    address = create("garm", bootstrap("garm-tenant-a", cfg["token_a"]))
    events = "/v1/controllers/%s/events" % controller_of("other")
    before = len(json.loads(api_request("other", "GET", events)[1]))
    lines_before = sum(1 for _ in open(log, "rb"))
    sampler = Sampler()
    conn, relayed, started = None, 0, time.monotonic()
    for i in range(2050):
        status, _, conn = guest_request(address, "/api/v1/callbacks/status", cfg["token_a"],
                                        {"status": "installing", "message": "step %d" % i}, conn=conn)
        relayed += status == 200
    took = time.monotonic() - started
    if conn is not None:
        conn.close()
    time.sleep(0.5)
    after = len(json.loads(api_request("other", "GET", events)[1]))
    lines = sum(1 for _ in open(log, "rb")) - lines_before
    report("%d/%d kept, %d log lines" % (after, before, lines), None, sampler.stop(),
           "the other controller's events kept after one guest's 2,050 reports in %.1f s "
           "(%d relayed), and the log lines they wrote" % (took, relayed))


def stalling_server():
    """An archive URL that answers 200, sends 64 KiB of its 4 MiB and then nothing."""
    listener = socket.create_server(("127.0.0.1", 0))

    def serve():
        held = []
        while True:
            conn, _ = listener.accept()
            conn.recv(65536)
            conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 4194304\r\n\r\n" + b"\0" * 65536)
            held.append(conn)
    threading.Thread(target=serve, daemon=True).start()
    return "http://127.0.0.1:%d/runner.tar.gz" % listener.getsockname()[1]


def slow_archive_downloads(url):
    first = proc_figures()
    sampler = Sampler()
    for i in range(8):
        name = "garm-archive%d" % i
        create("garm", bootstrap(name, tools=[tool(url, hashlib.sha256(b"%d" % i).hexdigest())]))
        time.sleep(0.3)
        delete("garm", name)
    time.sleep(2.0)
    high = sampler.stop()
    last = proc_figures()
    parts = sum(name.endswith(".part") for _, _, files in os.walk(cfg["state_dir"]) for name in files)
    report("threads %d->%d, %d .part" % (first[1], last[1], parts), None, high,
           "2 s after 8 create+delete naming slow archives: threads and .part files left (fds %d -> %d)"
           % (first[2], last[2]))


def ca_bundles():
    time.sleep(1.0)
    first = proc_figures()
    sampler = Sampler()
    names = []
    for i, bundle in enumerate(cfg["ca_bundles"]):
        names.append("garm-bundle%02d" % i)
        url = "https://127.0.0.1:1/runner-%d.tar.gz" % i  # refused: only the trust store is made
        create("garm", bootstrap(names[-1], tools=[tool(url, hashlib.sha256(b"%d" % i).hexdigest())],
                                 ca_bundle=open(bundle, "rb").read()))
    time.sleep(1.0)
    for name in names:
        delete("garm", name)
    time.sleep(2.0)
    high = sampler.stop()
    last = proc_figures()
    report("RSS %.1f->%.1f MiB" % (first[0], last[0]), None, high,
           "RSS after %d creates with distinct CA bundles, all deleted" % len(names))


PROBES = {
    "stalled-hellos": stalled_hellos,
    "silent-own-address": silent_own_address,
    "one-client-holds": lambda: one_client_holds(
        "garm", b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n",
        "the other controller's ListInstances while garm's certificate holds %d connections"),
    "unlisted-holds": lambda: one_client_holds(
        "stranger", b"GET /v1/images HTTP/1.1\r\nHost: x\r\n\r\n",
        "garm's ListInstances while an unlisted certificate opened %d kept-alive connections"),
    "strangers-guest-service": strangers_fill_guest_service,
    "slow-reader-downloads": slow_reader_downloads,
    "report-flood": report_flood,
    "slow-archives": lambda: slow_archive_downloads(
        "http://127.0.0.1:%d/downloads/runner.tar.gz" % cfg["garm_port"]),
    "stalled-archives": lambda: slow_archive_downloads(stalling_server()),
    "ca-bundles": ca_bundles,
}

resource.setrlimit(resource.RLIMIT_NOFILE, (8192, 8192))
PROBES[sys.argv[1]]()
