#!/usr/bin/env bash
# The kube-apiserver, kubectl and etcd that tests/kubernetes.rs needs: all of tests/k8s's
# Kubernetes binaries are built (cached, under a lock) by build-k8s.sh.
exec "$(dirname "${BASH_SOURCE[0]}")/build-k8s.sh" "$@"
