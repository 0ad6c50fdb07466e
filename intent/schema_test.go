package intent

import (
	"encoding/json"
	"testing"

	"github.com/google/jsonschema-go/jsonschema"
)

// checkSchema infers T's JSON schema the way the MCP SDK does for tool
// input and output, and validates a real value of T against it: a nil map
// or a field the schema does not allow would make a tool result invalid.
func checkSchema[T any](t *testing.T, name string, v T) {
	t.Helper()
	s, err := jsonschema.For[T](nil)
	if err != nil {
		t.Fatalf("%s: infer schema: %v", name, err)
	}
	rs, err := s.Resolve(nil)
	if err != nil {
		t.Fatalf("%s: resolve schema: %v", name, err)
	}
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	var instance map[string]any
	if err := json.Unmarshal(b, &instance); err != nil {
		t.Fatal(err)
	}
	if err := rs.Validate(instance); err != nil {
		t.Errorf("%s: a real value does not validate against its schema: %v\n%s", name, err, b)
	}
}

func TestTypesMakeValidSchemas(t *testing.T) {
	dir := newExampleRepo(t)
	r := openRepo(t, dir, nil)
	c, err := r.Component("os-layer")
	if err != nil {
		t.Fatal(err)
	}
	checkSchema(t, "Component", *c)
	list, err := r.Components()
	if err != nil {
		t.Fatal(err)
	}
	checkSchema(t, "components", struct {
		Components []ComponentSummary `json:"components"`
	}{list})
	refs, err := r.Documents()
	if err != nil {
		t.Fatal(err)
	}
	checkSchema(t, "documents", struct {
		Documents []DocumentRef `json:"documents"`
	}{refs})
	s, err := r.RoundSettings()
	if err != nil {
		t.Fatal(err)
	}
	checkSchema(t, "Settings", s)
	checkSchema(t, "empty Settings", Settings{})
	commit, err := r.RecordLesson(t.Context(), LessonInput{Kind: KindOpenQuestion, Component: "gpu-fleet", Property: "P5", Text: "q"})
	if err != nil {
		t.Fatal(err)
	}
	checkSchema(t, "Commit", commit)
	checkSchema(t, "LessonInput", LessonInput{Kind: KindLesson, Component: "os-layer", Text: "t"})
	res, err := r.RunVerify(t.Context(), "postgres", 0, offlineEnv(t))
	if err != nil {
		t.Fatal(err)
	}
	checkSchema(t, "VerifyResult", res)
	checkSchema(t, "PushResult", PushResult{})
}
