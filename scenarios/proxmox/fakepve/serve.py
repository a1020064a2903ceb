"""Serves fakepve (the fake Proxmox VE API from PyPI) for one test, as the test describes it.

    python serve.py SPEC.json DIR

DIR receives the server's certificate and key (the caller removes it).

SPEC: {"tokens": {"user@realm!name": "secret"}, "nodes": [{"name": "pve1", "online": true}],
       "guests": [{"vmid": 100, "name": "web", "type": "qemu"|"lxc", "status": "running", ...}],
       "grants": [{"user": "...", "path": "/", "privs": ["Sys.Audit"]}],
       "answers": {"/nodes/pve1/disks/list": [...]}}

"cluster_name" names the cluster; "ceph": true (or {"name", "pool"}) adds an RBD storage on
Ceph; "storages" adds storages: [{"storage": id, "type": "dir",
"content": "images", "total": bytes, "used": bytes}] (the used bytes are one volume's size, as
fakepve counts use).

"answers" replaces the value fakepve would synthesise from the schema for a path it does not
model (disks, ZFS pools, node status), with a payload shaped as Proxmox documents it.

Prints one JSON line once listening: {"url", "fingerprint", "cert_file"}. Then reads one JSON
command per line on stdin and answers {"ok": true} or {"ok": false, "error": ...}:
lose_quorum, regain_quorum, node_offline {node, offline}, set_status {vmid, status},
lock {vmid, lock}, fail {method, path, status, message | error, times}, revoke_token {tokenid},
clear_failures, ceph_health {health, slow} (Ceph reports `health`, e.g. HEALTH_WARN), ceph_down
(Ceph stops answering; RBD storages go inactive), ceph_recover,
answer {path, data}, tasks {} (the task log: upid, type, id, exitstatus), storage_used {storage,
used}, inspect {} (guests' status, quorum, storages' total and used: what a lab's oracle reads).
"""

import asyncio
import hashlib
import json
import sys

from fakepve.certs import make_cert
from fakepve.server import FakePve


class Pve(FakePve):
    answers = {}

    async def synthesise(self, match, method, info, user, values):
        if method == 'GET':
            path = match.template
            for name, value in values.items():
                path = path.replace('{' + name + '}', str(value))
            if path in self.answers:
                return self.answers[path]
        return await super().synthesise(match, method, info, user, values)


def build(spec):
    pve = Pve(host='127.0.0.1', port=0)
    pve.answers = dict(spec.get('answers', {}))
    pve.time_scale = float(spec.get('time_scale', 0))
    if 'cluster_name' in spec:
        pve.cluster_name = spec['cluster_name']
    for store in spec.get('storages', []):
        pve.storages[store['storage']] = {
            'type': store.get('type', 'dir'), 'active': 1, 'content': store.get('content', 'images'),
            'files': set(), 'path': '/srv/' + store['storage'], 'total': int(store['total']),
            'avail': int(store['total']) - int(store.get('used', 0))}
        set_used(pve, store['storage'], int(store.get('used', 0)))
    if spec.get('ceph'):
        pve.add_ceph_storage(**spec['ceph']) if isinstance(spec['ceph'], dict) else pve.add_ceph_storage()
    pve.nodes = {}
    for node in spec.get('nodes', [{'name': 'pve1'}]):
        pve.add_node(node['name'], online=node.get('online', True))
    for tokenid, secret in spec.get('tokens', {}).items():
        pve.apitokens[tokenid] = secret
    for grant in spec.get('grants', []):
        pve.grant(grant['user'], grant['path'], *grant['privs'])
    for guest in spec.get('guests', []):
        node = guest.get('node', 'pve1')
        if guest.get('type', 'qemu') == 'lxc':
            g = pve.add_ct(guest['vmid'], guest.get('name'), node=node, status=guest.get('status', 'stopped'),
                           config=guest.get('config', {}), template=guest.get('template', False),
                           lock=guest.get('lock'))
        else:
            g = pve.add_vm(guest['vmid'], guest['name'], node=node, status=guest.get('status', 'stopped'),
                           config=guest.get('config', {}), template=guest.get('template', False),
                           lock=guest.get('lock'))
        for key in ('shutdown_secs', 'start_secs', 'stop_secs', 'start_error', 'ha_state'):
            if key in guest:
                setattr(g, key, guest[key])
    return pve


