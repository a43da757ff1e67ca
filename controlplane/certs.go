package main

// certs.go owns the control plane's keys and certificates: one cluster CA (serving certificates and client
// certificates of the components and the admin), the front-proxy CA the aggregation layer uses to vouch for users
// when it proxies to an extension API server, and the ServiceAccount token signing key.

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// authority is a CA that signs leaf certificates.
type authority struct {
	cert *x509.Certificate
	key  crypto.Signer
}

// leaf describes a certificate to issue: a client certificate names a user (CommonName) and its groups
// (Organization); a serving certificate names its hosts.
type leaf struct {
	commonName string
	groups     []string
	dnsNames   []string
	ips        []net.IP
	client     bool
	serving    bool
}

func newKey() (*ecdsa.PrivateKey, error) {
	return ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
}

func serial() (*big.Int, error) {
	return rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
}

// newAuthority makes a self-signed CA and writes NAME.crt and NAME.key into dir.
func newAuthority(dir, name string) (*authority, error) {
	key, err := newKey()
	if err != nil {
		return nil, err
	}
	number, err := serial()
	if err != nil {
		return nil, err
	}
	template := &x509.Certificate{
		SerialNumber:          number,
		Subject:               pkix.Name{CommonName: name},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(10 * 365 * 24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, template, template, key.Public(), key)
	if err != nil {
		return nil, fmt.Errorf("self-signing CA %s: %w", name, err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	if err := writePair(dir, name, der, key); err != nil {
		return nil, err
	}
	return &authority{cert: cert, key: key}, nil
}

// issue signs a leaf certificate and writes NAME.crt and NAME.key into dir.
func (ca *authority) issue(dir, name string, spec leaf) error {
	key, err := newKey()
	if err != nil {
		return err
	}
	number, err := serial()
	if err != nil {
		return err
	}
	template := &x509.Certificate{
		SerialNumber: number,
		Subject:      pkix.Name{CommonName: spec.commonName, Organization: spec.groups},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(365 * 24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		DNSNames:     spec.dnsNames,
		IPAddresses:  spec.ips,
	}
	if spec.client {
		template.ExtKeyUsage = append(template.ExtKeyUsage, x509.ExtKeyUsageClientAuth)
	}
	if spec.serving {
		template.ExtKeyUsage = append(template.ExtKeyUsage, x509.ExtKeyUsageServerAuth)
	}
	der, err := x509.CreateCertificate(rand.Reader, template, ca.cert, key.Public(), ca.key)
	if err != nil {
		return fmt.Errorf("signing %s: %w", name, err)
	}
	return writePair(dir, name, der, key)
}

func writePair(dir, name string, der []byte, key *ecdsa.PrivateKey) error {
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, name+".crt"), pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, name+".key"), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}), 0o600)
}

// writeSigningKey writes the ServiceAccount token signing key (sa.key) and its public half (sa.pub).
func writeSigningKey(dir string) error {
	key, err := newKey()
	if err != nil {
		return err
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return err
	}
	pubDER, err := x509.MarshalPKIXPublicKey(key.Public())
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "sa.key"), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}), 0o600); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "sa.pub"), pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pubDER}), 0o644)
}

// pki is every file the components are started with, under one directory.
type pki struct {
	dir string
}

func (p pki) path(name string) string { return filepath.Join(p.dir, name) }

// makePKI issues everything the control plane needs, and the extra leaves (real nodes'). Each component authenticates with a client certificate
// naming the user the bootstrap RBAC policy expects (system:kube-controller-manager, system:kube-scheduler), so
// the real authorizer decides what each may do.
func makePKI(dir string, extra map[string]leaf) (pki, error) {
	p := pki{dir: dir}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return p, err
	}
	ca, err := newAuthority(dir, "ca")
	if err != nil {
		return p, err
	}
	frontProxy, err := newAuthority(dir, "front-proxy-ca")
	if err != nil {
		return p, err
	}
	leaves := map[string]leaf{
		"apiserver": {
			commonName: "kube-apiserver",
			dnsNames:   []string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc.cluster.local"},
			ips:        []net.IP{net.ParseIP("127.0.0.1"), net.ParseIP(serviceClusterIP)},
			serving:    true,
		},
		"admin":                   {commonName: "kubernetes-admin", groups: []string{"system:masters"}, client: true},
		"kube-controller-manager": {commonName: "system:kube-controller-manager", client: true},
		"kube-scheduler":          {commonName: "system:kube-scheduler", client: true},
		// The metrics adapter (metrics.go), reached by the aggregation layer through its Service.
		"metrics-adapter": {
			commonName: metricsService,
			dnsNames:   []string{metricsService + "." + metricsNamespace + ".svc"},
			ips:        []net.IP{net.ParseIP("127.0.0.1")},
			serving:    true,
		},
		// kwok stands in for every node's kubelet, so it acts as a cluster administrator, as kwok itself does.
		"kwok": {commonName: "kwok-controller", groups: []string{"system:masters"}, client: true},
	}
	for name, spec := range extra {
		leaves[name] = spec
	}
	for name, spec := range leaves {
		if err := ca.issue(dir, name, spec); err != nil {
			return p, err
		}
	}
	if err := frontProxy.issue(dir, "front-proxy-client", leaf{commonName: "front-proxy-client", client: true}); err != nil {
		return p, err
	}
	if err := writeSigningKey(dir); err != nil {
		return p, err
	}
	return p, nil
}
