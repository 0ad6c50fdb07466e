package parse

import (
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strings"

	"sigs.k8s.io/yaml"
)

// Livepatch is the part of `canonical-livepatch status` the round reads.
type Livepatch struct {
	ClientVersion string `json:"client_version,omitempty"`
	// Kernel is the running kernel's entry ("5.15.0-100.110-generic").
	Kernel string `json:"kernel,omitempty"`
	// CheckState is "checked", "needs-check", ...
	CheckState string `json:"check_state,omitempty"`
	// PatchState is "applied", "nothing-to-apply", "applying",
	// "apply-failed", "kernel-upgrade-required", ...
	PatchState string `json:"patch_state,omitempty"`
	Version    string `json:"version,omitempty"`
	// Supported is the newer clients' kernel support state ("supported",
	// "unsupported", "eol", ...).
	Supported string   `json:"supported,omitempty"`
	Fixes     []string `json:"fixes"`
}

// ParseLivepatchStatus reads `canonical-livepatch status --format json` or
// `--format yaml` (format "json" or "yaml"); the status of the running
// kernel is used (the first one when none says running).
func ParseLivepatchStatus(text, format string) (Livepatch, error) {
	data := []byte(text)
	if format == "yaml" {
		j, err := yaml.YAMLToJSON(data)
		if err != nil {
			return Livepatch{}, fmt.Errorf("livepatch status yaml: %w", err)
		}
		data = j
	} else if format != "json" {
		return Livepatch{}, fmt.Errorf("livepatch status: unknown format %q", format)
	}
	var doc map[string]json.RawMessage
	if err := json.Unmarshal(data, &doc); err != nil {
		return Livepatch{}, fmt.Errorf("livepatch status %s: %w", format, err)
	}
	lp := Livepatch{Fixes: []string{}}
	lp.ClientVersion = rawString(doc, "Client-Version", "client-version")
	var statuses []map[string]json.RawMessage
	for _, k := range []string{"Status", "status"} {
		if raw, ok := doc[k]; ok {
			_ = json.Unmarshal(raw, &statuses)
			break
		}
	}
	if len(statuses) == 0 {
		return lp, errors.New("livepatch status: no status entries")
	}
	st := statuses[0]
	for _, s := range statuses {
		var running bool
		for _, k := range []string{"Running", "running"} {
			if raw, ok := s[k]; ok {
				_ = json.Unmarshal(raw, &running)
			}
		}
		if running {
			st = s
			break
		}
	}
	lp.Kernel = rawString(st, "Kernel", "kernel")
	lp.Supported = rawString(st, "Supported", "supported")
	var inner map[string]json.RawMessage
	for _, k := range []string{"Livepatch", "livepatch"} {
		if raw, ok := st[k]; ok {
			_ = json.Unmarshal(raw, &inner)
		}
	}
	lp.CheckState = rawString(inner, "CheckState", "checkState")
	lp.PatchState = rawString(inner, "State", "patchState")
	lp.Version = rawString(inner, "Version", "version")
	for _, k := range []string{"Fixes", "fixes"} {
		raw, ok := inner[k]
		if !ok {
			continue
		}
		var list []struct {
			Name string `json:"Name"`
		}
		var text string
		if json.Unmarshal(raw, &list) == nil {
			for _, f := range list {
				if f.Name != "" {
					lp.Fixes = append(lp.Fixes, f.Name)
				}
			}
		} else if json.Unmarshal(raw, &text) == nil {
			for _, l := range strings.Split(text, "\n") {
				if l = strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(l), "*")); l != "" {
					lp.Fixes = append(lp.Fixes, l)
				}
			}
		}
	}
	return lp, nil
}

// rawString returns the first of keys holding a string (or a number, as
// text) in m.
func rawString(m map[string]json.RawMessage, keys ...string) string {
	for _, k := range keys {
		raw, ok := m[k]
		if !ok {
			continue
		}
		var s string
		if json.Unmarshal(raw, &s) == nil {
			return s
		}
		var n json.Number
		if json.Unmarshal(raw, &n) == nil {
			return n.String()
		}
	}
	return ""
}

