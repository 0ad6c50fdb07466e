package service

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"github.com/mcp-patch/mcp-patch/answer"
	"github.com/mcp-patch/mcp-patch/intent"
	"github.com/mcp-patch/mcp-patch/kube/windowlock"
	"github.com/mcp-patch/mcp-patch/round"
	"github.com/mcp-patch/mcp-patch/round/book"
	"github.com/mcp-patch/mcp-patch/round/window"
)

// With leader election on and an intent remote, the round is handed from
// one server to the next through what neither the agent nor a dead server
// can change afterwards:
//
//   - every commit of the round's record that reached the remote has the
//     journal's head at it (sequence number and running hash, round.Head)
//     published on the window Lease, which only the servers' ServiceAccount
//     writes (publishHead);
//   - an approved step's start is committed, pushed and published before
//     the step acts (durableStart), so a step that acted is never missing
//     from what the next leader adopts;
//   - the proofs (each approval as signed) travel in the round's folder
//     (rounds/<id>/proofs.jsonl), as a mailbox: the next leader keeps only
//     those whose signatures verify again.
//
// A server that begins a term as leader (takeOver) fetches the remote,
// adopts the journal up to the published head when its own anchor does not
// reproduce it (records past the head are cut and kept for a person), keeps
// the proofs that verify, and then works as after any restart: a step left
// in flight is re-entered by observing the node (window.DecideReentry).

// takeoverKeeping is the leader term this server brought its copy of the
// round up to.
type takeoverKeeping struct {
	mu   sync.Mutex
	term int32
	done bool
	last Takeover
}

// Takeover says what a server did when it began a term as leader.
type Takeover struct {
	Round string `json:"round,omitempty"`
	// Term is the leader Lease's transitions when the term began.
	Term int32 `json:"term"`
	// From and To are the working branch before and after the fetch;
	// Superseded keeps the commits only this server held (intent's
	// TakeOver).
	From, To   string `json:"-"`
	Superseded string `json:"superseded,omitempty"`
	// SetAside are the round's files this server wrote after its last
	// commit, kept in its state directory (superseded/<time>/).
	SetAside []string `json:"set_aside,omitempty"`
	// Adopted is the published head's record adopted (0: this server's
	// own anchor reproduced the journal, nothing to adopt).
	Adopted uint64 `json:"adopted,omitempty"`
	// Cut is how many records past the published head were cut (kept in
	// CutFile for a person).
	Cut     int    `json:"cut,omitempty"`
	CutFile string `json:"cut_file,omitempty"`
	// Proofs is how many proofs were kept from the remote; Refused how
	// many did not verify.
	Proofs  int           `json:"proofs,omitempty"`
	Refused int           `json:"proofs_refused,omitempty"`
	Took    time.Duration `json:"took_ns"`
}

// handsOver is true when another server may take this server's round
// over: leader election on and an intent remote to hand it through.
func (d *Service) handsOver() bool {
	return d.Config != nil && d.Config.LeaderElection.Enabled && d.Config.Git.Remote != ""
}

// durableTimeout bounds putting a step's start where the next leader
// finds it.
const durableTimeout = 2 * time.Minute

// durableStart is window.Recorder's Durable for round s where another
// server may take the round over (else nil): the start record is
// committed, the commit pushed and the journal's head at it published
// before the step acts. A failure anywhere leaves the step in flight with
// nothing begun (only a fresh approval restarts it).
func (d *Service) durableStart(s *window.Round) func(round.Record) error {
	if !d.handsOver() {
		return nil
	}
	return func(rec round.Record) error {
		ctx, cancel := context.WithTimeout(context.Background(), durableTimeout)
		defer cancel()
		c, _, err := d.commitRoundFiles(ctx, s.ID, s.Journal, where(rec.Step, rec.Node)+" started")
		if err != nil {
			return err
		}
		if !c.Pushed {
			return fmt.Errorf("commit %s is not on the intent remote %s: %s", short(c.Hash), d.Config.Git.Remote, c.PushError)
		}
		if why := d.unpublished(c.Hash); why != "" {
			return errors.New(why)
		}
		return nil
	}
}

