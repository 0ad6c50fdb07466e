package world

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"sigs.k8s.io/yaml"

	"github.com/mcp-patch/mcp-patch/lab/cluster"
)

// TestNamesMatchIntent keeps the World's default names equal to what the
// sample intent repository says, so that the round, reading the intent,
// finds the lab's objects.
func TestNamesMatchIntent(t *testing.T) {
	read := func(component string) map[string]any {
		data, err := os.ReadFile(filepath.Join("..", "..", "examples", "intent", component, "settings.yaml"))
		if err != nil {
			t.Fatal(err)
		}
		var m map[string]any
		if err := yaml.Unmarshal(data, &m); err != nil {
			t.Fatal(err)
		}
		return m
	}
	get := func(m map[string]any, path ...string) string {
		var v any = m
		for _, p := range path {
			mm, _ := v.(map[string]any)
			v = mm[p]
		}
		switch x := v.(type) {
		case string:
			return x
		case float64:
			return strconv.FormatFloat(x, 'f', -1, 64)
		}
		return ""
	}
	pg, wh, gpu, cp, osl := read("postgres"), read("admission-webhook"), read("gpu-fleet"), read("control-plane"), read("os-layer")
	n := Names{}.withDefaults()
	type pair struct{ Intent, World string }
	got := map[string]pair{
		"postgres.namespace":                  {get(pg, "postgres", "namespace"), n.PostgresNamespace},
		"postgres.cluster":                    {get(pg, "postgres", "cluster"), n.PostgresCluster},
		"postgres.instances":                  {get(pg, "postgres", "instances"), "3"},
		"webhook.namespace":                   {get(wh, "webhook", "namespace"), n.WebhookNamespace},
		"webhook.deployment":                  {get(wh, "webhook", "deployment"), n.WebhookDeployment},
		"webhook.configuration":               {get(wh, "webhook", "configuration"), n.WebhookConfiguration},
		"gpu.canary_label":                    {get(gpu, "gpu", "canary_label"), n.CanaryLabel},
		"gpu.node_label":                      {get(gpu, "gpu", "node_label"), n.GPUNodeLabel},
		"gpu.expected_gpus_per_server":        {get(gpu, "gpu", "expected_gpus_per_server"), "8"},
		"gpu.model_endpoint.model":            {get(gpu, "gpu", "model_endpoint", "model"), n.ModelID},
		"control_plane.vip_lease.namespace":   {get(cp, "control_plane", "vip_lease", "namespace"), n.VIPLeaseNamespace},
		"control_plane.vip_lease.name":        {get(cp, "control_plane", "vip_lease", "name"), n.VIPLeaseName},
		"control_plane.node_label":            {get(cp, "control_plane", "node_label"), labelControlPlane},
		"control_plane.etcd_members":          {get(cp, "control_plane", "etcd_members"), "3"},
		"gpu.model_endpoint.url (service)":    {serviceOf(get(gpu, "gpu", "model_endpoint", "url")), n.ModelName + "." + n.ModelNamespace + ".svc.cluster.local:8000"},
		"stack_health has the World's spaces": {"true", containsAll(osl, n)},
	}
	for k, p := range got {
		if p.Intent != p.World {
			t.Errorf("%s: intent says %q, the World uses %q", k, p.Intent, p.World)
		}
	}
}

// serviceOf returns host:port of an http URL.
func serviceOf(u string) string {
	u = strings.TrimPrefix(u, "http://")
	host, _, _ := strings.Cut(u, "/")
	return host
}

func containsAll(osl map[string]any, n Names) string {
	sh, _ := osl["stack_health"].(map[string]any)
	list, _ := sh["critical_namespaces"].([]any)
	have := map[string]bool{}
	for _, v := range list {
		s, _ := v.(string)
		have[s] = true
	}
	for _, ns := range []string{"kube-system", n.CNPGNamespace, n.PostgresNamespace, n.WebhookNamespace, n.GPUOperatorNamespace, n.ModelNamespace} {
		if !have[ns] {
			return "missing " + ns
		}
	}
	if have[n.WorkloadNamespace] {
		return n.WorkloadNamespace + " must not be critical"
	}
	return "true"
}

