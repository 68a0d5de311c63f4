"""This test process as a pod of a test's namespace, for the provider: the in-cluster credentials kubelet projects
into a pod (token, CA and namespace files), KUBERNETES_SERVICE_HOST/PORT, and the connection ``kubernetes_default``
with ``in_cluster``, all pointing at the local cluster's real API server.

The token is a real service-account token from the TokenRequest API, bound to a Secret: deleting the Secret revokes
it (the API server then answers 401), which is how a test plays a token refused right after kubelet replaced it. Both
Kubernetes clients' in-cluster loaders bind their file paths when called (module constants): the test points them
at its files by patching those. Their refresh period (a minute) is left as it is: the provider reads the file again
when it changes (airflow_mpi/hooks/token_file.py).
"""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from kubernetes import client
from kubernetes.config import incluster_config as sync_incluster
from kubernetes_asyncio.config import incluster_config as async_incluster

from airflow_mpi.hooks.base import MPIJobHookBase
from localcluster.waiting import wait_until
from tests.integration.least_privilege import bind_service_account

SERVICE_ACCOUNT = "airflow-mpi-in-cluster"
TOKEN_SECONDS = 600  # the least the API server issues


@dataclass
class PodCredentials:
    """The files of a pod's service account (``directory``: ``token``, ``ca.crt``, ``namespace``)."""

    api_client: Any  # the admin's: issues and revokes tokens
    namespace: str
    directory: Path
    host: str
    tokens: dict[str, str] = field(default_factory=dict)  # by the name of the Secret each is bound to

    @property
    def token_file(self) -> Path:
        return self.directory / "token"

    @property
    def ca_file(self) -> Path:
        return self.directory / "ca.crt"

    def issue(self, secret: str, seconds: int = TOKEN_SECONDS) -> str:
        """A new token of the service account, bound to a new Secret ``secret``, valid ``seconds`` (as asked: an API
        server may extend it), written over the token file as kubelet does (a whole file renamed over the old one: a
        reader never sees half a token)."""
        core = client.CoreV1Api(self.api_client)
        bound = core.create_namespaced_secret(self.namespace, {"metadata": {"name": secret}})
        ref = {"apiVersion": "v1", "kind": "Secret", "name": secret, "uid": bound.metadata.uid}
        token = core.create_namespaced_service_account_token(
            SERVICE_ACCOUNT,
            self.namespace,
            {"spec": {"expirationSeconds": seconds, "boundObjectRef": ref}},
        ).status.token
        written = self.directory / f".{secret}"
        written.write_text(token)
        os.replace(written, self.token_file)
        self.tokens[secret] = token
        return token

    def revoke(self, secret: str) -> None:
        """Delete the Secret ``secret`` (a token is bound to it); return once the API server refuses that token
        (its authentication cache keeps a token it accepted for up to 10 s)."""
        client.CoreV1Api(self.api_client).delete_namespaced_secret(secret, self.namespace)
        token = self.tokens[secret]
        wait_until(
            lambda: self.status_as(token) == 401, 30, f"the API server to refuse the token of {secret}"
        )

    def status_as(self, token: str) -> int:
        """The HTTP status of a request sent with ``token`` (a list of pods: the role grants it)."""
        cfg = client.Configuration(
            host=self.host, api_key={"BearerToken": token}, api_key_prefix={"BearerToken": "Bearer"}
        )
        cfg.ssl_ca_cert = str(self.ca_file)
        with client.ApiClient(cfg) as api:
            try:
                client.CoreV1Api(api).list_namespaced_pod(self.namespace, limit=1)
            except client.exceptions.ApiException as err:
                return err.status
        return 200


def _never_refreshing(library_loader: type) -> type:
    """The library's InClusterConfigLoader as ``try_refresh_token=False``: the token it first read, for good."""

    class Loader(library_loader):  # type: ignore[valid-type,misc]
        def __init__(self, *args: Any, try_refresh_token: bool = True, **kwargs: Any) -> None:
            super().__init__(*args, try_refresh_token=False, **kwargs)

    return Loader


def run_in_cluster(
    monkeypatch, api_client, namespace: str, role: str, directory: Path, *, refresh: bool = True
) -> PodCredentials:
    """Make this process a pod of ``namespace`` running as a service account bound only to the ClusterRole
    ``role``, its files in ``directory`` (no token yet: :meth:`PodCredentials.issue`). ``refresh=False``: the
    clients never read the token file again (``try_refresh_token=False``): a client that lost its refresh hook."""
    bind_service_account(api_client, namespace, role, SERVICE_ACCOUNT)
    admin = api_client.configuration
    directory.mkdir(parents=True, exist_ok=True)
    creds = PodCredentials(api_client, namespace, directory, admin.host)
    shutil.copyfile(admin.ssl_ca_cert, creds.ca_file)
    (directory / "namespace").write_text(namespace)
    server = urlsplit(admin.host)
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", str(server.hostname))
    monkeypatch.setenv("KUBERNETES_SERVICE_PORT", str(server.port))
    monkeypatch.setenv(
        "AIRFLOW_CONN_KUBERNETES_DEFAULT",
        json.dumps({"conn_type": "kubernetes", "extra": {"in_cluster": True}}),
    )
    for library in (sync_incluster, async_incluster):
        monkeypatch.setattr(library, "SERVICE_TOKEN_FILENAME", str(creds.token_file))
        monkeypatch.setattr(library, "SERVICE_CERT_FILENAME", str(creds.ca_file))
        if not refresh:
            monkeypatch.setattr(
                library, "InClusterConfigLoader", _never_refreshing(library.InClusterConfigLoader)
            )
    monkeypatch.setattr(MPIJobHookBase, "IN_CLUSTER_NAMESPACE_FILE", str(directory / "namespace"))
    # the sync loader makes its configuration the process's default: the next tests get theirs back
    monkeypatch.setattr(client.Configuration, "_default", client.Configuration._default)
    return creds
