package emul

import (
	"bufio"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/mcp-patch/mcp-patch/lab/fleet/machine"
)

func init() {
	register(aptGet, "apt-get")
	register(aptMark, "apt-mark")
	register(aptConfig, "apt-config")
	register(dpkgQuery, "dpkg-query")
	register(dpkg, "dpkg")
}

const (
	aptInterrupted = "E: dpkg was interrupted, you must manually run 'dpkg --configure -a' to correct the problem. \n"
	lockFrontend   = "/var/lib/dpkg/lock-frontend"
)

func aptHeader(c *ctx, quiet int, calc bool) {
	if quiet >= 2 {
		return
	}
	c.outf("Reading package lists...\nBuilding dependency tree...\nReading state information...\n")
	if calc {
		c.outf("Calculating upgrade...\n")
	}
}

// lockDpkg takes dpkg's frontend lock as apt does (fcntl-style exclusive
// lock, here flock on the same file) and reports a holder like apt. With
// -o DPkg::Lock::Timeout=N it waits up to N seconds, saying so, as apt does.
func lockDpkg(c *ctx) (func(), int) {
	p := c.host.Path(lockFrontend)
	os.MkdirAll(filepath.Dir(p), 0o755)
	f, err := os.OpenFile(p, os.O_RDWR|os.O_CREATE, 0o640)
	if err != nil {
		c.errf("E: Could not open lock file %s - open (13: Permission denied)\n", lockFrontend)
		return nil, 100
	}
	deadline := time.Now().Add(time.Duration(aptOptionInt(c.args, "DPkg::Lock::Timeout")) * time.Second)
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			break
		}
		holder, _ := os.ReadFile(p + ".pid")
		pid := strings.TrimSpace(string(holder))
		name := "apt-get"
		if comm, err := os.ReadFile("/proc/" + pid + "/comm"); err == nil && pid != "" {
			name = strings.TrimSpace(string(comm))
		}
		if time.Now().Before(deadline) {
			c.errf("Waiting for cache lock: Could not get lock %s. It is held by process %s (%s)...\n", lockFrontend, pid, name)
			time.Sleep(time.Second)
			continue
		}
		c.errf("E: Could not get lock %s. It is held by process %s (%s)\nN: Be aware that removing the lock file is not a solution and may break your system.\nE: Unable to acquire the dpkg frontend lock (%s), is another process using it?\n",
			lockFrontend, pid, name, lockFrontend)
		f.Close()
		return nil, 100
	}
	os.WriteFile(p+".pid", []byte(strconv.Itoa(os.Getpid())), 0o640)
	return func() { os.Remove(p + ".pid"); f.Close() }, 0
}

func aptGet(c *ctx) int {
	f, err := parseFlags(c.args, []string{"-o", "-c", "-t", "--option", "--config-file", "--target-release"}, false)
	if err != nil {
		c.errf("E: Command line option %v\n", err)
		return 100
	}
	simulate := f.has("-s", "--simulate", "--just-print", "--dry-run", "--recon", "--no-act")
	download := f.has("-d", "--download-only")
	yes := f.has("-y", "--yes", "--assume-yes")
	quiet := f.count("-q")
	if v, ok := f.get("--quiet"); ok {
		n, _ := strconv.Atoi(v)
		quiet += max(n, 1)
	}
	purge := f.has("--purge")
	if len(f.operands) == 0 {
		c.errf("E: Invalid operation \n")
		return 100
	}
	op := f.operands[0]
	switch op {
	case "update":
		return aptUpdate(c, quiet)
	case "full-upgrade", "dist-upgrade", "upgrade":
		return aptUpgrade(c, op, simulate, download, yes, quiet)
	case "autoremove", "auto-remove":
		return aptAutoremove(c, simulate, yes, purge, quiet)
	case "check":
		// check opens the cache with the lock, as apt does: it waits for
		// the lock and finds an interrupted dpkg.
		unlock, rc := lockDpkg(c)
		if rc != 0 {
			return rc
		}
		defer unlock()
		if st, err := c.host.View(); err != nil || st.DpkgInterrupted {
			c.errf("%s", aptInterrupted)
			return 100
		}
		aptHeader(c, quiet, false)
		return 0
	case "install", "remove", "purge", "source", "build-dep", "clean", "autoclean", "download", "changelog":
		c.errf("E: apt-get %s is not emulated on this lab host\n", op)
		return 100
	}
	c.errf("E: Invalid operation %s\n", op)
	return 100
}

