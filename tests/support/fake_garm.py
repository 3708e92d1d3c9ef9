#!/usr/bin/env python3
"""A fake garm controller for tests: garm's instance-facing callback and metadata endpoints
(docs: /work/shared/reference/garm-contract.md §3.1-3.4), over HTTPS or plain HTTP.

    fake_garm.py --cert C --key K --port-file F --log L [--plain] [--instances FILE]

Binds 127.0.0.1 on a free port and writes the port to F (atomically) once listening. Every
request is appended to L as one JSON line (method, path, query, headers, body as base64, time)
before it is answered. FILE maps instance tokens to their data:

    {"<token>": {"install_script": "...", "registration_token": "...",
                 "jit": {"runner": "<base64>", "credentials": "<base64>",
                         "credentials_rsaparams": "<base64>"},
                 "service_name": "...", "closed": false}}

Like garm, a token stops working (401) once its instance reported status idle or failed.
FILE is read again when it changes (instances added later keep the state of earlier ones), so
a test can add an instance whose script depends on one created before. An instance with
"hold_idle_until": "<path>" gets the answer to its `idle` report only once that path exists
(at most HOLD_SECONDS later): until garm answers, the agent keeps the guest's access open.
An instance with "answer_delay": <seconds> gets every answer that much later (a slow garm).

Agent mode (garm-contract §3): an instance with "agent_token" has garm-agent's WebSocket at
GET /agent, opened with that token (valid after idle too, as garm checks the instance, not
its bootstrap): garm pings at once, echoes text and binary frames, answers pings, and logs
every frame as {"method": "WS", "opcode", "body", "time"} and the socket's end as
{"method": "WS-END"}. In an install script, @AGENT_URL@ and @AGENT_TOKEN@ stand for them.
/api/v1/metadata/tools/garm-agent/<id>/download streams "agent_tool_bytes" (default 1 MiB)
of agent_tool_bytes() chunked, as garm's io.Copy does; with "agent_tool_cut_at", the
connection ends after that many bytes, without the last chunk.

With --downloads DIR, files in DIR are served without a token at /downloads/<name>, at most
--download-rate bytes per second (a WAN link to GitHub; 0: no limit), and /redirect/<name>
answers 302 to /downloads/<name>?signature=..., as GitHub's release URLs do.
"""

import argparse
import base64
import hashlib
import struct
import json
import os
import socket
import ssl
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

CALLBACKS = "/api/v1/callbacks"
METADATA = "/api/v1/metadata"
# The install script is padded past one 8 KiB read and always ends with this line, so a test
# can tell a complete script from a cut-off one.
SCRIPT_MIN_BYTES = 8 * 1024 + 1
SCRIPT_END = "# end of install script\n"
SCRIPT_PADDING = "# padding: garm's real install scripts are larger than one 8 KiB buffer\n"
# Irregular chunk sizes, so chunk boundaries fall anywhere in the client's reads.
CHUNK_SIZES = (4000, 1, 2500, 17)
UNIT_TEMPLATE = """[Unit]
Description=GitHub Actions Runner ({service})
After=network.target

[Service]
ExecStart=/home/{user}/actions-runner/runsvc.sh
User={user}
WorkingDirectory=/home/{user}/actions-runner
KillMode=process
KillSignal=SIGTERM
TimeoutStopSec=5min

[Install]
WantedBy=multi-user.target
"""


def error_body(error, details=""):
    return json.dumps({"error": error, "details": details}, separators=(",", ":")).encode()


AUTH_FAILED = error_body("Authentication failed")


# Keys this server adds to an instance at run time; a reload of the file keeps them.
RUNTIME_KEYS = ("closed", "registration_token_fetched")
HOLD_SECONDS = 600


