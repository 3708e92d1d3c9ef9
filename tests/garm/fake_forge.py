"""What the fake forges (fake_github.py, fake_gitea.py) share: a JSON handler that logs every
request it answers to WORK_DIR/<log_name> as JSON lines, and the port file the tier waits for."""
import json
import os
import threading
import time
from http.server import BaseHTTPRequestHandler

LOG_LOCK = threading.Lock()


class JsonHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    work = "."
    log_name = "requests.jsonl"

    def log_message(self, *args):
        pass

    def parse_request(self):
        self._request_body = None  # one handler serves every request of a kept-alive connection
        return super().parse_request()

    def extra_headers(self):
        return {}

    def answer(self, status, body=None, content_type="application/json"):
        self.body()  # read, used or not: the connection is kept alive for the next request
        data = b"" if body is None else (body if isinstance(body, bytes) else json.dumps(body).encode())
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        for name, value in self.extra_headers().items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(data)
        with LOG_LOCK, open(os.path.join(self.work, self.log_name), "a") as log:
            log.write(json.dumps({"time": round(time.time(), 3), "method": self.command,
                                  "path": self.path, "status": status,
                                  "authorization": self.headers.get("Authorization", "")}) + "\n")

    def body(self):
        """The request's JSON body, read once."""
        if getattr(self, "_request_body", None) is None:
            length = int(self.headers.get("Content-Length") or 0)
            self._request_body = json.loads(self.rfile.read(length) or b"{}") if length else {}
        return self._request_body


def publish_port(server, work, name):
    """WORK/<name>.port, written atomically once the server listens."""
    with open(os.path.join(work, name + ".port.tmp"), "w") as f:
        f.write(str(server.server_address[1]))
    os.rename(os.path.join(work, name + ".port.tmp"), os.path.join(work, name + ".port"))
