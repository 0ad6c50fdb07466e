// Package mcptool is the typed-tool framework under an MCP server: a tool
// is a Spec and a handler from a typed input to a typed output that embeds
// Result; the framework derives and states the input schema, validates
// and decodes arguments, turns the handler's error into a result (answer's
// Refusal and Failure), keeps the contract every result holds (status,
// reasons, next_action, next_call first), sends progress and registers the
// tools on an mcp.Server. It is generic over the value D handed to every
// handler, and asks the server of D only through Hooks: what it refuses,
// the audit of each call, what follows the audit. It knows nothing of what
// the tools do and must not import any package of the project but answer.
package mcptool
