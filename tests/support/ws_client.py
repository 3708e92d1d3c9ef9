#!/usr/bin/env python3
"""garm-agent's side of its WebSocket, for tests: the upgrade as gorilla/websocket sends it
(Authorization, no Origin), from a chosen source address.

    ws_client.py URL SOURCE TOKEN [--send TEXT]... [--ping] [--hold SECONDS]

Prints one JSON object: the answer's status (and body when it is not 101), whether
Sec-WebSocket-Accept matches the key, whether garm's first ping arrived, the echo of each
--send, whether --ping got its pong, and with --hold, after how many seconds the other end
closed the socket while the client stayed silent, or only pinged every second with
--keepalive (null: still open when the hold ended).
"""

import argparse
import base64
import hashlib
import json
import os
import socket
import struct
import sys
import time
from urllib.parse import urlsplit

WS_GUID = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"


def frame(opcode, payload):
    """A client frame: final, masked."""
    mask = os.urandom(4)
    size = len(payload)
    head = struct.pack(">B", 0x80 | opcode)
    if size < 126:
        head += struct.pack(">B", 0x80 | size)
    else:
        head += struct.pack(">BH", 0x80 | 126, size)
    return head + mask + bytes(b ^ mask[i % 4] for i, b in enumerate(payload))


class Reader:
    def __init__(self, sock):
        self.sock, self.buffer = sock, b""

    def exactly(self, size):
        while len(self.buffer) < size:
            got = self.sock.recv(65536)
            if not got:
                raise EOFError
            self.buffer += got
        out, self.buffer = self.buffer[:size], self.buffer[size:]
        return out

    def head(self):
        while b"\r\n\r\n" not in self.buffer:
            got = self.sock.recv(65536)
            if not got:
                raise EOFError
            self.buffer += got
        head, self.buffer = self.buffer.split(b"\r\n\r\n", 1)
        return head.decode("latin-1")

    def frame(self):
        first, second = self.exactly(2)
        size = second & 0x7F
        if size == 126:
            size = struct.unpack(">H", self.exactly(2))[0]
        elif size == 127:
            size = struct.unpack(">Q", self.exactly(8))[0]
        return first & 0x0F, self.exactly(size)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("url")
    parser.add_argument("source")
    parser.add_argument("token")
    parser.add_argument("--send", action="append", default=[])
    parser.add_argument("--ping", action="store_true")
    parser.add_argument("--hold", type=float, default=0)
    parser.add_argument("--keepalive", action="store_true", help="ping every second while holding")
    args = parser.parse_args()

    url = urlsplit(args.url)
    sock = socket.create_connection((url.hostname, url.port), timeout=20,
                                    source_address=(args.source, 0))
    key = base64.b64encode(os.urandom(16)).decode()
    sock.sendall(("GET %s HTTP/1.1\r\nHost: %s\r\nUser-Agent: Go-http-client/1.1\r\n"
                  "Upgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: %s\r\n"
                  "Sec-WebSocket-Version: 13\r\nAuthorization: Bearer %s\r\n\r\n"
                  % (url.path or "/", url.netloc, key, args.token)).encode())
    reader = Reader(sock)
    result = {}
    try:
        head = reader.head()
    except EOFError:
        print(json.dumps({"status": 0}))
        return
    result["status"] = int(head.split(" ")[1])
    headers = {line.split(":", 1)[0].strip().lower(): line.split(":", 1)[1].strip()
               for line in head.split("\r\n")[1:] if ":" in line}
    if result["status"] != 101:
        length = int(headers.get("content-length", "0"))
        result["body"] = reader.exactly(length).decode("utf-8", "replace") if length else ""
        print(json.dumps(result))
        return
    expected = base64.b64encode(hashlib.sha1((key + WS_GUID).encode()).digest()).decode()
    result["accept_ok"] = headers.get("sec-websocket-accept") == expected
    result["garm_ping"] = reader.frame() == (0x9, b"garm")
    result["echo"] = []
    for text in args.send:
        sock.sendall(frame(0x1, text.encode()))
        result["echo"].append(reader.frame()[1].decode())
    if args.ping:
        sock.sendall(frame(0x9, b"agent"))
        result["pong"] = reader.frame() == (0xA, b"agent")
    result["closed_after"] = None
    if args.hold:
        started = time.monotonic()
        while time.monotonic() - started < args.hold:
            left = args.hold - (time.monotonic() - started)
            sock.settimeout(min(left, 1.0) if args.keepalive else left)
            try:
                reader.frame()
            except (EOFError, ConnectionError):
                result["closed_after"] = round(time.monotonic() - started, 2)
                break
            except socket.timeout:
                if args.keepalive:
                    sock.sendall(frame(0x9, b"keepalive"))
    print(json.dumps(result))


if __name__ == "__main__":
    sys.exit(main())
