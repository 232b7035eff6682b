"""A local stand-in for the Hugging Face Hub: just the HTTP endpoints huggingface_hub's `create_repo`,
`upload_folder` (regular, non-LFS files) and `hf_hub_download` use, on 127.0.0.1, in memory.

Point a process at it with `HF_ENDPOINT=stand_in.url` (and `HF_HUB_OFFLINE=0`, a dummy `HF_TOKEN`). Every commit gets
a new id, so a download after an update sees the new files, as on the Hub.
"""

import base64
import hashlib
import json
import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class StandInHub:
    def __init__(self) -> None:
        self.repos: dict[str, dict] = {}  # repo id -> {"commit": id, "files": {path: bytes}}
        self.requests: list[str] = []
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> "StandInHub":
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.server.shutdown()
        self.server.server_close()

    def _handler(self):
        hub = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args) -> None:  # quiet
                pass

            def _reply(self, status: int, body: bytes = b"", headers: dict | None = None) -> None:
                self.send_response(status)
                for key, value in (headers or {}).items():
                    self.send_header(key, value)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(body)

            def _json(self, data: dict, status: int = 200) -> None:
                self._reply(status, json.dumps(data).encode(), {"Content-Type": "application/json"})

            def _body(self) -> bytes:
                return self.rfile.read(int(self.headers.get("Content-Length", 0)))

            def do_POST(self) -> None:
                hub.requests.append(f"POST {self.path}")
                path = self.path.split("?")[0]
                if path == "/api/repos/create":
                    data = json.loads(self._body())
                    repo_id = f"{data['organization']}/{data['name']}" if data.get("organization") else data["name"]
                    exists = repo_id in hub.repos
                    hub.repos.setdefault(repo_id, {"commit": hashlib.sha1(repo_id.encode()).hexdigest(), "files": {}})
                    return self._json({"url": f"{hub.url}/{repo_id}", "name": repo_id}, 409 if exists else 200)
                if path == "/api/validate-yaml":
                    self._body()
                    return self._json({"errors": [], "warnings": []})
                match = re.match(r"^/api/models/([^/]+/[^/]+)/(preupload|commit)/([^/]+)$", path)
                if not match or match.group(1) not in hub.repos:
                    return self._json({"error": "Repository not found"}, 404)
                repo = hub.repos[match.group(1)]
                body = self._body()
                if match.group(2) == "preupload":
                    files = json.loads(body)["files"]
                    return self._json(
                        {"files": [{"path": f["path"], "uploadMode": "regular", "shouldIgnore": False} for f in files]}
                    )
                for line in body.splitlines():
                    item = json.loads(line)
                    if item["key"] == "file":
                        repo["files"][item["value"]["path"]] = base64.b64decode(item["value"]["content"])
                    elif item["key"] == "deletedFile":
                        repo["files"].pop(item["value"]["path"], None)
                repo["commit"] = hashlib.sha1((repo["commit"] + str(len(hub.requests))).encode() + body).hexdigest()
                return self._json(
                    {"commitUrl": f"{hub.url}/{match.group(1)}/commit/{repo['commit']}", "commitOid": repo["commit"]}
                )

            def do_HEAD(self) -> None:
                self.do_GET()

            def do_GET(self) -> None:
                hub.requests.append(f"{self.command} {self.path}")
                match = re.match(r"^/([^/]+/[^/]+)/resolve/([^/]+)/(.+)$", self.path.split("?")[0])
                if not match or match.group(1) not in hub.repos:
                    return self._reply(404, b"", {"X-Error-Code": "RepositoryNotFound"})
                repo = hub.repos[match.group(1)]
                content = repo["files"].get(match.group(3))
                if content is None:
                    return self._reply(404, b"", {"X-Error-Code": "EntryNotFound", "X-Repo-Commit": repo["commit"]})
                etag = hashlib.sha1(content).hexdigest()
                self._reply(200, content, {"X-Repo-Commit": repo["commit"], "ETag": f'"{etag}"'})

        return Handler
