package service

import (
	"crypto/sha256"
	"errors"
	"time"

	"github.com/mcp-patch/mcp-patch/answer"
	"github.com/mcp-patch/mcp-patch/round"
	"github.com/mcp-patch/mcp-patch/round/book"
	"github.com/mcp-patch/mcp-patch/round/plan"
)

// RoundBook is the round's book (round/book) as the tools reach it: the
// book's answers, its refusals worded as the tools' (bookRefusal).
type RoundBook struct{ *book.Book }

// RoundFiles is what a commit of a round names (book.RoundFiles).
type RoundFiles = book.RoundFiles

// NewRoundBook returns a book over an intent repository working copy
// whose rounds are anchored in anchorDir.
func NewRoundBook(root, anchorDir string, clock func() time.Time) *RoundBook {
	return &RoundBook{book.New(root, anchorDir, clock)}
}

// AnchorsDir is where the rounds' anchors live under the state directory.
const AnchorsDir = book.AnchorsDir

// AnchorDir is where a server whose state directory is stateDir anchors
// its rounds' journals.
func AnchorDir(stateDir string) string { return book.AnchorDir(stateDir) }

// Journal is book.Book.Journal.
func (b *RoundBook) Journal(id string, create bool) (*round.Journal, error) {
	j, err := b.Book.Journal(id, create)
	return j, bookRefusal(err)
}

// View is book.Book.View.
func (b *RoundBook) View(id string) (*round.Journal, error) {
	j, err := b.Book.View(id)
	return j, bookRefusal(err)
}

// Current is book.Book.Current.
func (b *RoundBook) Current() (*round.Journal, error) {
	j, err := b.Book.Current()
	return j, bookRefusal(err)
}

// CurrentView is book.Book.CurrentView.
func (b *RoundBook) CurrentView() (*round.Journal, error) {
	j, err := b.Book.CurrentView()
	return j, bookRefusal(err)
}

func (b *RoundBook) cachedHeader(id string, sum [sha256.Size]byte) (plan.Header, bool) {
	return b.CachedHeader(id, sum)
}

func (b *RoundBook) keepHeader(id string, sum [sha256.Size]byte, h plan.Header) {
	b.KeepHeader(id, sum, h)
}

func (b *RoundBook) sharedPlan(id string, sum [sha256.Size]byte) (plan.Fleet, bool) {
	return b.SharedPlan(id, sum)
}

func (b *RoundBook) keepPlan(id string, sum [sha256.Size]byte, f plan.Fleet) { b.KeepPlan(id, sum, f) }

// TamperRefusal answers a round whose journal does not reproduce its
// anchor (book.TamperRefusal).
func TamperRefusal(id string, err error) error { return bookRefusal(book.TamperRefusal(id, err)) }

// bookRefusal words the book's refusal as the tools': one vocabulary.
func bookRefusal(err error) error {
	var r *book.Refusal
	if !errors.As(err, &r) {
		return err
	}
	if r.NextTool != "" {
		return answer.RefuseWith(answer.CallTo(r.NextTool, r.NextArgs...), r.Next, r.Reasons...)
	}
	return answer.Refuse(r.Next, r.Reasons...)
}
