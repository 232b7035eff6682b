"""An in-memory Hub on 127.0.0.1 for huggingface_hub's repo, branch, commit (PRs too) and download endpoints (set
HF_ENDPOINT, HF_HUB_OFFLINE=0, a dummy HF_TOKEN). Repo: {commit, files, visibility, branches, prs}; `requests` logs."""

import base64
import hashlib
import json
import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, unquote, urlsplit


class StandInHub:
    def __init__(self) -> None:
        self.repos: dict[str, dict] = {}
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

    def repo(self, repo_id: str, files: dict[str, bytes] | None = None, visibility: str | None = None) -> dict:
        """The repository `repo_id` (created with `files` on main when missing)."""
        commit = hashlib.sha1(repo_id.encode()).hexdigest()
        fresh = {"commit": commit, "files": dict(files or {}), "visibility": visibility, "branches": {}, "prs": []}
        return self.repos.setdefault(repo_id, fresh)

    @staticmethod
    def ref(repo: dict, revision: str) -> dict | None:
        """The ref of `revision` (a branch, `refs/pr/N`, or a ref's latest commit id), or None."""
        if revision == "main":
            return repo
        if revision.startswith("refs/pr/"):
            number = int(revision.rsplit("/", 1)[1])
            return repo["prs"][number - 1] if 0 < number <= len(repo["prs"]) else None
        refs = [repo, *repo["branches"].values(), *repo["prs"]]
        return repo["branches"].get(revision) or next((ref for ref in refs if ref["commit"] == revision), None)

    def _handler(self):
        hub = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args) -> None:
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

            def _log(self) -> None:
                hub.requests.append(f"{self.command} {self.path} {self.headers.get('Authorization', '')}".rstrip())

            def do_POST(self) -> None:
                self._log()
                url = urlsplit(self.path)
                path, query = url.path, parse_qs(url.query)
                if path == "/api/repos/create":
                    data = json.loads(self._body())
                    repo_id = f"{data['organization']}/{data['name']}" if data.get("organization") else data["name"]
                    exists = repo_id in hub.repos
                    hub.repo(repo_id, visibility=data.get("visibility"))
                    return self._json({"url": f"{hub.url}/{repo_id}", "name": repo_id}, 409 if exists else 200)
                if path == "/api/validate-yaml":
                    self._body()
                    return self._json({"errors": [], "warnings": []})
                match = re.match(r"^/api/models/([^/]+/[^/]+)/(preupload|commit|branch)/([^/]+)$", path)
                if not match or match.group(1) not in hub.repos:
                    return self._json({"error": "Repository not found"}, 404)
                repo_id, action, revision = match.group(1), match.group(2), unquote(match.group(3))
                repo = hub.repos[repo_id]
                body = self._body()
                if action == "branch":
                    if hub.ref(repo, revision) is not None:
                        return self._json({"error": "Reference already exists"}, 409)
                    repo["branches"][revision] = {"commit": repo["commit"], "files": dict(repo["files"])}
                    return self._json({})
                target = hub.ref(repo, revision)
                if target is None:
                    return self._reply(404, b"", {"X-Error-Code": "RevisionNotFound"})
                if action == "preupload":
                    files = json.loads(body)["files"]
                    return self._json(
                        {"files": [{"path": f["path"], "uploadMode": "regular", "shouldIgnore": False} for f in files]}
                    )
                reply = {}
                if query.get("create_pr") == ["1"]:
                    repo["prs"].append({"commit": target["commit"], "files": dict(target["files"])})
                    target = repo["prs"][-1]
                    reply["pullRequestUrl"] = f"{hub.url}/{repo_id}/discussions/{len(repo['prs'])}"
                for line in body.splitlines():
                    item = json.loads(line)
                    if item["key"] == "file":
                        target["files"][item["value"]["path"]] = base64.b64decode(item["value"]["content"])
                    elif item["key"] == "deletedFile":
                        target["files"].pop(item["value"]["path"], None)
                target["commit"] = hashlib.sha1((target["commit"] + str(len(hub.requests))).encode() + body).hexdigest()
                reply.update(commitUrl=f"{hub.url}/{repo_id}/commit/{target['commit']}", commitOid=target["commit"])
                return self._json(reply)

            def do_GET(self) -> None:
                self._log()
                match = re.match(r"^/([^/]+/[^/]+)/resolve/([^/]+)/(.+)$", urlsplit(self.path).path)
                if not match or match.group(1) not in hub.repos:
                    return self._reply(404, b"", {"X-Error-Code": "RepositoryNotFound"})
                ref = hub.ref(hub.repos[match.group(1)], unquote(match.group(2)))
                if ref is None:
                    return self._reply(404, b"", {"X-Error-Code": "RevisionNotFound"})
                content = ref["files"].get(match.group(3))
                if content is None:
                    return self._reply(404, b"", {"X-Error-Code": "EntryNotFound", "X-Repo-Commit": ref["commit"]})
                etag = hashlib.sha1(content).hexdigest()
                self._reply(200, content, {"X-Repo-Commit": ref["commit"], "ETag": f'"{etag}"'})

            do_HEAD = do_GET

        return Handler
