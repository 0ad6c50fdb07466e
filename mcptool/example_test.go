package mcptool_test

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/mcp-patch/mcp-patch/answer"
	"github.com/mcp-patch/mcp-patch/mcptool"
)

type greetIn struct {
	Name string `json:"name" jsonschema:"who to greet"`
}

type greetOut struct {
	mcptool.Result
	Greeting string `json:"greeting"`
}

// A tool on a server value of type string, called as a client would call
// it: a refusal is a result with the contract fields first, the payload
// after them.
func ExampleNew() {
	hooks := &mcptool.Hooks[string]{ResultSchemaID: "urn:example:result:1"}
	greet := mcptool.New[string, greetIn, greetOut](hooks,
		mcptool.Spec{Name: "greet", Title: "Greet", Description: "Greets someone.", Kind: mcptool.ReadOnly},
		func(ctx context.Context, host string, in greetIn, p mcptool.Progress) (greetOut, error) {
			if in.Name == "nobody" {
				return greetOut{}, answer.Refuse("Name somebody.", "nobody to greet")
			}
			return greetOut{Greeting: "hello " + in.Name + " from " + host}, nil
		})
	for _, args := range []string{`{"name":"ada"}`, `{"name":"nobody"}`} {
		out, _ := greet.CallJSON(context.Background(), "gpu-01", json.RawMessage(args), func(float64, float64, string) {})
		b, _ := mcptool.EncodeResult(out)
		fmt.Println(string(b))
	}
	// Output:
	// {"status":"ok","reasons":[],"next_action":"","greeting":"hello ada from gpu-01"}
	// {"status":"refused","reasons":["nobody to greet"],"next_action":"Name somebody.","greeting":""}
}