// aptOptionInt is the integer value of -o NAME=N (case-insensitive name,
// as apt reads it); 0 when absent or not a number.
func aptOptionInt(args []string, name string) int {
	v := 0
	for i, a := range args {
		var kv string
		switch {
		case (a == "-o" || a == "--option") && i+1 < len(args):
			kv = args[i+1]
		case strings.HasPrefix(a, "-o") && len(a) > 2:
			kv = a[2:]
		case strings.HasPrefix(a, "--option="):
			kv = strings.TrimPrefix(a, "--option=")
		default:
			continue
		}
		if k, val, ok := strings.Cut(kv, "="); ok && strings.EqualFold(k, name) {
			if n, err := strconv.Atoi(val); err == nil {
				v = n
			}
		}
	}
	return v
}

func aptUpdate(c *ctx, quiet int) int {
	if quiet < 2 {
		c.outf("Hit:1 http://archive.ubuntu.com/ubuntu noble InRelease\nHit:2 http://archive.ubuntu.com/ubuntu noble-updates InRelease\nHit:3 http://security.ubuntu.com/ubuntu noble-security InRelease\nHit:4 https://prod-cdn.packages.k8s.io/repositories/isv:/kubernetes:/core:/stable:/v1.31/deb  InRelease\n")
		c.outf("Reading package lists...\n")
	}
	return 0
}

func renderBlocks(c *ctx, plan machine.AptPlan, verbose bool) {
	if len(plan.Autoremovable) > 0 {
		c.outf("%s", machine.AptList("The following packages were automatically installed and are no longer required:", plan.Autoremovable, ""))
		c.outf("Use 'apt autoremove' to remove them.\n")
	}
	var removed, newPkgs, upgraded []string
	for _, op := range plan.Remove {
		removed = append(removed, op.Pkg.Name)
	}
	for _, op := range plan.Install {
		if op.New {
			newPkgs = append(newPkgs, op.Pkg.Name)
		} else {
			upgraded = append(upgraded, op.Pkg.Name)
		}
	}
	slices.Sort(newPkgs)
	slices.Sort(upgraded)
	c.outf("%s", machine.AptList("The following packages will be REMOVED:", removed, ""))
	c.outf("%s", machine.AptList("The following NEW packages will be installed:", newPkgs, ""))
	c.outf("%s", machine.AptList("The following packages have been kept back:", plan.KeptBack, ""))
	c.outf("%s", machine.AptList("The following upgrades have been deferred due to phasing:", plan.Phased, ""))
	c.outf("%s", machine.AptList("The following packages will be upgraded:", upgraded, ""))
	c.outf("%d upgraded, %d newly installed, %d to remove and %d not upgraded.\n",
		plan.Upgraded(), plan.NewCount(), len(plan.Remove), len(plan.KeptBack))
}

