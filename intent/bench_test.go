package intent

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

func BenchmarkParseIntent(b *testing.B) {
	src, err := os.ReadFile(filepath.Join(examplesDir, "os-layer", "intent.md"))
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(src)))
	for b.Loop() {
		if _, err := ParseIntent(string(src)); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkComponents reads and parses every document of the example repo
// (what read_intent without a component does).
func BenchmarkComponents(b *testing.B) {
	r := openRepo(b, newExampleRepo(b), nil)
	for b.Loop() {
		if _, err := r.Components(); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkRecordLesson is one lesson commit with go-git: validate, build
// blob, trees and commit, write the file, advance the branch, refresh the
// index.
func BenchmarkRecordLesson(b *testing.B) {
	r := openRepo(b, newExampleRepo(b), nil)
	i := 0
	for b.Loop() {
		i++
		if _, err := r.RecordLesson(b.Context(), LessonInput{Kind: KindLesson, Component: "os-layer", Text: "lesson " + strconv.Itoa(i)}); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkCommitRoundFiles is one round step's commit in a round of N
// nodes (-bench 'CommitRoundFiles/nodes=N'): the repository holds a node
// plan and a window report per node and 40 sealed segments; the commit
// names what the step changed, as the server does (three live files and a
// new one).
func BenchmarkCommitRoundFiles(b *testing.B) {
	for _, n := range []int{10, 100, 1000} {
		b.Run("nodes="+strconv.Itoa(n), func(b *testing.B) {
			ctx := b.Context()
			dir := newExampleRepo(b)
			hashes := &HashCache{}
			later := time.Now().Add(time.Hour)
			hashes.now = func() time.Time { return later }
			r := openRepo(b, dir, func(o *Options) { o.Hashes = hashes })
			var files, sealed []string
			for i := range n {
				for _, folder := range []string{"nodes", "window-signatures"} {
					f := fmt.Sprintf("rounds/2026-01/%s/gpu-%04d.json", folder, i)
					writeFile(b, filepath.Join(dir, f), fmt.Sprintf(`{"node":"gpu-%04d","folder":%q}`+"\n", i, folder))
					files = append(files, f)
				}
			}
			for i := range 40 {
				f := fmt.Sprintf("rounds/2026-01/journal-%06d.jsonl", i+1)
				writeFile(b, filepath.Join(dir, f), strings.Repeat(`{"seq":1}`+"\n", 100))
				files, sealed = append(files, f), append(sealed, f)
			}
			live := []string{"rounds/2026-01/journal.jsonl", "rounds/2026-01/audit.jsonl", "rounds/2026-01/state.json"}
			for _, f := range live {
				writeFile(b, filepath.Join(dir, f), "{}\n")
			}
			files = append(files, live...)
			if _, err := r.CommitFilesSealed(ctx, "round 2026-01: plan", files, sealed); err != nil {
				b.Fatal(err)
			}
			i := 0
			for b.Loop() {
				i++
				for _, f := range live {
					writeFile(b, filepath.Join(dir, f), fmt.Sprintf(`{"step":%d}`+"\n", i))
				}
				f := fmt.Sprintf("rounds/2026-01/extra/%06d.json", i)
				writeFile(b, filepath.Join(dir, f), "{}\n")
				if _, err := r.CommitFiles(ctx, "round 2026-01: step", append(slices.Clone(live), f)); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
