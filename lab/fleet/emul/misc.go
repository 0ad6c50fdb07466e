package emul

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"syscall"

	"github.com/mcp-patch/mcp-patch/lab/fleet/machine"
)

func init() {
	register(uname, "uname")
	register(hostname, "hostname")
	register(lsbRelease, "lsb_release")
	register(sudo, "sudo")
	register(getent, "getent")
	register(findmnt, "findmnt")
	register(lsmod, "lsmod")
	register(nvidiaSmi, "nvidia-smi")
	register(livepatch, "canonical-livepatch")
	register(sysctl, "sysctl")
	register(etcdctl, "etcdctl")
}

func uname(c *ctx) int {
	f, err := parseFlags(c.args, nil, false)
	if err != nil {
		c.errf("uname: %v\n", err)
		return 1
	}
	st, err := c.host.View()
	if err != nil {
		c.errf("uname: %v\n", err)
		return 1
	}
	fields := []struct {
		short, long, value string
	}{
		{"-s", "--kernel-name", "Linux"},
		{"-n", "--nodename", st.Hostname},
		{"-r", "--kernel-release", st.Kernel},
		{"-v", "--kernel-version", st.KernelBuild},
		{"-m", "--machine", "x86_64"},
		{"-p", "--processor", "x86_64"},
		{"-i", "--hardware-platform", "x86_64"},
		{"-o", "--operating-system", "GNU/Linux"},
	}
	var out []string
	all := f.has("-a", "--all")
	for _, fl := range fields {
		if all || f.has(fl.short, fl.long) {
			out = append(out, fl.value)
		}
	}
	if len(out) == 0 {
		out = []string{"Linux"}
	}
	c.outf("%s\n", strings.Join(out, " "))
	return 0
}

func hostname(c *ctx) int {
	if len(c.args) > 0 && !strings.HasPrefix(c.args[0], "-") {
		c.errf("hostname: you must be root to change the host name\n")
		return 1
	}
	st, err := c.host.View()
	if err != nil {
		c.errf("hostname: %v\n", err)
		return 1
	}
	c.outf("%s\n", st.Hostname)
	return 0
}

func lsbRelease(c *ctx) int {
	f, _ := parseFlags(c.args, nil, false)
	short := f.has("-s", "--short")
	vals := []struct{ flag, label, value string }{
		{"-i", "Distributor ID", "Ubuntu"},
		{"-d", "Description", "Ubuntu 24.04.1 LTS"},
		{"-r", "Release", "24.04"},
		{"-c", "Codename", "noble"},
	}
	all := f.has("-a", "--all")
	for _, v := range vals {
		if all || f.has(v.flag) {
			if short {
				c.outf("%s\n", v.value)
			} else {
				c.outf("%s:\t%s\n", v.label, v.value)
			}
		}
	}
	return 0
}

// sudo runs its command as it is (every process on a lab host already has
// the host's privileges), keeping the environment: the lab's variables are
// what makes the host's tools find their host.
func sudo(c *ctx) int {
	f, err := parseFlags(c.args, []string{"-u", "-g", "-C", "-D", "-h", "-p", "-r", "-t", "-U"}, true)
	if err != nil {
		c.errf("sudo: %v\n", err)
		return 1
	}
	if u, ok := f.get("-u"); ok && u != "root" && u != "#0" {
		c.errf("sudo: running as %s is not emulated on this lab host\n", u)
		return 1
	}
	if len(f.operands) == 0 {
		c.errf("usage: sudo -h | -K | -k | -V\n")
		return 1
	}
	cmd := f.operands
	p, err := exec.LookPath(cmd[0])
	if err != nil {
		c.errf("sudo: %s: command not found\n", cmd[0])
		return 1
	}
	if err := syscall.Exec(p, cmd, os.Environ()); err != nil {
		c.errf("sudo: unable to execute %s: %v\n", p, err)
		return 1
	}
	return 0
}