func aptUpgrade(c *ctx, op string, simulate, download, yes bool, quiet int) int {
	st, err := c.host.View()
	if err != nil {
		c.errf("E: %v\n", err)
		return 100
	}
	if st.DpkgInterrupted {
		c.errf("%s", aptInterrupted)
		return 100
	}
	plan := machine.PlanFullUpgrade(st)
	if op == "upgrade" {
		// upgrade never installs new packages or removes any: whatever
		// needs one is kept back.
		var keep []machine.AptOp
		news := map[string]bool{}
		for _, o := range plan.Install {
			if o.New {
				news[o.Pkg.Name] = true
			}
		}
		for _, o := range plan.Install {
			if o.New {
				continue
			}
			needsNew := false
			for _, d := range o.Pkg.Depends {
				if news[d] {
					needsNew = true
				}
			}
			if needsNew {
				plan.KeptBack = append(plan.KeptBack, o.Pkg.Name)
				continue
			}
			keep = append(keep, o)
		}
		slices.Sort(plan.KeptBack)
		plan.Install = keep
		plan.Remove = nil
	}
	var unlock func()
	if !simulate && !download {
		var rc int
		unlock, rc = lockDpkg(c)
		if rc != 0 {
			return rc
		}
		defer unlock()
	}
	aptHeader(c, quiet, true)
	if quiet < 2 {
		renderBlocks(c, plan, false)
	}
	if simulate {
		for _, o := range plan.Remove {
			c.outf("Remv %s [%s]\n", o.Pkg.Name, o.From)
		}
		for _, o := range plan.Install {
			c.outf("%s\n", machine.InstLine(o))
		}
		for _, o := range plan.Install {
			c.outf("%s\n", machine.ConfLine(o))
		}
		return 0
	}
	if len(plan.Install) == 0 && len(plan.Remove) == 0 {
		return 0
	}
	var total, need int
	downloaded := map[string]bool{}
	for _, d := range st.Downloaded {
		downloaded[d] = true
	}
	var toGet []*machine.Package
	for _, o := range plan.Install {
		total += o.Pkg.SizeKB
		if !downloaded[o.Pkg.Name+" "+o.To] {
			need += o.Pkg.SizeKB
			toGet = append(toGet, o.Pkg)
		}
	}
	if need == total {
		c.outf("Need to get %s of archives.\n", machine.SizeString(float64(total)*1000))
	} else {
		c.outf("Need to get %s/%s of archives.\n", machine.SizeString(float64(need)*1000), machine.SizeString(float64(total)*1000))
	}
	if !download {
		c.outf("After this operation, %s of additional disk space will be used.\n", machine.SizeString(float64(total)*2600))
	}
	if !yes {
		c.outf("Do you want to continue? [Y/n] ")
		line, err := bufio.NewReader(c.stdin).ReadString('\n')
		ans := strings.TrimSpace(line)
		if (err != nil && ans == "") || (ans != "" && !strings.HasPrefix(strings.ToLower(ans), "y")) {
			c.outf("Abort.\n")
			return 1
		}
	}
	for i, p := range toGet {
		c.outf("%s\n", machine.GetLine(i+1, p))
	}
	if len(toGet) > 0 {
		c.outf("Fetched %s in 1s (%s/s)\n", machine.SizeString(float64(need)*1000), machine.SizeString(float64(need)*1000))
	}
	err = c.host.Update(func(s *machine.State) error {
		for _, p := range toGet {
			s.Downloaded = append(s.Downloaded, p.Name+" "+p.Candidate)
			os.WriteFile(c.host.Path("/var/cache/apt/archives/"+machine.DebName(p, p.Candidate)), []byte(p.Name+"\n"), 0o644)
		}
		return nil
	})
	if err != nil {
		c.errf("E: %v\n", err)
		return 100
	}
	if download {
		c.outf("Download complete and in download only mode\n")
		return 0
	}
	return runDpkg(c, plan)
}

// installStep is how long dpkg spends on one package action.
func installStep() time.Duration {
	if d, err := time.ParseDuration(os.Getenv(EnvStepDelay)); err == nil {
		return d
	}
	return 50 * time.Millisecond
}

