package cli

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/spf13/cobra"

	"github.com/mcp-patch/mcp-patch/config"
	"github.com/mcp-patch/mcp-patch/examples"
)

// initFiles are what `mcp-patch init` writes, by name in its directory.
const (
	initConfig         = "config.yaml"
	initInventory      = "inventory.yaml"
	initAllowedSigners = "allowed_signers"
	initMCPJSON        = ".mcp.json"
)

func (a *app) initCommand() *cobra.Command {
	var dir, intentRepo string
	c := &cobra.Command{
		Use:   "init [--dir DIR] [--intent-repo PATH]",
		Short: "Write a starter configuration: config.yaml, inventory.yaml, allowed_signers and .mcp.json",
		Long: `Write a starter configuration into --dir (default ~/.config/mcp-patch):

  config.yaml      every field with its default and unit, commented; intent_repo,
                   ssh.inventory and approvals.allowed_signers point at the files here
  inventory.yaml   the SSH inventory format with an example per field
  allowed_signers  who may approve, with the ssh-keygen line to add a person
  .mcp.json        Claude Code's project config, with absolute paths, running
                   this binary's serve with the config above

Nothing is overwritten: if any of the files exists, init writes none of them.
Then edit them and check with "mcp-patch doctor --config DIR/config.yaml".`,
		Args: noArgs,
		RunE: func(*cobra.Command, []string) error {
			return exit(runInit(a.stdio, dir, intentRepo))
		},
	}
	def := ""
	if base, err := os.UserConfigDir(); err == nil {
		def = filepath.Join(base, "mcp-patch")
	}
	c.Flags().StringVar(&dir, "dir", def, "directory to write the files into")
	c.Flags().StringVar(&intentRepo, "intent-repo", "", "the intent repository's working copy, written into config.yaml (default: edit it there)")
	return c
}

func runInit(stdio IO, dir, intentRepo string) int {
	fail := func(err error) int {
		fmt.Fprintln(stdio.Stderr, "mcp-patch init:", err)
		return ExitNotOK
	}
	if dir == "" {
		return fail(errors.New("no --dir and no user config directory"))
	}
	dir, err := filepath.Abs(dir)
	if err != nil {
		return fail(err)
	}
	if intentRepo != "" {
		if intentRepo, err = filepath.Abs(intentRepo); err != nil {
			return fail(err)
		}
	}
	files, err := initContents(dir, intentRepo)
	if err != nil {
		return fail(err)
	}
	for _, f := range files {
		if _, err := os.Lstat(filepath.Join(dir, f.name)); err == nil {
			return fail(fmt.Errorf("%s exists; init overwrites nothing (move it away, or edit it)", filepath.Join(dir, f.name)))
		} else if !errors.Is(err, os.ErrNotExist) {
			return fail(err)
		}
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fail(err)
	}
	for _, f := range files {
		p := filepath.Join(dir, f.name)
		// O_EXCL: a file that appeared since the check is not overwritten either.
		fh, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_EXCL, f.mode)
		if err != nil {
			return fail(err)
		}
		_, werr := fh.Write(f.body)
		if cerr := fh.Close(); werr == nil {
			werr = cerr
		}
		if werr != nil {
			return fail(fmt.Errorf("write %s: %w", p, werr))
		}
		fmt.Fprintf(stdio.Stdout, "wrote %s\n", p)
	}
	cfg := filepath.Join(dir, initConfig)
	fmt.Fprintf(stdio.Stdout, `
Next:
  1. edit %s (intent_repo, kubeconfig/context) and %s
  2. add the people who may approve to %s
  3. check it:   mcp-patch doctor --config %s
                 mcp-patch config show --config %s
  4. connect Claude Code: copy %s into your project, or
       claude mcp add mcp-patch -- %s serve --config %s
`, cfg, filepath.Join(dir, initInventory), filepath.Join(dir, initAllowedSigners), cfg, cfg, filepath.Join(dir, initMCPJSON), selfPath(), cfg)
	return ExitOK
}

type initFile struct {
	name string
	mode os.FileMode
	body []byte
}

// initContents are the files init writes into dir: pure, so it is tested
// without a file system.
func initContents(dir, intentRepo string) ([]initFile, error) {
	c := config.DefaultConfig()
	set := map[string]bool{"ssh.inventory": true, "approvals.allowed_signers": true}
	c.SSH.Inventory = filepath.Join(dir, initInventory)
	c.Approvals.AllowedSigners = filepath.Join(dir, initAllowedSigners)
	if intentRepo != "" {
		c.IntentRepo = intentRepo
		set["intent_repo"] = true
	}
	starter, err := config.Starter(c, set)
	if err != nil {
		return nil, err
	}
	inventory := examples.Inventory()
	mcpJSON, err := json.MarshalIndent(map[string]any{
		"mcpServers": map[string]any{
			"mcp-patch": map[string]any{
				"command": selfPath(),
				"args":    []string{"serve", "--config", filepath.Join(dir, initConfig)},
			},
		},
	}, "", "  ")
	if err != nil {
		return nil, err
	}
	return []initFile{
		{initConfig, 0o600, starter},
		{initInventory, 0o600, inventory},
		{initAllowedSigners, 0o644, []byte(allowedSignersTemplate)},
		{initMCPJSON, 0o644, append(mcpJSON, '\n')},
	}, nil
}

// selfPath is this binary's absolute path, for the files that start it.
func selfPath() string {
	p, err := os.Executable()
	if err != nil {
		return "mcp-patch"
	}
	if r, err := filepath.EvalSymlinks(p); err == nil {
		p = r
	}
	return p
}

const allowedSignersTemplate = `# allowed_signers: the people who may approve mcp-patch's destructive steps
# (git's and ssh-keygen's ALLOWED SIGNERS format, see ssh-keygen(1)).
#
# One line per key: PRINCIPAL namespaces="mcp-patch" KEY-TYPE BASE64-KEY [COMMENT]
# Add a person from their public key (run where the key is, or with their .pub):
#
#   printf '%s namespaces="mcp-patch" %s\n' alice@example.org "$(cat ~/.ssh/id_ed25519.pub)" >> allowed_signers
#
# Check that a signature from them verifies:
#
#   ssh-keygen -Y sign -n mcp-patch -f ~/.ssh/id_ed25519 request.txt
#   ssh-keygen -Y verify -f allowed_signers -I alice@example.org -n mcp-patch -s request.txt.sig < request.txt
#
# A hardware key (sk-ssh-ed25519@openssh.com) works the same way.
`
