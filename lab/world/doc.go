// Package world puts the workloads of a GPU platform on the lab's real
// control plane (lab/cluster) and keeps them behaving the way their real
// controllers would, so that mcp-patch's unchanged production code (package
// kube and below) reads a believable cluster: kwok Nodes named after the lab
// hosts, a CloudNativePG Cluster with its instance pods and PDBs, kube-vip's
// leader Lease, an admission webhook behind a Service and a Deployment, a
// model Deployment on the GPU servers with an OpenAI-compatible completion
// endpoint served in-process, static-pod mirrors of etcd and the API server,
// and the cluster-side faults of the lab.
//
// A World runs one loop (informers on Nodes and Pods, and a ticker) that
// plays CloudNativePG (switchover when the primary's node is cordoned,
// failover when it goes down, readyInstances and phase from the instance
// pods), kube-vip (the Lease is renewed by its holder and taken over when
// the holder's host is down) and the kubelet of a host that reboots (its
// Node NotReady while the host is down, its etcd member stopped, its pods
// Ready again when it is back).
//
// The package owns only the objects it creates (all but the CNPG CRD carry
// LabelWorld=true), the status it writes for them and for the Nodes and
// pods it plays the kubelet of, and the listeners it opens. It must not
// start or stop cluster processes other than the etcd members it is
// handed, and production packages must not import it.
package world