func getent(c *ctx) int {
	if len(c.args) == 0 {
		c.errf("Usage: getent [OPTION...] database [key ...]\n")
		return 1
	}
	db, keys := c.args[0], c.args[1:]
	st, err := c.host.View()
	if err != nil {
		c.errf("getent: %v\n", err)
		return 1
	}
	var lines map[string]string
	var order []string
	switch db {
	case "passwd":
		lines = map[string]string{}
		for _, u := range st.Users {
			l := fmt.Sprintf("%s:x:%d:%d:%s:%s:%s", u.Name, u.UID, u.GID, u.Gecos, u.Home, u.Shell)
			lines[u.Name], lines[strconv.Itoa(u.UID)] = l, l
			order = append(order, u.Name)
		}
	case "group":
		lines = map[string]string{}
		for _, g := range st.Groups {
			l := fmt.Sprintf("%s:x:%d:%s", g.Name, g.GID, strings.Join(g.Members, ","))
			lines[g.Name], lines[strconv.Itoa(g.GID)] = l, l
			order = append(order, g.Name)
		}
	case "hosts", "ahosts":
		lines = map[string]string{"localhost": "127.0.0.1       localhost", st.Hostname: "127.0.1.1       " + st.Hostname}
		order = []string{"localhost", st.Hostname}
	default:
		c.errf("Unknown database: %s\nTry `getent --help' or `getent --usage' for more information.\n", db)
		return 1
	}
	if len(keys) == 0 {
		for _, k := range order {
			c.outf("%s\n", lines[k])
		}
		return 0
	}
	rc := 0
	for _, k := range keys {
		if l, ok := lines[k]; ok {
			c.outf("%s\n", l)
		} else {
			rc = 2
		}
	}
	return rc
}

func findmnt(c *ctx) int {
	f, err := parseFlags(c.args, []string{"-o", "--output", "-T", "--target", "-M", "--mountpoint", "-S", "--source", "-t", "--types"}, false)
	if err != nil {
		c.errf("findmnt: %v\n", err)
		return 1
	}
	st, err := c.host.View()
	if err != nil {
		c.errf("findmnt: %v\n", err)
		return 1
	}
	mounts := machine.EffectiveMounts(st)
	cols := []string{"TARGET", "SOURCE", "FSTYPE", "OPTIONS"}
	if v, ok := f.get("-o", "--output"); ok {
		cols = strings.Split(strings.ToUpper(v), ",")
	}
	var sel []machine.Mount
	switch {
	case f.has("-T", "--target"):
		t, _ := f.get("-T", "--target")
		p := c.logicalPath(c.hostPath(t))
		best := -1
		for i, m := range mounts {
			if p == m.Target || m.Target == "/" || strings.HasPrefix(p, m.Target+"/") {
				if best < 0 || len(m.Target) > len(mounts[best].Target) {
					best = i
				}
			}
		}
		if best >= 0 {
			sel = []machine.Mount{mounts[best]}
		}
	case f.has("-M", "--mountpoint") || len(f.operands) > 0:
		t, ok := f.get("-M", "--mountpoint")
		if !ok {
			t = f.operands[0]
		}
		p := c.logicalPath(c.hostPath(t))
		for _, m := range mounts {
			if m.Target == p || m.Source == t {
				sel = append(sel, m)
			}
		}
	default:
		sel = mounts
	}
	if len(sel) == 0 {
		return 1
	}
	value := func(m machine.Mount, col string) string {
		switch col {
		case "TARGET":
			return m.Target
		case "SOURCE":
			return m.Source
		case "FSTYPE":
			return m.FSType
		case "OPTIONS":
			return m.Options
		case "UUID":
			return m.UUID
		}
		return ""
	}
	raw := f.has("-r", "--raw")
	if !f.has("-n", "--noheadings") {
		c.outf("%s\n", strings.Join(cols, " "))
	}
	for _, m := range sel {
		var vals []string
		for _, col := range cols {
			v := value(m, col)
			if !raw {
				v = fmt.Sprintf("%-16s", v)
			}
			vals = append(vals, v)
		}
		c.outf("%s\n", strings.TrimRight(strings.Join(vals, " "), " "))
	}
	return 0
}

