package tools

import (
	"bytes"
	"io"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mcp-patch/mcp-patch/notify"
	"github.com/mcp-patch/mcp-patch/round"
	"github.com/mcp-patch/mcp-patch/round/service"
)

// A scrape reads the open round's state: the journal's own when this
// server holds it, else the journal on disk, opened for reading only (the
// book does not take the round, and the journal's bytes stay as they
// were); no round open is no state.
func TestMetricsSourceReadsWithoutOpening(t *testing.T) {
	if st, err := service.NewRoundBook(t.TempDir(), filepath.Join(t.TempDir(), "journals"), nil).OpenState(); st != nil || err != nil {
		t.Fatalf("no rounds: %v %v", st, err)
	}
	r := newWRig(t)
	r.drained(t)
	st, err := r.d.Book.OpenState()
	if err != nil || st == nil || st.RoundID != wRound || !st.Node(wNode).Steps[round.StepDrain].Green() {
		t.Fatalf("held round: %+v %v", st, err)
	}
	before := r.journalBytes(t)
	other := service.NewRoundBook(r.root, r.d.Book.AnchorDir, r.d.Now) // a scrape by another process
	st, err = other.OpenState()
	if err != nil || st == nil || st.RoundID != wRound || st.Current != wNode {
		t.Fatalf("round on disk: %+v %v", st, err)
	}
	if other.Holds(wRound) {
		t.Fatal("a scrape opened the round's journal")
	}
	if !bytes.Equal(before, r.journalBytes(t)) {
		t.Fatal("a scrape wrote the journal")
	}
}

// A notification's outcome is kept in its round's journal; one for a
// round that does not exist is an error naming it, and none is written
// without a round or a book.
func TestRecordNotificationInTheJournal(t *testing.T) {
	r := newWRig(t)
	dl := notify.Delivery{ID: "d-1", Hook: "ops", Kind: notify.RoundStopped, Round: wRound, Node: wNode, Sent: true, Attempts: 1, Status: 204}
	if err := r.d.RecordNotification(dl); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(r.journalBytes(t)), "notification round_stopped to ops sent (attempt 1, HTTP 204, delivery d-1)") {
		t.Fatalf("the delivery is not in the journal:\n%s", r.journalBytes(t))
	}
	before := r.journalBytes(t)
	dl.Round = "2026-12"
	if err := r.d.RecordNotification(dl); err == nil || !strings.Contains(err.Error(), "round 2026-12") {
		t.Fatalf("a delivery for a round that does not exist: %v", err)
	}
	dl.Round = ""
	if err := r.d.RecordNotification(dl); err != nil {
		t.Fatalf("a delivery of no round: %v", err)
	}
	if err := (&Deps{Log: slog.New(slog.NewTextHandler(io.Discard, nil))}).RecordNotification(notify.Delivery{Round: wRound}); err != nil {
		t.Fatalf("no book: %v", err)
	}
	if !bytes.Equal(before, r.journalBytes(t)) {
		t.Fatal("deliveries of no round wrote the journal")
	}
}
