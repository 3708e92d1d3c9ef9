#!/usr/bin/env python3
"""What the VM-tier shell scripts need from Python, in one place: `vm_helpers.py COMMAND ARGS...`.

Each command prints its answer on stdout. The scripts call it instead of inline Python, so no
Python sits inside shell quoting.
"""
import base64
import datetime
import json
import os
import re
import sys
import time


def set_garm_instance(path, token, data):
    """Adds (or replaces) an instance in the fake garm's instances file: TOKEN, a JSON object."""
    with open(path) as f:
        instances = json.load(f)
    instances[token] = json.loads(data)
    with open(path + ".tmp", "w") as f:
        json.dump(instances, f)
    os.replace(path + ".tmp", path)


def garm_instance_data(install_script, hold_idle_until=None, agent_token=None):
    """The fake garm's view of one instance: its install script, a file whose appearance it
    waits for before it answers the instance's `idle`, and the JWT garm issued for its
    garm-agent (agent mode)."""
    data = {"install_script": install_script}
    if hold_idle_until:
        data["hold_idle_until"] = hold_idle_until
    if agent_token:
        data["agent_token"] = agent_token
    print(json.dumps(data))


def agent_token(name):
    """A JWT shaped as garm issues to an instance's garm-agent (`name`, `is_agent`). Its
    signature is garm's to check: the fake garm compares the whole token."""
    def part(value):
        return base64.urlsafe_b64encode(json.dumps(value).encode()).decode().rstrip("=")
    claims = {"id": "vm-test", "name": name, "is_agent": True}
    print(part({"alg": "HS256", "typ": "JWT"}) + "." + part(claims) + "." + part("signature"))


def ws_client_program():
    """tests/support/ws_client.py (garm-agent's side of the socket), base64-encoded so a
    guest's install script can carry it."""
    here = os.path.dirname(os.path.abspath(__file__))
    with open(os.path.join(here, "..", "support", "ws_client.py"), "rb") as f:
        print(base64.b64encode(f.read()).decode())


def agent_frames(log):
    """The payloads of the WebSocket frames the fake garm received on /agent, one per line."""
    for line in open(log):
        r = json.loads(line)
        if r["method"] == "WS":
            print(base64.b64decode(r["body"]).decode(errors="replace"))


def bootstrap_json(name, token, wrapper, garm_url, ca_path, pool, arch="amd64", shape="{}"):
    """A BootstrapInstance as garm sends it for a pool of ARCH whose extra specs add SHAPE (a JSON
    object: root_disk_gib, scratch_disks, ...); URLs point at the fake garm, its CA is the
    bundle."""
    with open(ca_path, "rb") as f:
        ca = f.read()
    extra_specs = {"runner_install_template": base64.b64encode(wrapper.encode()).decode()}
    extra_specs.update(json.loads(shape))
    print(json.dumps({
        "name": name, "tools": [], "repo_url": "https://github.com/example-org/example",
        "callback-url": garm_url + "/api/v1/callbacks",
        "metadata-url": garm_url + "/api/v1/metadata",
        "instance-token": token, "ssh-keys": None,
        "extra_specs": extra_specs,
        "github-runner-group": "", "ca-cert-bundle": base64.b64encode(ca).decode(),
        "arch": arch, "os_type": "linux", "flavor": "small", "image": "debian-12",
        "labels": ["self-hosted", "edge"], "pool_id": pool,
        "user_data_options": {"disable_updates_on_boot": True, "extra_packages": None,
                              "enable_boot_debug": False},
        "jit_config_enabled": True,
        "proxy_config": {"http_proxy": "", "https_proxy": "", "no_proxy": ""}}))


def add_tool(url, filename, sha256):
    """The BootstrapInstance on stdin with one runner tool (linux x64), as garm sends GitHub's."""
    bootstrap = json.load(sys.stdin)
    bootstrap["tools"] = [{"os": "linux", "architecture": "x64", "download_url": url,
                           "filename": filename, "sha256_checksum": sha256}]
    print(json.dumps(bootstrap))


def count_downloads(log, path):
    """How many GET requests for PATH reached the fake garm."""
    print(sum(1 for line in open(log)
              if json.loads(line)["method"] == "GET" and json.loads(line)["path"] == path))


def garm_log_summary(log):
    """Every request the fake garm received: method, path, the start of its token."""
    for line in open(log):
        r = json.loads(line)
        print(r["method"], r["path"], r.get("headers", {}).get("Authorization", "")[:20] + "...")


def json_field(path):
    """DOTTED.PATH of the JSON on stdin (list indexes are numbers); empty for null."""
    value = json.load(sys.stdin)
    for key in path.split("."):
        value = value[int(key)] if isinstance(value, list) else value.get(key)
    print("" if value is None else value)


def garm_requests(log, token):
    """The fake garm's requests carrying TOKEN, one line each: "TIME PATH BODY"."""
    for line in open(log):
        r = json.loads(line)
        if r.get("headers", {}).get("Authorization") == "Bearer " + token:
            body = base64.b64decode(r["body"]).decode(errors="replace").replace("\n", " ")
            print("%.3f %s %s" % (r["time"], r["path"], body))