// publishHead publishes, on the window Lease, the head of round id's
// journal at commit, which the remote now holds; a failure is kept for
// the answers and for durableStart (unpublished).
func (d *Service) publishHead(ctx context.Context, id string, h round.Head, commit string) {
	if !d.handsOver() || h.Seq == 0 {
		return
	}
	err := d.publish(ctx, windowlock.Published{Round: id, Seq: h.Seq, Chain: h.Chain, Commit: commit})
	d.pushes.mu.Lock()
	defer d.pushes.mu.Unlock()
	if err != nil {
		d.pushes.unpublished = "the round's record (commit " + short(commit) + ") is on the intent remote, but the journal's head at it is not published on the window Lease: " +
			err.Error() + "; no approved step starts until its start is published"
		d.Log.Warn("the round's journal head is not published", "round", id, "commit", commit, "err", err)
		return
	}
	d.pushes.published, d.pushes.unpublished = commit, ""
}

func (d *Service) publish(ctx context.Context, p windowlock.Published) error {
	kc, err := d.KubeClients(ctx)
	if err != nil {
		return err
	}
	return windowlock.Publish(ctx, kc.Kube, d.WindowLockConfig(), p)
}

// unpublished says why commit's head is not published ("" when it is).
func (d *Service) unpublished(commit string) string {
	d.pushes.mu.Lock()
	defer d.pushes.mu.Unlock()
	if d.pushes.published == commit {
		return ""
	}
	if d.pushes.unpublished != "" {
		return d.pushes.unpublished
	}
	return "the journal's head at commit " + short(commit) + " is not published on the window Lease"
}

// mirrorProofs writes this server's proofs of round id into the round's
// folder, so that they travel with the remote (handsOver only). It runs
// under the journal's lock, before the commit names the files.
func (d *Service) mirrorProofs(id string) error {
	if !d.handsOver() {
		return nil
	}
	path, err := d.proofStore().File(id)
	if err != nil {
		return err
	}
	data, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("copy the kept signatures into the round's folder: %w", err)
	}
	if old, err := d.Book.ReadFile(id, book.ProofsFile); err == nil && string(old) == string(data) {
		return nil
	}
	return d.Book.WriteFile(id, book.ProofsFile, data)
}

// takeOver brings this server's copy of the round up to what the remote
// and the published head hold, once per leader term (f: the fence of the
// step that found the term), before the step opens the round. A failure
// refuses the step with nothing done.
func (d *Service) takeOver(ctx context.Context, f *Fenced) error {
	if f == nil || !d.handsOver() || d.Book == nil {
		return nil
	}
	term := f.fence.Leader.Transitions
	d.takeover.mu.Lock()
	defer d.takeover.mu.Unlock()
	if d.takeover.done && d.takeover.term == term {
		return nil
	}
	start := time.Now()
	d.renewLease()
	t, err := d.catchUp(ctx)
	if err != nil {
		d.Log.Error("this server leads but cannot take the round over from the remote: nothing runs", "term", term, "err", err)
		var r *answer.Refusal
		if errors.As(err, &r) {
			return err
		}
		return answer.Refuse("Ask a person to look at the intent remote and the window Lease's published head (the error says which), then call again.",
			"this server began a term as leader but could not take the round over: "+err.Error(), "nothing was executed")
	}
	t.Term, t.Took = term, time.Since(start)
	d.takeover.term, d.takeover.done, d.takeover.last = term, true, t
	d.Log.Info("took the round over from the remote", "round", t.Round, "term", term, "from", short(t.From), "to", short(t.To),
		"adopted", t.Adopted, "cut", t.Cut, "proofs", t.Proofs, "proofs_refused", t.Refused, "took", t.Took)
	return nil
}