func TestOptionsValidate(t *testing.T) {
	c := &cluster.Cluster{}
	hosts := []Host{{Name: "cp-1", Role: RoleControlPlane}, {Name: "cp-2", Role: RoleControlPlane}, {Name: "cp-3", Role: RoleControlPlane}, {Name: "gpu-1", Role: RoleGPU, Canary: true}}
	tests := []struct {
		name string
		opts Options
		want string // substring of the error; "" for none
	}{
		{"valid", Options{Cluster: c, Hosts: hosts}, ""},
		{"no cluster", Options{Hosts: hosts}, "Cluster is required"},
		{"no control plane", Options{Cluster: c, Hosts: hosts[3:]}, "at least one control-plane host"},
		{"duplicate", Options{Cluster: c, Hosts: append([]Host{hosts[0]}, hosts...)}, "appears twice"},
		{"bad role", Options{Cluster: c, Hosts: append(hosts, Host{Name: "x", Role: "storage"})}, `role "storage"`},
		{"canary on control plane", Options{Cluster: c, Hosts: []Host{{Name: "cp-1", Role: RoleControlPlane, Canary: true}}}, "only a GPU server"},
		{"two canaries", Options{Cluster: c, Hosts: append(hosts, Host{Name: "gpu-2", Role: RoleGPU, Canary: true})}, "2 canary hosts"},
		{"primary not control plane", Options{Cluster: c, Hosts: hosts, PrimaryNode: "gpu-1"}, "not a control-plane host"},
		{"primary without instance", Options{Cluster: c, Hosts: hosts, PostgresInstances: 2, PrimaryNode: "cp-3"}, "runs no Postgres instance"},
		{"too many instances", Options{Cluster: c, Hosts: hosts, PostgresInstances: 4}, "PostgresInstances 4"},
		{"model takes more than all", Options{Cluster: c, Hosts: hosts, ModelGPUs: 9}, "ModelGPUs 9"},
		{"probe for unknown host", Options{Cluster: c, Hosts: hosts, Probes: map[string]HostProbe{"gpu-9": nil}}, `"gpu-9" is not a host`},
		{"lease too short", Options{Cluster: c, Hosts: hosts, VIPLeaseDuration: 1}, "VIPLeaseDuration"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.opts.withDefaults().validate()
			got := ""
			if err != nil {
				got = err.Error()
			}
			if (tc.want == "") != (got == "") || !strings.Contains(got, tc.want) {
				t.Errorf("validate() = %q, want containing %q", got, tc.want)
			}
		})
	}
}

func TestOptionsDefaults(t *testing.T) {
	o := Options{Hosts: []Host{{Name: "cp-1", Role: RoleControlPlane}, {Name: "cp-2", Role: RoleControlPlane}, {Name: "gpu-1", Role: RoleGPU}}}.withDefaults()
	got := []any{o.PrimaryNode, o.PostgresInstances, o.GPUsPerServer, o.ModelGPUs, o.WebhookReplicas}
	if d := cmp.Diff([]any{"cp-2", 2, 8, 4, 2}, got); d != "" {
		t.Errorf("defaults (-want +got):\n%s", d)
	}
}

func TestModelServer(t *testing.T) {
	m, err := startModelServer("", "smoke")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.close() })
	base := "http://" + m.addr()
	post := func(path, body string) (int, map[string]any) {
		t.Helper()
		resp, err := http.Post(base+path, "application/json", bytes.NewBufferString(body))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		raw, _ := io.ReadAll(resp.Body)
		var out map[string]any
		if err := json.Unmarshal(raw, &out); err != nil {
			t.Fatalf("%s answered non-JSON %q", path, raw)
		}
		return resp.StatusCode, out
	}
	text := func(m map[string]any) string {
		ch, _ := m["choices"].([]any)
		if len(ch) == 0 {
			return ""
		}
		c, _ := ch[0].(map[string]any)
		if s, ok := c["text"].(string); ok {
			return s
		}
		msg, _ := c["message"].(map[string]any)
		s, _ := msg["content"].(string)
		return s
	}
	tests := []struct {
		name, path, body string
		failing          bool
		wantStatus       int
		wantText         string
	}{
		{"completion", "/v1/completions", `{"model":"smoke","prompt":"Reply with the single word: ready","max_tokens":8}`, false, 200, " ready"},
		{"chat", "/v1/chat/completions", `{"model":"smoke","messages":[{"role":"user","content":"hi"}]}`, false, 200, "ready"},
		{"same answer twice", "/v1/completions", `{"model":"smoke","prompt":"anything else"}`, false, 200, " ready"},
		{"unknown model", "/v1/completions", `{"model":"gpt","prompt":"x"}`, false, 404, ""},
		{"empty prompt", "/v1/completions", `{"model":"smoke","prompt":""}`, false, 400, ""},
		{"not JSON", "/v1/completions", `nope`, false, 400, ""},
		{"fault", "/v1/completions", `{"model":"smoke","prompt":"x"}`, true, 500, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			m.setFailing(tc.failing, 0)
			defer m.setFailing(false, 0)
			status, body := post(tc.path, tc.body)
			if status != tc.wantStatus || text(body) != tc.wantText {
				t.Errorf("POST %s = %d %q, want %d %q (body %v)", tc.path, status, text(body), tc.wantStatus, tc.wantText, body)
			}
		})
	}
	resp, err := http.Get(base + "/v1/models")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Errorf("GET /v1/models = %d", resp.StatusCode)
	}
}

func TestFaultByName(t *testing.T) {
	for _, info := range Faults() {
		arg := ""
		if info.Name == "pdb-blocks-drain" {
			arg = "gpu-1"
		}
		f, err := FaultByName(info.Name, arg)
		if err != nil {
			t.Errorf("%s: %v", info.Name, err)
			continue
		}
		if f.Name() != info.Name || f.Description() == "" {
			t.Errorf("%s: built %q with description %q", info.Name, f.Name(), f.Description())
		}
	}
	for _, bad := range [][2]string{{"no-such", ""}, {"pdb-blocks-drain", ""}, {"webhook-short", "zero"}, {"model-errors", "200"}} {
		if _, err := FaultByName(bad[0], bad[1]); err == nil {
			t.Errorf("FaultByName(%q, %q) = nil error", bad[0], bad[1])
		}
	}
}