class Instances:
    """Per-token state shared by the handler threads."""

    def __init__(self, path):
        self._lock = threading.Lock()
        self._path = path
        self._loaded_stamp = None
        self._data = {}
        self._reload_if_changed()

    def _reload_if_changed(self):
        if self._path is None:
            return
        info = os.stat(self._path)
        stamp = (info.st_mtime_ns, info.st_size, info.st_ino)
        if stamp == self._loaded_stamp:
            return
        with open(self._path, encoding="utf-8") as data:
            fresh = json.load(data)
        for token, instance in fresh.items():
            for key in RUNTIME_KEYS:
                if key in self._data.get(token, {}):
                    instance[key] = self._data[token][key]
        self._data, self._loaded_stamp = fresh, stamp

    def find(self, token):
        """The instance's data, or None when the token is unknown or no longer valid."""
        with self._lock:
            self._reload_if_changed()
            instance = self._data.get(token)
            return None if instance is None or instance.get("closed") else dict(instance)

    def close(self, token):
        with self._lock:
            self._data[token]["closed"] = True

    def by_agent_token(self, token):
        with self._lock:
            self._reload_if_changed()
            for instance in self._data.values():
                if token and instance.get("agent_token") == token:
                    return dict(instance)
            return None

    def take_registration_token(self, token):
        """The token text the first time, None afterwards (garm answers 401 then)."""
        with self._lock:
            instance = self._data[token]
            if instance.get("registration_token_fetched"):
                return None
            instance["registration_token_fetched"] = True
            return instance.get("registration_token")


class RequestLog:
    def __init__(self, path):
        self._lock = threading.Lock()
        self._path = path

    def append(self, entry):
        line = json.dumps(entry, separators=(",", ":")) + "\n"
        with self._lock, open(self._path, "a", encoding="utf-8") as log:
            log.write(line)


def agent_tool_block():
    """64 KiB that repeat to make the fake garm-agent binary (see agent_tool_sha256)."""
    seed = hashlib.sha256(b"garm-agent").digest()
    return b"".join(hashlib.sha256(seed + struct.pack(">I", i)).digest() for i in range(2048))


def agent_tool_sha256(size):
    digest, block, left = hashlib.sha256(), agent_tool_block(), size
    while left > 0:
        digest.update(block[:left])
        left -= len(block)
    return digest.hexdigest()


WS_GUID = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"


def ws_frame(opcode, payload):
    """A server frame: final, unmasked."""
    size = len(payload)
    if size < 126:
        head = struct.pack(">BB", 0x80 | opcode, size)
    elif size < 65536:
        head = struct.pack(">BBH", 0x80 | opcode, 126, size)
    else:
        head = struct.pack(">BBQ", 0x80 | opcode, 127, size)
    return head + payload


def ws_read_frame(stream):
    """(opcode, payload) of the next frame, or None at the end of the stream."""
    head = stream.read(2)
    if len(head) < 2:
        return None
    opcode, size = head[0] & 0x0F, head[1] & 0x7F
    if size == 126:
        size = struct.unpack(">H", stream.read(2))[0]
    elif size == 127:
        size = struct.unpack(">Q", stream.read(8))[0]
    mask = stream.read(4) if head[1] & 0x80 else b"\0\0\0\0"
    payload = bytearray(stream.read(size))
    for i in range(len(payload)):
        payload[i] ^= mask[i % 4]
    return opcode, bytes(payload)


