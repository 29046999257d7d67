"""The page's localhost server: GETs are served from folders by URL prefix (the page, three.js,
the result folder), and what the page POSTs is kept: ``/shot/<name>.png`` written into the
output folder, ``/done`` (a JSON description) or ``/fail`` (the page's error) ending the run."""

from __future__ import annotations

import http.server
import json
import re
import threading
from pathlib import Path

TYPES = {".html": "text/html", ".js": "text/javascript", ".mjs": "text/javascript",
         ".wasm": "application/wasm", ".glb": "model/gltf-binary", ".ktx2": "image/ktx2",
         ".json": "application/json", ".png": "image/png"}
SHOT_NAME = re.compile(r"/shot/([a-z0-9]+_[0-9]+\.png)")


def resolve(routes: dict[str, Path], url_path: str) -> Path | None:
    """The file ``url_path`` names: the route whose prefix (``/three/``) it starts with, the
    rest of it under that route's folder; None for no route, no file, or a path out of the
    folder."""
    path = url_path.split("?", 1)[0]
    for prefix, folder in routes.items():
        if path.startswith(prefix):
            root = folder.resolve()
            found = (root / path[len(prefix):]).resolve()
            if found.is_file() and found.is_relative_to(root):
                return found
    return None


class PageServer:
    """A threaded HTTP server on 127.0.0.1 at a free port; ``wait`` blocks until the page
    posted ``/done`` or ``/fail``. ``shots`` lists the names written into ``out``."""

    def __init__(self, routes: dict[str, Path], out: Path):
        self.routes, self.out = routes, out
        self.shots: list[str] = []
        self.description: dict | None = None
        self.failure: str | None = None
        self._ended = threading.Event()
        self._http = http.server.ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._thread = threading.Thread(target=self._http.serve_forever, daemon=True)

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self._http.server_address[1]}{path}"

    def __enter__(self) -> PageServer:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._http.shutdown()
        self._http.server_close()

    def wait(self, timeout: float) -> bool:
        """Whether the page ended (done or failed) within ``timeout`` seconds."""
        return self._ended.wait(timeout)

    def _posted(self, path: str, body: bytes) -> bool:
        """Keeps what the page posted; False for a path the page never posts to."""
        shot = SHOT_NAME.fullmatch(path)
        if shot:
            (self.out / shot[1]).write_bytes(body)
            self.shots.append(shot[1])
        elif path == "/done":
            self.description = json.loads(body)
            self._ended.set()
        elif path == "/fail":
            self.failure = body.decode("utf-8", "replace")
            self._ended.set()
        else:
            return False
        return True

    def _handler(self):
        server = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):
                found = resolve(server.routes, self.path)
                if found is None:
                    self.send_error(404)
                    return
                body = found.read_bytes()
                self.send_response(200)
                self.send_header("Content-Type",
                                 TYPES.get(found.suffix, "application/octet-stream"))
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_POST(self):
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                if not server._posted(self.path, body):
                    self.send_error(404)
                    return
                self.send_response(204)
                self.end_headers()

            def log_message(self, *args):
                pass

        return Handler
