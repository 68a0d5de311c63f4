"""Where an async hook's client configuration comes from: the sync hook's sources, in the sync hook's order.

Split from hooks/async_mpijob.py (the requests); the file and text parsing helpers are hooks/kubeconfig.py.
"""

from __future__ import annotations

import asyncio
from typing import Any

from kubernetes_asyncio import client as async_client, config as async_config

from airflow.providers.common.compat.sdk import AirflowException
from airflow_mpi.hooks.kubeconfig import kubeconfig_uses_dynamic_auth, parse_kubeconfig, read_kubeconfig


async def load_client_config(hook: Any) -> None:
    """Load the client configuration from the same sources, in the same order, as the sync hook.

    in_cluster | config_file argument or kube_config_path extra | kube_config extra (YAML/JSON
    text or dict) | config_dict argument -- mutually exclusive; none: in-cluster when running in
    a pod, else the default kubeconfig. cluster_context selects the context, disable_verify_ssl
    turns certificate checks off. Loaded once, except for exec/auth-provider credentials
    (short-lived tokens), which are reloaded on every call.
    """
    if hook.client_configuration is None:
        hook.client_configuration = async_client.Configuration()
    if hook._config_loaded:
        return
    cfg = hook.client_configuration
    in_cluster = hook._coalesce_param(hook.in_cluster, await hook._get_field("in_cluster"))
    cluster_context = hook._coalesce_param(hook.cluster_context, await hook._get_field("cluster_context"))
    kubeconfig_path = hook._coalesce_param(hook.config_file or None, await hook._get_field("kube_config_path"))
    kubeconfig = await hook._get_field("kube_config")
    if sum(1 for o in (in_cluster, kubeconfig, kubeconfig_path, hook.config_dict) if o) > 1:
        raise AirflowException(
            "Invalid connection configuration. Options kube_config_path (or config_file), kube_config, "
            "in_cluster and config_dict are mutually exclusive. You can only use one option at a time."
        )
    dynamic = False
    if in_cluster:
        hook.log.debug("loading kube_config from: in_cluster configuration")
        async_config.load_incluster_config(client_configuration=cfg)
        hook._is_in_cluster = True
    elif kubeconfig_path:
        hook.log.debug("loading kube_config from: %s", kubeconfig_path)
        await async_config.load_kube_config(
            config_file=kubeconfig_path, context=cluster_context, client_configuration=cfg
        )
        data = await asyncio.to_thread(read_kubeconfig, kubeconfig_path)
        dynamic = kubeconfig_uses_dynamic_auth(data, cluster_context)
        hook._is_in_cluster = False
    elif kubeconfig:
        hook.log.debug("loading kube_config from: connection kube_config")
        data = kubeconfig if isinstance(kubeconfig, dict) else parse_kubeconfig(kubeconfig)
        await async_config.load_kube_config_from_dict(data, context=cluster_context, client_configuration=cfg)
        dynamic = kubeconfig_uses_dynamic_auth(data, cluster_context)
        hook._is_in_cluster = False
    elif hook.config_dict:
        hook.log.debug("loading kube_config from: config dictionary")
        await async_config.load_kube_config_from_dict(
            hook.config_dict, context=cluster_context, client_configuration=cfg
        )
        dynamic = kubeconfig_uses_dynamic_auth(hook.config_dict, cluster_context)
        hook._is_in_cluster = False
    else:
        try:
            async_config.load_incluster_config(client_configuration=cfg)
            hook._is_in_cluster = True
        except async_config.ConfigException:
            hook.log.debug("loading kube_config from: default file")
            await async_config.load_kube_config(context=cluster_context, client_configuration=cfg)
            data = await asyncio.to_thread(read_kubeconfig, async_config.KUBE_CONFIG_DEFAULT_LOCATION)
            dynamic = kubeconfig_uses_dynamic_auth(data, cluster_context)
            hook._is_in_cluster = False
    if hook._coalesce_param(hook.disable_verify_ssl, await hook._get_field("disable_verify_ssl")):
        cfg.verify_ssl = False
    hook._config_loaded = not dynamic
