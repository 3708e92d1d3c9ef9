#!/usr/bin/env python3
"""A GitHub Enterprise API on loopback with what a repository's garm pools need: the rate limit,
runner application downloads (a tiny runner archive it serves itself), registration tokens,
JIT configs, and the repository's runners (listed, deleted). Every request goes to a JSON-lines
log. Test-only routes under /_test/ let the tier mark a runner online (what a real runner does
when run.sh connects) and read the runner list.

Usage: fake_github.py WORK_DIR   (writes WORK_DIR/github.port, WORK_DIR/github-requests.jsonl)
"""
import base64
import hashlib
import io
import json
import os
import re
import sys
import tarfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

WORK = sys.argv[1]
LOCK = threading.Lock()  # the runners; never held while answering
LOG_LOCK = threading.Lock()
RUNNERS = {}  # id -> runner
NEXT_ID = [1000]
REPO = r"/api/v3/repos/(?P<owner>[^/]+)/(?P<repo>[^/]+)"

# The runner archive: config.sh and run.sh that stand in for GitHub's runner, and the files
# garm's install template copies (bin/runsvc.sh, svc.sh). run.sh marks the runner online here.
RUNNER_FILES = {
    "config.sh": "#!/bin/bash\necho \"config.sh $*\" >> \"$(dirname \"$0\")/_diag.log\"\n",
    "run.sh": ("#!/bin/bash\ncd \"$(dirname \"$0\")\"\necho run.sh started >> _diag.log\n"
               "name=$(sed -n 's/.*\"agentName\": *\"\\([^\"]*\\)\".*/\\1/p' .runner)\n"
               "curl -fsS -X POST \"${GITHUB_URL:-__GITHUB__}/_test/runners/$name/online\" "
               ">> _diag.log 2>&1 || true\nexec sleep infinity\n"),
    "svc.sh": ("#!/bin/bash\ncd \"$(dirname \"$0\")\"\ncase \"$1\" in\n"
               "  install) echo installed >> _diag.log ;;\n"
               "  start) nohup ./run.sh > run.log 2>&1 & ;;\nesac\n"),
    # garm's install script copies it to the runner's home and starts it from a systemd unit.
    "bin/runsvc.sh": ("#!/bin/bash\ncd \"$(dirname \"$0\")\"\n"
                      "if [ -x ./run.sh ]; then exec ./run.sh; else exec ../run.sh; fi\n"),
    "bin/installdependencies.sh": "#!/bin/bash\nexit 0\n",
}


def runner_archive(github_url):
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as archive:
        for name, text in sorted(RUNNER_FILES.items()):
            data = text.replace("__GITHUB__", github_url).encode()
            info = tarfile.TarInfo("./" + name)
            info.size, info.mode, info.mtime = len(data), 0o755, 0
            archive.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def repository(match):
    return match.group("owner") + "/" + match.group("repo")


