package parse

import (
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestParseAptSimulateFixtures(t *testing.T) {
	type want struct {
		counts      AptCounts
		new         []string
		removed     []string
		keptBack    []string
		heldChanged []string
		additional  []string
		inst, conf  int
		remv, purg  int
		notFully    int
		first       AptAction
	}
	tests := []struct {
		name string
		file string
		want want
	}{
		{
			name: "ubuntu 22.04 new kernel, kept back, multi-pocket origins",
			file: "apt/apt-get-just-print-upgrade_ubuntu2204_new-kernel_kept-back_salt-fixture.txt",
			want: want{
				counts: AptCounts{Upgraded: 4, NewlyInstalled: 7, NotUpgraded: 5, Found: true},
				new: []string{"linux-cloud-tools-5.15.0-86", "linux-cloud-tools-5.15.0-86-generic", "linux-headers-5.15.0-86",
					"linux-headers-5.15.0-86-generic", "linux-image-5.15.0-86-generic", "linux-modules-5.15.0-86-generic",
					"linux-modules-extra-5.15.0-86-generic"},
				// "netplan. io" is how the capture wrapped netplan.io; both halves
				// are kept as written.
				keptBack: []string{"libnetplan0", "libsgutils2-2", "netplan.", "io", "sg3-utils", "sg3-utils-udev"},
				inst:     11, conf: 11,
				first: AptAction{Op: "Inst", Package: "linux-cloud-tools-5.15.0-86", NewVersion: "5.15.0-86.96",
					Origins: []string{"Ubuntu:22.04/jammy-updates", "Ubuntu:22.04/jammy-security"}, Arch: "amd64"},
			},
		},
		{
			name: "debian 6 upgrade with NOTE banner",
			file: "apt/apt-get-s-upgrade_debian6-squeeze_monitoring-plugins-debian2.txt",
			want: want{
				counts: AptCounts{Upgraded: 13, Found: true},
				inst:   13, conf: 13,
				first: AptAction{Op: "Inst", Package: "base-files", OldVersion: "6.0squeeze5", NewVersion: "6.0squeeze6",
					Origins: []string{"Debian:6.0.6/stable"}, Arch: "amd64"},
			},
		},
		{
			name: "ubuntu 12.04 security, trailing [libc6:amd64 ]",
			file: "apt/apt-get-s-upgrade_ubuntu1204-security_monitoring-plugins-ubuntu2.txt",
			want: want{
				inst: 25, conf: 25,
				first: AptAction{Op: "Inst", Package: "libc6-dev", OldVersion: "2.15-0ubuntu10", NewVersion: "2.15-0ubuntu10.2",
					Origins: []string{"Ubuntu:12.04/precise-security"}, Arch: "amd64"},
			},
		},
		{
			name: "interleaved Remv/Inst/Conf, not fully installed",
			file: "apt/apt-get-dry-run-remove_ubuntu1404_interleaved-Remv-Inst-Conf_not-fully-installed_forum.txt",
			want: want{
				counts:     AptCounts{Upgraded: 1, ToRemove: 3, Found: true},
				removed:    []string{"linux-headers-3.13.0-45", "linux-headers-3.13.0-45-generic", "linux-image-extra-3.13.0-45-generic"},
				additional: []string{"linux-image-3.13.0-52-generic"},
				inst:       1, conf: 4, remv: 3, notFully: 5,
				first: AptAction{Op: "Remv", Package: "linux-image-extra-3.13.0-45-generic", OldVersion: "3.13.0-45.74"},
			},
		},
		{
			name: "apt 3 REMOVING and Summary layout",
			file: "apt/apt-s-autoremove_ubuntu2504-plucky_apt3-new-format_REMOVING-Summary_forum.txt",
			want: want{
				counts: AptCounts{ToRemove: 12, Found: true},
				removed: []string{"amd64-microcode", "iucode-tool", "libpkcs11-helper1t64", "network-manager-openvpn",
					"gjs", "libgjs0g", "linux-image-6.11.0-1001-realtime", "openvpn",
					"intel-microcode", "libmozjs-128-0", "linux-image-realtime", "surfshark"},
				remv:  12,
				first: AptAction{Op: "Remv", Package: "surfshark", OldVersion: "3.1.0-4987"},
			},
		},
		{
			name: "held package will be changed",
			file: "apt/apt-get-install-allow-change-held-packages_kubeadm-1.22.2_held-packages-will-be-changed.txt",
			want: want{
				counts:      AptCounts{Upgraded: 1, NotUpgraded: 114, Found: true},
				heldChanged: []string{"kubeadm"},
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := ParseAptSimulate(fixture(t, tc.file))
			count := func(op string) int {
				n := 0
				for _, a := range s.Actions {
					if a.Op == op {
						n++
					}
				}
				return n
			}
			got := want{
				counts: s.Counts, new: s.New, removed: s.Removed, keptBack: s.KeptBack, heldChanged: s.HeldChanged,
				additional: s.Additional, inst: count("Inst"), conf: count("Conf"), remv: count("Remv"), purg: count("Purg"),
				notFully: s.NotFullyInstalled,
			}
			if len(s.Actions) > 0 {
				got.first = s.Actions[0]
			}
			if d := cmp.Diff(tc.want, got, cmp.AllowUnexported(want{})); d != "" {
				t.Errorf("(-want +got)\n%s", d)
			}
		})
	}
}

func TestPlanLines(t *testing.T) {
	out := "Remv oldlib [1.0]\nInst newlib (1.0 mcp-lab:lab [all])\nInst tinyapp [1.0] (2.0 mcp-lab:lab [all])\n" +
		"Conf tinyapp (2.0 mcp-lab:lab [all])\nPurg linux-image-6.1.0-9-amd64 [6.1.27-1]\n"
	want := []string{
		"Inst newlib - 1.0 all",
		"Inst tinyapp 1.0 2.0 all",
		"Purg linux-image-6.1.0-9-amd64 6.1.27-1 - -",
		"Remv oldlib 1.0 - -",
	}
	if d := cmp.Diff(want, PlanLines(out)); d != "" {
		t.Errorf("(-want +got)\n%s", d)
	}
	// Conf lines, banners and ordering do not change the digest.
	reordered := "NOTE: This is only a simulation!\nInst tinyapp [1.0] (2.0 mcp-lab:lab [all])\nRemv oldlib [1.0]\n" +
		"Purg linux-image-6.1.0-9-amd64 [6.1.27-1]\nInst newlib (1.0 mcp-lab:lab [all])\n"
	if PlanDigest(out) != PlanDigest(reordered) {
		t.Error("digest depends on order or Conf lines")
	}
	if PlanDigest("") != "sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855" {
		t.Errorf("empty plan digest = %s", PlanDigest(""))
	}
}

// awkPlan runs the plan-digest block of simulate.sh on out and returns its
// sorted lines and digest.
func awkPlan(t testing.TB, block, out string) ([]string, string) {
	t.Helper()
	lines := runShell(t, block+"\nplan_lines | LC_ALL=C sort", []byte(out))
	digest := runShell(t, block+"\nplan_digest", []byte(out))
	var ls []string
	for _, l := range strings.Split(lines, "\n") {
		if l != "" {
			ls = append(ls, l)
		}
	}
	return ls, strings.TrimSpace(digest)
}

var planTricky = []string{
	"",
	"Inst\n",
	"Inst \n",
	"  Inst  y [] (2 a [b]) []\n",
	"Inst a [1] (2 x [amd64])\r\n",
	"Remv\tfoo\t[1.0]\t\n",
	"Inst a (\nInst b ( [])\n",
	"Inst a [1] (2 Ubuntu:22.04/jammy-updates, Ubuntu:22.04/jammy-security [amd64]) [libc6:amd64 ]\n",
	"Purg ü [é] (ß [ä])\n",
	"Inst c [[x]] ((y [[z]])\n",
	"Inst d [1]\n",
	"Inst e [ (1 [a])",
}

func TestPlanDigestMatchesScript(t *testing.T) {
	blockSim := scriptBlock(t, "simulate.sh", "plan-digest")
	if blockInst := scriptBlock(t, "install.sh", "plan-digest"); blockInst != blockSim {
		t.Fatal("plan-digest differs between simulate.sh and install.sh")
	}
	inputs := slices.Clone(planTricky)
	for _, f := range fixtureFiles(t, "apt", "apt-") {
		inputs = append(inputs, fixture(t, strings.TrimPrefix(f, "testdata/fixtures/")))
	}
	for i, in := range inputs {
		lines, digest := awkPlan(t, blockSim, in)
		if d := cmp.Diff(lines, PlanLines(in)); d != "" {
			t.Errorf("input %d: lines differ (-awk +go)\n%s", i, d)
		}
		if digest != PlanDigest(in) {
			t.Errorf("input %d: awk digest %s, go digest %s", i, digest, PlanDigest(in))
		}
	}
}

func FuzzParseAptSimulate(f *testing.F) {
	for _, p := range fixtureFiles(f, "apt", "") {
		f.Add(fixture(f, strings.TrimPrefix(p, "testdata/fixtures/")))
	}
	for _, s := range planTricky {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, out string) {
		s := ParseAptSimulate(out)
		lines := PlanLines(out)
		if !slices.IsSorted(lines) {
			t.Fatal("plan lines not sorted")
		}
		if PlanDigest(out) != DigestPlanLines(lines) {
			t.Fatal("digest not a function of the lines")
		}
		for _, a := range s.Actions {
			if a.Package == "" || (a.Op != "Inst" && a.Op != "Conf" && a.Op != "Remv" && a.Op != "Purg") {
				t.Fatalf("bad action %+v", a)
			}
		}
		plan := 0
		for _, a := range s.Actions {
			if a.Op != "Conf" {
				plan++
			}
		}
		if plan > len(lines) {
			t.Fatalf("%d plan actions but %d plan lines", plan, len(lines))
		}
		_ = ParseAptDownload(out)
		_ = ParseDpkgQuery(out)
	})
}