// runDpkg carries out a plan the way dpkg does: removals, then unpack of
// every package, then configuration, then triggers (initramfs and GRUB for
// a new kernel). The state is saved after each step, so a process killed
// half-way leaves dpkg "interrupted", as a real one does.
func runDpkg(c *ctx, plan machine.AptPlan) int {
	step := installStep()
	if err := c.host.Update(func(s *machine.State) error { s.DpkgInterrupted = true; return nil }); err != nil {
		c.errf("E: %v\n", err)
		return 100
	}
	if err := notify("install-started"); err != nil {
		c.errf("W: %v\n", err)
	}
	c.outf("(Reading database ... %d files and directories currently installed.)\n", 187342)
	var kernels []string
	kernelVersions := map[string]string{}
	for _, o := range plan.Remove {
		c.outf("Removing %s (%s) ...\n", o.Pkg.Name, o.From)
		if err := c.host.Update(func(s *machine.State) error {
			p := s.Packages[o.Pkg.Name]
			if err := machine.RemoveFiles(c.host, p); err != nil {
				return err
			}
			p.Version, p.ConfigOnly = o.From, true
			return nil
		}); err != nil {
			c.errf("dpkg: error processing package %s (--remove): %v\n", o.Pkg.Name, err)
			return 100
		}
		time.Sleep(step)
	}
	for _, o := range plan.Install {
		deb := machine.DebName(o.Pkg, o.To)
		if o.New {
			c.outf("Selecting previously unselected package %s.\n", o.Pkg.Name)
		}
		c.outf("Preparing to unpack .../%s ...\n", deb)
		if o.New {
			c.outf("Unpacking %s (%s) ...\n", o.Pkg.Name, o.To)
		} else {
			c.outf("Unpacking %s (%s) over (%s) ...\n", o.Pkg.Name, o.To, o.From)
		}
		if err := c.host.Update(func(s *machine.State) error {
			p := s.Packages[o.Pkg.Name]
			p.Version, p.Candidate, p.ConfigOnly = o.To, "", false
			if o.New {
				p.Auto = true
			}
			return machine.InstallFiles(c.host, s, p)
		}); err != nil {
			c.errf("dpkg: error processing archive %s (--unpack): %v\n", deb, err)
			return 100
		}
		if o.Pkg.Kind == "image" {
			kernels = append(kernels, o.Pkg.Kernel+"-generic")
			kernelVersions[o.Pkg.Kernel+"-generic"] = o.To
		}
		time.Sleep(step)
	}
	for _, o := range plan.Install {
		c.outf("Setting up %s (%s) ...\n", o.Pkg.Name, o.To)
		if o.Pkg.Kind == "image" {
			rel := o.Pkg.Kernel + "-generic"
			c.outf("I: /boot/vmlinuz is now a symlink to vmlinuz-%s\nI: /boot/initrd.img is now a symlink to initrd.img-%s\n", rel, rel)
		}
		time.Sleep(step / 2)
	}
	for _, rel := range kernels {
		c.outf("Processing triggers for linux-image-%s (%s) ...\n", rel, kernelVersions[rel])
		c.outf("/etc/kernel/postinst.d/initramfs-tools:\nupdate-initramfs: Generating /boot/initrd.img-%s\n", rel)
		c.outf("/etc/kernel/postinst.d/zz-update-grub:\n")
		if rc := updateGrub(c, c.stdout); rc != 0 {
			c.errf("run-parts: /etc/kernel/postinst.d/zz-update-grub exited with return code %d\n", rc)
			return 100
		}
	}
	c.outf("Processing triggers for libc-bin (2.39-0ubuntu8.3) ...\n")
	err := c.host.Update(func(s *machine.State) error {
		s.DpkgInterrupted = false
		s.Downloaded = nil
		if len(kernels) > 0 {
			rr := c.host.Path("/run/reboot-required")
			if err := os.WriteFile(rr, []byte("*** System restart required ***\n"), 0o644); err != nil {
				return err
			}
			var pkgs strings.Builder
			for _, k := range kernels {
				pkgs.WriteString("linux-image-" + k + "\nlinux-base\n")
			}
			return os.WriteFile(rr+".pkgs", []byte(pkgs.String()), 0o644)
		}
		return nil
	})
	if err != nil {
		c.errf("E: %v\n", err)
		return 100
	}
	return 0
}