def runner_json(runner):
    return {"id": runner["id"], "name": runner["name"], "os": "linux",
            "status": runner["status"], "busy": False,
            "labels": [{"id": i + 1, "name": label, "type": "custom"}
                       for i, label in enumerate(runner["labels"])]}


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def answer(self, status, body=None, content_type="application/json"):
        data = b"" if body is None else (body if isinstance(body, bytes) else json.dumps(body).encode())
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        self.send_header("X-RateLimit-Limit", "5000")
        self.send_header("X-RateLimit-Remaining", "4999")
        self.send_header("X-RateLimit-Reset", str(int(time.time()) + 3600))
        self.end_headers()
        self.wfile.write(data)
        with LOG_LOCK, open(os.path.join(WORK, "github-requests.jsonl"), "a") as log:
            log.write(json.dumps({"time": round(time.time(), 3), "method": self.command,
                                  "path": self.path, "status": status}) + "\n")

    def body(self):
        length = int(self.headers.get("Content-Length") or 0)
        return json.loads(self.rfile.read(length) or b"{}") if length else {}

    def route(self):
        path = self.path.split("?")[0]
        method = self.command
        if method == "GET" and path == "/api/v3/rate_limit":
            rate = {"limit": 5000, "remaining": 4999, "used": 1, "reset": int(time.time()) + 3600}
            return self.answer(200, {"resources": {"core": rate}, "rate": rate})
        if method == "GET" and re.fullmatch(REPO + r"/actions/runners/downloads", path):
            url = "http://%s:%d/runner/actions-runner-linux-x64.tar.gz" % self.server.server_address
            return self.answer(200, [{"os": "linux", "architecture": "x64", "download_url": url,
                                      "filename": "actions-runner-linux-x64.tar.gz",
                                      "sha256_checksum": self.server.archive_sha256}])
        if method == "GET" and path == "/runner/actions-runner-linux-x64.tar.gz":
            return self.answer(200, self.server.archive, "application/gzip")
        if method == "POST" and re.fullmatch(REPO + r"/actions/runners/registration-token", path):
            return self.answer(201, {"token": "fake-registration-token",
                                     "expires_at": time.strftime("%Y-%m-%dT%H:%M:%SZ",
                                                                 time.gmtime(time.time() + 3600))})
        match = re.fullmatch(REPO + r"/actions/runners/generate-jitconfig", path)
        if method == "POST" and match:
            request = self.body()
            with LOCK:
                NEXT_ID[0] += 1
                runner = {"id": NEXT_ID[0], "name": request.get("name", ""), "status": "offline",
                          "labels": request.get("labels") or [], "repo": repository(match)}
                RUNNERS[runner["id"]] = runner
            files = {name: base64.b64encode(json.dumps(
                {"agentId": runner["id"], "agentName": runner["name"]}).encode()).decode()
                for name in (".runner", ".credentials", ".credentials_rsaparams")}
            encoded = base64.b64encode(json.dumps(files).encode()).decode()
            return self.answer(201, {"runner": runner_json(runner), "encoded_jit_config": encoded})
        match = re.fullmatch(REPO + r"/actions/runners", path)
        if method == "GET" and match:
            with LOCK:
                runners = [runner_json(r) for r in RUNNERS.values() if r["repo"] == repository(match)]
            return self.answer(200, {"total_count": len(runners), "runners": runners})
        match = re.fullmatch(REPO + r"/actions/runners/(?P<id>\d+)", path)
        if method == "DELETE" and match:
            with LOCK:
                runner = RUNNERS.get(int(match.group("id")))
                gone = runner is not None and runner["repo"] == repository(match)
                if gone:
                    del RUNNERS[runner["id"]]
            return self.answer(204) if gone else self.answer(404, {"message": "Not Found"})
        if method == "GET" and re.fullmatch(REPO + r"/hooks", path):
            return self.answer(200, [])
        # What GitHub shows when a runner's process connects, or its machine goes away.
        match = re.fullmatch(r"/_test/runners/(?P<name>[^/]+)/(?P<status>online|offline)", path)
        if method == "POST" and match:
            with LOCK:
                found = [r for r in RUNNERS.values() if r["name"] == match.group("name")]
                for runner in found:
                    runner["status"] = match.group("status")
            return self.answer(200 if found else 404, {"runners": len(found)})
        if method == "GET" and path == "/_test/runners":
            with LOCK:
                runners = [dict(r) for r in RUNNERS.values()]
            return self.answer(200, runners)
        return self.answer(404, {"message": "Not Found",
                                 "documentation_url": "https://docs.github.com/rest"})

    do_GET = do_POST = do_DELETE = do_PUT = do_PATCH = route


def main():
    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    url = "http://127.0.0.1:%d" % server.server_address[1]
    server.archive = runner_archive(url)
    server.archive_sha256 = hashlib.sha256(server.archive).hexdigest()
    with open(os.path.join(WORK, "github.port.tmp"), "w") as f:
        f.write(str(server.server_address[1]))
    os.rename(os.path.join(WORK, "github.port.tmp"), os.path.join(WORK, "github.port"))
    server.serve_forever()


if __name__ == "__main__":
    main()
