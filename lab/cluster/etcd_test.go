package cluster

import (
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	clientv3 "go.etcd.io/etcd/client/v3"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// memberView is what a client sees of one member.
type memberView struct {
	Answers   bool // Status succeeded
	LeadersUp bool // the leader the member names is a running member
}

// memberIDs maps each member's raft ID to its index.
func memberIDs(t *testing.T, e *EtcdCluster) map[uint64]int {
	t.Helper()
	tlsConf, err := e.ClientTLS()
	if err != nil {
		t.Fatal(err)
	}
	cli, err := clientv3.New(clientv3.Config{Endpoints: e.Endpoints(), TLS: tlsConf, DialTimeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	ids := map[uint64]int{}
	for i, m := range e.Members {
		ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
		st, err := cli.Status(ctx, m.ClientURL)
		cancel()
		if err != nil {
			t.Fatalf("status of %s: %v", m.Name, err)
		}
		ids[st.Header.MemberId] = i
	}
	return ids
}

// viewMember asks one member for its status, bounded by a short timeout.
func viewMember(ctx context.Context, t *testing.T, e *EtcdCluster, ids map[uint64]int, i int) memberView {
	t.Helper()
	tlsConf, err := e.ClientTLS()
	if err != nil {
		t.Fatal(err)
	}
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{e.Members[i].ClientURL}, TLS: tlsConf, DialTimeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	st, err := cli.Status(ctx, e.Members[i].ClientURL)
	if err != nil {
		return memberView{}
	}
	leader, known := ids[st.Leader]
	return memberView{Answers: true, LeadersUp: known && e.Running(leader)}
}

// canWrite reports whether a write through the running members commits.
func canWrite(ctx context.Context, t *testing.T, e *EtcdCluster) bool {
	t.Helper()
	tlsConf, err := e.ClientTLS()
	if err != nil {
		t.Fatal(err)
	}
	var eps []string
	for i := range e.Members {
		if e.Running(i) {
			eps = append(eps, e.Members[i].ClientURL)
		}
	}
	cli, err := clientv3.New(clientv3.Config{Endpoints: eps, TLS: tlsConf, DialTimeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	_, err = cli.Put(ctx, "/lab/quorum-probe", time.Now().String())
	return err == nil
}

func TestEtcdClusterQuorum(t *testing.T) {
	e := StartEtcdClusterT(t, EtcdOptions{Members: 3})
	ids := memberIDs(t, e)

	// Steps run in order on one cluster; each names the member it stops or
	// starts and what the running members must show afterwards.
	steps := []struct {
		name      string
		stop      int  // -1: none; -2: whichever member leads
		kill      bool // stop by SIGKILL instead of SIGTERM
		start     int  // -1: none
		wantView  map[int]memberView
		wantWrite bool
	}{
		{"all three up", -1, false, -1, map[int]memberView{0: {true, true}, 1: {true, true}, 2: {true, true}}, true},
		{"one member stopped keeps quorum", 0, false, -1, map[int]memberView{1: {true, true}, 2: {true, true}}, true},
		{"two members lost: no leader", 1, true, -1, map[int]memberView{2: {true, false}}, false},
		{"one back: quorum again", -1, false, 1, map[int]memberView{1: {true, true}, 2: {true, true}}, true},
		{"all back", -1, false, 0, map[int]memberView{0: {true, true}, 1: {true, true}, 2: {true, true}}, true},
		{"the leader crashes: the others elect a new one", -2, true, -1, nil, true},
	}
	for _, st := range steps {
		t.Run(st.name, func(t *testing.T) {
			stop := st.stop
			if stop == -2 {
				stop = leaderIndex(t, e, ids)
				st.wantView = map[int]memberView{}
				for i := range e.Members {
					if i != stop {
						st.wantView[i] = memberView{true, true}
					}
				}
			}
			if stop >= 0 {
				end := e.StopMember
				if st.kill {
					end = e.KillMember
				}
				if err := end(stop); err != nil {
					t.Fatal(err)
				}
			}
			if st.start >= 0 {
				if err := e.StartMember(t.Context(), st.start); err != nil {
					t.Fatal(err)
				}
			}
			// Leadership settles within a few election timeouts (1 s each).
			var got map[int]memberView
			err := pollUntil(t.Context(), 30*time.Second, "member views", func(ctx context.Context) (bool, error) {
				got = map[int]memberView{}
				for i := range st.wantView {
					got[i] = viewMember(ctx, t, e, ids, i)
				}
				return cmp.Equal(st.wantView, got), nil
			})
			if err != nil {
				t.Fatalf("%v (-want +got):\n%s", err, cmp.Diff(st.wantView, got))
			}
			if gotWrite := canWrite(t.Context(), t, e); gotWrite != st.wantWrite {
				t.Errorf("write commits = %t, want %t", gotWrite, st.wantWrite)
			}
		})
	}
}

// leaderIndex returns the index of the member that leads.
func leaderIndex(t *testing.T, e *EtcdCluster, ids map[uint64]int) int {
	t.Helper()
	for i := range e.Members {
		if !e.Running(i) {
			continue
		}
		tlsConf, err := e.ClientTLS()
		if err != nil {
			t.Fatal(err)
		}
		cli, err := clientv3.New(clientv3.Config{Endpoints: []string{e.Members[i].ClientURL}, TLS: tlsConf, DialTimeout: 2 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
		st, err := cli.Status(ctx, e.Members[i].ClientURL)
		cancel()
		cli.Close()
		if err == nil && st.Leader != 0 {
			return ids[st.Leader]
		}
	}
	t.Fatal("no member names a leader")
	return -1
}

// The gate and the host scripts use etcdctl with kubeadm-style certificate
// flags; the lab's certificates must work with the real CLI.
func TestEtcdctlEndpointStatusWithClientCert(t *testing.T) {
	e := StartEtcdClusterT(t, EtcdOptions{Members: 3})
	bins := Binaries{Dir: binDirForTest(t, nil)}
	run := func(args ...string) (string, error) {
		ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
		defer cancel()
		base := []string{"--endpoints=" + strings.Join(e.Endpoints(), ","), "--cacert=" + e.CAFile, "--cert=" + e.ClientCertFile, "--key=" + e.ClientKeyFile, "--dial-timeout=2s", "--command-timeout=3s"}
		out, err := exec.CommandContext(ctx, bins.Path("etcdctl"), append(base, args...)...).CombinedOutput()
		return string(out), err
	}
	out, err := run("endpoint", "status", "-w", "json")
	if err != nil {
		t.Fatalf("etcdctl endpoint status: %v\n%s", err, out)
	}
	var statuses []struct {
		Endpoint string `json:"Endpoint"`
		Status   struct {
			Header struct {
				MemberID uint64 `json:"member_id"`
			} `json:"header"`
			Leader uint64 `json:"leader"`
		} `json:"Status"`
	}
	if err := json.Unmarshal([]byte(out), &statuses); err != nil {
		t.Fatalf("parse etcdctl output: %v\n%s", err, out)
	}
	if len(statuses) != 3 {
		t.Fatalf("etcdctl reported %d endpoints, want 3:\n%s", len(statuses), out)
	}
	leaders := map[uint64]bool{}
	isLeader := 0
	for _, s := range statuses {
		leaders[s.Status.Leader] = true
		if s.Status.Leader == s.Status.Header.MemberID {
			isLeader++
		}
	}
	if len(leaders) != 1 || leaders[0] || isLeader != 1 {
		t.Errorf("want one agreed leader among 3 members, got %s", out)
	}

	// Without a client certificate the member refuses the client.
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	noCert, err := exec.CommandContext(ctx, bins.Path("etcdctl"), "--endpoints="+e.Members[0].ClientURL, "--cacert="+e.CAFile, "--dial-timeout=2s", "--command-timeout=3s", "endpoint", "health").CombinedOutput()
	if err == nil {
		t.Errorf("etcdctl without a client certificate succeeded:\n%s", noCert)
	}
}

// The lab's API server can sit on a real three-member etcd; losing quorum
// there shows up in the API server's own readiness, as it would in a real
// control plane.
func TestAPIServerOnEtcdClusterFollowsQuorum(t *testing.T) {
	e := StartEtcdClusterT(t, EtcdOptions{Members: 3})
	c := StartT(t, Options{Etcd: e, WithoutScheduler: true, WithoutControllerManager: true})
	if c.EtcdEndpoint != "" {
		t.Errorf("EtcdEndpoint = %q, want empty with an external etcd", c.EtcdEndpoint)
	}
	readyz := func(ctx context.Context) (string, error) {
		ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		body, err := c.Client().Discovery().RESTClient().Get().AbsPath("/readyz").Param("verbose", "true").DoRaw(ctx)
		return string(body), err
	}
	// A request in flight on a connection to a member that dies fails, as
	// on a real control plane; the etcd client then moves to another member.
	createConfigMap := func(name string) error {
		var last error
		err := pollUntil(t.Context(), 30*time.Second, "create configmap "+name, func(ctx context.Context) (bool, error) {
			ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			defer cancel()
			_, last = c.Client().CoreV1().ConfigMaps("default").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
			return last == nil, nil
		})
		if err != nil {
			return fmt.Errorf("%w (last error: %v)", err, last)
		}
		return nil
	}

	if err := e.KillMember(0); err != nil {
		t.Fatal(err)
	}
	if err := createConfigMap("with-two-members"); err != nil {
		t.Fatalf("write with 2 of 3 etcd members: %v", err)
	}

	if err := e.KillMember(1); err != nil {
		t.Fatal(err)
	}
	var body string
	err := pollUntil(t.Context(), time.Minute, "readyz reports etcd failing", func(ctx context.Context) (bool, error) {
		var err error
		body, err = readyz(ctx)
		return err != nil && strings.Contains(body, "[-]etcd failed"), nil
	})
	if err != nil {
		t.Fatalf("%v; last /readyz: %s", err, body)
	}

	if err := e.StartMember(t.Context(), 1); err != nil {
		t.Fatal(err)
	}
	err = pollUntil(t.Context(), time.Minute, "readyz ok again", func(ctx context.Context) (bool, error) {
		var err error
		body, err = readyz(ctx)
		return err == nil, nil
	})
	if err != nil {
		t.Fatalf("%v; last /readyz: %s", err, body)
	}
	if err := createConfigMap("quorum-restored"); err != nil {
		t.Fatalf("write after quorum came back: %v", err)
	}
}
