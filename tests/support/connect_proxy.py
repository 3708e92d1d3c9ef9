#!/usr/bin/env python3
"""A minimal HTTP CONNECT proxy for tests, as squid or tinyproxy answer a client.

    connect_proxy.py --port-file F --log L

Binds 127.0.0.1 on a free port and writes it to F once listening. For each CONNECT host:port
it logs one line "CONNECT host:port" to L, answers 200 and pipes bytes both ways; any other
request line is logged and answered 405.
"""

import argparse
import os
import select
import socket
import sys
import threading


def pipe(client, upstream):
    sockets = [client, upstream]
    while True:
        readable, _, _ = select.select(sockets, [], [], 60)
        if not readable:
            return
        for source in readable:
            data = source.recv(65536)
            if not data:
                return
            (upstream if source is client else client).sendall(data)


def serve(client, log):
    with client:
        head = b""
        while b"\r\n\r\n" not in head:
            data = client.recv(1)
            if not data:
                return
            head += data
        line = head.split(b"\r\n")[0].decode("latin-1")
        with open(log, "a", encoding="utf-8") as out:
            out.write(line.rsplit(" ", 1)[0] + "\n")
        method, target = line.split(" ")[:2]
        if method != "CONNECT":
            client.sendall(b"HTTP/1.1 405 Method Not Allowed\r\nContent-Length: 0\r\n\r\n")
            return
        host, port = target.rsplit(":", 1)
        with socket.create_connection((host, int(port)), timeout=10) as upstream:
            client.sendall(b"HTTP/1.1 200 Connection established\r\n\r\n")
            pipe(client, upstream)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port-file", required=True)
    parser.add_argument("--log", required=True)
    args = parser.parse_args()
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(16)
    temp = args.port_file + ".tmp"
    with open(temp, "w", encoding="ascii") as out:
        out.write("%d\n" % listener.getsockname()[1])
    os.replace(temp, args.port_file)
    while True:
        client, _ = listener.accept()
        threading.Thread(target=serve, args=(client, args.log), daemon=True).start()


if __name__ == "__main__":
    sys.exit(main())
