package cluster_test

import (
	"context"
	"fmt"
	"log"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/mcp-patch/mcp-patch/lab/cluster"
)

// A control plane with two GPU servers and a control-plane node, the way
// the lab models a fleet. Tests use cluster.StartT, which also stops it.
func ExampleStart() {
	ctx := context.Background()
	c, err := cluster.Start(ctx, cluster.Options{
		Nodes: []cluster.Node{
			{Name: "cp-01", Labels: map[string]string{"node-role.kubernetes.io/control-plane": ""}},
			{Name: "gpu-01", Capacity: map[corev1.ResourceName]string{"nvidia.com/gpu": "8"}},
			{Name: "gpu-02", Capacity: map[corev1.ResourceName]string{"nvidia.com/gpu": "8"}},
		},
	})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Stop()

	// Production code gets only the kubeconfig, as with a real cluster.
	fmt.Println("KUBECONFIG=" + c.Kubeconfig)
	nodes, err := c.Client().CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(len(nodes.Items), "nodes")
}

// A three-member etcd with kubeadm-style client TLS; stopping two members
// takes quorum away.
func ExampleStartEtcdCluster() {
	ctx := context.Background()
	e, err := cluster.StartEtcdCluster(ctx, cluster.EtcdOptions{Members: 3})
	if err != nil {
		log.Fatal(err)
	}
	defer e.Stop()
	fmt.Println("etcdctl --endpoints", e.Endpoints(), "--cacert", e.CAFile, "--cert", e.ClientCertFile, "--key", e.ClientKeyFile, "endpoint status")
	if err := e.KillMember(0); err != nil { // quorum holds with 2 of 3
		log.Fatal(err)
	}
	if err := e.StartMember(ctx, 0); err != nil {
		log.Fatal(err)
	}
}