// retakeNextTerm makes the next destructive step take the round over
// again (a push the remote refused: another server wrote there).
func (d *Service) retakeNextTerm() {
	d.takeover.mu.Lock()
	d.takeover.done = false
	d.takeover.mu.Unlock()
}

// catchUp fetches the round's record from the remote, adopts the journal
// up to the published head unless this server's own anchor reproduces it,
// and keeps the proofs that verify.
func (d *Service) catchUp(ctx context.Context) (Takeover, error) {
	kc, err := d.KubeClients(ctx)
	if err != nil {
		return Takeover{}, err
	}
	pub, ok, err := windowlock.ReadPublished(ctx, kc.Kube, d.WindowLockConfig())
	if err != nil || !ok {
		// Nothing published: no server has handed a round over yet.
		return Takeover{}, err
	}
	t := Takeover{Round: pub.Round}
	// Journals held open read the files before they change.
	if err := d.Book.Close(); err != nil {
		return t, err
	}
	fr, aside, err := d.mirror(ctx, pub.Round)
	if err != nil {
		return t, err
	}
	t.From, t.To, t.Superseded, t.SetAside = fr.From, fr.To, fr.Superseded, aside
	dir := d.Book.Dir(pub.Round)
	if err := round.CheckReproduced(dir, d.Book.AnchorDir); err != nil {
		if !errors.Is(err, round.ErrTampered) {
			return t, err
		}
		rep, err := d.adopt(dir, pub)
		if err != nil {
			return t, err
		}
		t.Adopted, t.Cut, t.CutFile = pub.Seq, rep.Cut, rep.CutFile
		if rep.Cut > 0 {
			d.Log.Warn("records past the published head were cut from the journal; a person reads them", "round", pub.Round,
				"records", rep.CutRecords, "kept_in", rep.CutFile)
		}
	}
	t.Proofs, t.Refused, err = d.importProofs(ctx, pub.Round)
	return t, err
}

// adopt sets this server's own anchor of the round aside (its records are
// not what the remote holds) and adopts the journal up to pub's head.
func (d *Service) adopt(dir string, pub windowlock.Published) (round.AdoptReport, error) {
	own := filepath.Join(d.Book.AnchorDir, pub.Round+".jsonl")
	if _, err := os.Stat(own); err == nil {
		aside := own + ".before-term-" + strconv.FormatInt(time.Now().UnixNano(), 10)
		if err := os.Rename(own, aside); err != nil {
			return round.AdoptReport{}, fmt.Errorf("set this server's own anchor aside: %w", err)
		}
		d.Log.Warn("this server's anchor of the round does not reproduce what the remote holds; set aside", "round", pub.Round, "kept_in", aside)
	}
	return round.Adopt(dir, d.Book.AnchorDir, round.Head{Seq: pub.Seq, Chain: pub.Chain})
}

// importProofs keeps the proofs of round id found in its folder that this
// server does not hold and whose signatures verify again; it answers how
// many were kept and how many refused.
func (d *Service) importProofs(ctx context.Context, id string) (kept, refused int, err error) {
	data, err := d.Book.ReadFile(id, book.ProofsFile)
	if errors.Is(err, os.ErrNotExist) {
		return 0, 0, nil
	}
	if err != nil {
		return 0, 0, err
	}
	theirs, err := book.ParseProofs(data)
	if err != nil {
		return 0, 0, fmt.Errorf("the round's %s: %w", book.ProofsFile, err)
	}
	mine, err := d.proofs(id)
	if err != nil {
		return 0, 0, err
	}
	key := func(p Proof) string { return p.ApprovalID + "\x00" + p.Tool + "\x00" + p.Step + "\x00" + p.Node }
	have := map[string]bool{}
	for _, p := range mine {
		have[key(p)] = true
	}
	var add []Proof
	for _, p := range theirs {
		if have[key(p)] {
			continue
		}
		if _, err := d.reverify(ctx, id, p, p.Tool, p.Node, ""); err != nil {
			refused++
			d.Log.Warn("a proof in the round's folder does not verify: not kept", "round", id, "tool", p.Tool, "node", p.Node, "approval", p.ApprovalID, "err", err)
			continue
		}
		have[key(p)] = true
		add = append(add, p)
	}
	return len(add), refused, d.proofStore().Import(id, add)
}

