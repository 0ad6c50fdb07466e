package main

import (
	"bytes"
	"fmt"
	"os"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/cobra/doc"

	"github.com/mcp-patch/mcp-patch/cli"
)

func cliPage() ([]byte, error) {
	home, err := os.UserHomeDir()
	if err != nil {
		return nil, fmt.Errorf("home directory: %w", err)
	}
	return renderCLI(cli.CommandTree(), home)
}

// renderCLI is every command's cobra Markdown on one page, its "see also"
// links turned into links to the commands' headings. A default under home
// is written under ~.
func renderCLI(root *cobra.Command, home string) ([]byte, error) {
	cmds := available(root)
	files := map[string]string{} // cobra's file name of a command → its heading's anchor
	for _, c := range cmds {
		c.DisableAutoGenTag = true
		files[strings.ReplaceAll(c.CommandPath(), " ", "_")+".md"] = "#" + anchor(c.CommandPath())
	}
	var b bytes.Buffer
	b.WriteString(header("Command line", "the cobra command tree (cli.CommandTree)"))
	b.WriteString("`mcp-patch --help` and `mcp-patch COMMAND --help` print the same. Exit codes: 0 ok, 1 refused, failed or approval_required, 2 usage error, 3 in progress (call again).\n\n")
	var err error
	for _, c := range cmds {
		if e := doc.GenMarkdownCustom(c, &b, func(file string) string {
			if a, ok := files[file]; ok {
				return a
			}
			err = fmt.Errorf("%s: a link to %s, which is no command on this page", c.CommandPath(), file)
			return file
		}); e != nil {
			return nil, fmt.Errorf("%s: %w", c.CommandPath(), e)
		}
	}
	if err != nil {
		return nil, err
	}
	out := b.String()
	if home != "" && home != "/" {
		out = strings.ReplaceAll(out, home+"/", "~/")
	}
	// cobra ends each command with a blank line: one is enough at the end.
	return []byte(strings.TrimRight(out, "\n") + "\n"), nil
}

// available is root and every command below it that its help lists, in
// depth-first order.
func available(root *cobra.Command) []*cobra.Command {
	out := []*cobra.Command{root}
	for _, c := range root.Commands() {
		if !c.IsAvailableCommand() || c.IsAdditionalHelpTopicCommand() {
			continue
		}
		out = append(out, available(c)...)
	}
	return out
}
