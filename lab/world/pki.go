package world

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"time"
)

// servingCert is a CA and a serving certificate it signed.
type servingCert struct {
	caPEM, certPEM, keyPEM []byte
	tls                    tls.Certificate
}

// newServingCert makes a CA and a certificate for the DNS names and IPs,
// valid for the given time from an hour ago.
func newServingCert(commonName string, dnsNames []string, ips []net.IP, valid time.Duration) (servingCert, error) {
	var out servingCert
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return out, fmt.Errorf("generate CA key for %s: %w", commonName, err)
	}
	notBefore := time.Now().Add(-time.Hour)
	caTmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: commonName + "-ca"},
		NotBefore:             notBefore,
		NotAfter:              notBefore.Add(valid),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return out, fmt.Errorf("sign CA for %s: %w", commonName, err)
	}
	caCert, err := x509.ParseCertificate(caDER)
	if err != nil {
		return out, err
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return out, fmt.Errorf("generate key for %s: %w", commonName, err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{CommonName: commonName},
		DNSNames:     dnsNames,
		IPAddresses:  ips,
		NotBefore:    notBefore,
		NotAfter:     notBefore.Add(valid),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, caCert, &key.PublicKey, caKey)
	if err != nil {
		return out, fmt.Errorf("sign certificate for %s: %w", commonName, err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return out, err
	}
	out.caPEM = pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER})
	out.certPEM = pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	out.keyPEM = pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER})
	out.tls, err = tls.X509KeyPair(out.certPEM, out.keyPEM)
	if err != nil {
		return out, fmt.Errorf("load certificate for %s: %w", commonName, err)
	}
	return out, nil
}

func serial() *big.Int {
	n, _ := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	return n
}
