package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/mcp-patch/mcp-patch/config"
	"github.com/mcp-patch/mcp-patch/host"
	"github.com/mcp-patch/mcp-patch/host/steps"
	"github.com/mcp-patch/mcp-patch/intent"
	"github.com/mcp-patch/mcp-patch/kube"
	"github.com/mcp-patch/mcp-patch/policy"
	"github.com/mcp-patch/mcp-patch/round/service"
	"github.com/mcp-patch/mcp-patch/tools"
)

func (a *app) doctorCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "doctor",
		Short: "Check the configuration against the world: cluster, permissions, SSH and sudo on every node, intent repo, allowed_signers, token file",
		Long: `Load the configuration (as serve would) and check, one line each, ok or FAIL
with what to do:

  cluster          the API server answers with the kubeconfig context named
  permissions      the credentials may make every request mcp-patch makes
                   (SelfSubjectAccessReview; each one missing is named with
                   the RBAC rule that grants it, see mcp-patch rbac)
  ssh NODE         every inventory node: SSH reachable, its host key in
                   known_hosts, "sudo -n true" works for the login user;
                   the key it logged in with and the ~/.ssh/config lines
                   (file:line) its address, port, user, key or jump came from
  intent repo      the working copy is clean, on a branch, and commits go to
                   a working branch that is not protected
  allowed_signers  it parses; who may approve
  trust            WARN (does not fail) when this user can write allowed_signers,
                   or when destructive tools would be offered over stdio to an
                   agent running as this same user (docs/SECURITY.md)
  token file       mode 0600 (when serve.token_file is set)

Nothing is changed anywhere. Exit 0 when every check is ok, 1 otherwise.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := a.g.load(a.stdio.Getenv)
			if err != nil {
				return err
			}
			if !a.g.set("log-level") {
				a.g.logLevel = "error"
			}
			log, err := a.g.logger(a.stdio.Stderr)
			if err != nil {
				return usageError{err}
			}
			d := &tools.Deps{Config: &c, Log: log, Getenv: a.stdio.Getenv, Now: time.Now}
			return exit(runDoctor(cmd.Context(), d, a.stdio.Stdout))
		},
	}
}

// check is one line of doctor's report.
type check struct {
	ok bool
	// warn marks a line that does not fail doctor but says what to change.
	warn bool
	what string // "cluster", "ssh gpu-1", ...
	msg  string
}

func (c check) String() string {
	mark := "ok  "
	if c.warn {
		mark = "WARN"
	}
	if !c.ok {
		mark = "FAIL"
	}
	return fmt.Sprintf("%s %s: %s", mark, c.what, c.msg)
}

func okf(what, format string, a ...any) check {
	return check{ok: true, what: what, msg: fmt.Sprintf(format, a...)}
}

func failf(what, format string, a ...any) check {
	return check{what: what, msg: fmt.Sprintf(format, a...)}
}

// runDoctor runs every check, prints one line per check as it completes,
// and returns the exit code.
func runDoctor(ctx context.Context, d *tools.Deps, w io.Writer) int {
	c := d.Config
	failed, total := 0, 0
	report := func(cs ...check) {
		for _, ch := range cs {
			total++
			if !ch.ok {
				failed++
			}
			fmt.Fprintln(w, ch)
		}
	}
	cl, clErr := kube.Load(ctx, kube.LoadOptions{Kubeconfig: c.Kubeconfig, Context: c.Context})
	report(clusterCheck(cl, clErr, c))
	report(permissionChecks(ctx, cl, clErr, c)...)
	d.Cluster = func(context.Context) (*kube.Clients, error) { return cl, clErr }
	report(sshChecks(ctx, d)...)
	report(intentCheck(c))
	if c.IntentRepo != "" {
		report(environmentCheck(c))
	}
	report(signersCheck(c, d.Now()))
	report(trustChecks(c, "")...)
	report(tokenCheck(c))
	if failed > 0 {
		fmt.Fprintf(w, "%d of %d checks failed\n", failed, total)
		return ExitNotOK
	}
	fmt.Fprintf(w, "all %d checks ok\n", total)
	return ExitOK
}

func clusterCheck(cl *kube.Clients, err error, c *config.Config) check {
	if err != nil {
		where := "kubectl's default kubeconfig"
		if c.Kubeconfig != "" {
			where = c.Kubeconfig
		}
		return failf("cluster", "%v; check kubeconfig (%s), the context (--context or context in the config) and that the API server is up", err, where)
	}
	name := cl.Context
	if name == "" {
		name = "in-cluster"
	}
	return okf("cluster", "context %q, API server %s answers (Kubernetes %s)", name, cl.Host, cl.ServerVersion)
}

// sshChecks log in to every inventory node through the production pool,
// at most ssh.concurrency at a time, and run `true` through `sudo -n` (the
// pool's way for a login other than root).
func sshChecks(ctx context.Context, d *tools.Deps) []check {
	c := d.Config
	pool, inv, err := service.OpenHostPool(ctx, d)
	if err != nil {
		return []check{failf("ssh", "%v; fix ssh.inventory (or the cluster access that names the nodes)", err)}
	}
	defer pool.Close()
	nodes := inv.Nodes()
	if len(nodes) == 0 {
		return []check{failf("ssh", "the inventory names no node; list the nodes in ssh.inventory or make the cluster reachable")}
	}
	// A login plus `true`: the dial timeout, and as long again for the rest.
	bound := 2*c.SSH.DialTimeout.D() + 10*time.Second
	res := host.FanOut(ctx, nodes, c.SSH.Concurrency, func(ctx context.Context, node string) (host.Output, error) {
		ctx, cancel := context.WithTimeout(ctx, bound)
		defer cancel()
		return pool.RunScript(ctx, node, []byte("true\n"), nil)
	})
	out := make([]check, 0, len(res))
	for _, r := range res {
		key, _ := pool.KeyUsed(r.Node)
		out = append(out, sshCheck(inv, r, key))
	}
	return out
}

// sshCheck is one node's line: how it was reached, the key that logged in
// (key; empty when none did) and the ~/.ssh/config lines its target took.
func sshCheck(inv *host.MapInventory, r host.Result[host.Output], key string) check {
	what := "ssh " + r.Node
	t, err := inv.Lookup(r.Node)
	if err != nil {
		return failf(what, "%v", err)
	}
	login := t.LoginUser() + "@" + t.DialAddr()
	if t.Jump != "" {
		login += " via " + t.Jump
	}
	var how string
	if key != "" {
		how += "; key " + key
	}
	if len(t.SSHConfigLines) > 0 {
		how += "; ssh config: " + strings.Join(t.SSHConfigLines, ", ")
	}
	var hk *host.HostKeyError
	var se *host.SudoError
	var nk *host.NoKeyError
	switch {
	case errors.As(r.Err, &hk):
		return failf(what, "%s: %v%s", login, hk, how)
	case errors.As(r.Err, &se):
		return failf(what, "%s: host key known, logged in; %v%s", login, se, how)
	case errors.As(r.Err, &nk):
		return failf(what, "%s: %v%s; %s", login, nk, how, steps.NextStepFor(steps.CauseNoKey, r.Node))
	case r.Err != nil:
		return failf(what, "%s: %v%s; check the address, port, user and key (ssh.key_files, ~/.ssh or the agent)", login, r.Err, how)
	case r.Value.ExitCode != 0:
		return failf(what, "%s: `true` exited %d (%s)%s", login, r.Value.ExitCode, strings.TrimSpace(string(r.Value.Stderr)), how)
	}
	if t.LoginUser() == "root" {
		return okf(what, "%s, host key known, logged in as root (no sudo needed)%s", login, how)
	}
	return okf(what, "%s, host key known, sudo -n works%s", login, how)
}

// intentCheck opens the intent repository as the tools do and checks the
// working copy is clean and on a branch; round commits go to the working
// branch, which the configuration never lets be a protected one.
func intentCheck(c *config.Config) check {
	const what = "intent repo"
	if c.IntentRepo == "" {
		return failf(what, "intent_repo is not set; set it in the config (or --intent-repo) to the intent repository's working copy")
	}
	r, err := intent.Open(c.IntentRepo, intent.Options{Protected: c.Git.Protected, WorkingBranch: c.Git.Branch})
	if err != nil {
		return failf(what, "%v; point intent_repo at a git working copy of the intent repository", err)
	}
	// Through intent: a large round's index is split, which go-git alone
	// does not read.
	repo, err := r.Git()
	if err != nil {
		return failf(what, "%s: %v", r.Root(), err)
	}
	head, err := repo.Head()
	if err != nil {
		return failf(what, "%s: read HEAD: %v; make a first commit", r.Root(), err)
	}
	if !head.Name().IsBranch() {
		return failf(what, "%s: HEAD is detached at %s; check out a branch", r.Root(), head.Hash().String()[:12])
	}
	wt, err := repo.Worktree()
	if err != nil {
		return failf(what, "%s: %v", r.Root(), err)
	}
	st, err := wt.Status()
	if err != nil {
		return failf(what, "%s: status: %v", r.Root(), err)
	}
	if !st.IsClean() {
		var files []string
		for f, s := range st {
			files = append(files, fmt.Sprintf("%c%c %s", s.Staging, s.Worktree, f))
		}
		slices.Sort(files)
		return failf(what, "%s has uncommitted changes (%s); commit, stash or remove them", r.Root(), clipList(files, 5))
	}
	branch := c.Git.Branch
	if branch == "" {
		branch = "mcp-patch/round-<round id>"
	}
	return okf(what, "%s is clean on %s; round commits go to %s (protected: %s)",
		r.Root(), head.Name().Short(), branch, strings.Join(c.Git.Protected, ", "))
}

// environmentCheck says which environment of the intent repository's
// environments.yaml this server serves, and what its rounds are held to;
// a repository that defines environments served with none named is a
// warning: its rounds would have no promotion gate.
func environmentCheck(c *config.Config) check {
	const what = "environment"
	envs, err := intent.LoadEnvironments(c.IntentRepo)
	if err != nil {
		return failf(what, "%v; fix %s in the intent repository", err, intent.EnvironmentsFile)
	}
	if len(envs) == 0 && c.Environment == "" {
		return okf(what, "the intent repository has one environment (no %s)", intent.EnvironmentsFile)
	}
	if err := envs.Check(c.Environment); err != nil {
		if c.Environment == "" {
			ch := okf(what, "%s defines %s and this server serves none of them: its rounds have no promotion gate and no compliance clock of their own; set environment (MCP_PATCH_ENVIRONMENT)",
				intent.EnvironmentsFile, strings.Join(envs.Names(), ", "))
			ch.warn = true
			return ch
		}
		return failf(what, "%v", err)
	}
	env, _ := envs.Get(c.Environment)
	msg := fmt.Sprintf("serves %s (%s, compliance deadline %d days); rounds are named %s-<month>", env.Name, env.Compliance, env.ComplianceDeadlineDays, env.Name)
	if env.Upstream != "" {
		msg += fmt.Sprintf("; plans only kernels proven in %s and soaked %d hours there", env.Upstream, env.PromotionSoakHours)
	}
	return okf(what, "%s", msg)
}

func clipList(items []string, n int) string {
	if len(items) <= n {
		return strings.Join(items, ", ")
	}
	return fmt.Sprintf("%s and %d more", strings.Join(items[:n], ", "), len(items)-n)
}

// signersCheck parses allowed_signers and names who may approve now.
func signersCheck(c *config.Config, now time.Time) check {
	const what = "allowed_signers"
	p := c.Approvals.AllowedSigners
	if p == "" {
		if c.Mode == config.ModeReadOnly {
			return okf(what, "not set; not needed read-only")
		}
		return failf(what, "approvals.allowed_signers is not set, so nobody can approve a destructive step; mcp-patch init writes a template")
	}
	s, err := policy.LoadAllowedSigners(p)
	if err != nil {
		return failf(what, "%v; fix the line named (format: PRINCIPAL namespaces=\"%s\" KEY-TYPE BASE64-KEY)", err, policy.Namespace)
	}
	var who []string
	for _, k := range s.Signers {
		// A line of patterns alone ("!*") admits its key as no one.
		if len(k.Names()) == 0 || !k.AllowsNamespace(policy.Namespace) || !k.ValidAt(now) {
			continue
		}
		if k.LabOnly && !c.Approvals.AllowLabOnly {
			continue
		}
		entry := fmt.Sprintf("%s (%s %s", strings.Join(k.Names(), ","), k.Key.Type(), k.Fingerprint())
		if k.LabOnly {
			entry += ", lab-only"
		}
		who = append(who, entry+")")
	}
	if len(who) == 0 {
		return failf(what, "%s lists nobody who may approve now (by name, namespace %q, valid now%s); add a person as its comments show",
			p, policy.Namespace, map[bool]string{false: ", not lab-only", true: ""}[c.Approvals.AllowLabOnly])
	}
	return okf(what, "%s: %d may approve: %s", p, len(who), strings.Join(who, "; "))
}

// tokenCheck: the HTTP bearer token file is readable by its owner alone.
func tokenCheck(c *config.Config) check {
	const what = "token file"
	p := c.Serve.TokenFile
	if p == "" {
		return okf(what, "serve.token_file not set (stdio, or the token from $%s)", c.Serve.TokenEnv)
	}
	fi, err := os.Stat(p)
	if err != nil {
		return failf(what, "%v; create it with: (umask 077; openssl rand -hex 32 > %s)", err, p)
	}
	if m := fi.Mode().Perm(); m&0o077 != 0 {
		return failf(what, "%s has mode %04o, others can read the token; chmod 600 %s", p, m, p)
	}
	return okf(what, "%s, mode %04o", p, fi.Mode().Perm())
}
