"""Serves Proxmox Backup Server API payloads over TLS for one test, as the test gives them.

    python pbs_payloads.py SPEC.json DIR

There is no fake of the Proxmox Backup Server API to test against, so the test writes each
answer itself, shaped as the PBS API documents it, and this server only does what a PBS does
around them: HTTPS with a fresh self-signed certificate (written to DIR, made with fakepve's
certificate helper), API-token authentication (`Authorization: PBSAPIToken=<id>:<secret>`,
401 otherwise) and the `{"data": ...}` envelope. A path with no answer is a 404 with PBS's
error shape.

SPEC: {"tokens": {"user@realm!name": "secret"},
       "answers": {"/api2/json/version": {...}, "/api2/json/admin/datastore": [...], ...}}
A key may carry a query string (`/api2/json/admin/datastore/s1/snapshots?ns=a`), matched as sent.

Prints one JSON line once listening: {"url", "fingerprint", "cert_file"}. Then reads one JSON
command per line on stdin and answers {"ok": true} or {"ok": false, "error": ...}:
answer {path, data} (replace or add an answer), forget {path} (the path answers 404 from now),
fail {path, status, message} (the path answers that error), requests {} (how many requests
each path got).
"""

import hashlib
import json
import ssl
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from fakepve.certs import make_cert

STATE = {'answers': {}, 'failures': {}, 'tokens': {}, 'requests': {}}
LOCK = threading.Lock()


class Handler(BaseHTTPRequestHandler):
    protocol_version = 'HTTP/1.1'

    def log_message(self, *args):
        pass

    def reply(self, status, body):
        raw = json.dumps(body).encode()
        self.send_response(status)
        self.send_header('Content-Type', 'application/json;charset=UTF-8')
        self.send_header('Content-Length', str(len(raw)))
        self.end_headers()
        self.wfile.write(raw)

    def authorized(self):
        header = self.headers.get('Authorization', '')
        if not header.startswith('PBSAPIToken='):
            return False
        token, _, secret = header[len('PBSAPIToken='):].partition(':')
        return STATE['tokens'].get(token) == secret

    def do_GET(self):
        with LOCK:
            STATE['requests'][self.path] = STATE['requests'].get(self.path, 0) + 1
            failure = STATE['failures'].get(self.path)
            found = self.path in STATE['answers']
            data = STATE['answers'].get(self.path)
        if not self.authorized():
            self.reply(401, {'data': None, 'message': 'authentication failed - invalid credentials'})
        elif failure is not None:
            self.reply(failure['status'], {'data': None, 'message': failure['message']})
        elif not found:
            self.reply(404, {'data': None, 'message': 'Path \'%s\' not found.' % self.path})
        else:
            self.reply(200, {'data': data})


def apply(cmd):
    op = cmd.get('op')
    with LOCK:
        if op == 'answer':
            STATE['answers'][cmd['path']] = cmd['data']
            STATE['failures'].pop(cmd['path'], None)
        elif op == 'forget':
            STATE['answers'].pop(cmd['path'], None)
        elif op == 'fail':
            STATE['failures'][cmd['path']] = {'status': int(cmd.get('status', 500)),
                                              'message': cmd.get('message', 'internal error')}
        elif op == 'requests':
            return dict(STATE['requests'])
        else:
            raise ValueError('unknown op %r' % op)
    return None


def main():
    spec_file, directory = sys.argv[1], sys.argv[2]
    with open(spec_file) as f:
        spec = json.load(f)
    STATE['tokens'] = dict(spec.get('tokens', {}))
    STATE['answers'] = dict(spec.get('answers', {}))
    certfile, keyfile, der = make_cert(directory, hosts=('127.0.0.1',))
    server = ThreadingHTTPServer(('127.0.0.1', 0), Handler)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(certfile, keyfile)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    digest = hashlib.sha256(der).hexdigest().upper()
    fingerprint = ':'.join(digest[i:i + 2] for i in range(0, len(digest), 2))
    url = 'https://127.0.0.1:%d' % server.server_address[1]
    print(json.dumps({'url': url, 'fingerprint': fingerprint, 'cert_file': certfile}), flush=True)
    for line in sys.stdin:
        line = line.strip()
        if not line:
            continue
        try:
            data = apply(json.loads(line))
            print(json.dumps({'ok': True, 'data': data}), flush=True)
        except Exception as error:  # noqa: BLE001 - every failure is answered, never a crash
            print(json.dumps({'ok': False, 'error': str(error)}), flush=True)


if __name__ == '__main__':
    main()
