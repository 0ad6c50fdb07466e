// Package steps is the Go side of each host-side step of a patch window:
// it validates the inputs, builds the script's environment from fixed
// templates, runs the embedded scripts/host/*.sh on a node through a
// host.Runner, decodes the one JSON object the script prints, parses the
// raw tool output it embeds (with host/parse) and returns typed results.
//
// It owns the contract between scripts and Go. It must not decide round
// policy (order, approvals, whether a plan may go ahead) nor hold state
// between calls; it never opens connections itself.
package steps

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"path"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/mcp-patch/mcp-patch/host"
	"github.com/mcp-patch/mcp-patch/scripts"
)

// Statuses a script reports in its "status" field, with the exit code it
// uses for each.
const (
	StatusOK          = "ok"           // exit 0
	StatusError       = "error"        // exit 1: the step could not be done
	StatusBadInput    = "bad_input"    // exit 2: refused before doing anything
	StatusRefused     = "refused"      // exit 3: a precondition is not met; nothing changed
	StatusCheckFailed = "check_failed" // exit 4: a check ran and found a problem
)

var (
	// ErrRefused: the script refused (a precondition is not met); nothing
	// was changed.
	ErrRefused = errors.New("refused")
	// ErrBadInput: the input was refused, in Go or by the script, before
	// anything ran on the node.
	ErrBadInput = errors.New("bad input")
	// ErrStepFailed: the script ran and failed (a tool exited non-zero).
	ErrStepFailed = errors.New("step failed")
	// ErrProtocol: the script's output was not the one JSON object agreed.
	ErrProtocol = errors.New("unexpected script output")
)

// StepError is a step that did not end "ok". Errors.Is matches ErrRefused,
// ErrBadInput or ErrStepFailed by Status.
type StepError struct {
	Step     string `json:"step"`
	Node     string `json:"node"`
	Status   string `json:"status"`
	Reason   string `json:"reason"`
	ExitCode int    `json:"exit_code"`
	// Stderr is the end of what the script wrote on stderr.
	Stderr string `json:"stderr,omitempty"`
}

func (e *StepError) Error() string {
	return fmt.Sprintf("%s on node %s: %s: %s", e.Step, e.Node, e.Status, e.Reason)
}

// Is lets errors.Is(err, ErrRefused) and friends work.
func (e *StepError) Is(target error) bool {
	switch target {
	case ErrRefused:
		return e.Status == StatusRefused
	case ErrBadInput:
		return e.Status == StatusBadInput
	case ErrStepFailed:
		return e.Status == StatusError
	}
	return false
}

// Paths overrides where the scripts look on the node. The zero value uses
// each script's documented default (the real system paths); tests and
// unusual hosts point them elsewhere. Every non-empty field must be an
// absolute path.
type Paths struct {
	GrubCfg          string // GRUB_CFG [/boot/grub/grub.cfg]
	GrubDir          string // GRUB_DIR [/boot/grub]
	GrubDefaults     string // GRUB_DEFAULTS [/etc/default/grub]
	GrubDropin       string // GRUB_DROPIN [/etc/default/grub.d/99-trial-boot.cfg]
	BootIDFile       string // BOOT_ID_FILE [/proc/sys/kernel/random/boot_id]
	ProcUptime       string // PROC_UPTIME [/proc/uptime]
	ProcSys          string // PROC_SYS [/proc/sys]
	ProcMdstat       string // PROC_MDSTAT [/proc/mdstat]
	RebootRequired   string // REBOOT_REQUIRED [/var/run/reboot-required]
	ProcDriverNvidia string // PROC_DRIVER_NVIDIA [/proc/driver/nvidia]
	ProcNvswitch     string // PROC_NVSWITCH [/proc/driver/nvidia-nvswitch/devices]
	ModulesDir       string // MODULES_DIR [/lib/modules]
	BackupDir        string // BACKUP_DIR [/var/backups/mcp-patch]
	StateDir         string // STATE_DIR [/var/lib/mcp-patch]
	EtcDir           string // ETC_DIR [/etc]
	EtcKubernetes    string // ETC_KUBERNETES [$ETC_DIR/kubernetes]
	EtcdDataDir      string // ETCD_DATA_DIR [/var/lib/etcd]
	ProcBonding      string // PROC_BONDING [/proc/net/bonding]
	SysInfiniband    string // SYS_INFINIBAND [/sys/class/infiniband]
	SystemdDir       string // SYSTEMD_DIR [/run/systemd/system]
	// AptConfig and DpkgAdminDir are read by apt and dpkg themselves
	// (APT_CONFIG, DPKG_ADMINDIR): a private apt/dpkg state, e.g. in tests.
	AptConfig    string
	DpkgAdminDir string
}

