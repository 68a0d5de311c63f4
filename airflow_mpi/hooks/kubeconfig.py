"""Where the client configuration comes from: kubeconfig text or file, and the in-cluster namespace."""

from __future__ import annotations

import os

IN_CLUSTER_NAMESPACE_FILE = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"


# --------------------------------------------------------------------------------------- namespace
def in_cluster_namespace(path: str = IN_CLUSTER_NAMESPACE_FILE) -> str | None:
    """The namespace of the pod this process runs in, when it runs in a pod."""
    try:
        with open(path) as f:
            return f.read().strip() or None
    except OSError:
        return None


# --------------------------------------------------------------------------------------- kubeconfig
def parse_kubeconfig(text: str) -> dict:
    """A kubeconfig given inline (YAML or JSON text) as a dict; the text is never echoed (credentials)."""
    import yaml

    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as err:
        raise ValueError(f"The connection's kube_config is not valid YAML/JSON ({type(err).__name__})") from None
    if not isinstance(data, dict):
        raise ValueError("The connection's kube_config must be a kubeconfig mapping (YAML or JSON object)")
    return data


def read_kubeconfig(path: str) -> dict | None:
    """The kubeconfig at ``path`` (None when it is a list of paths, missing or unreadable)."""
    import yaml

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
