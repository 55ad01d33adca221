"""A pytest plugin (`-p etcd3gw_port`) that points etcd3gw 2.0.0's own tests at the
server under test, whose port is QK_ETCD3GW_PORT.

etcd3gw 2.0.0's tests take no address from the environment: the client is
`Etcd3Client()` (localhost:2379, /v3alpha/) and the tests are skipped unless
`urllib3.PoolManager().request('GET', '127.0.0.1:2379')` succeeds. Both are loaded
before the tests are collected, so this plugin changes the client's default port and
sends that one probe to the server's /version; the tests themselves run unchanged, and
the client keeps its own default path.
"""

import importlib
import os

import urllib3

PORT = int(os.environ["QK_ETCD3GW_PORT"])

_client_init = importlib.import_module("etcd3gw.client").Etcd3Client.__init__
_defaults = list(_client_init.__defaults__)
# (host, port, protocol, ca_cert, cert_key, cert_cert, timeout, api_path)
_defaults[1] = PORT
_client_init.__defaults__ = tuple(_defaults)

_request = urllib3.PoolManager.request


def _probe_here(self, method, url, *args, **kwargs):
    if url == "127.0.0.1:2379":
        url = f"http://127.0.0.1:{PORT}/version"
    return _request(self, method, url, *args, **kwargs)


urllib3.PoolManager.request = _probe_here
