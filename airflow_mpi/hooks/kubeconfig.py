"""Where a hook's client configuration comes from: kubeconfig text or file, the in-cluster namespace, and the async
hook's loading of it (the stock async hook ignores part of the connection: hooks/async_mpijob.py)."""

from __future__ import annotations

import asyncio
import os
from typing import TYPE_CHECKING, Any

import yaml
from airflow.providers.common.compat.sdk import AirflowException

from airflow_mpi.hooks.token_file import follow_token_file

if TYPE_CHECKING:
    from airflow_mpi.hooks.async_mpijob import AsyncMPIJobHook

IN_CLUSTER_NAMESPACE_FILE = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"


def in_cluster_namespace(path: str = IN_CLUSTER_NAMESPACE_FILE) -> str | None:
    try:
        with open(path) as f:
            return f.read().strip() or None
    except OSError:
        return None


def parse_kubeconfig(text: str) -> dict:
    """A kubeconfig given inline (YAML or JSON text) as a dict; the text is never echoed (credentials)."""
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as err:
        raise ValueError(
            f"The connection's kube_config is not valid YAML/JSON ({type(err).__name__})"
        ) from None
    if not isinstance(data, dict):
        raise ValueError("The connection's kube_config must be a kubeconfig mapping (YAML or JSON object)")
    return data


def read_kubeconfig(path: str) -> dict | None:
    """The kubeconfig at ``path`` (None when it is a list of paths, missing or unreadable)."""
    if not path or os.pathsep in path:
        return None
    try:
        with open(os.path.expanduser(path)) as f:
            data = yaml.safe_load(f)
    except (OSError, yaml.YAMLError):
        return None
    return data if isinstance(data, dict) else None


def kubeconfig_uses_dynamic_auth(data: dict | None, context: str | None = None) -> bool:
    """True when the active user's credentials expire (exec plugin, auth-provider) or cannot be determined."""
    if not data:
        return True
    active = context or data.get("current-context")
    user_name = None
    for ctx in data.get("contexts") or []:
        if isinstance(ctx, dict) and ctx.get("name") == active:
            user_name = (ctx.get("context") or {}).get("user")
            break
    for user in data.get("users") or []:
        if isinstance(user, dict) and user.get("name") == user_name:
            spec = user.get("user") or {}
            return "exec" in spec or "auth-provider" in spec
    return True


def load_in_cluster(cfg: Any) -> None:
    """The pod's service account into ``cfg``, its token followed as kubelet rotates it (hooks/token_file.py);
    ConfigException when this is no pod."""
    from kubernetes_asyncio import config as async_config
    from kubernetes_asyncio.config import incluster_config

    async_config.load_incluster_config(client_configuration=cfg)
    follow_token_file(cfg, incluster_config.SERVICE_TOKEN_FILENAME)


async def load_client_config(hook: AsyncMPIJobHook) -> None:
    """Load the client configuration from the same sources, in the same order, as the sync hook: in_cluster |
    config_file argument or kube_config_path extra | kube_config extra (YAML/JSON text or dict) | config_dict
    argument, mutually exclusive; none: in-cluster when running in a pod, else the default kubeconfig. Loaded once,
    except for exec/auth-provider credentials (short-lived tokens), reloaded on every call; an in-cluster token is read
    again when its file changes."""
    from kubernetes_asyncio import client as async_client
    from kubernetes_asyncio import config as async_config

    if hook.client_configuration is None:
        hook.client_configuration = async_client.Configuration()
    if hook._config_loaded:
        return
    cfg = hook.client_configuration
    field = hook._connection_field
    in_cluster = hook._coalesce_param(hook.in_cluster, await field("in_cluster"))
    cluster_context = hook._coalesce_param(hook.cluster_context, await field("cluster_context"))
    kubeconfig_path = hook._coalesce_param(hook.config_file or None, await field("kube_config_path"))
    kubeconfig = await field("kube_config")
    if sum(1 for o in (in_cluster, kubeconfig, kubeconfig_path, hook.config_dict) if o) > 1:
        raise AirflowException(
            "Invalid connection configuration. Options kube_config_path (or config_file), "
            "kube_config, in_cluster and config_dict are mutually exclusive. You can only use one "
            "option at a time."
        )
    dynamic, hook._is_in_cluster = False, False
    if in_cluster:
        hook.log.debug("loading kube_config from: in_cluster configuration")
        load_in_cluster(cfg)
        hook._is_in_cluster = True
    elif kubeconfig_path:
        hook.log.debug("loading kube_config from: %s", kubeconfig_path)
        await async_config.load_kube_config(
            config_file=kubeconfig_path, context=cluster_context, client_configuration=cfg
        )
        data = await asyncio.to_thread(read_kubeconfig, kubeconfig_path)
        dynamic = kubeconfig_uses_dynamic_auth(data, cluster_context)
    elif kubeconfig or hook.config_dict:
        hook.log.debug(
            "loading kube_config from: %s", "connection kube_config" if kubeconfig else "config dictionary"
        )
        data = kubeconfig or hook.config_dict
        data = data if isinstance(data, dict) else parse_kubeconfig(str(data))
        await async_config.load_kube_config_from_dict(data, context=cluster_context, client_configuration=cfg)
        dynamic = kubeconfig_uses_dynamic_auth(data, cluster_context)
    else:
        try:
            load_in_cluster(cfg)
            hook._is_in_cluster = True
        except async_config.ConfigException:
            hook.log.debug("loading kube_config from: default file")
            await async_config.load_kube_config(context=cluster_context, client_configuration=cfg)
            data = await asyncio.to_thread(read_kubeconfig, async_config.KUBE_CONFIG_DEFAULT_LOCATION)
            dynamic = kubeconfig_uses_dynamic_auth(data, cluster_context)
    if hook._coalesce_param(hook.disable_verify_ssl, await field("disable_verify_ssl")):
        cfg.verify_ssl = False
    hook._config_loaded = not dynamic