func lsmod(c *ctx) int {
	data, err := os.ReadFile(c.host.Path("/proc/modules"))
	if err != nil {
		c.errf("lsmod: %v\n", err)
		return 1
	}
	c.outf("Module                  Size  Used by\n")
	for _, l := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		f := strings.Fields(l)
		if len(f) < 4 {
			continue
		}
		users := strings.TrimSuffix(f[3], ",")
		if users == "-" {
			users = ""
		}
		c.outf("%-19s %8s  %s %s\n", f[0], f[1], f[2], users)
	}
	return 0
}

func nvidiaSmi(c *ctx) int {
	st, err := c.host.View()
	if err != nil {
		c.errf("nvidia-smi: %v\n", err)
		return 1
	}
	if !st.DriverLoaded {
		c.outf("%s", machine.NvidiaSmiNoDriver)
		return 9
	}
	f, err := parseFlags(c.args, []string{"--query-gpu", "--format", "-i", "--id", "-d", "--display", "-f", "--filename"}, false)
	if err != nil {
		c.errf("nvidia-smi: %v\n", err)
		return 2
	}
	switch {
	case f.has("-q", "--query") && f.has("-x", "--xml-format"):
		c.outf("%s", machine.NvidiaSmiXML(st, c.now))
	case f.has("-L", "--list-gpus"):
		c.outf("%s", machine.NvidiaSmiList(st))
	case f.has("--query-gpu"):
		q, _ := f.get("--query-gpu")
		format, _ := f.get("--format")
		return nvidiaQuery(c, st, strings.Split(q, ","), format)
	case len(c.args) == 0:
		c.outf("%s", nvidiaTable(st))
	default:
		c.errf("nvidia-smi: this use (%s) is not emulated on this lab host\n", strings.Join(c.args, " "))
		return 2
	}
	return 0
}

func nvidiaQuery(c *ctx, st *machine.State, fields []string, format string) int {
	opts := strings.Split(format, ",")
	if !slices.Contains(opts, "csv") {
		c.errf("Invalid combination of input arguments. Please run 'nvidia-smi -h' for help.\n")
		return 2
	}
	header := !slices.Contains(opts, "noheader")
	units := !slices.Contains(opts, "nounits")
	fm := st.Services["nvidia-fabricmanager.service"]
	fabric := "Completed"
	if fm == nil || fm.ActiveState != "active" {
		fabric = "In Progress"
	}
	mem := machine.GPUMemoryMiB(st)
	var heads []string
	for _, fl := range fields {
		fl = strings.TrimSpace(fl)
		h := fl
		switch fl {
		case "memory.total", "memory.free", "memory.used":
			h += " [MiB]"
		}
		heads = append(heads, h)
	}
	if header {
		c.outf("%s\n", strings.Join(heads, ", "))
	}
	for i := 0; i < st.GPUsVisible && i < len(st.GPUs); i++ {
		g := st.GPUs[i]
		var vals []string
		for _, fl := range fields {
			var v string
			switch strings.TrimSpace(fl) {
			case "index":
				v = strconv.Itoa(g.Index)
			case "name", "gpu_name":
				v = machine.GPUName(st)
			case "uuid", "gpu_uuid":
				v = g.UUID
			case "serial", "gpu_serial":
				v = g.Serial
			case "pci.bus_id", "gpu_bus_id":
				v = g.BusID
			case "driver_version":
				v = st.DriverVersion
			case "count":
				v = strconv.Itoa(st.GPUsVisible)
			case "memory.total":
				v = strconv.Itoa(mem)
			case "memory.used":
				v = "1"
			case "memory.free":
				v = strconv.Itoa(mem - 1)
			case "fabric.state":
				v = fabric
			case "fabric.status":
				v = "Success"
				if fabric != "Completed" {
					v = "[N/A]"
				}
			case "persistence_mode":
				v = "Enabled"
			case "temperature.gpu":
				v = "31"
			case "utilization.gpu":
				v = "0"
			default:
				c.errf("Field \"%s\" is not a valid field to query.\n\n", fl)
				return 2
			}
			if units && strings.HasPrefix(strings.TrimSpace(fl), "memory.") {
				v += " MiB"
			}
			if units && strings.TrimSpace(fl) == "utilization.gpu" {
				v += " %"
			}
			vals = append(vals, v)
		}
		c.outf("%s\n", strings.Join(vals, ", "))
	}
	return 0
}

