package fleet

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/mcp-patch/mcp-patch/host/parse"
)

const fixtures = "../../testdata/fixtures"

// aptGrammar is the line grammar of `apt-get -s` output (apt 2.x, the
// "The following ..." layout). Every pattern is checked against the real
// captures in the shared fixtures before the lab's output is checked
// against it.
var aptGrammar = map[string]*regexp.Regexp{
	"progress": regexp.MustCompile(`^(Reading package lists|Building dependency tree|Reading state information|Calculating upgrade)\.\.\.( Done)?$`),
	"title":    regexp.MustCompile(`^The following (NEW packages will be installed|packages have been kept back|packages will be upgraded|packages will be REMOVED|held packages will be changed|packages were automatically installed and are no longer required):$`),
	"list":     regexp.MustCompile(`^  \S+(?: \S+)*$`),
	"summary":  regexp.MustCompile(`^\d+ upgraded, \d+ newly installed, \d+ to remove and \d+ not upgraded\.$`),
	"inst":     regexp.MustCompile(`^Inst (\S+)(?: \[(\S+)\])? \((\S+) (.+) \[(\S+)\]\)(?: \[\])?$`),
	"conf":     regexp.MustCompile(`^Conf (\S+) \((\S+) (.+) \[(\S+)\]\)$`),
	"remv":     regexp.MustCompile(`^(?:Remv|Purg) (\S+) \[(\S+)\]$`),
	"hint":     regexp.MustCompile(`^Use '(?:sudo )?apt autoremove' to remove (?:it|them)\.$`),
}

func classify(line string) string {
	for name, re := range aptGrammar {
		if re.MatchString(line) {
			return name
		}
	}
	return ""
}

// TestAptGrammarFitsRealCaptures proves the grammar on real apt output:
// every Inst/Conf/Remv line, progress line, block title and summary of the
// captures must be recognised.
func TestAptGrammarFitsRealCaptures(t *testing.T) {
	for _, name := range []string{
		"apt-get-just-print-upgrade_ubuntu2204_new-kernel_kept-back_salt-fixture.txt",
		"apt-get-dry-run-remove_ubuntu1404_interleaved-Remv-Inst-Conf_not-fully-installed_forum.txt",
		"apt-get-install-allow-change-held-packages_kubeadm-1.22.2_held-packages-will-be-changed.txt",
	} {
		data, err := os.ReadFile(filepath.Join(fixtures, "apt", name))
		if err != nil {
			t.Fatalf("read fixture: %v", err)
		}
		for _, line := range strings.Split(string(data), "\n") {
			line = strings.TrimRight(line, " ")
			isOp := regexp.MustCompile(`^(Inst|Conf|Remv|Purg) `).MatchString(line)
			isKnown := isOp || strings.HasPrefix(line, "The following") || strings.Contains(line, " upgraded, ") ||
				strings.HasPrefix(line, "Reading package lists") || strings.HasPrefix(line, "Calculating upgrade")
			if !isKnown {
				continue
			}
			if strings.HasPrefix(line, "The following extra packages") {
				continue // apt 1.0 wording, gone from apt 2.x
			}
			if classify(line) == "" {
				t.Errorf("%s: real line not matched by the grammar: %q", name, line)
			}
		}
	}
}

