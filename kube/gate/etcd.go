package gate

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/url"
	"sort"
	"strings"
	"sync"
	"time"

	"go.etcd.io/etcd/client/pkg/v3/transport"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"
)

// DialFunc opens a connection to addr ("host:port"), for example through an
// SSH tunnel to a control-plane node.
type DialFunc func(ctx context.Context, addr string) (net.Conn, error)

// EtcdConfig says how to reach every etcd member. kubeadm's layout: CA
// /etc/kubernetes/pki/etcd/ca.crt, client certificate
// /etc/kubernetes/pki/etcd/healthcheck-client.crt and .key.
type EtcdConfig struct {
	// Endpoints are the members' client URLs, e.g. https://10.0.0.11:2379.
	// Every member should be listed: a member missing here is reported as
	// not checked.
	Endpoints []string
	// CAFile, CertFile and KeyFile are read on this machine when TLS is nil.
	// All empty (and TLS nil): plain connections.
	CAFile, CertFile, KeyFile string
	// TLS replaces the files.
	TLS *tls.Config
	// Dial, when set, carries every connection (gRPC's context dialer).
	Dial DialFunc
	// DialTimeout bounds connecting to a member. Zero: 5s.
	DialTimeout time.Duration
	// RequestTimeout bounds each status, member-list and alarm call. Zero:
	// 5s.
	RequestTimeout time.Duration
}

// memberStatus is what one endpoint said.
type memberStatus struct {
	Endpoint  string
	Err       string
	ID        uint64
	Leader    uint64
	RaftTerm  uint64
	RaftIndex uint64
	Version   string
	DBSize    int64
	Errors    []string
	IsLearner bool
}

// etcdMember is one entry of the member list.
type etcdMember struct {
	ID         uint64
	Name       string
	ClientURLs []string
	IsLearner  bool
}

// CheckEtcd asks every endpoint for its status (Maintenance.Status), reads
// the member list and alarms, and judges: OK when the reachable voting
// members are a quorum of the member list, agree on one leader, and no
// alarm is raised. Members down with quorum kept are warnings.
func CheckEtcd(ctx context.Context, cfg EtcdConfig) Check {
	return timed(func() Check {
		if len(cfg.Endpoints) == 0 {
			return Check{Name: NameEtcd, Reason: "no etcd endpoints configured"}
		}
		tlsCfg := cfg.TLS
		if tlsCfg == nil && (cfg.CAFile != "" || cfg.CertFile != "" || cfg.KeyFile != "") {
			info := transport.TLSInfo{TrustedCAFile: cfg.CAFile, CertFile: cfg.CertFile, KeyFile: cfg.KeyFile}
			var err error
			tlsCfg, err = info.ClientConfig()
			if err != nil {
				return Check{Name: NameEtcd, Reason: fmt.Sprintf("load etcd client certificates: %v", err)}
			}
		}
		dialTimeout := orDuration(cfg.DialTimeout, 5*time.Second)
		reqTimeout := orDuration(cfg.RequestTimeout, 5*time.Second)
		ccfg := clientv3.Config{
			Endpoints:       cfg.Endpoints,
			TLS:             tlsCfg,
			DialTimeout:     dialTimeout,
			Logger:          zap.NewNop(),
			MaxUnaryRetries: 1,
			Context:         ctx,
		}
		if cfg.Dial != nil {
			ccfg.DialOptions = []grpc.DialOption{grpc.WithContextDialer(cfg.Dial)}
		}
		cli, err := clientv3.New(ccfg)
		if err != nil {
			return Check{Name: NameEtcd, Reason: fmt.Sprintf("build etcd client for %s: %v", strings.Join(cfg.Endpoints, ", "), err)}
		}
		defer cli.Close()

		statuses := make([]memberStatus, len(cfg.Endpoints))
		var wg sync.WaitGroup
		for i, ep := range cfg.Endpoints {
			wg.Go(func() {
				rctx, cancel := context.WithTimeout(ctx, reqTimeout)
				defer cancel()
				statuses[i] = memberStatus{Endpoint: ep}
				st, err := cli.Status(rctx, ep)
				if err != nil {
					statuses[i].Err = errText(err)
					if cause := diagnose(ctx, cfg.Dial, tlsCfg, ep, dialTimeout); cause != "" {
						statuses[i].Err += " (" + cause + ")"
					}
					return
				}
				statuses[i].ID = st.Header.MemberId
				statuses[i].Leader = st.Leader
				statuses[i].RaftTerm = st.RaftTerm
				statuses[i].RaftIndex = st.RaftIndex
				statuses[i].Version = st.Version
				statuses[i].DBSize = st.DbSize
				statuses[i].Errors = st.Errors
				statuses[i].IsLearner = st.IsLearner
			})
		}
		wg.Wait()

		var members []etcdMember
		var alarms []string
		var listErr, alarmErr error
		if anyReachable(statuses) {
			rctx, cancel := context.WithTimeout(ctx, reqTimeout)
			ml, err := cli.MemberList(rctx)
			cancel()
			if err != nil {
				listErr = err
			} else {
				for _, m := range ml.Members {
					members = append(members, etcdMember{ID: m.ID, Name: m.Name, ClientURLs: m.ClientURLs, IsLearner: m.IsLearner})
				}
			}
			rctx, cancel = context.WithTimeout(ctx, reqTimeout)
			al, err := cli.AlarmList(rctx)
			cancel()
			if err != nil {
				alarmErr = err
			} else {
				for _, a := range al.Alarms {
					alarms = append(alarms, fmt.Sprintf("alarm %s on member %x", a.Alarm, a.MemberID))
				}
			}
		}
		c := judgeEtcd(members, listErr, statuses, alarms)
		if alarmErr != nil {
			c.OK = false
			c.Reason = strings.TrimPrefix(c.Reason+"; alarm list unreadable: "+errText(alarmErr), "; ")
		}
		return c
	})
}