func nvidiaTable(st *machine.State) string {
	var b strings.Builder
	fmt.Fprintf(&b, "+-----------------------------------------------------------------------------------------+\n")
	fmt.Fprintf(&b, "| NVIDIA-SMI %-14s Driver Version: %-14s CUDA Version: %-11s |\n", st.DriverVersion, st.DriverVersion, st.CUDAVersion)
	fmt.Fprintf(&b, "|-----------------------------------------+------------------------+----------------------+\n")
	for i := 0; i < st.GPUsVisible && i < len(st.GPUs); i++ {
		fmt.Fprintf(&b, "| %3d  %-34s | %-22s | %20s |\n", i, machine.GPUName(st), st.GPUs[i].BusID, "0%")
	}
	fmt.Fprintf(&b, "+-----------------------------------------------------------------------------------------+\n")
	return b.String()
}

// livepatch renders `canonical-livepatch status` in the client's formats
// (plain, --format yaml, --format json), as the shared captures show them.
func livepatch(c *ctx) int {
	f, err := parseFlags(c.args, []string{"--format"}, false)
	if err != nil || len(f.operands) == 0 || f.operands[0] != "status" {
		c.errf("canonical-livepatch: only `status [--format json|yaml] [--verbose]` is emulated on this lab host\n")
		return 1
	}
	st, err := c.host.View()
	if err != nil {
		c.errf("canonical-livepatch: %v\n", err)
		return 1
	}
	lp := st.Livepatch
	if !lp.Enabled {
		c.errf("Machine is not enabled. Please run 'sudo canonical-livepatch enable' with the token obtained from https://ubuntu.com/livepatch.\n")
		return 1
	}
	abi := strings.TrimSuffix(st.Kernel, "-generic")
	pkgKernel := st.Kernel
	if p := st.Packages["linux-image-"+st.Kernel]; p != nil {
		pkgKernel = p.Version + "-generic"
	}
	_ = abi
	boot := st.BootTime.UTC().Format("2006-01-02T15:04:05Z")
	check := c.now.UTC().Format("2006-01-02T15:04:05Z")
	format, _ := f.get("--format")
	switch format {
	case "json":
		doc := map[string]any{
			"Client-Version": "10.8.3", "Architecture": "amd64", "CPU-Model": "Intel(R) Xeon(R) Platinum 8480+", "Boot-Time": boot,
			"Last-Check": check, "Machine-Id": machineID(st), "tier": lp.Tier,
			"Status": []any{map[string]any{
				"Kernel": pkgKernel, "Running": true, "Supported": "supported", "UpgradeRequiredDate": "2025-07-01",
				"Livepatch": map[string]any{"CheckState": "checked", "State": lp.PatchState, "Version": lp.Version, "Fixes": []any{}},
			}},
		}
		out, _ := json.Marshal(doc)
		c.outf("%s\n", out)
	case "yaml":
		c.outf("client-version: 10.8.3\narchitecture: x86_64\ncpu-model: Intel(R) Xeon(R) Platinum 8480+\nlast-check: %s\nboot-time: %s\nuptime: %s\nstatus:\n- kernel: %s\n  running: true\n  livepatch:\n    checkState: checked\n    patchState: %s\n    version: %q\n    fixes: \"\"\ntier: %s\n",
			check, boot, c.now.Sub(st.BootTime).Round(1e9), pkgKernel, lp.PatchState, lp.Version, lp.Tier)
	case "":
		c.outf("last check: %s\nkernel: %s\nserver check-in: succeeded\nkernel state: ✓ kernel series %s is covered by Livepatch\npatch state: ✓ no livepatches available for this kernel yet\ntier: %s\nmachine id: %s\n",
			"1 minute ago", pkgKernel, strings.Join(strings.SplitN(st.Kernel, ".", 3)[:2], "."), lp.Tier, machineID(st))
	default:
		c.errf("canonical-livepatch: unknown format %q\n", format)
		return 1
	}
	return 0
}

