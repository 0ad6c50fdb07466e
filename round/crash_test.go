package round

import (
	"bufio"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// The test binary doubles as the child process of the journal tests: with
// childModeEnv set it runs a helper instead of the tests.
const (
	childModeEnv = "ROUND_TEST_CHILD_MODE"
	childDirEnv  = "ROUND_TEST_CHILD_DIR"
	childSeedEnv = "ROUND_TEST_CHILD_SEED"
)

func TestMain(m *testing.M) {
	switch os.Getenv(childModeEnv) {
	case "":
		os.Exit(m.Run())
	case "hold":
		os.Exit(holdChild(os.Getenv(childDirEnv)))
	case "crash":
		seed, _ := strconv.ParseUint(os.Getenv(childSeedEnv), 10, 64)
		os.Exit(crashChild(os.Getenv(childDirEnv), seed))
	default:
		fmt.Fprintln(os.Stderr, "unknown child mode")
		os.Exit(2)
	}
}

// crashNodes is a fleet big enough that a round does not finish between
// two kills most of the time.
func crashNodes() ([]NodeInfo, Placement) {
	var nodes []NodeInfo
	for i := range 3 {
		nodes = append(nodes, NodeInfo{Name: fmt.Sprintf("cp-%d", i), ControlPlane: true})
	}
	for i := range 12 {
		nodes = append(nodes, NodeInfo{Name: fmt.Sprintf("gpu-%02d", i), GPU: true, RunningGPUPods: i % 4})
	}
	return nodes, Placement{PostgresPrimaryNodes: []string{"cp-1"}, VIPNode: "cp-2"}
}

// crashChild drives a round the way an agent would (following Status's
// next step, failing now and then, resuming) and prints "acked seq N" after
// every append returns. It runs until it is killed or the round closes.
func crashChild(dir string, seed uint64) int {
	rng := rand.New(rand.NewPCG(seed, 7))
	j, err := Open(dir)
	if err != nil {
		fmt.Fprintln(os.Stderr, "open:", err)
		return 1
	}
	// Split each line in two writes so a kill can land mid-line.
	j.splitWrite = 200 * time.Microsecond
	out := bufio.NewWriterSize(os.Stdout, 0)
	ack := func(r Record, err error) {
		if err != nil {
			fmt.Fprintln(os.Stderr, "append:", err)
			os.Exit(1)
		}
		fmt.Fprintf(out, "acked seq %d kind=%s node=%s step=%s\n", r.Seq, r.Kind, r.Node, r.Step)
		out.Flush()
	}
	fmt.Fprintln(out, "ready")
	out.Flush()
	for _, t := range j.Opened().NeedsRecheck {
		ack(j.FinishStep(t.Step, t.Node, Meta{Detail: "re-checked after restart"}))
	}
	if j.State().Plan == nil {
		o, err := PlanOrder(crashNodes())
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		ack(j.Plan(o, time.Millisecond, Meta{}))
	}
	for {
		st := j.Status()
		nx := st.Next
		switch {
		case st.Phase == PhaseClosed:
			fmt.Fprintln(out, "round closed")
			out.Flush()
			return 0
		case nx == nil:
			fmt.Fprintln(os.Stderr, "no next step:", st.NextAction)
			return 1
		case nx.Decision != "":
			ack(j.Decide(nx.Decision, nx.Node, nx.Step, Meta{Detail: "resume after a test failure"}))
		case !nx.WaitUntil.IsZero():
			time.Sleep(time.Until(nx.WaitUntil) + time.Millisecond)
		case nx.Step == StepClose && !j.State().FindingsCommitted:
			ack(j.Lesson("the crash test learned something"))
			ack(j.FindingsCommitted("c0ffee"))
		default:
			ack(j.StartStep(nx.Step, nx.Node, Meta{ApprovalID: "ap"}))
			time.Sleep(time.Duration(rng.IntN(400)) * time.Microsecond)
			if nx.Step != StepSoak && rng.IntN(15) == 0 {
				ack(j.FailStep(nx.Step, nx.Node, Meta{Detail: "injected failure"}))
			} else {
				ack(j.FinishStep(nx.Step, nx.Node, Meta{Kernel: "6.8.0-" + strconv.Itoa(int(st.WindowsClosed))}))
			}
		}
	}
}

type ack struct {
	seq              uint64
	kind, node, step string
}

// TestJournalSurvivesKill9 runs a real child process appending to the
// journal and kills it with SIGKILL at random points, then reopens: every
// record the child saw acknowledged is there, a torn tail is saved and
// truncated, the state equals a replay of the journal, and steps left in
// flight come back flagged NeedsRecheck.
func TestJournalSurvivesKill9(t *testing.T) {
	const wantKills = 60
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 1))
	root := t.TempDir()
	roundNo := 1
	dir := filepath.Join(root, "rounds", fmt.Sprintf("crash-%d", roundNo))
	var kills, torn, rechecks, acked, closedRounds, duringOpen int
	for kills < wantKills {
		cmd := exec.Command(os.Args[0])
		cmd.Env = append(os.Environ(), childModeEnv+"=crash", childDirEnv+"="+dir,
			childSeedEnv+"="+strconv.FormatUint(rng.Uint64(), 10))
		var stderr strings.Builder
		cmd.Stderr = &stderr
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cmd.Process.Kill() })
		lines := make(chan string, 1024)
		go func() {
			sc := bufio.NewScanner(stdout)
			for sc.Scan() {
				lines <- sc.Text()
			}
			close(lines)
		}()
		var got []string
		var delay time.Duration
		if rng.IntN(5) == 0 {
			// Sometimes kill while the child is still opening.
			delay = time.Duration(rng.IntN(8000)) * time.Microsecond
			duringOpen++
		} else {
			// Wait until it is ready, then let it append a while.
			for l := range lines {
				got = append(got, l)
				if l == "ready" {
					break
				}
			}
			delay = time.Duration(rng.IntN(60000)) * time.Microsecond
		}
		time.Sleep(delay)
		if err := cmd.Process.Kill(); err != nil {
			t.Fatal(err)
		}
		for l := range lines {
			got = append(got, l)
		}
		werr := cmd.Wait()
		if slices.Contains(got, "round closed") {
			closedRounds++
		} else if !strings.Contains(fmt.Sprint(werr), "killed") {
			t.Fatalf("child ended with %v before the kill: %s", werr, stderr.String())
		} else {
			kills++
		}
		acks := parseAcks(t, got)
		acked += len(acks)
		tornHere, recheckHere := verifyAfterCrash(t, dir, acks)
		if tornHere {
			torn++
		}
		rechecks += recheckHere
		if slices.Contains(got, "round closed") {
			roundNo++
			dir = filepath.Join(root, "rounds", fmt.Sprintf("crash-%d", roundNo))
		}
	}
	t.Logf("kill -9: %d kills (%d while opening), %d acknowledged records all present, %d torn tails saved and truncated, %d in-flight steps flagged NeedsRecheck, %d rounds closed, state equal to replay after every reopen",
		kills, duringOpen, acked, torn, rechecks, closedRounds)
	if torn == 0 {
		t.Log("no kill landed mid-line this run; torn tails are also covered by TestJournalTornTailIsSavedTruncatedAndRecorded")
	}
}