def set_used(pve, storage, used):
    """Make `used` bytes of `storage` in use: one volume of that size, as fakepve counts use."""
    store = pve.storages[storage]
    total = int(store.get('total', 0))
    store['volumes'] = {'{0}:fill'.format(storage): {'size': used, 'format': 'raw'}} if used else {}
    store['avail'] = max(total - used, 0)


def inspect(pve):
    guests = {str(g.vmid): g.status for g in pve.vms}
    storages = {}
    for sid, store in pve.storages.items():
        total, used, _ = pve._space(store)
        storages[sid] = {'total': total, 'used': used}
    return {'guests': guests, 'quorate': bool(pve.quorate), 'storages': storages}


def apply(pve, cmd):
    op = cmd.get('op')
    if op == 'lose_quorum':
        pve.lose_quorum()
    elif op == 'regain_quorum':
        pve.regain_quorum()
    elif op == 'node_offline':
        pve.set_node_offline(cmd['node'], cmd.get('offline', True))
    elif op == 'set_status':
        guest = pve.guest(cmd['vmid'])
        guest.status = cmd['status']
    elif op == 'lock':
        guest = pve.guest(cmd['vmid'])
        guest.lock = cmd.get('lock')
    elif op == 'fail':
        if 'error' in cmd:
            pve.fail(cmd['method'], cmd['path'], error=cmd['error'], times=cmd.get('times'))
        else:
            pve.fail(cmd['method'], cmd['path'], cmd['status'], cmd['message'], times=cmd.get('times'))
    elif op == 'revoke_token':
        pve.apitokens.pop(cmd['tokenid'], None)
    elif op == 'clear_failures':
        pve.failures.clear()
    elif op == 'answer':
        pve.answers[cmd['path']] = cmd['data']
    elif op == 'ceph_health':
        pve.ceph_slow(float(cmd.get('slow', 0)), cmd['health'])
    elif op == 'ceph_down':
        pve.ceph_down()
    elif op == 'ceph_recover':
        pve.ceph_recover()
    elif op == 'storage_used':
        set_used(pve, cmd['storage'], int(cmd['used']))
    elif op == 'inspect':
        return inspect(pve)
    elif op == 'tasks':
        return [{'upid': t['upid'], 'type': t['type'], 'id': t['id'], 'status': t['status'],
                 'exitstatus': t.get('exitstatus')} for t in pve.tasklog]
    else:
        raise ValueError('unknown op {0!r}'.format(op))
    return None


async def main():
    with open(sys.argv[1]) as f:
        spec = json.load(f)
    pve = build(spec)
    await serve(pve, sys.argv[2])


async def serve(pve, directory):
    certfile, keyfile, der = make_cert(directory, hosts=('127.0.0.1',))
    await pve.start(certfile, keyfile)
    fingerprint = ':'.join('{0:02X}'.format(b) for b in hashlib.sha256(der).digest())
    print(json.dumps({'url': pve.url, 'fingerprint': fingerprint, 'cert_file': certfile}), flush=True)
    loop = asyncio.get_running_loop()
    while True:
        line = await loop.run_in_executor(None, sys.stdin.readline)
        if not line:
            break
        try:
            data = apply(pve, json.loads(line))
            answer = {'ok': True, 'data': data}
        except Exception as exc:  # the test sees what went wrong
            answer = {'ok': False, 'error': '{0}: {1}'.format(type(exc).__name__, exc)}
        print(json.dumps(answer), flush=True)
    await pve.stop()


if __name__ == '__main__':
    asyncio.run(main())