// TestAptOutputHasAptShape checks the lab's apt-get -s output line by line
// against the grammar, the package lists against the Inst/Remv lines, and
// reads it back with the project's own parser.
func TestAptOutputHasAptShape(t *testing.T) {
	f := newTestFleet(t, Options{ControlPlanes: 1, GPUServers: 1})
	gpu, cp := f.Host("gpu-1"), f.Host("cp-1")
	if err := gpu.Inject(AptWouldRemove{}); err != nil {
		t.Fatal(err)
	}
	if err := gpu.Inject(NvidiaModulesMissing{}); err != nil {
		t.Fatal(err)
	}
	for _, h := range []*Host{gpu, cp} {
		t.Run(h.Name, func(t *testing.T) {
			out := sh(t, f, h, "apt-get -s full-upgrade")
			var insts, confs, remvs []string
			blocks := map[string][]string{}
			title := ""
			for _, line := range strings.Split(strings.TrimSuffix(out, "\n"), "\n") {
				kind := classify(line)
				switch kind {
				case "":
					t.Errorf("line not in apt's grammar: %q", line)
				case "title":
					title = line
				case "list":
					blocks[title] = append(blocks[title], strings.Fields(line)...)
					for _, w := range strings.Fields(line) {
						if len(line) > 80 {
							t.Errorf("list line longer than 80 columns: %q (%s)", line, w)
							break
						}
					}
				case "inst":
					insts = append(insts, aptGrammar["inst"].FindStringSubmatch(line)[1])
				case "conf":
					confs = append(confs, aptGrammar["conf"].FindStringSubmatch(line)[1])
				case "remv":
					remvs = append(remvs, aptGrammar["remv"].FindStringSubmatch(line)[1])
				}
			}
			listed := slices.Concat(blocks["The following NEW packages will be installed:"], blocks["The following packages will be upgraded:"])
			slices.Sort(listed)
			sortedInsts := slices.Sorted(slices.Values(insts))
			if diff := cmp.Diff(listed, sortedInsts); diff != "" {
				t.Errorf("NEW+upgraded blocks vs Inst lines (-blocks +inst):\n%s", diff)
			}
			if diff := cmp.Diff(insts, confs); diff != "" {
				t.Errorf("Inst vs Conf lines (-inst +conf):\n%s", diff)
			}
			if diff := cmp.Diff(blocks["The following packages will be REMOVED:"], remvs, cmp.Transformer("sort", func(s []string) []string { return slices.Sorted(slices.Values(s)) })); diff != "" {
				t.Errorf("REMOVED block vs Remv lines:\n%s", diff)
			}

			sim := parse.ParseAptSimulate(out)
			if sim.Counts.Upgraded+sim.Counts.NewlyInstalled != len(insts) || sim.Counts.ToRemove != len(remvs) || sim.Counts.NotUpgraded != len(sim.KeptBack) {
				t.Errorf("summary counts %+v vs %d Inst, %d Remv, kept back %v", sim.Counts, len(insts), len(remvs), sim.KeptBack)
			}
			if h == gpu {
				want := []string{"containerd", "cri-tools", "kubeadm", "kubectl", "kubelet", "linux-modules-nvidia-550-server-generic"}
				if diff := cmp.Diff(want, sim.KeptBack); diff != "" {
					t.Errorf("kept back (-want +got):\n%s", diff)
				}
				if diff := cmp.Diff([]string{"nvidia-fabricmanager-550"}, remvs); diff != "" {
					t.Errorf("removals (-want +got):\n%s", diff)
				}
			}
		})
	}

	t.Run("download", func(t *testing.T) {
		out := sh(t, f, cp, "apt-get -d -y full-upgrade </dev/null")
		d := parse.ParseAptDownload(out)
		if !d.Complete || len(d.Fetched) == 0 {
			t.Fatalf("download output not understood: %+v\n%s", d, out)
		}
		again := sh(t, f, cp, "apt-get -d -y full-upgrade </dev/null")
		if strings.Contains(again, "Get:") || !strings.Contains(again, "Need to get 0 B/") {
			t.Errorf("second download fetched again:\n%s", again)
		}
	})

	t.Run("without -y apt asks and aborts on end of input", func(t *testing.T) {
		r := run(t, f, cp, "apt-get full-upgrade", "")
		if r.code != 1 || !strings.HasSuffix(r.stdout, "Do you want to continue? [Y/n] Abort.\n") {
			t.Errorf("apt-get without -y: exit %d\n%s", r.code, r.stdout)
		}
	})
}
