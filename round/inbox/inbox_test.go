package inbox

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestValidID(t *testing.T) {
	for _, tt := range []struct {
		id string
		ok bool
	}{
		{"production-2026-12:gpu-3:drain_node", true},
		{"2026-12:all-nodes:sign_plan", true},
		{"staging-2026-12:gpu-3.dc1.example.org:approve_window", true},
		{"production-2026-12:gpu-3", false},
		{"production-2026-12:gpu-3:drain_node:x", false},
		{"../x:gpu-3:drain_node", false},
		{"p:GPU-3:drain_node", false},
		{"p:gpu-3/..:drain_node", false},
		{"p::drain_node", false},
		{"", false},
	} {
		if err := ValidID(tt.id); (err == nil) != tt.ok {
			t.Errorf("ValidID(%q) = %v, want ok %v", tt.id, err, tt.ok)
		}
	}
}

// A request put twice keeps the time it was first asked while the first
// has not expired; it is listed until it expires; a signed approval waits
// beside it until the request is resolved.
func TestInboxRequests(t *testing.T) {
	d := Dir(filepath.Join(t.TempDir(), "inbox"))
	now := time.Date(2026, 12, 7, 8, 0, 0, 0, time.UTC)
	if es, err := d.List(now); err != nil || len(es) != 0 {
		t.Fatalf("a missing inbox lists %v (%v)", es, err)
	}
	e := Entry{Environment: "production", Round: "production-2026-12", Node: "gpu-3", Step: "drain_node", Since: now, Expires: now.Add(30 * time.Minute), Request: "req 1"}
	if err := d.Put(e, now); err != nil {
		t.Fatal(err)
	}
	later := now.Add(10 * time.Minute)
	e2 := e
	e2.Since, e2.Expires, e2.Request = later, later.Add(30*time.Minute), "req 2"
	if err := d.Put(e2, later); err != nil {
		t.Fatal(err)
	}
	other := Entry{Environment: "staging", Round: "staging-2026-12", Node: "gpu-1", Step: "reboot_node", Since: now.Add(time.Minute), Expires: now.Add(15 * time.Minute), Request: "req 3"}
	if err := d.Put(other, later); err != nil {
		t.Fatal(err)
	}
	es, err := d.List(later)
	if err != nil {
		t.Fatal(err)
	}
	if len(es) != 2 || es[0].ID != "production-2026-12:gpu-3:drain_node" || !es[0].Since.Equal(now) || es[0].Request != "req 2" || es[1].ID != "staging-2026-12:gpu-1:reboot_node" {
		t.Fatalf("listed %+v", es)
	}
	if es, _ := d.List(now.Add(20 * time.Minute)); len(es) != 1 || es[0].Environment != "production" {
		t.Fatalf("after staging's request expired: %+v", es)
	}
	id := es[0].ID
	if err := d.Sign(id, "approval"); err != nil {
		t.Fatal(err)
	}
	if err := d.Sign("x-2026-12:gpu-9:drain_node", "approval"); err == nil || !strings.Contains(err.Error(), "no request") {
		t.Fatalf("signing a request the inbox does not hold: %v", err)
	}
	if g, err := d.Get(id); err != nil || !g.Signed {
		t.Fatalf("Get after Sign: %+v %v", g, err)
	}
	if a, ok, err := d.Approval(id); err != nil || !ok || a != "approval" {
		t.Fatalf("Approval: %q %v %v", a, ok, err)
	}
	if err := d.DropApproval(id); err != nil {
		t.Fatal(err)
	}
	if _, ok, _ := d.Approval(id); ok {
		t.Fatal("the dropped approval is still there")
	}
	if err := d.Resolve(id); err != nil {
		t.Fatal(err)
	}
	if _, err := d.Get(id); err == nil {
		t.Fatal("the resolved request is still there")
	}
	if err := d.Resolve(id); err != nil {
		t.Fatalf("resolving twice: %v", err)
	}
	// A file that claims another id is an error naming it, not a request.
	if err := os.WriteFile(filepath.Join(string(d), "p-2026-12:gpu-1:drain_node.request.json"),
		[]byte(`{"id":"p-2026-12:gpu-2:drain_node","round":"p-2026-12","node":"gpu-2","step":"drain_node"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := d.List(later); err == nil || !strings.Contains(err.Error(), "names another request") {
		t.Fatalf("a renamed request: %v", err)
	}
}

func TestInboxStatuses(t *testing.T) {
	d := Dir(t.TempDir())
	now := time.Date(2026, 12, 7, 8, 0, 0, 0, time.UTC)
	for _, s := range []Status{
		{Environment: "staging", Round: "staging-2026-12", Phase: "closed", Updated: now},
		{Environment: "production", Round: "production-2026-12", Phase: "windows", Node: "gpu-3", Deadline: now.Add(48 * time.Hour), Updated: now},
		{Phase: "not_planned", Updated: now},
	} {
		if err := d.PutStatus(s); err != nil {
			t.Fatal(err)
		}
	}
	if err := d.PutStatus(Status{Environment: "../x"}); err == nil {
		t.Fatal("a status named outside the inbox was written")
	}
	ss, err := d.Statuses()
	if err != nil {
		t.Fatal(err)
	}
	if len(ss) != 3 || ss[0].Environment != "" || ss[1].Environment != "production" || ss[1].Node != "gpu-3" || !ss[1].Deadline.Equal(now.Add(48*time.Hour)) || ss[2].Phase != "closed" {
		t.Fatalf("statuses %+v", ss)
	}
}