func aptAutoremove(c *ctx, simulate, yes, purge bool, quiet int) int {
	st, err := c.host.View()
	if err != nil {
		c.errf("E: %v\n", err)
		return 100
	}
	if st.DpkgInterrupted {
		c.errf("%s", aptInterrupted)
		return 100
	}
	if !simulate {
		unlock, rc := lockDpkg(c)
		if rc != 0 {
			return rc
		}
		defer unlock()
	}
	names := machine.Autoremovable(st)
	full := machine.PlanFullUpgrade(st)
	aptHeader(c, quiet, false)
	suffix := ""
	if purge {
		suffix = "*"
	}
	if quiet < 2 {
		c.outf("%s", machine.AptList("The following packages will be REMOVED:", names, suffix))
		c.outf("0 upgraded, 0 newly installed, %d to remove and %d not upgraded.\n", len(names), len(full.KeptBack)+len(full.Install))
	}
	verb := "Remv"
	if purge {
		verb = "Purg"
	}
	if simulate {
		for _, n := range names {
			c.outf("%s %s [%s]\n", verb, n, st.Packages[n].Version)
		}
		return 0
	}
	if len(names) == 0 {
		return 0
	}
	var kb int
	for _, n := range names {
		kb += st.Packages[n].SizeKB
	}
	c.outf("After this operation, %s disk space will be freed.\n", machine.SizeString(float64(kb)*2600))
	if !yes {
		c.outf("Do you want to continue? [Y/n] ")
		line, err := bufio.NewReader(c.stdin).ReadString('\n')
		ans := strings.TrimSpace(line)
		if (err != nil && ans == "") || (ans != "" && !strings.HasPrefix(strings.ToLower(ans), "y")) {
			c.outf("Abort.\n")
			return 1
		}
	}
	c.outf("(Reading database ... %d files and directories currently installed.)\n", 187342)
	removedImage := false
	for _, n := range names {
		p := st.Packages[n]
		c.outf("Removing %s (%s) ...\n", n, p.Version)
		if p.Kind == "image" {
			removedImage = true
			rel := p.Kernel + "-generic"
			c.outf("/etc/kernel/postrm.d/initramfs-tools:\nupdate-initramfs: Deleting /boot/initrd.img-%s\n", rel)
		}
		if err := c.host.Update(func(s *machine.State) error {
			sp := s.Packages[n]
			if err := machine.RemoveFiles(c.host, sp); err != nil {
				return err
			}
			if purge {
				sp.Version, sp.ConfigOnly = "", false
			} else {
				sp.ConfigOnly = true
			}
			return nil
		}); err != nil {
			c.errf("dpkg: error processing package %s (--remove): %v\n", n, err)
			return 100
		}
	}
	if removedImage {
		c.outf("/etc/kernel/postrm.d/zz-update-grub:\n")
		if rc := updateGrub(c, c.stdout); rc != 0 {
			return 100
		}
	}
	if purge {
		for _, n := range names {
			c.outf("Purging configuration files for %s (%s) ...\n", n, st.Packages[n].Version)
		}
	}
	return 0
}

