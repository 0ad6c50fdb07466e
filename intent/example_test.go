package intent_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/mcp-patch/mcp-patch/intent"
)

// A round opens the intent repository for its own id, reads a component,
// flags a contradiction against a property, and runs the component's checks.
func Example() {
	ctx := context.Background()
	repo, err := intent.Open("/srv/intent", intent.Options{RoundID: "2025-11"})
	if err != nil {
		log.Fatal(err)
	}
	c, err := repo.Component("os-layer")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(c.Settings.Kernel.SoakHours, c.Intent.PropertyIDs())

	commit, err := repo.RecordLesson(ctx, intent.LessonInput{
		Kind: intent.KindOpenQuestion, Component: "os-layer", Property: "P1",
		Text: "Livepatch reports nothing to apply on gpu-04's kernel line.",
	})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(commit.OpenQuestionID, commit.Branch, commit.Files)

	res, err := repo.RunVerify(ctx, "os-layer", time.Minute, map[string]string{"KUBECONFIG": "/etc/mcp-patch/kubeconfig"})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(res.Passed, res.ExitCode)
}