// diagnose finds why an endpoint did not answer, which gRPC's retries hide
// behind a deadline: the connection (through the dialer, if any) refused
// or unrouted, or the TLS handshake rejected (no or wrong client
// certificate, unknown CA). Empty when the connection and handshake work.
func diagnose(ctx context.Context, dial DialFunc, tlsCfg *tls.Config, endpoint string, timeout time.Duration) string {
	u, err := url.Parse(endpoint)
	if err != nil || u.Host == "" {
		return ""
	}
	ctx, cancel := context.WithTimeout(ctx, min(timeout, 2*time.Second))
	defer cancel()
	var conn net.Conn
	if dial != nil {
		conn, err = dial(ctx, u.Host)
	} else {
		var d net.Dialer
		conn, err = d.DialContext(ctx, "tcp", u.Host)
	}
	if err != nil {
		return "connect: " + err.Error()
	}
	defer conn.Close()
	if tlsCfg == nil || u.Scheme != "https" {
		return ""
	}
	cfg := tlsCfg.Clone()
	if cfg.ServerName == "" {
		cfg.ServerName = u.Hostname()
	}
	cfg.NextProtos = []string{"h2"}
	tc := tls.Client(conn, cfg)
	if err := tc.HandshakeContext(ctx); err != nil {
		return "TLS handshake: " + err.Error()
	}
	// Under TLS 1.3 the server judges the client certificate after the
	// handshake; its verdict arrives as an alert on the first read.
	_ = tc.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
	var b [1]byte
	if _, err := tc.Read(b[:]); err != nil {
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			return ""
		}
		return "TLS: " + err.Error()
	}
	return ""
}

func anyReachable(s []memberStatus) bool {
	for _, m := range s {
		if m.Err == "" {
			return true
		}
	}
	return false
}

