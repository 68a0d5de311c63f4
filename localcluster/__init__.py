"""Dev/test only (not part of the installed provider): a local Kubernetes cluster built from upstream sources.

Real etcd, kube-apiserver, kube-controller-manager, kube-scheduler and controllers (the mpi-operator,
Kueue...); SIMULATED nodes (kwok). See localcluster/README.md.  Entry points: ``python -m localcluster``,
:class:`localcluster.cluster.LocalCluster`.
"""

from .cluster import API_V1, API_V2BETA1, ClusterError, LocalCluster

__all__ = ["API_V1", "API_V2BETA1", "ClusterError", "LocalCluster"]
