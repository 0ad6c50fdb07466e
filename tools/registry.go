package tools

// Builtin returns every tool mcp-patch offers.
func Builtin() *Registry {
	r := &Registry{}
	r.Add(builtin()...)
	return r
}

func builtin() []Tool {
	return []Tool{ReadIntent(), RecordLesson(), RunVerify()}
}