def count_strangers(log, *tokens):
    """How many requests reached the fake garm with none of TOKENS as their bearer token
    (WebSocket frames are not requests: they travel on a socket opened by one). The image
    server's /downloads/ (the agent's pulls: public files) asks for none."""
    allowed = ["Bearer " + t for t in tokens]
    requests = (json.loads(line) for line in open(log))
    print(sum(1 for r in requests
              if "headers" in r and not r.get("path", "").startswith("/downloads/")
              and r["headers"].get("Authorization") not in allowed))


def seconds_between(rfc3339, epoch_seconds):
    """RFC3339 time minus EPOCH_SECONDS, to a tenth of a second."""
    moment = datetime.datetime.fromisoformat(rfc3339.replace("Z", "+00:00")).timestamp()
    print("%.1f" % (moment - float(epoch_seconds)))


ARP_CLAIM = r'''
import socket, sys, time
dev, mac, ip = sys.argv[1], bytes.fromhex(sys.argv[2].replace(":", "")), socket.inet_aton(sys.argv[3])
frame = b"\xff" * 6 + mac + b"\x08\x06" + b"\x00\x01\x08\x00\x06\x04\x00\x02" + mac + ip + b"\xff" * 6 + ip
s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW)
s.bind((dev, 0))
for _ in range(8):
    s.send(frame)
    time.sleep(0.5)
'''


def arp_claim_program():
    """A program a guest runs (`python3 - DEV MAC IP`) to claim IP over ARP with gratuitous
    replies, base64-encoded so it travels inside a shell script unquoted."""
    print(base64.b64encode(ARP_CLAIM.encode()).decode())


def warm_token(record_file):
    """The token a warm guest asks for its assignment with, read from its record in the agent's
    state directory (its seed's install script), as an attacker who knew it would use it."""
    import hashlib
    import re
    import yaml
    with open(record_file) as f:
        record = json.load(f)
    user_data = yaml.safe_load(record["guest"]["user_data"])
    script = next(base64.b64decode(f["content"]).decode() for f in user_data["write_files"]
                  if f["path"] == "/install_runner.sh")
    token = re.search(r"^WARM_TOKEN='([^']*)'$", script, re.M).group(1)
    # The agent keeps only the token's hash: this is the token it accepts, not a look-alike.
    if hashlib.sha256(token.encode()).hexdigest() != record["warm"]["token_hash"]:
        sys.exit("the seed's WARM_TOKEN is not the one the record's token_hash stands for")
    print(token)


def stamp_lines():
    """Copies stdin (a guest's console) to stdout, each line prefixed with the epoch time it
    arrived at, to a hundredth of a second."""
    for line in sys.stdin.buffer:
        text = line.decode("utf-8", "replace").rstrip("\r\n")
        print("%.2f %s" % (time.time(), text), flush=True)


BOOT_MARKERS = [
    ("kernel", re.compile(r"Linux version")),
    ("systemd", re.compile(r"systemd\[1\]: .*running in system mode|Welcome to ")),
    ("cloud-init init-local", re.compile(r"running 'init-local'")),
    ("cloud-init init (network up, seed fetched)", re.compile(r"running 'init' ")),
    ("cloud-init modules:config", re.compile(r"running 'modules:config'")),
    ("cloud-init modules:final", re.compile(r"running 'modules:final'")),
    ("login prompt", re.compile(r" login: ")),
    ("cloud-init finished", re.compile(r"Cloud-init v\. .* finished at")),
]


def boot_phases(console_log, since):
    """Where a guest's boot was, from its stamped console (stamp-lines), in seconds since
    SINCE (CreateInstance): the first line of each marker, in time order."""
    seen = {}
    for line in open(console_log, errors="replace", newline="\n"):
        stamp, _, text = line.partition(" ")
        try:
            at = float(stamp)
        except ValueError:  # a line of the guest's own, not a stamped one
            continue
        for name, pattern in BOOT_MARKERS:
            if name not in seen and pattern.search(text):
                seen[name] = at - float(since)
    for name, at in sorted(seen.items(), key=lambda item: item[1]):
        print("    +%5.1f s  %s" % (at, name))


COMMANDS = {
    "boot-phases": boot_phases,
    "stamp-lines": stamp_lines,
    "warm-token": warm_token,
    "set-garm-instance": set_garm_instance,
    "garm-instance-data": garm_instance_data,
    "bootstrap-json": bootstrap_json,
    "garm-log-summary": garm_log_summary,
    "json-field": json_field,
    "garm-requests": garm_requests,
    "count-strangers": count_strangers,
    "seconds-between": seconds_between,
    "arp-claim-program": arp_claim_program,
    "add-tool": add_tool,
    "count-downloads": count_downloads,
    "agent-token": agent_token,
    "ws-client-program": ws_client_program,
    "agent-frames": agent_frames,
}


def main():
    if len(sys.argv) < 2 or sys.argv[1] not in COMMANDS:
        sys.exit("usage: vm_helpers.py {%s} ARGS..." % ",".join(COMMANDS))
    try:
        COMMANDS[sys.argv[1]](*sys.argv[2:])
        sys.stdout.flush()
    except BrokenPipeError:
        # A reader that stops at the first match (grep -q, awk exit) is no error: under pipefail
        # a failing writer would turn its match into a miss.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())


if __name__ == "__main__":
    main()