func aptMark(c *ctx) int {
	if len(c.args) == 0 {
		c.errf("E: No operation specified\n")
		return 100
	}
	op, names := c.args[0], c.args[1:]
	switch op {
	case "showhold", "showheld", "showauto", "showmanual":
		st, err := c.host.View()
		if err != nil {
			c.errf("E: %v\n", err)
			return 100
		}
		for _, p := range st.SortedPackages() {
			if len(names) > 0 && !slices.Contains(names, p.Name) {
				continue
			}
			var show bool
			switch op {
			case "showhold", "showheld":
				show = p.Hold
			case "showauto":
				show = p.Installed() && p.Auto
			default:
				show = p.Installed() && !p.Auto
			}
			if show {
				c.outf("%s\n", p.Name)
			}
		}
		return 0
	case "hold", "unhold", "auto", "manual":
		if len(names) == 0 {
			c.errf("E: No packages found\n")
			return 100
		}
		var out strings.Builder
		err := c.host.Update(func(s *machine.State) error {
			for _, n := range names {
				if s.Packages[n] == nil || (!s.Packages[n].Installed() && s.Packages[n].Candidate == "") {
					return fmt.Errorf("Unable to locate package %s", n)
				}
			}
			for _, n := range names {
				p := s.Packages[n]
				switch op {
				case "hold":
					if p.Hold {
						fmt.Fprintf(&out, "%s was already set on hold.\n", n)
					} else {
						p.Hold = true
						fmt.Fprintf(&out, "%s set on hold.\n", n)
					}
				case "unhold":
					if !p.Hold {
						fmt.Fprintf(&out, "%s was already not on hold.\n", n)
					} else {
						p.Hold = false
						fmt.Fprintf(&out, "Canceled hold on %s.\n", n)
					}
				case "auto":
					p.Auto = true
					fmt.Fprintf(&out, "%s set to automatically installed.\n", n)
				case "manual":
					p.Auto = false
					fmt.Fprintf(&out, "%s set to manually installed.\n", n)
				}
			}
			return nil
		})
		if err != nil {
			c.errf("E: %v\n", err)
			return 100
		}
		c.outf("%s", out.String())
		return 0
	}
	c.errf("E: Invalid operation %s\n", op)
	return 100
}

// aptConfig implements `apt-config dump` over the apt.conf.d files of the
// host root, merged into one tree as apt does.
func aptConfig(c *ctx) int {
	f, err := parseFlags(c.args, []string{"-o", "-c"}, false)
	if err != nil || len(f.operands) == 0 {
		c.errf("E: No operation specified\n")
		return 100
	}
	if f.operands[0] != "dump" {
		c.errf("E: apt-config %s is not emulated on this lab host\n", f.operands[0])
		return 100
	}
	base := `APT { Architecture "amd64"; Build-Essential { "build-essential"; }; Install-Recommends "1"; Install-Suggests "0";
Sandbox { User "_apt"; }; NeverAutoRemove { "^firmware-linux.*"; "^linux-firmware$"; }; VersionedKernelPackages { "linux-.*"; }; };
Dir "/"; Dir::State "var/lib/apt"; Dir::Cache "var/cache/apt"; Dir::Etc "etc/apt"; Dir::Etc::parts "apt.conf.d";`
	tree := &aptNode{}
	tree.parse(base)
	files, _ := filepath.Glob(c.host.Path("/etc/apt/apt.conf.d/*"))
	slices.Sort(files)
	for _, file := range files {
		data, err := os.ReadFile(file)
		if err != nil {
			continue
		}
		tree.parse(string(data))
	}
	for _, l := range tree.dump() {
		c.outf("%s\n", l)
	}
	return 0
}

// aptNode is apt's configuration tree: named children in the order first
// set, list items as children without a name.
type aptNode struct {
	name     string
	value    string
	children []*aptNode
}

func (n *aptNode) child(name string) *aptNode {
	if name != "" {
		for _, c := range n.children {
			if c.name == name {
				return c
			}
		}
	}
	c := &aptNode{name: name}
	n.children = append(n.children, c)
	return c
}

// set puts value at the path key (components separated by "::") below n.
func (n *aptNode) set(key []string, value string) {
	cur := n
	for _, k := range key {
		cur = cur.child(k)
	}
	cur.value = value
}

var aptConfToken = regexp.MustCompile(`"[^"]*"|[{};]|[^\s{};"]+`)

