package plan

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
)

// Header is what a plan says of itself and, per node, what an approval
// binds, without the nodes' details: what round_status needs, read from
// plan.json one node at a time (a 1000-node plan is megabytes).
type Header struct {
	Round             string
	Revision          int
	Digest            string
	Signatures        int
	PerStepSignatures int
	Summary           []string
	Blockers          []Blocker
	Risks             []string
	Nodes             []NodeHeader
}

// NodeHeader is one node's approval sizing and window digest.
type NodeHeader struct {
	Node     string
	Approval string
	Window   string
}

// Ready reports whether the plan has no blocker.
func (h Header) Ready() bool { return len(h.Blockers) == 0 }

// Node returns the named node's header.
func (h Header) Node(name string) (NodeHeader, bool) {
	for _, n := range h.Nodes {
		if n.Node == name {
			return n, true
		}
	}
	return NodeHeader{}, false
}

// DecodeHeader streams plan.json, decoding one node at a time, and checks
// its digests as Decode does: a plan edited after it was sealed is refused.
func DecodeHeader(r io.Reader) (Header, error) {
	dec := json.NewDecoder(bufio.NewReaderSize(r, 64<<10))
	var h Header
	fail := func(err error) (Header, error) {
		return Header{}, fmt.Errorf("read plan: %w", err)
	}
	if err := expectDelim(dec, '{'); err != nil {
		return fail(err)
	}
	var parts []string
	signatures, perStep := 2, 2 // the plan itself, autoremove
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return fail(err)
		}
		key, _ := tok.(string)
		switch key {
		case "round":
			err = dec.Decode(&h.Round)
		case "revision":
			err = dec.Decode(&h.Revision)
		case "digest":
			err = dec.Decode(&h.Digest)
		case "summary":
			err = dec.Decode(&h.Summary)
		case "blockers":
			err = dec.Decode(&h.Blockers)
		case "risks":
			err = dec.Decode(&h.Risks)
		case "nodes":
			if err = expectDelim(dec, '['); err != nil {
				break
			}
			for dec.More() {
				var n Node
				if err = dec.Decode(&n); err != nil {
					break
				}
				n.seal()
				signatures += n.Signatures()
				perStep += len(n.steps())
				parts = append(parts, n.digestPart())
				h.Nodes = append(h.Nodes, NodeHeader{Node: n.Node, Approval: n.Approval, Window: n.Window})
			}
			if err == nil {
				err = expectDelim(dec, ']')
			}
		default:
			var skip json.RawMessage
			err = dec.Decode(&skip)
		}
		if err != nil {
			return fail(err)
		}
	}
	if err := expectDelim(dec, '}'); err != nil {
		return fail(err)
	}
	// Counted as Decode counts them (seal), not as the file says.
	h.Signatures, h.PerStepSignatures = signatures, perStep
	if got := fleetDigest(append([]string{"plan", h.Round}, parts...), h.Blockers, h.Risks); got != h.Digest {
		return Header{}, fmt.Errorf("read plan of round %s: its digest %s does not match its content (%s): the file was changed after it was sealed", h.Round, h.Digest, got)
	}
	return h, nil
}

func expectDelim(dec *json.Decoder, want json.Delim) error {
	tok, err := dec.Token()
	if err != nil {
		return err
	}
	if d, ok := tok.(json.Delim); !ok || d != want {
		return errors.New("plan.json: want " + want.String() + ", found " + fmt.Sprint(tok))
	}
	return nil
}