func parseAcks(t *testing.T, lines []string) []ack {
	var out []ack
	for _, l := range lines {
		if !strings.HasPrefix(l, "acked seq ") {
			continue
		}
		var a ack
		f := strings.Fields(l)
		seq, err := strconv.ParseUint(f[2], 10, 64)
		if err != nil || len(f) != 6 {
			t.Fatalf("bad ack line %q", l)
		}
		a.seq = seq
		a.kind = strings.TrimPrefix(f[3], "kind=")
		a.node = strings.TrimPrefix(f[4], "node=")
		a.step = strings.TrimPrefix(f[5], "step=")
		out = append(out, a)
	}
	return out
}

// verifyAfterCrash checks the round directory after a kill and reopens it.
func verifyAfterCrash(t *testing.T, dir string, acks []ack) (tornFound bool, recheck int) {
	t.Helper()
	data, err := ReadJournal(dir)
	if err != nil {
		if len(acks) == 0 && os.IsNotExist(err) {
			return false, 0 // killed before the journal existed
		}
		t.Fatal(err)
	}
	sc, err := scanLines(data)
	if err != nil {
		t.Fatalf("journal after kill: %v", err)
	}
	for _, a := range acks {
		if a.seq == 0 || a.seq > uint64(len(sc.records)) {
			t.Fatalf("acknowledged seq %d lost: journal has %d records", a.seq, len(sc.records))
		}
		r := sc.records[a.seq-1]
		if string(r.Kind) != a.kind || r.Node != a.node || string(r.Step) != a.step {
			t.Fatalf("acknowledged seq %d was %s/%s/%s, journal has %+v", a.seq, a.kind, a.node, a.step, r)
		}
	}
	// What should be flagged: steps whose last record is a start.
	open := map[Target]bool{}
	for _, r := range sc.records {
		if r.Kind == KindPlan {
			for t := range open {
				if t.Node != "" && !slices.ContainsFunc(r.Plan.Order.Positions, func(p Position) bool { return p.Node == t.Node }) {
					delete(open, t)
				}
			}
		}
		tg := Target{Node: r.Node, Step: r.Step}
		switch r.Kind {
		case KindStepStarted:
			open[tg] = true
		case KindStepFinished, KindStepFailed:
			delete(open, tg)
		}
	}
	delete(open, Target{Step: StepSoak})

	// state.json is whole and the snapshot of a prefix of the journal.
	if _, err := os.Stat(filepath.Join(dir, StateFile)); err == nil && len(sc.records) > 0 {
		if err := snapshotMatches(dir, data[:sc.good]); err != nil {
			t.Fatalf("after the kill: %v", err)
		}
	}

	j, err := Open(dir)
	if err != nil {
		t.Fatalf("reopen after kill: %v", err)
	}
	defer j.Close()
	rep := j.Opened()
	if rep.TornBytes != len(sc.torn) {
		t.Fatalf("reopen reported %d torn bytes, journal had %d", rep.TornBytes, len(sc.torn))
	}
	if len(sc.torn) > 0 {
		saved, err := os.ReadFile(filepath.Join(dir, rep.TornSavedAs))
		if err != nil || string(saved) != string(sc.torn) {
			t.Fatalf("torn tail not saved whole: %q %v", saved, err)
		}
	}
	var want []Target
	for tg := range open {
		want = append(want, tg)
	}
	got := slices.Clone(rep.NeedsRecheck)
	less := func(a, b Target) int { return strings.Compare(a.Node+"/"+string(a.Step), b.Node+"/"+string(b.Step)) }
	slices.SortFunc(want, less)
	slices.SortFunc(got, less)
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatalf("NeedsRecheck after kill (-want +got):\n%s", diff)
	}
	for _, tg := range got {
		r := j.State().run(tg.Step, tg.Node)
		if r.State != InFlight || !r.NeedsRecheck {
			t.Fatalf("%v: %+v, want in flight with NeedsRecheck", tg, r)
		}
	}
	tornFiles, _ := filepath.Glob(filepath.Join(dir, "*.torn-*"))
	if n := len(j.State().Recoveries); n != len(tornFiles) {
		t.Fatalf("%d torn tails saved, %d recorded in the journal", len(tornFiles), n)
	}
	checkConsistent(t, j)
	return len(sc.torn) > 0, len(got)
}
