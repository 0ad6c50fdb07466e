package intent

import (
	"os"
	"path/filepath"
	"strconv"
	"testing"
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
