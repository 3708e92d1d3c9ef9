#!/usr/bin/env python3
"""A Gitea API on loopback with what garm calls for a repository's pools (read from garm's
source: util/github/gitea.go and the go-github paths it reuses under /api/v1): the repository's
Actions runners (listed with their labels, deleted), registration tokens and hooks; and the
releases list garm reads gitea-runner's downloads from (its endpoint's tools metadata URL). Every
request goes to a JSON-lines log. Test-only routes under /_test/ stand in for what
`gitea-runner register` does through Gitea's runner protocol (which garm never calls): a runner
of that name and labels appears, online.

Usage: fake_gitea.py WORK_DIR [ADDRESS]
       (writes WORK_DIR/gitea.port, WORK_DIR/gitea-requests.jsonl)
"""
import hashlib
import json
import re
import sys
import threading
from http.server import ThreadingHTTPServer

from fake_forge import JsonHandler, publish_port

WORK = sys.argv[1]
ADDRESS = sys.argv[2] if len(sys.argv) > 2 else "127.0.0.1"
LOCK = threading.Lock()
RUNNERS = {}  # id -> runner
NEXT_ID = [2000]
VERSION = "0.2.13"
OWNER = r"/api/v1/(?:repos/(?P<owner>[^/]+)/(?P<repo>[^/]+)|orgs/(?P<org>[^/]+))"

# What stands in for gitea-runner: `register` records the runner here (as Gitea's runner
# protocol would) and writes the indented .runner JSON act_runner writes, whose "id" line garm's
# install template reads; `daemon` runs until stopped.
RUNNER_PROGRAM = r"""#!/bin/bash
set -eu
case "${1:-}" in
  register)
    shift; name= labels= instance= token=
    while [ $# -gt 0 ]; do
      case "$1" in --name) name=$2; shift ;; --labels) labels=$2; shift ;;
        --instance) instance=$2; shift ;; --token) token=$2; shift ;; esac
      shift
    done
    id=$(curl -fsS -X POST -H 'Content-Type: application/json' \
      -d "{\"name\": \"$name\", \"labels\": \"$labels\", \"token\": \"$token\"}" \
      "${instance%/}/_test/register")
    printf '{\n  "id": %s,\n  "name": "%s",\n  "address": "%s"\n}\n' "$id" "$name" "$instance" > .runner
    ;;
  daemon) exec sleep infinity ;;
  --version|-v) echo "gitea-runner version v__VERSION__" ;;
esac
""".replace("__VERSION__", VERSION)


def runner_json(runner):
    return {"id": runner["id"], "name": runner["name"], "status": runner["status"],
            "busy": False, "ephemeral": True, "disabled": False,
            "labels": [{"id": i + 1, "name": label, "type": "custom"}
                       for i, label in enumerate(runner["labels"])]}


def owner_of(match):
    return match.group("org") or match.group("owner") + "/" + match.group("repo")


class Handler(JsonHandler):
    work = WORK
    log_name = "gitea-requests.jsonl"

    def base_url(self):
        return "http://%s:%d" % (ADDRESS, self.server.server_address[1])

    def releases(self):
        name = "gitea-runner-%s-linux-amd64" % VERSION
        program = self.server.program
        return [{"id": 1, "tag_name": "v" + VERSION, "name": "v" + VERSION, "draft": False,
                 "prerelease": False, "tarball_url": self.base_url() + "/_download/src.tar.gz",
                 "assets": [{"id": 11, "name": name, "size": len(program),
                             "browser_download_url": self.base_url() + "/_download/" + name},
                            {"id": 12, "name": name + ".sha256", "size": 64,
                             "browser_download_url": self.base_url() + "/_download/" + name +
                             ".sha256"}]}]

    def route(self):
        path = self.path.split("?")[0]
        method = self.command
        if method == "GET" and path == "/_releases":
            return self.answer(200, self.releases())
        if method == "GET" and path.startswith("/_download/gitea-runner-"):
            if path.endswith(".sha256"):
                return self.answer(200, hashlib.sha256(self.server.program).hexdigest().encode(),
                                   "text/plain")
            return self.answer(200, self.server.program, "application/octet-stream")
        match = re.fullmatch(OWNER + r"/actions/runners/registration-token", path)
        if method == "POST" and match:
            return self.answer(200, {"token": "gitea-registration-token-" + owner_of(match)})
        match = re.fullmatch(OWNER + r"/actions/runners", path)
        if method == "GET" and match:
            with LOCK:
                runners = [runner_json(r) for r in RUNNERS.values() if r["owner"] == owner_of(match)]
            return self.answer(200, {"runners": runners, "total_count": len(runners)})
        match = re.fullmatch(OWNER + r"/actions/runners/(?P<id>\d+)", path)
        if method == "DELETE" and match:
            with LOCK:
                runner = RUNNERS.get(int(match.group("id")))
                gone = runner is not None and runner["owner"] == owner_of(match)
                if gone:
                    del RUNNERS[runner["id"]]
            return self.answer(204) if gone else self.answer(404, {"message": "runner does not exist"})
        if method == "GET" and re.fullmatch(OWNER + r"/hooks", path):
            return self.answer(200, [])
        # `gitea-runner register --instance <api base URL>`: the repository is the token's.
        if method == "POST" and path == "/_test/register":
            request = self.body()
            owner = request.get("token", "").partition("gitea-registration-token-")[2]
            labels = [label for label in request.get("labels", "").split(",") if label]
            with LOCK:
                NEXT_ID[0] += 1
                RUNNERS[NEXT_ID[0]] = {"id": NEXT_ID[0], "name": request.get("name", ""),
                                       "labels": labels, "status": "online",
                                       "owner": owner or "owner/gitea-repo"}
            return self.answer(200, NEXT_ID[0])
        if method == "GET" and path == "/_test/runners":
            with LOCK:
                runners = [dict(r) for r in RUNNERS.values()]
            return self.answer(200, runners)
        return self.answer(404, {"message": "The target couldn't be found.", "errors": []})

    do_GET = do_POST = do_DELETE = do_PUT = do_PATCH = route


def main():
    server = ThreadingHTTPServer((ADDRESS, 0), Handler)
    server.daemon_threads = True
    server.program = RUNNER_PROGRAM.encode()
    publish_port(server, WORK, "gitea")
    server.serve_forever()


if __name__ == "__main__":
    main()
