package cli

import (
	"io"
	"strings"

	"github.com/spf13/cobra"
)

// CommandTree is mcp-patch's command tree as Run builds it, with cobra's
// completion command, for the CLI reference (scripts/internal/gendocs). It
// reads an empty environment, so the defaults it shows are the built-in
// ones; its commands are for reading, not for running.
func CommandTree() *cobra.Command {
	a := newApp(IO{Stdin: strings.NewReader(""), Stdout: io.Discard, Stderr: io.Discard, Getenv: func(string) string { return "" }})
	root := a.rootCommand()
	root.InitDefaultCompletionCmd()
	return root
}

// newApp is the app every command tree is built on.
func newApp(stdio IO) *app {
	return &app{stdio: stdio, g: &globals{logLevel: "info"}}
}