// parse reads apt.conf syntax (comments, `Key "value";`, `Key { ... };`,
// `"item";` list entries) into the tree.
func (n *aptNode) parse(src string) {
	var clean strings.Builder
	inComment := false
	for _, line := range strings.Split(src, "\n") {
		if inComment {
			if i := strings.Index(line, "*/"); i >= 0 {
				line, inComment = line[i+2:], false
			} else {
				continue
			}
		}
		if i := strings.Index(line, "/*"); i >= 0 && strings.Count(line[:i], `"`)%2 == 0 {
			if j := strings.Index(line[i:], "*/"); j >= 0 {
				line = line[:i] + line[i+j+2:]
			} else {
				line, inComment = line[:i], true
			}
		}
		t := strings.TrimSpace(line)
		if strings.HasPrefix(t, "#") {
			continue
		}
		if i := strings.Index(line, "//"); i >= 0 && strings.Count(line[:i], `"`)%2 == 0 {
			line = line[:i]
		}
		clean.WriteString(line + "\n")
	}
	var frames [][]string
	var pending []string
	unq := func(s string) string { return strings.Trim(s, `"`) }
	path := func(extra ...string) []string {
		var p []string
		for _, f := range frames {
			p = append(p, f...)
		}
		return append(p, extra...)
	}
	for _, t := range aptConfToken.FindAllString(clean.String(), -1) {
		switch t {
		case "{":
			if len(pending) > 0 {
				frames = append(frames, strings.Split(unq(pending[0]), "::"))
			} else {
				frames = append(frames, nil)
			}
			pending = nil
		case "}":
			if len(frames) > 0 {
				frames = frames[:len(frames)-1]
			}
			pending = nil
		case ";":
			switch len(pending) {
			case 1:
				if strings.HasPrefix(pending[0], `"`) {
					n.set(path(""), unq(pending[0]))
				}
			case 2:
				n.set(path(strings.Split(unq(pending[0]), "::")...), unq(pending[1]))
			}
			pending = nil
		default:
			pending = append(pending, t)
		}
	}
}

// dump renders the tree as `apt-config dump` does.
func (n *aptNode) dump() []string {
	var out []string
	var walk func(node *aptNode, prefix string)
	walk = func(node *aptNode, prefix string) {
		for _, c := range node.children {
			full := c.name
			if prefix != "" {
				full = prefix + "::" + c.name
			}
			out = append(out, full+` "`+c.value+`";`)
			walk(c, full)
		}
	}
	walk(n, "")
	return out
}

func dpkgStatus(p *machine.Package) (status, abbrev string) {
	want := "install"
	if p.Hold {
		want = "hold"
	}
	switch {
	case p.ConfigOnly:
		return "deinstall ok config-files", "rc "
	case p.Installed():
		if want == "hold" {
			return "hold ok installed", "hi "
		}
		return "install ok installed", "ii "
	}
	return "unknown ok not-installed", "un "
}

var dpkgField = regexp.MustCompile(`\$\{([^}]+)\}`)