func (p Paths) env() (map[string]string, error) {
	env := map[string]string{}
	for name, v := range map[string]string{
		"GRUB_CFG": p.GrubCfg, "GRUB_DIR": p.GrubDir, "GRUB_DEFAULTS": p.GrubDefaults, "GRUB_DROPIN": p.GrubDropin,
		"BOOT_ID_FILE": p.BootIDFile, "PROC_UPTIME": p.ProcUptime, "PROC_SYS": p.ProcSys, "PROC_MDSTAT": p.ProcMdstat,
		"REBOOT_REQUIRED": p.RebootRequired, "PROC_DRIVER_NVIDIA": p.ProcDriverNvidia, "PROC_NVSWITCH": p.ProcNvswitch,
		"MODULES_DIR": p.ModulesDir, "BACKUP_DIR": p.BackupDir, "STATE_DIR": p.StateDir, "ETC_DIR": p.EtcDir,
		"ETC_KUBERNETES": p.EtcKubernetes, "ETCD_DATA_DIR": p.EtcdDataDir, "PROC_BONDING": p.ProcBonding,
		"SYS_INFINIBAND": p.SysInfiniband, "SYSTEMD_DIR": p.SystemdDir, "APT_CONFIG": p.AptConfig, "DPKG_ADMINDIR": p.DpkgAdminDir,
	} {
		if v == "" {
			continue
		}
		if !path.IsAbs(v) || strings.ContainsFunc(v, func(r rune) bool { return r < 0x20 || r == 0x7f }) {
			return nil, fmt.Errorf("%w: path %s=%q must be absolute and printable", ErrBadInput, name, v)
		}
		env[name] = v
	}
	return env, nil
}

// Steps runs the host-side steps on nodes through Runner.
type Steps struct {
	Runner host.Runner
	// Paths overrides script paths; zero means the real system paths.
	Paths Paths
	// Log receives one record per step run; nil discards.
	Log *slog.Logger
	// LockTimeout is how long download, install and autoremove wait for
	// another apt or dpkg holding dpkg's lock (apt's DPkg::Lock::Timeout)
	// before refusing with the holder's pid and command; the holder is
	// never touched. 0 means the scripts' default, 120s; at most 9999s.
	LockTimeout time.Duration
}

// lockEnv adds LOCK_TIMEOUT to env when LockTimeout is set.
func (s *Steps) lockEnv(env map[string]string) map[string]string {
	if s.LockTimeout <= 0 {
		return env
	}
	if env == nil {
		env = map[string]string{}
	}
	env["LOCK_TIMEOUT"] = strconv.Itoa(int(min(s.LockTimeout.Round(time.Second)/time.Second, 9999)))
	return env
}

// New returns Steps over r with default paths.
func New(r host.Runner, log *slog.Logger) *Steps {
	return &Steps{Runner: r, Log: log}
}

