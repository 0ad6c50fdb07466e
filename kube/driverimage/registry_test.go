package driverimage_test

import (
	"net"
	"strings"
	"testing"

	"github.com/mcp-patch/mcp-patch/kube/driverimage"
	"github.com/mcp-patch/mcp-patch/lab/registry"
)

// The check against the real OCI registry Debian ships (docker-registry,
// the CNCF distribution), images pushed into it with the real skopeo: a
// tag present, a tag absent, a repository absent, paged tag lists, a
// registry that wants a login, and a registry that is down ("could not
// check", never present).
func TestCheckAgainstARealRegistry(t *testing.T) {
	ctx := t.Context()
	reg := startRegistry(t, "", "")
	present := driverimage.Tag("535", "6.8.0-45-generic", "ubuntu22.04")
	for _, tag := range []string{present, driverimage.Tag("535", "6.8.0-40-generic", "ubuntu22.04"), "535.216.03-ubuntu22.04"} {
		if err := reg.Push(ctx, "nvidia/driver", tag); err != nil {
			t.Fatal(err)
		}
	}
	im := driverimage.Image{Registry: reg.URL, Repository: "nvidia/driver"}
	c := driverimage.Checker{}

	if r := c.Check(ctx, im, present); r.Verdict != driverimage.Present || r.Tags != 3 {
		t.Fatalf("pushed tag: %+v, want present among 3", r)
	}
	missing := driverimage.Tag("535", "6.8.0-47-generic", "ubuntu22.04")
	if r := c.Check(ctx, im, missing); r.Verdict != driverimage.Absent || !strings.Contains(r.Reason, missing) {
		t.Fatalf("a kernel without an image: %+v, want absent naming the tag", r)
	}
	if r := c.Check(ctx, driverimage.Image{Registry: im.Registry, Repository: "nvidia/no-such-driver"}, present); r.Verdict != driverimage.Absent {
		t.Fatalf("no repository: %+v, want absent", r)
	}
	// distribution 2.8 answers the whole list in one page whatever ?n= asks
	// (paging is tested on the spec's Link header in paging_test.go).
	if tags, err := (driverimage.Checker{PageSize: 1}).Tags(ctx, im); err != nil || len(tags) != 3 {
		t.Fatalf("tag list asked in pages of 1: %v %v, want the 3 tags", tags, err)
	}
	// A publisher withdraws one image: its tag is gone from the list, the
	// others stay.
	withdrawn := driverimage.Tag("535", "6.8.0-40-generic", "ubuntu22.04")
	if err := reg.Delete(ctx, "nvidia/driver", withdrawn); err != nil {
		t.Fatal(err)
	}
	if r := c.Check(ctx, im, withdrawn); r.Verdict != driverimage.Absent {
		t.Fatalf("a withdrawn tag: %+v, want absent", r)
	}
	if r := c.Check(ctx, im, present); r.Verdict != driverimage.Present || r.Tags != 2 {
		t.Fatalf("after another tag's withdrawal: %+v, want present among 2", r)
	}
	if r := c.Check(ctx, im, "bad tag/with slash"); r.Verdict != driverimage.Uncertain {
		t.Fatalf("bad tag: %+v, want could not check", r)
	}

	// A registry that wants a login (htpasswd, Basic).
	sec := startRegistry(t, "puller", "s3cret-pass")
	if err := sec.Push(ctx, "nvidia/driver", present); err != nil {
		t.Fatal(err)
	}
	secIm := driverimage.Image{Registry: sec.URL, Repository: "nvidia/driver", Username: "puller", Password: "s3cret-pass"}
	if r := c.Check(ctx, secIm, present); r.Verdict != driverimage.Present {
		t.Fatalf("with the login: %+v, want present", r)
	}
	secIm.Username, secIm.Password = "", ""
	if r := c.Check(ctx, secIm, present); r.Verdict != driverimage.Uncertain || !strings.Contains(r.Reason, "login") {
		t.Fatalf("without the login: %+v, want could not check, naming the login", r)
	}
	secIm.Username, secIm.Password = "puller", "wrong"
	if r := c.Check(ctx, secIm, present); r.Verdict != driverimage.Uncertain {
		t.Fatalf("a wrong login: %+v, want could not check", r)
	}

	// The registry goes down: never a pass.
	down := freeAddr(t)
	if r := c.Check(ctx, driverimage.Image{Registry: "http://" + down, Repository: "nvidia/driver"}, present); r.Verdict != driverimage.Uncertain || !strings.Contains(r.Reason, "could not check") {
		t.Fatalf("registry down: %+v, want could not check", r)
	}
}

// startRegistry runs the lab's registry (docker-registry) for the test;
// a user and password turn on htpasswd logins.
func startRegistry(t *testing.T, user, pass string) *registry.Registry {
	t.Helper()
	r, err := registry.Start(t.Context(), registry.Options{Dir: t.TempDir(), User: user, Password: pass})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := r.Stop(); err != nil {
			t.Error(err)
		}
	})
	return r
}

// freeAddr is a loopback address nothing listens on.
func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	return addr
}
