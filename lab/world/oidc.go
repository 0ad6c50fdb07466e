package world

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"sync/atomic"
	"time"
)

// oidcRealmPath is the issuer path, as in the intent's issuer URL
// (https://sso.example.com/realms/platform).
const oidcRealmPath = "/realms/platform"

// oidcServer answers OIDC discovery for the issuer the lab's kube-apiserver
// mirror pods name, over TLS on loopback.
type oidcServer struct {
	issuer   string
	caPEM    []byte
	listener net.Listener
	srv      *http.Server
	done     chan struct{}
	down     atomic.Bool
}

func startOIDCServer() (*oidcServer, error) {
	cert, err := newServingCert("lab-oidc", []string{"localhost"}, []net.IP{net.ParseIP("127.0.0.1")}, 365*24*time.Hour)
	if err != nil {
		return nil, err
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("listen for the OIDC issuer: %w", err)
	}
	s := &oidcServer{caPEM: cert.caPEM, listener: l, done: make(chan struct{})}
	s.issuer = "https://" + l.Addr().String() + oidcRealmPath
	mux := http.NewServeMux()
	mux.HandleFunc("GET "+oidcRealmPath+"/.well-known/openid-configuration", func(w http.ResponseWriter, _ *http.Request) {
		if s.down.Load() {
			writeError(w, http.StatusServiceUnavailable, "Unavailable", "lab fault: the identity provider is down")
			return
		}
		writeJSON(w, http.StatusOK, map[string]any{
			"issuer":                                s.issuer,
			"authorization_endpoint":                s.issuer + "/protocol/openid-connect/auth",
			"token_endpoint":                        s.issuer + "/protocol/openid-connect/token",
			"jwks_uri":                              s.issuer + "/protocol/openid-connect/certs",
			"response_types_supported":              []string{"code", "id_token"},
			"subject_types_supported":               []string{"public"},
			"id_token_signing_alg_values_supported": []string{"RS256", "ES256"},
		})
	})
	mux.HandleFunc("GET "+oidcRealmPath+"/protocol/openid-connect/certs", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, map[string]any{"keys": []any{}})
	})
	s.srv = &http.Server{
		Handler:           mux,
		ReadHeaderTimeout: 5 * time.Second,
		TLSConfig:         &tls.Config{Certificates: []tls.Certificate{cert.tls}, MinVersion: tls.VersionTLS12},
		ErrorLog:          nil,
	}
	go func() {
		defer close(s.done)
		_ = s.srv.ServeTLS(l, "", "")
	}()
	return s, nil
}

func (s *oidcServer) close() error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err := s.srv.Shutdown(ctx)
	<-s.done
	if err != nil {
		return fmt.Errorf("stop OIDC issuer: %w", err)
	}
	return nil
}