func (s *Steps) logger() *slog.Logger {
	if s.Log == nil {
		return slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	return s.Log
}

// envelope is what every script prints besides its own fields.
type envelope struct {
	Step   string `json:"step"`
	Status string `json:"status"`
	Reason string `json:"reason"`
}

// ValidateNode refuses a node name that is not a DNS-1123 subdomain (the
// Kubernetes node name rules: lower case, digits, '-' and '.', starting and
// ending with an alphanumeric).
func ValidateNode(node string) error {
	if errs := validation.IsDNS1123Subdomain(node); len(errs) > 0 {
		return fmt.Errorf("%w: node name %q: %s", ErrBadInput, node, strings.Join(errs, "; "))
	}
	return nil
}

var (
	roundPattern  = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$`) })
	kernelPattern = sync.OnceValue(func() *regexp.Regexp {
		return regexp.MustCompile(`^[0-9]+\.[0-9]+(\.[0-9]+)?([.+~_-][A-Za-z0-9]+){0,12}$`)
	})
	digestPattern = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^sha256:[0-9a-f]{64}$`) })
	bootIDPattern = sync.OnceValue(func() *regexp.Regexp {
		return regexp.MustCompile(`^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$`)
	})
	entryPattern = sync.OnceValue(func() *regexp.Regexp {
		return regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,199}(>[A-Za-z0-9][A-Za-z0-9._-]{0,199})?$`)
	})
)

// ValidateRound checks a round id (letters, digits, '.', '_', '-'; at
// most 64; the scripts use it in file and unit names).
func ValidateRound(round string) error {
	if !roundPattern().MatchString(round) {
		return fmt.Errorf("%w: round id %q must match %s", ErrBadInput, round, roundPattern())
	}
	return nil
}

// ValidateKernel checks a kernel release such as 5.15.0-86-generic.
func ValidateKernel(what, release string) error {
	if len(release) > 100 || !kernelPattern().MatchString(release) {
		return fmt.Errorf("%w: %s %q is not a kernel release", ErrBadInput, what, release)
	}
	return nil
}

// ValidateBootID checks a boot id as /proc/sys/kernel/random/boot_id
// names a boot (a UUID).
func ValidateBootID(id string) error {
	if !bootIDPattern().MatchString(id) {
		return fmt.Errorf("%w: boot id %q is not a UUID", ErrBadInput, id)
	}
	return nil
}

// ValidatePlanDigest checks a plan digest ("sha256:" and 64 hex digits).
func ValidatePlanDigest(d string) error {
	if !digestPattern().MatchString(d) {
		return fmt.Errorf("%w: plan digest %q must be sha256:<64 lower-case hex>", ErrBadInput, d)
	}
	return nil
}

// ValidateEntryID checks a GRUB entry id path as the trial boot takes it:
// "<submenu id>><entry id>" or a top-level "<entry id>", each made of
// letters, digits, '.', '_' and '-'.
func ValidateEntryID(what, id string) error {
	if !entryPattern().MatchString(id) {
		return fmt.Errorf("%w: %s %q is not a GRUB entry id path (submenu-id>entry-id)", ErrBadInput, what, id)
	}
	return nil
}

// run validates node and env, runs the script and decodes its one JSON
// object into out (which may be nil). A status other than "ok" (and
// "check_failed" when allowCheckFailed) is returned as *StepError, with out
// still filled from what the script reported.
func (s *Steps) run(ctx context.Context, step, node string, env map[string]string, out any, allowCheckFailed bool) (envelope, error) {
	var env0 envelope
	if err := ValidateNode(node); err != nil {
		return env0, fmt.Errorf("%s on node %s: %w", step, node, err)
	}
	if s.Runner == nil {
		return env0, fmt.Errorf("%s on node %s: no runner", step, node)
	}
	full, err := s.Paths.env()
	if err != nil {
		return env0, fmt.Errorf("%s on node %s: %w", step, node, err)
	}
	for k, v := range env {
		full[k] = v
	}
	if err := host.ValidateEnv(full); err != nil {
		return env0, fmt.Errorf("%s on node %s: %w: %w", step, node, ErrBadInput, err)
	}
	script, err := scripts.Host.ReadFile("host/" + step + ".sh")
	if err != nil {
		return env0, fmt.Errorf("%s on node %s: %w", step, node, err)
	}
	log := s.logger().With("node", node, "step", step)
	log.Debug("running host step")
	res, err := s.Runner.RunScript(ctx, node, script, full)
	if err != nil {
		return env0, fmt.Errorf("%s on node %s: %w", step, node, err)
	}
	stderr := tail(string(res.Stderr), 2000)
	if res.Truncated {
		return env0, fmt.Errorf("%s on node %s: %w: output was cut at the runner's size cap (exit %d)", step, node, ErrProtocol, res.ExitCode)
	}
	if err := decodeOne(res.Stdout, &env0); err != nil {
		return env0, fmt.Errorf("%s on node %s: %w: %w (exit %d, stderr: %s)", step, node, ErrProtocol, err, res.ExitCode, stderr)
	}
	if env0.Step != step {
		return env0, fmt.Errorf("%s on node %s: %w: script says it is step %q", step, node, ErrProtocol, env0.Step)
	}
	if out != nil {
		if err := decodeOne(res.Stdout, out); err != nil {
			return env0, fmt.Errorf("%s on node %s: %w: %w", step, node, ErrProtocol, err)
		}
	}
	want := map[string]int{StatusOK: 0, StatusError: 1, StatusBadInput: 2, StatusRefused: 3, StatusCheckFailed: 4}
	code, known := want[env0.Status]
	if !known || code != res.ExitCode {
		return env0, fmt.Errorf("%s on node %s: %w: status %q with exit code %d", step, node, ErrProtocol, env0.Status, res.ExitCode)
	}
	log.Info("host step done", "status", env0.Status, "reason", env0.Reason)
	if env0.Status == StatusOK || (allowCheckFailed && env0.Status == StatusCheckFailed) {
		return env0, nil
	}
	return env0, &StepError{Step: step, Node: node, Status: env0.Status, Reason: env0.Reason, ExitCode: res.ExitCode, Stderr: stderr}
}

// decodeOne decodes exactly one JSON object from b (surrounding white
// space allowed, nothing else).
func decodeOne(b []byte, v any) error {
	d := json.NewDecoder(bytes.NewReader(b))
	if err := d.Decode(v); err != nil {
		return fmt.Errorf("decode: %w", err)
	}
	if d.More() {
		return errors.New("more than one JSON value on stdout")
	}
	var extra json.RawMessage
	if err := d.Decode(&extra); err != io.EOF {
		return errors.New("trailing data after the JSON object")
	}
	return nil
}

func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return "…" + s[len(s)-n:]
}

// nonNil returns s, or an empty slice for nil (so JSON shows [] not null).
func nonNil[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}
