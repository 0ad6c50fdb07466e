package cli

import (
	"bufio"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/mcp-patch/mcp-patch/config"
)

// trustFacts are what the trust-domain warnings look at (docs/SECURITY.md):
// whoever can write allowed_signers, the config or the state directory is
// trusted like a signer, and an agent running as the serving user can.
type trustFacts struct {
	// UID is the serving user.
	UID int
	// Signers is approvals.allowed_signers ("" when none: no destructive
	// step can be approved at all).
	Signers string
	// SignersWritable: the serving user can write allowed_signers or
	// replace it (write its directory).
	SignersWritable bool
	// Writable are the other trust files the serving user can write
	// (the config file, the state directory).
	Writable []string
	// Destructive: the mode offers destructive tools.
	Destructive bool
	// Stdio: served over stdio, to the client that started the server.
	Stdio bool
	// ClientUID is the uid of the process that started the server over
	// stdio (the agent's client); -1 when unknown.
	ClientUID int
}

// trustWarnings are the warnings serve and doctor give for facts: each
// says what the agent could do and what to change. Pure.
func trustWarnings(f trustFacts) []string {
	var out []string
	if f.Signers != "" && f.SignersWritable {
		out = append(out, fmt.Sprintf("the serving user (uid %d) can write %s: whoever runs as this user can add a key and approve "+
			"destructive steps; make it owned by another user (root) and not writable by this one", f.UID, f.Signers))
	}
	if f.Signers != "" && f.Destructive && f.Stdio && f.ClientUID == f.UID {
		also := ""
		if f.SignersWritable || len(f.Writable) > 0 {
			also = " and can write " + strings.Join(append(signersIf(f), f.Writable...), ", ")
		}
		out = append(out, fmt.Sprintf("destructive tools are offered over stdio to a client running as the serving user (uid %d): "+
			"the agent is in the server's trust domain%s; for production run `serve --http` under its own user, "+
			"or serve the agent with --disable-destructive or --read-only", f.UID, also))
	}
	return out
}

func signersIf(f trustFacts) []string {
	if f.SignersWritable {
		return []string{f.Signers}
	}
	return nil
}

// gatherTrustFacts reads the facts for c as served now: over stdio when
// c.Serve.HTTP is empty, to the client whose pid is parent (0: none, as
// for doctor, which assumes the client runs as the user running it).
func gatherTrustFacts(c *config.Config, configFile string, parent int) trustFacts {
	f := trustFacts{UID: os.Geteuid(), Signers: c.Approvals.AllowedSigners, Stdio: c.Serve.HTTP == "",
		Destructive: c.Mode != config.ModeReadOnly && c.Mode != config.ModeDisableDestructive, ClientUID: -1}
	if f.Signers != "" {
		f.SignersWritable = canReplace(f.Signers)
	}
	for _, p := range []string{configFile, c.StateDir} {
		if p != "" && canReplace(p) {
			f.Writable = append(f.Writable, p)
		}
	}
	switch {
	case parent == 0:
		f.ClientUID = f.UID
	case parent > 0:
		if uid, err := processUID(parent); err == nil {
			f.ClientUID = uid
		}
	}
	return f
}

// canReplace says whether this process may write path or the directory
// that holds it (and so replace it), checked with the effective ids.
func canReplace(path string) bool {
	for _, p := range []string{path, filepath.Dir(path)} {
		if err := unix.Faccessat(unix.AT_FDCWD, p, unix.W_OK, unix.AT_EACCESS); err == nil {
			return true
		}
	}
	return false
}

// processUID is the effective uid of process pid, from /proc.
func processUID(pid int) (int, error) {
	f, err := os.Open(filepath.Join("/proc", strconv.Itoa(pid), "status"))
	if err != nil {
		return -1, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "Uid:"); ok {
			fields := strings.Fields(rest)
			if len(fields) < 2 {
				break
			}
			return strconv.Atoi(fields[1])
		}
	}
	if err := sc.Err(); err != nil {
		return -1, err
	}
	return -1, fmt.Errorf("no Uid line in /proc/%d/status", pid)
}

// trustChecks are doctor's trust-domain lines: a warning each (they do
// not fail doctor), or one ok line.
func trustChecks(c *config.Config, configFile string) []check {
	ws := trustWarnings(gatherTrustFacts(c, configFile, 0))
	if len(ws) == 0 {
		return []check{okf("trust", "allowed_signers is not writable by uid %d, and no destructive tool is offered over stdio to a client of the same user", os.Geteuid())}
	}
	out := make([]check, len(ws))
	for i, w := range ws {
		out[i] = check{ok: true, warn: true, what: "trust", msg: w}
	}
	return out
}

// warnTrust logs serve's trust-domain warnings, once at start.
func warnTrust(log *slog.Logger, c *config.Config, configFile string) {
	parent := -1
	if c.Serve.HTTP == "" {
		parent = os.Getppid()
	}
	for _, w := range trustWarnings(gatherTrustFacts(c, configFile, parent)) {
		log.Warn("trust domain: " + w)
	}
}