def install_script_bytes(script):
    text = script if script.endswith("\n") else script + "\n"
    while len((text + SCRIPT_END).encode()) < SCRIPT_MIN_BYTES:
        text += SCRIPT_PADDING
    return (text + SCRIPT_END).encode()


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # needed for chunked responses
    server_version = "fake-garm"
    timeout = 10  # a client that stalls does not hold a thread for ever

    def log_message(self, format, *args):  # the request log is the only record
        pass

    # ---- plumbing ----------------------------------------------------------------------------

    def read_body(self):
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            body = b""
            while True:
                size = int(self.rfile.readline().split(b";")[0].strip(), 16)
                if size == 0:
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass
                    return body
                body += self.rfile.read(size)
                self.rfile.readline()
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length > 0 else b""

    def respond(self, status, body=b"", content_type="application/json", extra_headers=()):
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        for name, value in extra_headers:
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def respond_chunked(self, status, body, content_type):
        """Without Content-Length, as Go's net/http answers a large body."""
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        at, turn = 0, 0
        while at < len(body):
            piece = body[at : at + CHUNK_SIZES[turn % len(CHUNK_SIZES)]]
            self.wfile.write(b"%x\r\n%s\r\n" % (len(piece), piece))
            at, turn = at + len(piece), turn + 1
        self.wfile.write(b"0\r\n\r\n")

    def bearer_token(self):
        # As garm does: split on single spaces, exactly two parts, the scheme word unchecked.
        parts = (self.headers.get("Authorization") or "").split(" ")
        return parts[1] if len(parts) == 2 else None

    # ---- dispatch ----------------------------------------------------------------------------

    def handle_any(self):
        body = self.read_body()
        url = urlsplit(self.path)
        self.server.request_log.append(
            {
                "method": self.command,
                "path": url.path,
                "query": url.query,
                "headers": dict(self.headers.items()),
                "body": base64.b64encode(body).decode(),
                "time": time.time(),
            }
        )
        if url.path.startswith(("/downloads/", "/redirect/")) and self.server.downloads:
            self.download(url.path)
            return
        # garm registers every route with and without a trailing slash.
        path = url.path[:-1] if len(url.path) > 1 and url.path.endswith("/") else url.path
        if path == "/agent":
            self.agent_socket()
            return
        route = ROUTES.get(path)
        if path.startswith(METADATA + "/tools/garm-agent/") and path.endswith("/download"):
            route = ("GET", Handler.agent_tool)
        if route is None:
            self.respond(404, error_body("Not Found", "no such route"))
            return
        method, handler = route
        if self.command not in (method, "OPTIONS"):
            self.respond(405, content_type="text/plain")
            return
        token = self.bearer_token()
        instance = self.server.instances.find(token) if token else None
        if instance is None:
            self.respond(401, AUTH_FAILED)
            return
        if self.command == "OPTIONS":
            self.respond(200)
            return
        time.sleep(float(instance.get("answer_delay", 0)))
        handler(self, token, instance, body, parse_qs(url.query))

    do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = do_HEAD = do_OPTIONS = handle_any

    # ---- endpoints ---------------------------------------------------------------------------

    def agent_socket(self):
        token = self.bearer_token()
        instance = self.server.instances.by_agent_token(token)
        if instance is None:
            self.respond(401, AUTH_FAILED)
            return
        key = self.headers.get("Sec-WebSocket-Key", "")
        if self.headers.get("Upgrade", "").lower() != "websocket" or not key:
            self.respond(400, error_body("Bad Request", "not a websocket handshake"))
            return
        accept = base64.b64encode(hashlib.sha1((key + WS_GUID).encode()).digest()).decode()
        self.wfile.write(
            ("HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
             "Sec-WebSocket-Accept: %s\r\n\r\n" % accept).encode() + ws_frame(0x9, b"garm"))
        self.wfile.flush()
        self.connection.settimeout(300)
        end = "closed by the client"
        try:
            while True:
                frame = ws_read_frame(self.rfile)
                if frame is None:
                    break
                opcode, payload = frame
                self.server.request_log.append({"method": "WS", "path": "/agent", "opcode": opcode,
                                                "body": base64.b64encode(payload).decode(),
                                                "time": time.time()})
                if opcode in (0x1, 0x2):
                    self.wfile.write(ws_frame(opcode, payload))
                elif opcode == 0x9:
                    self.wfile.write(ws_frame(0xA, payload))
                elif opcode == 0x8:
                    self.wfile.write(ws_frame(0x8, payload[:2]))
                    end = "close frame"
                    break
                self.wfile.flush()
        except OSError as error:
            end = "error: %s" % error
        self.server.request_log.append({"method": "WS-END", "path": "/agent", "body": "",
                                        "end": end, "time": time.time()})
        self.close_connection = True

    def agent_tool(self, token, instance, body, query):
        size = int(instance.get("agent_tool_bytes", 1 << 20))
        self.send_response(200)
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        block, left = agent_tool_block(), size
        cut_at = int(instance.get("agent_tool_cut_at", size + 1))
        while left > 0:
            if size - left >= cut_at:  # garm's connection ends before the last chunk
                self.close_connection = True
                return
            piece = block[:left]
            self.wfile.write(b"%x\r\n%s\r\n" % (len(piece), piece))
            left -= len(piece)
        self.wfile.write(b"0\r\n\r\n")

    def download(self, path):
        kind, name = path.split("/")[1:3]
        file = os.path.join(self.server.downloads, os.path.basename(name))
        if not os.path.isfile(file):
            self.respond(404, b"no such file", "text/plain")
            return
        if kind == "redirect":
            location = "%s/downloads/%s?signature=%s" % (self.server.base_url, name, "a" * 40)
            self.respond(302, b"", "text/html", [("Location", location)])
            return
        size = os.path.getsize(file)
        first = self.range_start(size)
        if first is None:
            self.respond(416, b"", "text/plain", [("Content-Range", "bytes */%d" % size)])
            return
        self.send_response(206 if first else 200)
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("Content-Length", str(size - first))
        if first:
            self.send_header("Content-Range", "bytes %d-%d/%d" % (first, size - 1, size))
        self.end_headers()
        # <file>.cut holds a byte count: the connection drops once that much of the file was
        # sent (the file is removed, so the next request gets the rest).
        cut_file = file + ".cut"
        cut = int(open(cut_file).read()) if os.path.exists(cut_file) else None
        rate, started, sent = self.server.download_rate, time.monotonic(), 0
        with open(file, "rb") as data:
            data.seek(first)
            while True:
                piece = data.read(64 * 1024)
                if not piece:
                    break
                if cut is not None and first + sent + len(piece) > cut:
                    self.wfile.write(piece[:max(0, cut - first - sent)])
                    self.wfile.flush()
                    os.remove(cut_file)
                    self.close_connection = True
                    self.connection.shutdown(socket.SHUT_RDWR)
                    return
                self.wfile.write(piece)
                sent += len(piece)
                if rate:
                    ahead = sent / rate - (time.monotonic() - started)
                    if ahead > 0:
                        time.sleep(ahead)

    def range_start(self, size):
        """Where a "Range: bytes=N-" asks the answer to start: 0 without one, None past the end."""
        wanted = self.headers.get("Range", "")
        if not wanted.startswith("bytes=") or not wanted.endswith("-"):
            return 0
        first = int(wanted[6:-1])
        return first if first < size else None

    def parse_json_object(self, body):
        try:
            message = json.loads(body)
        except (ValueError, UnicodeDecodeError):
            message = None
        if not isinstance(message, dict):
            self.respond(400, error_body("Bad Request", "failed to decode request body"))
            return None
        return message

    def status(self, token, instance, body, query):
        message = self.parse_json_object(body)
        if message is None:
            return
        if message.get("status") == "idle" and instance.get("hold_idle_until"):
            deadline = time.monotonic() + HOLD_SECONDS
            while not os.path.exists(instance["hold_idle_until"]) and time.monotonic() < deadline:
                time.sleep(0.2)
        if message.get("status") in ("idle", "failed"):
            self.server.instances.close(token)
        self.respond(200)

    def system_info(self, token, instance, body, query):
        if self.parse_json_object(body) is not None:
            self.respond(200)

    def install_script(self, token, instance, body, query):
        script = instance.get("install_script")
        if script is None:
            self.respond(409, error_body("Conflict", "no install template for this pool"))
            return
        # Like garm's, the rendered script names garm's own URLs: @GARM_URL@ stands for them.
        script = script.replace("@GARM_URL@", self.server.base_url)
        script = script.replace("@AGENT_URL@", self.server.base_url + "/agent")
        script = script.replace("@AGENT_TOKEN@", instance.get("agent_token", ""))
        self.respond_chunked(200, install_script_bytes(script), "text/plain")

    def registration_token(self, token, instance, body, query):
        text = None if instance.get("jit") else self.server.instances.take_registration_token(token)
        if text is None:
            self.respond(401, error_body("Not Authorized"))
            return
        # garm sends the raw token under a JSON content type.
        self.respond(200, text.encode(), "application/json")

    def service_name(self, token, instance, body, query):
        name = instance.get("service_name", "actions.runner.example-org")
        self.respond(200, name.encode(), "text/plain")

    def unit_file(self, token, instance, body, query):
        user = query.get("runAsUser", ["runner"])[0]
        service = instance.get("service_name", "actions.runner.example-org")
        unit = UNIT_TEMPLATE.format(service=service, user=user)
        self.respond(200, unit.encode(), "text/plain")