// FuzzPlanLinesAgainstScript checks the Go digest against the script's awk
// on generated input (slow: one sh per input).
func FuzzPlanLinesAgainstScript(f *testing.F) {
	block := scriptBlock(f, "simulate.sh", "plan-digest")
	for _, s := range planTricky {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, out string) {
		if strings.ContainsRune(out, 0) {
			t.Skip("apt never prints NUL; awk implementations differ on it")
		}
		lines, digest := awkPlan(t, block, out)
		if d := cmp.Diff(lines, PlanLines(out)); d != "" {
			t.Fatalf("lines differ (-awk +go)\n%s", d)
		}
		if digest != PlanDigest(out) {
			t.Fatalf("awk %s, go %s", digest, PlanDigest(out))
		}
	})
}

func TestParseAptDownload(t *testing.T) {
	out := "Need to get 0 B/1496 B of archives.\nGet:1 file:/tmp/r ./ newlib 1.0 [752 B]\n" +
		"Get:2 https://packages.cloud.google.com/apt kubernetes-xenial/main amd64 kubeadm amd64 1.22.2-00 [8718 kB]\n" +
		"Fetched 8718 kB in 0s (21.8 MB/s)\nDownload complete and in download only mode\n"
	want := AptDownload{
		Fetched: []AptFetch{
			{Package: "newlib", Version: "1.0", URI: "file:/tmp/r", Size: "752 B"},
			{Package: "kubeadm", Version: "1.22.2-00", Arch: "amd64", URI: "https://packages.cloud.google.com/apt", Size: "8718 kB"},
		},
		NeedToGet: "0 B/1496 B", FetchedTotal: "8718 kB in 0s (21.8 MB/s)", Complete: true,
	}
	if d := cmp.Diff(want, ParseAptDownload(out)); d != "" {
		t.Errorf("(-want +got)\n%s", d)
	}
}