func machineID(st *machine.State) string {
	return strings.ReplaceAll(st.RootUUID, "-", "")
}

func sysctl(c *ctx) int {
	f, err := parseFlags(c.args, []string{"-p", "--load"}, false)
	if err != nil {
		c.errf("sysctl: %v\n", err)
		return 1
	}
	valueOnly := f.has("-n", "--values")
	write := f.has("-w", "--write")
	var out strings.Builder
	rc := 0
	err = c.host.Update(func(s *machine.State) error {
		if f.has("--system") || f.has("-p", "--load") {
			for k, v := range machine.PersistentSysctl(c.host) {
				s.Sysctl[k] = v
				fmt.Fprintf(&out, "%s = %s\n", k, v)
			}
			return machine.WriteRuntimeFiles(c.host, s, c.now)
		}
		if f.has("-a", "-A", "--all") {
			keys := make([]string, 0, len(s.Sysctl))
			for k := range s.Sysctl {
				keys = append(keys, k)
			}
			sort.Strings(keys)
			for _, k := range keys {
				fmt.Fprintf(&out, "%s = %s\n", k, s.Sysctl[k])
			}
			return nil
		}
		changed := false
		for _, op := range f.operands {
			k, v, isSet := strings.Cut(op, "=")
			k = strings.ReplaceAll(strings.TrimSpace(k), "/", ".")
			if isSet || write {
				if !isSet {
					fmt.Fprintf(c.stderr, "sysctl: \"%s\" must be of the form name=value\n", op)
					rc = 255
					continue
				}
				if _, ok := s.Sysctl[k]; !ok {
					fmt.Fprintf(c.stderr, "sysctl: cannot stat /proc/sys/%s: No such file or directory\n", strings.ReplaceAll(k, ".", "/"))
					rc = 255
					continue
				}
				s.Sysctl[k] = strings.TrimSpace(v)
				changed = true
				fmt.Fprintf(&out, "%s = %s\n", k, s.Sysctl[k])
				continue
			}
			v, ok := s.Sysctl[k]
			if !ok {
				fmt.Fprintf(c.stderr, "sysctl: cannot stat /proc/sys/%s: No such file or directory\n", strings.ReplaceAll(k, ".", "/"))
				rc = 255
				continue
			}
			if valueOnly {
				fmt.Fprintf(&out, "%s\n", v)
			} else {
				fmt.Fprintf(&out, "%s = %s\n", k, v)
			}
		}
		if changed {
			return machine.WriteRuntimeFiles(c.host, s, c.now)
		}
		return nil
	})
	if err != nil {
		c.errf("sysctl: %v\n", err)
		return 1
	}
	c.outf("%s", out.String())
	return rc
}

// etcdctl emulates `etcdctl snapshot save FILE` on a control-plane host:
// the lab's etcd is reached by the orchestrator through the SSH tunnel,
// not from here, so the file written is a marked stand-in, not a bbolt
// database.
func etcdctl(c *ctx) int {
	f, err := parseFlags(c.args, []string{"--endpoints", "--cacert", "--cert", "--key", "-w", "--write-out", "--command-timeout", "--dial-timeout"}, false)
	if err != nil {
		c.errf("Error: %v\n", err)
		return 1
	}
	if len(f.operands) < 3 || f.operands[0] != "snapshot" || f.operands[1] != "save" {
		c.errf("Error: only `etcdctl snapshot save FILE` is emulated on this lab host\n")
		return 1
	}
	for _, name := range []string{"--cacert", "--cert", "--key"} {
		if p, ok := f.get(name); ok {
			if _, err := os.Stat(p); err != nil {
				c.errf("Error: open %s: no such file or directory\n", p)
				return 1
			}
		}
	}
	st, err := c.host.View()
	if err != nil {
		c.errf("Error: %v\n", err)
		return 1
	}
	if st.Role != machine.RoleControlPlane {
		ep, _ := f.get("--endpoints")
		c.errf("{\"level\":\"warn\",\"msg\":\"retrying of unary invoker failed\"}\nError: context deadline exceeded (no etcd at %s)\n", ep)
		return 1
	}
	file := f.operands[2]
	if !c.inRoot(file) {
		c.errf("Error: lab host: refusing to write %s outside the emulated host root\n", file)
		return 1
	}
	content := fmt.Sprintf("lab etcd snapshot stand-in\nhost: %s\ntaken: %s\n", st.Hostname, c.now.UTC().Format("2006-01-02T15:04:05Z"))
	if err := os.WriteFile(file+".part", []byte(content), 0o600); err != nil {
		c.errf("Error: %v\n", err)
		return 1
	}
	if err := os.Rename(file+".part", file); err != nil {
		c.errf("Error: %v\n", err)
		return 1
	}
	c.errf("{\"level\":\"info\",\"msg\":\"created temporary db file\",\"path\":%q}\n", filepath.Base(file)+".part")
	c.outf("Snapshot saved at %s\n", file)
	return 0
}