def credentials_endpoint(file_name):
    """GET MD/credentials/<file_name>: one decoded JIT file, as an attachment."""

    def serve(handler, token, instance, body, query):
        files = instance.get("jit") or {}
        if file_name not in files:
            handler.respond(404, error_body("Not Found", "no such credentials file"))
            return
        handler.respond(
            200,
            base64.b64decode(files[file_name]),
            "application/octet-stream",
            [("Content-Disposition", "attachment; filename=." + file_name)],
        )

    return serve


ROUTES = {
    CALLBACKS + "/status": ("POST", Handler.status),
    CALLBACKS + "/system-info": ("POST", Handler.system_info),
    METADATA + "/install-script": ("GET", Handler.install_script),
    METADATA + "/runner-registration-token": ("GET", Handler.registration_token),
    METADATA + "/system/service-name": ("GET", Handler.service_name),
    METADATA + "/systemd/unit-file": ("GET", Handler.unit_file),
}
for _name in ("runner", "credentials", "credentials_rsaparams"):
    ROUTES[METADATA + "/credentials/" + _name] = ("GET", credentials_endpoint(_name))


class Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, tls_context, instances, request_log, downloads=None, download_rate=0,
                 bind="127.0.0.1"):
        self.downloads = downloads
        self.download_rate = download_rate
        self.tls_context = tls_context
        self.instances = instances
        self.request_log = request_log
        super().__init__((bind, 0), Handler)
        self.base_url = ("http://%s:%d" % (bind, self.server_address[1]) if tls_context is None
                         else "https://localhost:%d" % self.server_address[1])

    def finish_request(self, request, client_address):
        # The handshake runs on the connection's own thread: a client that never completes
        # one must not stall the accept loop.
        if self.tls_context is None:
            super().finish_request(request, client_address)
            return
        request.settimeout(Handler.timeout)
        try:
            connection = self.tls_context.wrap_socket(request, server_side=True)
        except (ssl.SSLError, OSError):
            return
        try:
            super().finish_request(connection, client_address)
        finally:
            connection.close()


def write_port_file(path, port):
    temp = path + ".tmp"
    with open(temp, "w", encoding="ascii") as out:
        out.write("%d\n" % port)
    os.replace(temp, path)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cert")
    parser.add_argument("--key")
    parser.add_argument("--port-file", required=True)
    parser.add_argument("--log", required=True)
    parser.add_argument("--plain", action="store_true", help="HTTP instead of HTTPS")
    parser.add_argument("--instances", help="JSON file: token -> instance data")
    parser.add_argument("--downloads", help="directory served at /downloads/")
    parser.add_argument("--bind", default="127.0.0.1", help="address to listen on (plain HTTP)")
    parser.add_argument("--download-rate", type=int, default=0, help="bytes per second, 0: no limit")
    args = parser.parse_args()

    tls_context = None
    if not args.plain:
        if not args.cert or not args.key:
            parser.error("--cert and --key are required without --plain")
        tls_context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        tls_context.load_cert_chain(args.cert, args.key)
    server = Server(tls_context, Instances(args.instances), RequestLog(args.log), args.downloads,
                    args.download_rate, args.bind)
    write_port_file(args.port_file, server.server_address[1])
    server.serve_forever()


if __name__ == "__main__":
    sys.exit(main())