func dpkgFormat(format string, p *machine.Package) string {
	status, abbrev := dpkgStatus(p)
	out := dpkgField.ReplaceAllStringFunc(format, func(m string) string {
		spec := m[2 : len(m)-1]
		name, width, _ := strings.Cut(spec, ";")
		var v string
		switch strings.ToLower(name) {
		case "package":
			v = p.Name
		case "binary:package":
			v = p.Name
		case "version":
			v = p.Version
		case "architecture":
			v = p.Arch
		case "status":
			v = status
		case "db:status-abbrev":
			v = abbrev
		case "db:status-want":
			v = strings.Fields(status)[0]
		case "db:status-status":
			v = strings.Fields(status)[2]
		case "installed-size":
			v = strconv.Itoa(p.SizeKB * 3)
		case "source":
			v = ""
		case "binary:summary", "description":
			v = p.Name + " (lab package)"
		}
		if width != "" {
			if w, err := strconv.Atoi(width); err == nil {
				if w < 0 {
					v = fmt.Sprintf("%-*s", -w, v)
				} else {
					v = fmt.Sprintf("%*s", w, v)
				}
			}
		}
		return v
	})
	return strings.NewReplacer(`\n`, "\n", `\t`, "\t", `\\`, `\`).Replace(out)
}

func dpkgQuery(c *ctx) int {
	f, err := parseFlags(c.args, []string{"-f", "--showformat"}, false)
	if err != nil {
		c.errf("dpkg-query: error: %v\n", err)
		return 2
	}
	if !f.has("-W", "--show", "-l", "--list", "-s", "--status") {
		c.errf("dpkg-query: need an action option\n")
		return 2
	}
	st, err := c.host.View()
	if err != nil {
		c.errf("dpkg-query: error: %v\n", err)
		return 2
	}
	format := "${binary:Package}\t${Version}\n"
	if v, ok := f.get("--showformat"); ok {
		format = v
	}
	if v, ok := f.get("-f"); ok {
		// dpkg's option parser takes "-f=FORMAT" as "-f FORMAT".
		format = strings.TrimPrefix(v, "=")
	}
	known := func(p *machine.Package) bool { return p.Installed() || p.ConfigOnly }
	patterns := f.operands
	if len(patterns) == 0 {
		patterns = []string{"*"}
	}
	rc := 0
	if f.has("-l", "--list") {
		c.outf("Desired=Unknown/Install/Remove/Purge/Hold\n| Status=Not/Inst/Conf-files/Unpacked/halF-conf/Half-inst/trig-aWait/Trig-pend\n|/ Err?=(none)/Reinst-required (Status,Err: uppercase=bad)\n||/ Name                          Version                    Architecture Description\n+++-=============================-==========================-============-=================================\n")
		format = "${db:Status-Abbrev;3} ${Package;-29} ${Version;-26} ${Architecture;-12} ${binary:Summary}\n"
	}
	for _, pat := range patterns {
		found := false
		for _, p := range st.SortedPackages() {
			if !known(p) {
				continue
			}
			if ok, _ := path.Match(pat, p.Name); !ok {
				continue
			}
			found = true
			if f.has("-s", "--status") {
				s, _ := dpkgStatus(p)
				c.outf("Package: %s\nStatus: %s\nArchitecture: %s\nVersion: %s\n\n", p.Name, s, p.Arch, p.Version)
				continue
			}
			c.outf("%s", dpkgFormat(format, p))
		}
		if !found {
			c.errf("dpkg-query: no packages found matching %s\n", pat)
			rc = 1
		}
	}
	return rc
}

func dpkg(c *ctx) int {
	f, err := parseFlags(c.args, nil, false)
	if err != nil {
		c.errf("dpkg: error: %v\n", err)
		return 2
	}
	switch {
	case f.has("--print-architecture"):
		c.outf("amd64\n")
		return 0
	case f.has("-l", "--list", "-W", "--show", "-s", "--status"):
		return dpkgQuery(c)
	case f.has("--audit", "-C"):
		st, err := c.host.View()
		if err != nil {
			c.errf("dpkg: error: %v\n", err)
			return 2
		}
		if st.DpkgInterrupted {
			c.outf("The following packages are only half configured, probably due to problems\nconfiguring them the first time.  The configuration should be retried using\ndpkg --configure <package> or the configure menu option in dselect:\n")
		}
		return 0
	case f.has("--configure"):
		if !slices.Contains(f.operands, "-a") && !f.has("-a", "--pending") {
			c.errf("dpkg: error: --configure needs at least one package name argument\n")
			return 2
		}
		err := c.host.Update(func(s *machine.State) error { s.DpkgInterrupted = false; return nil })
		if err != nil {
			c.errf("dpkg: error: %v\n", err)
			return 2
		}
		return 0
	}
	c.errf("dpkg: error: this use of dpkg is not emulated on this lab host\n")
	return 2
}
