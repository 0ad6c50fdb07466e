package cluster

import (
	"context"
	"fmt"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// authorizationArgs make the API server authorise as a production one
// does: the Node authorizer for kubelets, then RBAC for everyone else, so
// a client without a role binding is refused (the admin token is in
// system:masters).
func authorizationArgs() []string {
	return []string{"--authorization-mode=Node,RBAC"}
}

// ServiceAccountTokenTTL is how long a token ServiceAccountKubeconfig
// requests stays valid: longer than any lab run.
const ServiceAccountTokenTTL = 7 * 24 * time.Hour

// ServiceAccountKubeconfig creates the ServiceAccount namespace/name when
// it does not exist, requests a token for it (the TokenRequest API, as
// `kubectl create token` does) and writes a kubeconfig at path that
// authenticates with that token alone. What it may do is what its role
// bindings grant.
func (c *Cluster) ServiceAccountKubeconfig(ctx context.Context, namespace, name, path string) error {
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace}}
	if _, err := c.client.CoreV1().ServiceAccounts(namespace).Create(ctx, sa, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create ServiceAccount %s/%s: %w", namespace, name, err)
	}
	ttl := int64(ServiceAccountTokenTTL / time.Second)
	tr, err := c.client.CoreV1().ServiceAccounts(namespace).CreateToken(ctx, name,
		&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: &ttl}}, metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("request a token for ServiceAccount %s/%s: %w", namespace, name, err)
	}
	user := "system:serviceaccount:" + namespace + ":" + name
	kc := clientcmdapi.NewConfig()
	kc.Clusters["lab"] = &clientcmdapi.Cluster{Server: c.Server, CertificateAuthorityData: c.Config.CAData}
	kc.AuthInfos[user] = &clientcmdapi.AuthInfo{Token: tr.Status.Token}
	kc.Contexts["lab"] = &clientcmdapi.Context{Cluster: "lab", AuthInfo: user, Namespace: namespace}
	kc.CurrentContext = "lab"
	if err := clientcmd.WriteToFile(*kc, path); err != nil {
		return fmt.Errorf("write kubeconfig of %s: %w", user, err)
	}
	return nil
}
