package intent

import (
	"fmt"
	"path/filepath"
	"testing"
)

// BenchmarkStepCommitPush is what pushing each step's record costs on a
// local remote (git.push_required): a step's commit alone, the same
// commit pushed to a bare repository, and the push before a destructive
// step when the remote already holds the branch.
func BenchmarkStepCommitPush(b *testing.B) {
	for _, mode := range []string{"commit", "commit+push", "push-up-to-date"} {
		b.Run(mode, func(b *testing.B) {
			ctx := b.Context()
			dir := newExampleRepo(b)
			remote := ""
			if mode != "commit" {
				bare := filepath.Join(b.TempDir(), "intent.git")
				gitCLI(b, filepath.Dir(bare), "init", "-q", "--bare", bare)
				gitCLI(b, dir, "remote", "add", "origin", bare)
				remote = "origin"
			}
			r := openRepo(b, dir, func(o *Options) { o.Remote = remote })
			step := func(i int) {
				f := "rounds/2025-11/journal.jsonl"
				writeFile(b, filepath.Join(dir, f), fmt.Sprintf(`{"seq":%d}`+"\n", i))
				c, err := r.CommitFiles(ctx, "round 2025-11: step", []string{f})
				if err != nil || c.PushError != "" {
					b.Fatal(err, c.PushError)
				}
			}
			step(0)
			i := 0
			for b.Loop() {
				i++
				if mode == "push-up-to-date" {
					if res, err := r.Push(ctx); err != nil || !res.UpToDate {
						b.Fatal(err, res)
					}
					continue
				}
				step(i)
			}
		})
	}
}
