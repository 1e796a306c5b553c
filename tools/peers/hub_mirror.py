"""A slow stand-in for the Hugging Face Hub's `resolve` endpoint, for tests/node_startup.rs (run
inside the test's private network namespace, on loopback): serves the files of --dir as
`/<repo>/resolve/<revision>/<name>` with the headers the Hub sends (etag, x-repo-commit,
content-range; `Range: bytes=A-B` honoured) at --rate bytes per second, so a download takes long
enough to be watched; any other path is 404. Writes its port to --port-file.
"""
import argparse
import os
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dir", required=True)
    ap.add_argument("--repo", required=True)
    ap.add_argument("--revision", required=True)
    ap.add_argument("--rate", type=float, default=1e6, help="bytes per second")
    ap.add_argument("--port-file", required=True)
    args = ap.parse_args()
    prefix = f"/{args.repo}/resolve/{args.revision}/"

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *a):
            pass

        def do_GET(self):
            name = self.path[len(prefix):] if self.path.startswith(prefix) else None
            path = os.path.join(args.dir, name) if name and "/" not in name else None
            if not path or not os.path.isfile(path):
                self.send_response(404)
                self.send_header("content-length", "0")
                self.end_headers()
                return
            body = open(path, "rb").read()
            start, end = 0, len(body) - 1
            rng = self.headers.get("Range", "")
            if rng.startswith("bytes="):
                a, _, b = rng[len("bytes="):].partition("-")
                start = min(int(a or 0), len(body))
                end = min(int(b), len(body) - 1) if b else len(body) - 1
            part = body[start:end + 1]
            self.send_response(206)
            self.send_header("etag", f'"etag-{name}"')
            self.send_header("x-repo-commit", args.revision)
            self.send_header("content-range", f"bytes {start}-{end}/{len(body)}")
            self.send_header("content-length", str(len(part)))
            self.end_headers()
            chunk = 32 * 1024
            for i in range(0, len(part), chunk):
                self.wfile.write(part[i:i + chunk])
                time.sleep(chunk / args.rate)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    with open(args.port_file + ".tmp", "w") as f:
        f.write(str(server.server_address[1]))
    os.rename(args.port_file + ".tmp", args.port_file)
    server.serve_forever()


if __name__ == "__main__":
    main()
