"""A real git smart-HTTP server over TLS for the tests: ``git http-backend`` (CGI) behind Python's HTTP server.

``python -m tests.supervisor._git_https_server --addr A --port P --cert C --key K --root R`` serves every
repository under ``R`` (``GIT_HTTP_EXPORT_ALL``) at ``https://<name>:P/<repo>`` and prints ``listening`` once it
accepts connections. With ``REQUIRE_AUTHORIZATION`` in its environment every request must carry exactly that
``Authorization`` header (else ``401``). Git's own CGI does the protocol (v0 and v2, gzip request bodies); this
module only passes the request to it and its answer back. Run it inside a lab namespace (``tests/sandbox/_netlab.py``).
"""

from __future__ import annotations

import argparse
import http.server
import os
import ssl
import subprocess
import sys
from urllib.parse import urlsplit

BACKEND = "/usr/lib/git-core/git-http-backend"


def _handler(root: str) -> type[http.server.BaseHTTPRequestHandler]:
    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.0"  # one request per connection: the body's end is the connection's

        def do_GET(self) -> None:
            self._cgi()

        def do_POST(self) -> None:
            self._cgi()

        def _cgi(self) -> None:
            required = os.environ.get("REQUIRE_AUTHORIZATION")  # a credential the clone must bring
            if required and self.headers.get("Authorization") != required:
                self.send_response(401)
                self.send_header("WWW-Authenticate", 'Bearer realm="lab"')
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            parts = urlsplit(self.path)
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length else b""
            env = {
                "PATH": "/usr/bin:/bin",
                "GIT_PROJECT_ROOT": root,
                "GIT_HTTP_EXPORT_ALL": "1",
                "REQUEST_METHOD": self.command,
                "PATH_INFO": parts.path,
                "QUERY_STRING": parts.query,
                "CONTENT_TYPE": self.headers.get("Content-Type") or "",
                "CONTENT_LENGTH": str(len(body)),
                "REMOTE_ADDR": self.client_address[0],
                "GIT_CONFIG_NOSYSTEM": "1",
                "HOME": root,
            }
            if self.headers.get("Content-Encoding"):
                env["HTTP_CONTENT_ENCODING"] = self.headers["Content-Encoding"]
            if self.headers.get("Git-Protocol"):
                env["GIT_PROTOCOL"] = self.headers["Git-Protocol"]
            done = subprocess.run([BACKEND], input=body, env=env, capture_output=True, timeout=60, check=False)
            head, _, payload = done.stdout.partition(b"\r\n\r\n")
            if not _:
                head, _, payload = done.stdout.partition(b"\n\n")
            status, headers = 200, []
            for line in head.decode("latin-1").splitlines():
                name, _, value = line.partition(":")
                if name.lower() == "status":
                    status = int(value.split()[0])
                elif name:
                    headers.append((name, value.strip()))
            self.send_response(status)
            for name, value in headers:
                self.send_header(name, value)
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        def log_message(self, *args: object) -> None:
            pass

    return Handler


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--addr", required=True)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--cert", required=True)
    parser.add_argument("--key", required=True)
    parser.add_argument("--root", required=True)
    args = parser.parse_args(argv)
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(args.cert, args.key)
    server = http.server.ThreadingHTTPServer((args.addr, args.port), _handler(os.path.realpath(args.root)))
    server.socket = ctx.wrap_socket(server.socket, server_side=True)
    print("listening", flush=True)
    sys.stdout.flush()
    server.serve_forever()


if __name__ == "__main__":
    main()