// SyncForRead brings this server's copy of the round up to what the
// remote holds before it answers a read-only call, where another server
// may have written the round since: a follower mirrors the remote; a
// leader at the first call of its term takes the round over first, so
// that what it answers is what it will act on. Nothing of the round
// changes; a failure leaves the answer to the copy as it is, logged.
func (d *Service) SyncForRead(ctx context.Context) {
	if !d.handsOver() || d.Book == nil {
		return
	}
	l, err := d.Leadership(ctx)
	if err != nil || l == nil {
		return
	}
	if l.IsLeader() {
		f, err := l.Admit(ctx)
		if err == nil {
			err = d.takeOver(ctx, &Fenced{l: l, fence: f})
		}
		if err != nil {
			d.Log.Warn("the leader answers from its copy of the round: it could not take the round over yet", "err", err)
		}
		return
	}
	d.FollowRemote(ctx)
}

// FollowRemote brings a follower's working copy up to what the remote
// holds, so that its answers are the leader's as of the leader's last
// push. The working copy of a follower is a mirror of the remote (what
// only it held is kept aside, as at a takeover).
func (d *Service) FollowRemote(ctx context.Context) {
	if !d.handsOver() || d.Book == nil || !d.Following() {
		return
	}
	kc, err := d.KubeClients(ctx)
	if err != nil {
		return
	}
	pub, ok, err := windowlock.ReadPublished(ctx, kc.Kube, d.WindowLockConfig())
	if err != nil || !ok {
		return
	}
	if _, _, err := d.mirror(ctx, pub.Round); err != nil {
		d.Log.Warn("a follower answers from its copy of the round: the remote could not be fetched", "round", pub.Round, "err", err)
	}
}

// mirror brings the working copy's round folder to what the remote holds:
// what this server wrote there after its last commit is set aside (kept
// in its state directory for a person), then the remote's branch is taken
// (intent's TakeOver: the remote wins).
func (d *Service) mirror(ctx context.Context, id string) (intent.FetchResult, []string, error) {
	repo, err := d.IntentRepo(id)
	if err != nil {
		return intent.FetchResult{}, nil, err
	}
	keep := filepath.Join(d.Config.StateDir, "superseded", strconv.FormatInt(time.Now().UnixNano(), 10))
	aside, err := repo.SetAside(filepath.ToSlash(filepath.Join("rounds", id)), keep)
	if err != nil {
		return intent.FetchResult{}, nil, fmt.Errorf("set aside what this server wrote after its last commit: %w", err)
	}
	if len(aside) > 0 {
		d.Log.Warn("this server's uncommitted records of the round are set aside; the remote's record wins", "round", id,
			"files", aside, "kept_in", keep)
	}
	fr, err := repo.TakeOver(ctx)
	if err != nil {
		return fr, aside, fmt.Errorf("bring the working copy up to the intent remote: %w", err)
	}
	if fr.Superseded != "" {
		d.Log.Warn("this server's working branch held commits the remote does not; the remote's record wins, they are kept for a person",
			"round", id, "kept_in", fr.Superseded)
	}
	return fr, aside, nil
}

// ActorIdentity is who this server is to the rest of the cluster: the
// name its cordons, kured's lock and its maintenance requests carry. With
// leader election on, the servers of one election are one actor, named
// after their leader Lease (<namespace>/<lease_name>), so that the next
// leader finds the cordon and the lock of the window in flight its own;
// else the server's identity.
func (d *Service) ActorIdentity() string {
	if d.Config == nil || !d.Config.LeaderElection.Enabled {
		return d.Identity
	}
	return d.Config.Kube.LeaseNamespace + "/" + d.Config.LeaderElection.LeaseName
}
