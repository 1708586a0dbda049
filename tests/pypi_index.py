"""A package index on loopback for the registry tests (test_build.py, test_offline.py)."""
from __future__ import annotations

import hashlib
import json
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class Index:
    """Serves files under /files/ and their listing at /simple/<project>/, as PEP 691 JSON when
    asked for it (json=True) or as a PEP 503 HTML page."""

    def __init__(self, json_api: bool = True):
        self.files: dict[str, tuple[str, bytes, str]] = {}   # filename -> (project, bytes, sha256 listed)
        self.json_api = json_api
        self.requests: list[str] = []
        index = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *a):
                pass

            def do_GET(self):
                index.requests.append(self.path)
                parts = self.path.strip("/").split("/")
                if parts[0] == "files" and len(parts) == 2 and parts[1] in index.files:
                    return self._send(index.files[parts[1]][1], "application/octet-stream")
                if parts[0] == "simple" and len(parts) == 2:
                    rows = [(n, d) for n, (p, _, d) in index.files.items() if p == parts[1]]
                    if not rows:
                        return self.send_error(404)
                    if index.json_api and "json" in self.headers.get("Accept", ""):
                        body = {"files": [{"filename": n, "url": f"../../files/{n}", "hashes": {"sha256": d}}
                                          for n, d in rows]}
                        return self._send(json.dumps(body).encode(), "application/vnd.pypi.simple.v1+json")
                    links = "".join(f'<a href="/files/{n}#sha256={d}">{n}</a><br/>' for n, d in rows)
                    return self._send(f"<html><body>{links}</body></html>".encode(), "text/html")
                self.send_error(404)

            def _send(self, body, ctype):
                self.send_response(200)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/simple"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def add(self, project: str, name: str, data: bytes, listed_sha: str | None = None) -> None:
        self.files[name] = (project, data, listed_sha or hashlib.sha256(data).hexdigest())


def dead_index_url() -> str:
    """An index URL on a loopback port nothing listens on."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}/simple"