func init() {
	register(df, "df")
	register(aptCache, "apt-cache")
}

// df prints `df -Pk PATH...` for the host's mounts: the filesystem holding
// /boot reports the boot-nearly-full fault's free space when it is set,
// every other one plenty.
func df(c *ctx) int {
	f, err := parseFlags(c.args, nil, false)
	if err != nil {
		c.errf("df: %v\n", err)
		return 1
	}
	st, err := c.host.View()
	if err != nil {
		c.errf("df: %v\n", err)
		return 1
	}
	mounts := machine.EffectiveMounts(st)
	holding := func(p string) (machine.Mount, bool) {
		best := -1
		for i, m := range mounts {
			if p == m.Target || m.Target == "/" || strings.HasPrefix(p, m.Target+"/") {
				if best < 0 || len(m.Target) > len(mounts[best].Target) {
					best = i
				}
			}
		}
		if best < 0 {
			return machine.Mount{}, false
		}
		return mounts[best], true
	}
	boot, _ := holding("/boot")
	c.outf("Filesystem     1024-blocks    Used Available Capacity Mounted on\n")
	paths := f.operands
	if len(paths) == 0 {
		paths = []string{"/"}
	}
	rc := 0
	for _, p := range paths {
		m, ok := holding(c.logicalPath(c.hostPath(p)))
		if !ok {
			c.errf("df: %s: No such file or directory\n", p)
			rc = 1
			continue
		}
		size, avail := int64(30_000_000), int64(21_000_000)
		if m.Target == boot.Target && st.Faults.BootFreeKB > 0 {
			avail = st.Faults.BootFreeKB
		}
		used := size - avail
		c.outf("%-14s %11d %7d %9d %7d%% %s\n", m.Source, size, used, avail, used*100/size, m.Target)
	}
	return rc
}

// aptCache implements `apt-cache policy PKG...` (what simulate.sh asks
// about kept-back packages); phased candidates say "(phased 0%)".
func aptCache(c *ctx) int {
	if len(c.args) == 0 || c.args[0] != "policy" {
		c.errf("E: apt-cache %s is not emulated on this lab host\n", strings.Join(c.args, " "))
		return 100
	}
	st, err := c.host.View()
	if err != nil {
		c.errf("E: %v\n", err)
		return 100
	}
	for _, name := range c.args[1:] {
		p := st.Packages[name]
		if p == nil {
			c.errf("N: Unable to locate package %s\n", name)
			continue
		}
		installed, candidate := p.Version, p.Candidate
		if installed == "" {
			installed = "(none)"
		}
		if candidate == "" {
			candidate = p.Version
		}
		c.outf("%s:\n  Installed: %s\n  Candidate: %s\n  Version table:\n", name, installed, candidate)
		if p.Candidate != "" && p.Candidate != p.Version {
			phased := ""
			if slices.Contains(st.Faults.Phased, name) {
				phased = " (phased 0%)"
			}
			c.outf("     %s 500%s\n        500 http://archive.ubuntu.com/ubuntu noble-updates/main amd64 Packages\n", p.Candidate, phased)
		}
		if p.Version != "" {
			c.outf(" *** %s 100\n        100 /var/lib/dpkg/status\n", p.Version)
		}
	}
	return 0
}
