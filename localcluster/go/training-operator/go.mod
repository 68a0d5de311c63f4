module airflow-mpi.localcluster/training-operator

// Only the kubeflow.org/v1 MPIJob CRD is read from this module (manifests/base/crds/kubeflow.org_mpijobs.yaml);
// nothing is built from it.

go 1.26.0

require github.com/kubeflow/training-operator v1.9.4