// judgeEtcd decides from what the endpoints and the member list said.
func judgeEtcd(members []etcdMember, listErr error, statuses []memberStatus, alarms []string) Check {
	c := Check{Name: NameEtcd}
	byID := map[uint64]memberStatus{}
	var down []string
	for _, s := range statuses {
		if s.Err != "" {
			c.Evidence = append(c.Evidence, fmt.Sprintf("%s: unreachable: %s", s.Endpoint, s.Err))
			down = append(down, s.Endpoint)
			continue
		}
		role := "voter"
		if s.IsLearner {
			role = "learner"
		}
		c.Evidence = append(c.Evidence, fmt.Sprintf("%s: member %x (%s), leader %x, term %d, index %d, version %s, db %d bytes",
			s.Endpoint, s.ID, role, s.Leader, s.RaftTerm, s.RaftIndex, s.Version, s.DBSize))
		for _, e := range s.Errors {
			alarms = append(alarms, fmt.Sprintf("%s reports: %s", s.Endpoint, e))
		}
		byID[s.ID] = s
	}

	// The member list is the truth about cluster size; without it, the
	// configured endpoints stand in for it.
	voters := 0
	if listErr != nil || members == nil {
		if listErr != nil {
			c.Warnings = append(c.Warnings, "member list unreadable ("+errText(listErr)+"); quorum judged over the configured endpoints")
		}
		voters = len(statuses)
	} else {
		for _, m := range members {
			if m.IsLearner {
				continue
			}
			voters++
			if _, ok := byID[m.ID]; !ok && !listedIn(m.ClientURLs, statuses) {
				c.Warnings = append(c.Warnings, fmt.Sprintf("member %s (%x, %s) is not among the configured endpoints: not checked",
					m.Name, m.ID, strings.Join(m.ClientURLs, ",")))
			}
		}
	}
	up := 0
	leaders := map[uint64][]string{}
	for _, s := range byID {
		if s.IsLearner {
			continue
		}
		up++
		leaders[s.Leader] = append(leaders[s.Leader], s.Endpoint)
	}
	quorum := voters/2 + 1
	c.Evidence = append(c.Evidence, fmt.Sprintf("quorum: %d of %d voting members answer, %d needed", up, voters, quorum))
	sort.Strings(alarms)
	c.Evidence = append(c.Evidence, alarms...)

	var problems []string
	if up < quorum {
		problems = append(problems, fmt.Sprintf("quorum lost: %d of %d voting members answer, %d needed", up, voters, quorum))
	}
	switch {
	case len(leaders) == 0:
		// counted above as quorum lost
	case len(leaders) > 1:
		var views []string
		for id, eps := range leaders {
			views = append(views, fmt.Sprintf("%x per %s", id, strings.Join(eps, ",")))
		}
		sort.Strings(views)
		problems = append(problems, "members disagree on the leader: "+strings.Join(views, "; "))
	default:
		for id := range leaders {
			if id == 0 {
				problems = append(problems, "no leader elected")
			} else {
				c.Evidence = append(c.Evidence, fmt.Sprintf("leader: %x", id))
			}
		}
	}
	if len(alarms) > 0 {
		problems = append(problems, "alarms raised: "+strings.Join(alarms, "; "))
	}
	if len(problems) > 0 {
		c.Reason = strings.Join(problems, "; ")
		return c
	}
	c.OK = true
	if len(down) > 0 {
		c.Warnings = append(c.Warnings, fmt.Sprintf("%d member(s) down (%s); quorum kept with %d of %d — %d more failure(s) lose it",
			len(down), strings.Join(down, ", "), up, voters, up-quorum+1))
	}
	return c
}

func listedIn(urls []string, statuses []memberStatus) bool {
	for _, u := range urls {
		for _, s := range statuses {
			if strings.TrimSuffix(u, "/") == strings.TrimSuffix(s.Endpoint, "/") {
				return true
			}
		}
	}
	return false
}

func errText(err error) string {
	if errors.Is(err, context.DeadlineExceeded) {
		return "timed out: " + err.Error()
	}
	return err.Error()
}

func orDuration(d, def time.Duration) time.Duration {
	if d > 0 {
		return d
	}
	return def
}