func TestParseDpkgQuery(t *testing.T) {
	out := "kubelet\t1.30.1-1.1\thi \nlinux-image-6.8.0-45-generic\t6.8.0-45.45\tii \nlinux-image-6.8.0-40-generic\t6.8.0-40.40\trc \nbroken\n"
	want := []DpkgPackage{
		{Name: "kubelet", Version: "1.30.1-1.1", Status: "hi", Installed: true, Held: true},
		{Name: "linux-image-6.8.0-45-generic", Version: "6.8.0-45.45", Status: "ii", Installed: true},
		{Name: "linux-image-6.8.0-40-generic", Version: "6.8.0-40.40", Status: "rc"},
	}
	if d := cmp.Diff(want, ParseDpkgQuery(out)); d != "" {
		t.Errorf("(-want +got)\n%s", d)
	}
}

func TestClassifyPackage(t *testing.T) {
	tests := map[string]string{
		"linux-image-5.15.0-86-generic":                     ClassKernel,
		"linux-modules-extra-5.15.0-86-generic":             ClassKernel,
		"linux-headers-generic":                             ClassKernel,
		"linux-generic":                                     ClassKernel,
		"linux-generic-hwe-22.04":                           ClassKernel,
		"linux-modules-nvidia-535-server-5.15.0-86-generic": ClassNvidia,
		"nvidia-driver-535-server":                          ClassNvidia,
		"libnvidia-compute-535-server:amd64":                ClassNvidia,
		"kubelet":                                           ClassKubernetes,
		"containerd.io":                                     ClassKubernetes,
		"cri-tools":                                         ClassKubernetes,
		"openssl":                                           ClassOther,
		"linux-libc-dev":                                    ClassOther,
	}
	for name, want := range tests {
		if got := ClassifyPackage(name); got != want {
			t.Errorf("ClassifyPackage(%q) = %q, want %q", name, got, want)
		}
	}
	for name, want := range map[string]string{"linux-image-5.15.0-86-generic": "5.15.0-86-generic", "linux-image-unsigned-6.8.0-45-generic": "6.8.0-45-generic", "linux-image-generic": "", "linux-image-6.1.0-13-amd64": "6.1.0-13-amd64"} {
		got, ok := KernelFromImagePackage(name)
		if got != want || ok != (want != "") {
			t.Errorf("KernelFromImagePackage(%q) = %q, %v", name, got, ok)
		}
	}
}