var aptConfigBlacklist = regexp.MustCompile(`^Unattended-Upgrade::Package-Blacklist(?:::)?\s+"(.*)";\s*$`)

// ParseAptConfigBlacklist reads the Unattended-Upgrade::Package-Blacklist
// lines of `apt-config dump` (apt has already resolved comments, includes
// and overrides). The entries are Python regular expressions matched
// against package names.
func ParseAptConfigBlacklist(dump string) []string {
	out := []string{}
	for _, line := range strings.Split(dump, "\n") {
		if m := aptConfigBlacklist.FindStringSubmatch(strings.TrimSpace(line)); m != nil && m[1] != "" {
			out = append(out, m[1])
		}
	}
	return out
}

// ParseRebootRequiredPkgs reads /var/run/reboot-required.pkgs: package
// names, one per line, de-duplicated in first-seen order.
func ParseRebootRequiredPkgs(text string) []string {
	out := []string{}
	seen := map[string]bool{}
	for _, l := range Lines(text) {
		if !seen[l] {
			seen[l] = true
			out = append(out, l)
		}
	}
	return out
}

// Package classes.
const (
	ClassKernel     = "kernel"
	ClassNvidia     = "nvidia"
	ClassKubernetes = "kubernetes"
	ClassOther      = "other"
)

var kubernetesPackages = map[string]bool{
	"kubelet": true, "kubeadm": true, "kubectl": true, "cri-tools": true,
	"containerd": true, "containerd.io": true, "kubernetes-cni": true,
}

// ClassifyPackage says whether a package belongs to the kernel
// (linux-image/-modules/-headers/-generic metas ...), the NVIDIA stack
// (nvidia-*, libnvidia-*, linux-modules-nvidia-*, linux-objects-nvidia-*,
// linux-signatures-nvidia-*) or Kubernetes (kubelet, kubeadm, kubectl,
// cri-tools, containerd). An ":arch" suffix is ignored.
func ClassifyPackage(name string) string {
	if i := strings.IndexByte(name, ':'); i >= 0 {
		name = name[:i]
	}
	switch {
	case kubernetesPackages[name]:
		return ClassKubernetes
	case strings.HasPrefix(name, "nvidia-"), strings.HasPrefix(name, "libnvidia-"),
		strings.HasPrefix(name, "linux-modules-nvidia-"), strings.HasPrefix(name, "linux-objects-nvidia-"),
		strings.HasPrefix(name, "linux-signatures-nvidia-"), strings.HasPrefix(name, "linux-nvidia-"):
		return ClassNvidia
	case strings.HasPrefix(name, "linux-image-"), strings.HasPrefix(name, "linux-modules-"),
		strings.HasPrefix(name, "linux-headers-"), strings.HasPrefix(name, "linux-tools-"),
		strings.HasPrefix(name, "linux-cloud-tools-"), strings.HasPrefix(name, "linux-buildinfo-"),
		strings.HasPrefix(name, "linux-hwe-"), strings.HasPrefix(name, "linux-generic"),
		strings.HasPrefix(name, "linux-virtual"), strings.HasPrefix(name, "linux-lowlatency"),
		strings.HasPrefix(name, "linux-aws"), strings.HasPrefix(name, "linux-azure"),
		strings.HasPrefix(name, "linux-gcp"), strings.HasPrefix(name, "linux-oracle"),
		strings.HasPrefix(name, "linux-kvm"), strings.HasPrefix(name, "linux-signed-"),
		name == "linux-base", name == "linux-firmware":
		return ClassKernel
	}
	return ClassOther
}

var kernelImagePackage = regexp.MustCompile(`^linux-image-(?:unsigned-)?(\d+\.\d+(?:\.\d+)?-[0-9A-Za-z.+~-]+)$`)

// KernelFromImagePackage returns the kernel release a versioned
// linux-image package installs ("linux-image-5.15.0-86-generic" →
// "5.15.0-86-generic"); false for metapackages such as
// linux-image-generic.
func KernelFromImagePackage(name string) (string, bool) {
	if i := strings.IndexByte(name, ':'); i >= 0 {
		name = name[:i]
	}
	m := kernelImagePackage.FindStringSubmatch(name)
	if m == nil {
		return "", false
	}
	return m[1], true
}
