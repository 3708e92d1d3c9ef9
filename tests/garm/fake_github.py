#!/usr/bin/env python3
"""A GitHub Enterprise API on loopback with what a repository's garm pools need: the rate limit,
runner application downloads (a tiny runner archive it serves itself), registration tokens,
JIT configs, and the repository's runners (listed, deleted); and what its scale sets need of the
Actions service (read from garm's util/github/scalesets): the admin token exchange, scale sets,
their JIT configs, the agents list, message sessions and a long-polled message queue that never
has a job. Every request goes to a JSON-lines log. Test-only routes under /_test/ let the tier
mark a runner online (what a real runner does when run.sh connects) and read the runner list.

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
import uuid
from http.server import ThreadingHTTPServer

from fake_forge import JsonHandler, publish_port

WORK = sys.argv[1]
LOCK = threading.Lock()  # the runners; never held while answering
RUNNERS = {}  # id -> runner
NEXT_ID = [1000]
REPO = r"/api/v3/repos/(?P<owner>[^/]+)/(?P<repo>[^/]+)"
SCALE_SETS = {}  # id -> scale set
# The Actions service of one repository (its registration names it): /_actions/<owner>/<repo>.
ACTIONS = r"/_actions/(?P<owner>[^/]+)/(?P<repo>[^/]+)/_apis/(?:runtime|distributedtask)"
QUEUE_WAIT_SECONDS = 30  # GitHub holds a message poll about 50 s; garm must not spin

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


def jwt(seconds=3600):
    """A token garm parses without verifying, for its expiry only."""
    def part(value):
        return base64.urlsafe_b64encode(json.dumps(value).encode()).rstrip(b"=").decode()
    return "%s.%s.%s" % (part({"alg": "HS256", "typ": "JWT"}),
                         part({"exp": int(time.time()) + seconds}), "c2lnbmF0dXJl")


def agent_json(runner):
    """A runner as the Actions service lists it (garm's RunnerReference)."""
    return {"id": runner["id"], "name": runner["name"], "os": "linux",
            "runnerScaleSetId": runner.get("scale_set", 0), "runnerGroupId": 1,
            "runnerGroupName": "Default", "enabled": True, "ephemeral": True,
            "status": runner["status"], "busy": False, "provisioningState": "Provisioned",
            "labels": [{"name": label, "type": "System"} for label in runner["labels"]]}


def statistics():
    return {"totalAvailableJobs": 0, "totalAcquiredJobs": 0, "totalAssignedJobs": 0,
            "totalRunningJobs": 0, "totalRegisteredRunners": 0, "totalBusyRunners": 0,
            "totalIdleRunners": 0}


def session_json(handler, scale_set_id, session_id):
    scale_set = {k: v for k, v in SCALE_SETS.get(scale_set_id, {}).items() if k != "repo"}
    return {"sessionId": session_id, "ownerName": "garm",
            "runnerScaleSet": dict(scale_set, id=scale_set_id),
            "messageQueueUrl": "%s/_mq/%d" % (handler.base_url(), scale_set_id),
            "messageQueueAccessToken": jwt(), "statistics": statistics()}


class Handler(JsonHandler):
    work = WORK
    log_name = "github-requests.jsonl"

    def extra_headers(self):
        return {"X-RateLimit-Limit": "5000", "X-RateLimit-Remaining": "4999",
                "X-RateLimit-Reset": str(int(time.time()) + 3600)}

    def base_url(self):
        return "http://%s:%d" % self.server.server_address

    def actions(self, method, path, query):
        """The Actions service of garm's scale sets; None when `path` is not one of its routes."""
        if method == "POST" and path == "/actions/runner-registration":
            forge_url = self.body().get("url", "")  # <base>/<owner>/<repo>
            owner_repo = "/".join(forge_url.rstrip("/").split("/")[-2:])
            return 200, {"url": "%s/_actions/%s/" % (self.base_url(), owner_repo), "token": jwt()}
        match = re.fullmatch(ACTIONS + r"/(?P<rest>.*)", path)
        if match:
            return self.actions_of(method, repository(match), match.group("rest"), query)
        match = re.fullmatch(r"/_mq/(?P<id>\d+)(?:/(?P<message>\d+))?", path)
        if match:
            if method == "DELETE":
                return 204, None
            time.sleep(QUEUE_WAIT_SECONDS)  # no job comes: 202 after a long poll
            return 202, None
        return None

    def actions_of(self, method, repo, rest, query):
        if rest == "runnerscalesets":
            if method == "POST":
                request = self.body()
                with LOCK:
                    NEXT_ID[0] += 1
                    scale_set = dict(request, id=NEXT_ID[0], runnerGroupId=1,
                                     runnerGroupName="Default", statistics=statistics())
                    SCALE_SETS[scale_set["id"]] = dict(scale_set, repo=repo)
                return 200, scale_set
            with LOCK:
                found = [{k: v for k, v in s.items() if k != "repo"} for s in SCALE_SETS.values()
                         if s["repo"] == repo and s.get("name") == query.get("name")]
            return 200, {"count": len(found), "value": found}
        match = re.fullmatch(r"runnerscalesets/(?P<id>\d+)(?P<rest>/.*)?", rest)
        if match:
            return self.scale_set(method, repo, int(match.group("id")), match.group("rest") or "")
        if method == "GET" and rest == "pools/0/agents":
            with LOCK:
                agents = [agent_json(r) for r in RUNNERS.values() if r["repo"] == repo]
            return 200, {"count": len(agents), "value": agents}
        match = re.fullmatch(r"pools/0/agents/(?P<id>\d+)", rest)
        if match:
            with LOCK:
                runner = RUNNERS.get(int(match.group("id")))
                if runner is not None and runner["repo"] != repo:
                    runner = None
                if runner is not None and method == "DELETE":
                    del RUNNERS[runner["id"]]
            if runner is None:
                return 404, {"message": "runner not found"}
            return (204, None) if method == "DELETE" else (200, agent_json(runner))
        return 404, {"message": "Not Found"}

    def scale_set(self, method, repo, scale_set_id, rest):
        with LOCK:
            known = SCALE_SETS.get(scale_set_id, {}).get("repo") == repo
        if not known:
            return 404, {"message": "scale set not found"}
        if rest == "" and method == "DELETE":
            with LOCK:
                SCALE_SETS.pop(scale_set_id, None)
            return 204, None
        if rest == "" and method in ("GET", "PATCH"):
            with LOCK:
                scale_set = SCALE_SETS[scale_set_id]
                if method == "PATCH":
                    scale_set.update(self.body())
                shown = {k: v for k, v in scale_set.items() if k != "repo"}
            return 200, shown
        if rest == "/generatejitconfig" and method == "POST":
            request = self.body()
            with LOCK:
                NEXT_ID[0] += 1
                runner = {"id": NEXT_ID[0], "name": request.get("name", ""), "status": "offline",
                          "labels": [], "repo": repo, "scale_set": scale_set_id}
                RUNNERS[runner["id"]] = runner
            config = {".runner": base64.b64encode(json.dumps(
                {"agentId": runner["id"], "agentName": runner["name"]}).encode()).decode()}
            return 200, {"runner": agent_json(runner), "encodedJITConfig": base64.b64encode(
                json.dumps(config).encode()).decode()}
        if rest == "/sessions" and method == "POST":
            return 200, session_json(self, scale_set_id, str(uuid.uuid4()))
        match = re.fullmatch(r"/sessions/(?P<session>[0-9a-f-]+)", rest)
        if match:
            return (204, None) if method == "DELETE" else (
                200, session_json(self, scale_set_id, match.group("session")))
        if rest == "/acquirejobs" and method == "POST":
            return 200, {"count": 0, "value": []}
        return 404, {"message": "Not Found"}

    def route(self):
        path = self.path.split("?")[0]
        method = self.command
        query = dict(p.split("=", 1) for p in self.path.partition("?")[2].split("&") if "=" in p)
        handled = self.actions(method, path, query)
        if handled is not None:
            return self.answer(*handled)
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
    publish_port(server, WORK, "github")
    server.serve_forever()


if __name__ == "__main__":
    main()
